"""A ``torch.save`` archive laid out in place, in a writable buffer (the memory tier's slot, mapped).

``torch.save`` writes a zip file of stored (uncompressed) records under one top directory, here ``archive/``
(the name ``torch.save`` gives an archive written to a file object)::

    archive/data/<key>            one per storage, its bytes starting at a multiple of 64 (the padding is a
                                  local-header extra field, id ``FB``, as torch's own writer pads)
    archive/data.pkl              the pickled structure, storages as persistent ids naming ``data/<key>``
    archive/.format_version       "1"
    archive/.storage_alignment    "64"
    archive/byteorder             "little" / "big"
    archive/version               "3\\n"
    central directory, zip64 end record and locator, end record (comment: ``tier.comment(generation)``)

``torch.load`` finds records by name through the central directory, so their order is free: here the
storages come first, so their place is known before the structure is pickled and a capture can copy each
storage straight to where the archive holds it (``reserve``), naming the record once the pickle has given it
its key (``name_reserved``).  Each reserved record keeps room for the longest header it may need; the padding
field fills what its name leaves.  CRC fields are 0, as in ``file.py``'s CRC-off archives: torch 2.13's
reader does not check them (a test loads an archive with CRC 0 and one with a wrong CRC), so no pass over the
bytes is spent on them.  Records or offsets past 4 GiB get zip64 extra fields; the zip64 end record is always
written, as torch's writer does.

Pure Python and ``struct``: nothing here imports torch.
"""

from __future__ import annotations

import struct
import sys

ALIGNMENT = 64                 # torch.save's storage alignment
ARCHIVE = "archive"            # the top directory, as torch.save names an archive written to a file object
FORMAT_VERSION = b"1"
VERSION = b"3\n"               # torch's produced file format version

_LOCAL = struct.Struct("<IHHHHHIIIHH")            # 30 bytes
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")    # 46 bytes
_END64 = struct.Struct("<IQHHIIQQQQ")             # 56 bytes
_LOCATOR = struct.Struct("<IIQI")                 # 20 bytes
_END = struct.Struct("<IHHHHIIH")                 # 22 bytes
_LOCAL_SIG, _CENTRAL_SIG = 0x04034B50, 0x02014B50
_END64_SIG, _LOCATOR_SIG, _END_SIG = 0x06064B50, 0x07064B50, 0x06054B50
_PAD_ID, _ZIP64_ID = 0x4246, 0x0001               # "FB" (torch's padding field), zip64 extended information
_MAX32, _MAX16 = 0xFFFFFFFF, 0xFFFF
_NEEDED, _NEEDED64 = 20, 45
_KEY_ROOM = 20                                    # digits a storage key may take
_HEADER_ROOM = _LOCAL.size + len(ARCHIVE) + len("/data/") + _KEY_ROOM + 20 + 4   # name, zip64 extra, FB field


class ArchiveFull(Exception):
    """The archive would not fit in its buffer: ``needed`` bytes of ``capacity``."""

    def __init__(self, needed: int, capacity: int):
        super().__init__(f"the archive needs more than {capacity} bytes (at least {needed})")
        self.needed, self.capacity = needed, capacity


