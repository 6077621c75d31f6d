"""Whether a file a rank wrote is whole: a torch zip archive's end record, a safetensors file's header.

A rank killed in the middle of ``torch.save`` leaves a file whose zip end record is missing or points at
sizes the file does not have; one killed writing a safetensors file leaves fewer bytes than its header names.
Such a file is never mirrored to disk, and a whole copy from the mirror replaces it before the next attempt.
Other files are taken as they are (finished when closed and unchanged: ``mirror.py``).
"""

from __future__ import annotations

import os
import struct

from launcher.base import border

ZIP_LOCAL = b"PK\x03\x04"
ZIP_END = b"PK\x05\x06"
ZIP64_LOCATOR = b"PK\x06\x07"
ZIP64_END = b"PK\x06\x06"
END_SIZE, LOCATOR_SIZE, MAX_COMMENT = 22, 20, 0xFFFF
SAFETENSORS = ".safetensors"
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".tar")
MAX_HEADER = 100 << 20   # safetensors' own limit on its header


def is_torn(path: str) -> bool:
    """True when ``path`` is a zip archive or safetensors file that is not whole (unreadable, or no regular file: a
    FIFO or a symbolic link a rank left there, torn too: never mirrored)."""
    return wholeness(path) is False


def wholeness(path: str) -> bool | None:
    """True: a zip archive (torch's format) or safetensors file, whole to its last byte; False: torn (or unreadable,
    or no regular file); None: a format whose end cannot be told (any other file: whole or not, only its writer
    knows)."""
    fd = border.open_fd(path)
    if fd is None:
        return False
    try:
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8)
            if head.startswith(ZIP_LOCAL):
                return _zip_whole(fh, size)
            if len(head) < len(ZIP_LOCAL) and ZIP_LOCAL.startswith(head) and path.endswith(TORCH_SUFFIXES):
                return False   # killed before the archive's first header was written
            if path.endswith(SAFETENSORS):
                return _safetensors_whole(fh, size, head)
            return None
    except OSError:
        return False


def _zip_whole(fh, size: int) -> bool:
    """The end record closes the file exactly and its central directory ends where it begins."""
    tail_start = max(size - END_SIZE - MAX_COMMENT - LOCATOR_SIZE, 0)
    fh.seek(tail_start)
    tail = fh.read()
    at = tail.rfind(ZIP_END)
    while at >= 0:
        if len(tail) - at >= END_SIZE:
            (_, _, _, _, _, cd_size, cd_offset, comment) = struct.unpack("<4sHHHHIIH", tail[at:at + END_SIZE])
            if at + END_SIZE + comment == len(tail):
                if at >= LOCATOR_SIZE and tail[at - LOCATOR_SIZE:at - LOCATOR_SIZE + 4] == ZIP64_LOCATOR:
                    return _zip64_whole(fh, tail, at, tail_start)
                return cd_offset + cd_size == tail_start + at
        at = tail.rfind(ZIP_END, 0, at)
    return False


def _zip64_whole(fh, tail: bytes, at: int, tail_start: int) -> bool:
    """Zip64 (torch writes it): the locator names the zip64 end record, just before it, whose central directory
    ends where that record begins."""
    locator = at - LOCATOR_SIZE
    (end64,) = struct.unpack("<Q", tail[locator + 8:locator + 16])
    fh.seek(end64)
    record = fh.read(56)
    if len(record) < 56 or record[:4] != ZIP64_END:
        return False
    cd_size, cd_offset = struct.unpack("<QQ", record[40:56])
    return cd_offset + cd_size == end64 and end64 + 56 == tail_start + locator


def _safetensors_whole(fh, size: int, head: bytes) -> bool:
    if len(head) < 8:
        return False
    (length,) = struct.unpack("<Q", head)
    if length > MAX_HEADER or 8 + length > size:
        return False
    try:
        header = border.expect(border.parse_json(fh.read(length), "safetensors header"), dict, "safetensors header")
    except border.Refused:
        return False
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets)):
            return False
        end = max(end, offsets[1])
    return 8 + length + end == size
