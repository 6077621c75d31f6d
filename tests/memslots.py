"""Memory slots as checkpoint/tier.py says a rank writes them, for tests of dlaunch's side (persist, keeper).

A slot holds a ``torch.save`` archive ending with the zip comment ``dlaunch generation=<G>``, written in place
under an exclusive flock into the slot ``newest.json`` does not name, then ``newest.json`` replaced to name it.
"""

import fcntl
import io
import os
import struct

from launcher.checkpoint import tier


def archive(state, generation: int) -> bytes:
    """``torch.save(state)``'s bytes with the generation's zip comment."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    assert data[-2:] == b"\x00\x00"   # the end record's comment length: none yet
    note = tier.comment(generation)
    return data[:-2] + struct.pack("<H", len(note)) + note


def save(slots: str, state, epoch: int, step: int, *, prefix: str = "ckpt", persist: bool = False,
         keep_max=None, replicated: bool = False, commit: bool = True, cut: int | None = None) -> tier.Record:
    """One memory save; ``commit`` False leaves newest.json as it was (a rank killed before its rename),
    ``cut`` writes only that many bytes (a rank killed while writing)."""
    os.makedirs(slots, exist_ok=True)
    current = tier.read_record(slots)
    slot = 0 if current is None else 1 - current.slot
    generation = 1 if current is None else current.generation + 1
    data = archive(state, generation)
    fd = os.open(tier.slot_path(slots, slot), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size >= 64:   # the old archive's ending cleared first, as checkpoint.memory does
            os.pwrite(fd, bytes(64), size - 64)
        os.pwrite(fd, data[:cut] if cut is not None else data, 0)
    finally:
        os.close(fd)
    record = tier.Record(slot=slot, generation=generation, epoch=epoch, step=step, prefix=prefix,
                         name=f"{prefix}-{epoch}_{step}.pt", length=len(data), persist=persist, keep_max=keep_max,
                         replicated=replicated)
    if commit:
        if current is not None:
            tier.write_record(slots, current, tier.PREVIOUS_FILE)
        tier.write_record(slots, record)
    return record
