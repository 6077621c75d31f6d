"""Writing one checkpoint file as fast as the disk takes it: a ``torch.load``-able zip, flushed early.

Where ``torch.save``'s time goes (1 GiB of float32 tensors, this project's 2-core VM): about 75 %
is the CRC-32 its zip writer computes over every byte (~0.7 GiB/s on one core), which
``torch.load`` never checks; pickling the structure and copying into the page cache are small.
So ``write_torch`` writes the same archive ``torch.save`` does (same records, pickle protocol,
persistent ids and 64-byte storage alignment, so ``torch.load``, ``mmap=True`` and
``weights_only=True`` read it unchanged) through torch's own zip writer with the CRC turned off
(what ``torch.serialization.set_crc32_options(False)`` does, here per file instead of for the
whole process), and ``EarlyWriteback`` keeps the kernel writing the file's pages to disk while
they are produced, so the closing ``fsync`` waits for the last few megabytes only.  The records'
CRC fields are 0: ``unzip -t`` and Python's ``zipfile`` reject them, ``torch.load`` does not look.

Storages are written where they are: CPU ones straight from their memory, others after a copy to
the CPU (as ``torch.save`` does; ``checkpoint.save`` stages device tensors into pinned host buffers
first, ``stage``).  ``locations`` lets a caller that already copied device tensors into host buffers
record where they came from, so the file loads as a ``torch.save`` of the original would.

Test hooks (environment, read per file): ``DLAUNCH_CKPT_TEST_DELAY=S`` sleeps S seconds before
each storage record (a slow disk); ``DLAUNCH_CKPT_TEST_ENOSPC=1`` fails the first storage record
with ``OSError(ENOSPC)`` (a full disk, where a small tmpfs cannot be mounted).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import sys
import threading
import time

from launcher.checkpoint import heartbeat

STORAGE_ALIGNMENT = 64    # torch.save's default; recorded in the file as torch.save does


@functools.cache
def _start_writeback():
    """Linux's ``sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)``, or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return lambda fd, offset, nbytes: call(fd, offset, nbytes, 2)   # 2 = SYNC_FILE_RANGE_WRITE


class EarlyWriteback:
    """While a file is written, keep asking the kernel to write its new bytes to disk, and tell the hang watch.

    The writer releases the GIL while it writes, so this thread runs alongside it; the final fsync
    then waits for the last few megabytes only, and a durable save costs about what a plain write
    into the page cache does.  Growth of the file is progress: it touches the rank's heartbeat
    (``launcher.heartbeat``, at most once a second), so a long save, in the foreground or in the
    background, is never taken for a hang, while a save that stops writing is.
    """

    INTERVAL = 0.01        # seconds between looks at the file size
    CHUNK = 16 << 20       # bytes written before asking for their writeback
    LAG = 8 << 20          # stay this far behind the write head: pages still being written are left alone

    def __init__(self, fd: int):
        self.fd, self.done, self.size, self.start = fd, 0, 0, _start_writeback()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="dlaunch-writeback", daemon=True)

    def _run(self):
        while not self.stop.wait(self.INTERVAL):
            try:
                size = os.fstat(self.fd).st_size
            except OSError:
                return
            if size > self.size:
                self.size = size
                heartbeat.beat()
            end = (size - self.LAG) & ~((1 << 20) - 1)
            if self.start is not None and end - self.done >= self.CHUNK:
                self.start(self.fd, self.done, end - self.done)
                self.done = end

    def __enter__(self):
        try:
            self.thread.start()
        except RuntimeError:   # no new threads at interpreter shutdown (a save in flight at exit): write without
            pass
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread.ident is not None:
            self.thread.join()
        return False


def _persistent_ids(locations: dict | None):
    """torch.save's persistent_id: every storage becomes a record ``data/<key>``; returns (id function, storages)."""
    import torch
    from torch.serialization import location_tag, normalize_storage_type

    keys: dict[int, str] = {}
    storages: dict[str, object] = {}
    dtypes: dict[int, object] = {}

    def persistent_id(obj):
        if isinstance(obj, torch.storage.TypedStorage):
            storage, dtype = obj._untyped_storage, obj.dtype
            storage_type, numel = getattr(torch, obj._pickle_storage_type()), obj._size()
        elif torch.is_storage(obj):
            storage, dtype = obj, torch.uint8
            storage_type, numel = normalize_storage_type(type(obj)), obj.nbytes()
        else:
            return None
        if storage.device.type != "meta" and storage.data_ptr() != 0:
            if dtypes.setdefault(storage.data_ptr(), dtype) != dtype:
                raise RuntimeError("Cannot save multiple tensors or storages that view the same data as "
                                   "different types")
        key = keys.setdefault(storage._cdata, str(len(keys)))
        storages[key] = storage
        location = (locations or {}).get(storage._cdata) or location_tag(storage)
        return ("storage", storage_type, key, location, numel)

    return persistent_id, storages


def _writer(path: str):
    """torch's zip writer for ``path`` without CRC-32; None where this torch has no such switch."""
    import torch

    try:
        path.encode("ascii")
    except UnicodeEncodeError:
        return None    # torch's C++ writer takes ASCII paths only
    try:
        return torch._C.PyTorchFileWriter(path, False, STORAGE_ALIGNMENT)
    except TypeError:
        return None


def write_torch(state, path: str, locations: dict | None = None) -> None:
    """Write ``state`` to ``path`` as a ``torch.save`` archive (see the module docstring); not fsynced."""
    import pickle

    import torch
    from torch.serialization import DEFAULT_PROTOCOL

    writer = _writer(path)
    if writer is None:
        torch.save(state, path)
        return
    persistent_id, storages = _persistent_ids(locations)

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return persistent_id(obj)

    buffer = io.BytesIO()
    Pickler(buffer, protocol=DEFAULT_PROTOCOL).dump(state)
    data = buffer.getvalue()
    delay = float(os.environ.get("DLAUNCH_CKPT_TEST_DELAY") or 0)
    ending = False
    try:
        writer.write_record("data.pkl", data, len(data))
        for name, value in ((".format_version", "1"), (".storage_alignment", str(STORAGE_ALIGNMENT)),
                            ("byteorder", sys.byteorder)):
            writer.write_record(name, value, len(value))
        for key, storage in storages.items():
            if os.environ.get("DLAUNCH_CKPT_TEST_ENOSPC"):
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (DLAUNCH_CKPT_TEST_ENOSPC)", path)
            if delay:
                time.sleep(delay)
            if storage.device.type != "cpu":
                storage = storage.cpu()
            writer.write_record(f"data/{key}", storage, storage.nbytes())
        ending = True
        writer.write_end_of_file()
    except BaseException as error:
        if not ending:   # end it (which marks it finished) or its destructor ends it, fails and aborts the process
            with contextlib.suppress(RuntimeError):
                writer.write_end_of_file()
        if isinstance(error, RuntimeError):   # torch's writer says "iostream error" for a full disk too
            raise _as_os_error(path, error) from error
        raise
    finally:
        writer = storages = None     # closes the file now, even while a traceback keeps this frame


def _as_os_error(path: str, error: Exception) -> OSError:
    try:
        stat = os.statvfs(os.path.dirname(path) or ".")
        full = stat.f_bavail * stat.f_frsize < (16 << 20)
    except OSError:
        full = False
    if full:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    return OSError(errno.EIO, f"could not write the checkpoint: {error}", path)
