"""A small, learnable stand-in for CIFAR-10, written in its binary format: the examples' data when none is given.

Shared by ``train_cifar.py`` (PyTorch) and ``train_cifar_mindspore.py`` (MindSpore), so it needs numpy
only.  The layout is the real dataset's (``cifar-10-batches-bin/data_batch_1.bin`` ... and
``test_batch.bin``; each record is 1 label byte then 3072 pixel bytes, 32x32, channel-major R, G, B)
and so is the size of every file: exactly 10,000 records.  MindSpore's ``Cifar10Dataset`` insists on
that (it reads each file in blocks of the real file's record count: files of 256 or 819 records are
rejected, 10,000 accepted); the PyTorch example reads only the first ``--samples`` records.  Only as
many training files as ``samples`` needs are written.

Every file is a pure function of (seed, file), written atomically (temporary file, fsync, rename), so
all ranks may call ``ensure_synthetic_cifar`` at once with no barrier: concurrent writers just replace
a file with identical bytes.  Files live under the user's cache directory
(``$XDG_CACHE_HOME/dlaunch/synthetic-cifar``) and are reused by every later run.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

IMAGE_SHAPE = (3, 32, 32)
IMAGE_BYTES = 3 * 32 * 32
RECORD_BYTES = 1 + IMAGE_BYTES
NUM_CLASSES = 10
RECORDS_PER_FILE = 10_000   # the real files' count, which MindSpore's reader requires
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILE = "test_batch.bin"
BATCHES_DIR = "cifar-10-batches-bin"
MAX_SAMPLES = RECORDS_PER_FILE * len(TRAIN_FILES)
LAYOUT = "v2"   # in the cache path: v1 (files sized by --samples, made with torch) is never mixed in

# Well-separated colours, one per class, so the task is learnable in few steps.
PALETTE = np.array(
    [
        [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
        [145, 30, 180], [70, 240, 240], [240, 50, 230], [210, 245, 60], [0, 0, 128],
    ],
    dtype=np.int16,
)


def synthetic_images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Images = class colour + class-specific stripes + uniform noise, as uint8 [N, 3, 32, 32].

    Colour alone separates the classes; the stripes give the convolutions something spatial to
    find.  Integer-only arithmetic keeps the bytes identical across processes and machines, which
    the concurrent writes rely on.
    """
    n = labels.size
    labels = labels.astype(np.int16)
    coords = np.arange(32, dtype=np.int16)
    base = (PALETTE[labels] * 2 // 5 + 75).reshape(n, 3, 1, 1)
    period = (2 + labels // 2).reshape(n, 1, 1)
    horizontal = (labels % 2 == 0).reshape(n, 1, 1)
    along = np.where(horizontal, coords.reshape(1, 32, 1), coords.reshape(1, 1, 32))
    stripes = ((along // period) % 2 * 48 - 24).astype(np.int16).reshape(n, 1, 32, 32)
    noise = rng.integers(-96, 97, size=(n, *IMAGE_SHAPE), dtype=np.int16)
    return np.clip(base + stripes + noise, 0, 255).astype(np.uint8)


def synthetic_file(seed: int, stream: int, count: int = RECORDS_PER_FILE) -> bytes:
    """The records of one synthetic file; ``stream`` (the file's number) decorrelates the files."""
    rng = np.random.default_rng([seed, stream])
    labels = rng.integers(0, NUM_CLASSES, size=count, dtype=np.uint8)
    records = np.empty((count, RECORD_BYTES), dtype=np.uint8)
    records[:, 0] = labels
    records[:, 1:] = synthetic_images(labels, rng).reshape(count, IMAGE_BYTES)
    return records.tobytes()


def atomic_write(path: Path, write: Callable) -> None:
    """Write via a temp file in the same directory, fsync, then ``os.replace``.

    Readers (other ranks, a resuming job) see either no file or a complete one, never a torn
    write, even if this process is killed half-way.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def default_cache_root() -> Path:
    """The user's cache directory ($XDG_CACHE_HOME, else ~/.cache): made once, reused by every later run."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "dlaunch" / "synthetic-cifar"


def train_files_for(samples: int) -> tuple[str, ...]:
    """The training files that hold the first ``samples`` records."""
    if not 1 <= samples <= MAX_SAMPLES:
        raise ValueError(f"synthetic CIFAR-10 has 1 to {MAX_SAMPLES} training samples, not {samples}")
    return TRAIN_FILES[:-(-samples // RECORDS_PER_FILE)]


def ensure_synthetic_cifar(root: Path, samples: int, seed: int) -> Path:
    """Create (once) the files of a synthetic ``cifar-10-batches-bin`` that hold ``samples`` training
    records, and its test file; return the directory."""
    directory = root / f"{LAYOUT}-seed{seed}" / BATCHES_DIR
    names = train_files_for(samples) + (TEST_FILE,)
    for name in names:
        path = directory / name
        if path.is_file() and path.stat().st_size == RECORDS_PER_FILE * RECORD_BYTES:
            continue
        stream = len(TRAIN_FILES) if name == TEST_FILE else TRAIN_FILES.index(name)
        data = synthetic_file(seed, stream)
        atomic_write(path, lambda handle, data=data: handle.write(data))
    return directory