def align(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT


def _zip64_local(size: int) -> bytes:
    return struct.pack("<HHQQ", _ZIP64_ID, 16, size, size) if size >= _MAX32 else b""


class Archive:
    """An archive being written into ``buffer`` (anything ``memoryview`` can write: an mmap, a bytearray).

    ``ensure(end)``, when given, is called before bytes up to ``end`` are written (the memory tier allocates
    the slot's pages there, so a full file system is an ``OSError`` rather than a SIGBUS).
    """

    def __init__(self, buffer, ensure=None):
        self.view = memoryview(buffer).cast("B")
        self.capacity = len(self.view)
        self.ensure = ensure
        self.end = 0                      # bytes laid out so far
        self.entries: list[tuple[str, int, int]] = []    # (name, header offset, size) for the central directory
        self.reserved: list[tuple[int, int, int]] = []   # (header offset, data offset, size), not yet named

    def _claim(self, end: int) -> None:
        if end > self.capacity:
            raise ArchiveFull(end, self.capacity)
        if self.ensure is not None:
            self.ensure(end)

    def reserve(self, nbytes: int) -> int:
        """Room for a storage record of ``nbytes`` whose name is given later; returns where its bytes go."""
        start = self.end
        data = align(start + _HEADER_ROOM)
        self._claim(data + nbytes)
        self.reserved.append((start, data, nbytes))
        self.end = data + nbytes
        return data

    def name_reserved(self, index: int, key: str) -> None:
        """Write the local header of reserved record ``index`` (in ``reserve`` order) as ``data/<key>``."""
        start, data, nbytes = self.reserved[index]
        if len(key) > _KEY_ROOM:
            raise ValueError(f"storage key {key[:40]!r} is longer than {_KEY_ROOM} characters")
        self._header(f"data/{key}", start, data, nbytes)

    def _header(self, record: str, start: int, data: int, nbytes: int) -> None:
        name = f"{ARCHIVE}/{record}".encode()
        zip64 = _zip64_local(nbytes)
        pad = data - start - _LOCAL.size - len(name) - len(zip64) - 4
        if pad < 0:
            raise ValueError(f"no room for the header of {record!r}")
        extra = zip64 + struct.pack("<HH", _PAD_ID, pad) + b"Z" * pad
        size32 = min(nbytes, _MAX32)
        header = _LOCAL.pack(_LOCAL_SIG, _NEEDED64 if zip64 else _NEEDED, 0, 0, 0, 0, 0, size32, size32,
                             len(name), len(extra)) + name + extra
        self.view[start:data] = header
        self.entries.append((record, start, nbytes))

    def add(self, record: str, nbytes: int, data=None) -> int:
        """Append record ``record`` of ``nbytes``; its bytes are ``data`` or, without it, filled by the caller at
        the offset returned."""
        start = self.end
        name_room = _LOCAL.size + len(ARCHIVE) + 1 + len(record.encode()) + len(_zip64_local(nbytes)) + 4
        offset = align(start + name_room)
        self._claim(offset + nbytes)
        self._header(record, start, offset, nbytes)
        if data is not None:
            self.view[offset:offset + nbytes] = data
        self.end = offset + nbytes
        return offset

    def finish(self, pickled: bytes, comment: bytes = b"") -> int:
        """Add the pickle and the small records, the central directory and the end records; returns the
        archive's length (its last bytes are ``comment``)."""
        if len(comment) > _MAX16:
            raise ValueError("a zip comment holds at most 65535 bytes")
        self.add("data.pkl", len(pickled), pickled)
        for record, value in ((".format_version", FORMAT_VERSION), (".storage_alignment", str(ALIGNMENT).encode()),
                              ("byteorder", sys.byteorder.encode()), ("version", VERSION)):
            self.add(record, len(value), value)
        central = bytearray()
        for record, start, nbytes in self.entries:
            name = f"{ARCHIVE}/{record}".encode()
            big = [value for value in (nbytes, nbytes, start) if value >= _MAX32]
            extra = struct.pack(f"<HH{len(big)}Q", _ZIP64_ID, 8 * len(big), *big) if big else b""
            central += _CENTRAL.pack(_CENTRAL_SIG, _NEEDED64, _NEEDED64 if big else _NEEDED, 0, 0, 0, 0, 0,
                                     min(nbytes, _MAX32), min(nbytes, _MAX32), len(name), len(extra), 0, 0, 0, 0,
                                     min(start, _MAX32)) + name + extra
        count, directory = len(self.entries), self.end
        end64 = directory + len(central)
        tail = bytes(central) + _END64.pack(_END64_SIG, _END64.size - 12, _NEEDED64, _NEEDED64, 0, 0, count, count,
                                            len(central), directory)
        tail += _LOCATOR.pack(_LOCATOR_SIG, 0, end64, 1)
        tail += _END.pack(_END_SIG, 0, 0, min(count, _MAX16), min(count, _MAX16), min(len(central), _MAX32),
                          min(directory, _MAX32), len(comment)) + comment
        self._claim(directory + len(tail))
        self.view[directory:directory + len(tail)] = tail
        self.end = directory + len(tail)
        return self.end

    def release(self) -> None:
        """Let the buffer go (an mmap with a view still exported cannot be closed or resized)."""
        self.view.release()
