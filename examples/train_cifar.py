"""Data-parallel ResNet training on CIFAR-10: the bundled dlaunch example job.

This is the MindSpore tutorial's data-parallel ResNet recipe (sharded
Cifar10Dataset, ResNet, Momentum optimizer, LossMonitor, ModelCheckpoint)
redone in PyTorch on CPU with ``torch.distributed`` (gloo backend).  It is a
plain torchrun-style script, so it runs unchanged under any launcher that sets
the usual environment:

    dlaunch run examples/train_cifar.py --ranks 8
    torchrun --nproc-per-node 8 examples/train_cifar.py
    python examples/train_cifar.py            # single process, no process group

Distributed setup comes from ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT`` (``env://`` rendezvous).  The MindSpore
names ``RANK_ID``, ``RANK_SIZE`` and ``DEVICE_ID`` are logged and used as a
fallback when the torch names are absent, so MindSpore-era launch scripts keep
working.  Without ``WORLD_SIZE`` (or ``RANK_SIZE``) the job trains as rank 0 of 1.

Data is the CIFAR-10 *binary* format (``cifar-10-batches-bin/data_batch_N.bin``
and ``test_batch.bin``; each record is 1 label byte followed by 3072 pixel bytes,
32x32 image stored channel-major R, G, B).  Pass a real copy with
``--data-path`` or ``DATA_PATH`` (the directory itself or its parent).  With
neither, a learnable synthetic dataset in exactly that format is written once
under the user's cache directory by ``synthetic_cifar.py`` (shared with the
MindSpore example), and the first ``--samples`` records of it are read back by
the same parser.

Like MindSpore's ``num_shards=RANK_SIZE, shard_id=RANK_ID``, every rank keeps
only its strided shard of the records and reshuffles that shard each epoch with
a seeded generator.  Output is unprefixed (the launcher adds rank prefixes):
``epoch: 1 step: 4, loss is 2.0084016`` every ``--log-every`` steps, then
``epoch: 2 accuracy: 0.83`` on the rank's test shard and ``training finished``.
Each epoch ends with a rank-local checkpoint ``{prefix}-{epoch}_{step}.pt`` in
``$DLAUNCH_CKPT_DIR`` (default ``./ckpt_<rank>``), written atomically.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from synthetic_cifar import (
    BATCHES_DIR,
    IMAGE_BYTES,
    IMAGE_SHAPE,
    MAX_SAMPLES,
    NUM_CLASSES,
    RECORD_BYTES,
    TEST_FILE,
    TRAIN_FILES,
    default_cache_root,
    ensure_synthetic_cifar,
)

# Per-channel mean/std of real CIFAR-10, as used by the MindSpore recipe.
CIFAR_MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
CIFAR_STD = torch.tensor([0.2023, 0.1994, 0.2010]).view(1, 3, 1, 1)


# --------------------------------------------------------------------------
# Distributed environment
# --------------------------------------------------------------------------


@dataclass
class DistEnv:
    """Where this process sits in the job, resolved from launcher variables."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    distributed: bool = False
    mindspore: dict[str, str] = field(default_factory=dict)


def _first_int(environ: Mapping[str, str], names: tuple[str, ...], default: int) -> int:
    """Return the first of ``names`` set in ``environ`` as an int."""
    for name in names:
        value = environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise SystemExit(f"environment variable {name}={value!r} is not an integer") from None
    return default


def read_dist_env(environ: Mapping[str, str] = os.environ) -> DistEnv:
    """Read torchrun names first, MindSpore names (RANK_ID/RANK_SIZE/DEVICE_ID) second.

    A job joins a process group only when ``WORLD_SIZE`` is set (the contract
    torchrun and dlaunch share, so ``python train_cifar.py`` just works) or when
    ``RANK_SIZE`` asks for more than one rank: MindSpore scripts export
    ``RANK_SIZE=1`` even for standalone runs, with no rendezvous address.
    """
    mindspore = {k: environ[k] for k in ("RANK_ID", "RANK_SIZE", "DEVICE_ID") if k in environ}
    world_size = _first_int(environ, ("WORLD_SIZE", "RANK_SIZE"), 1)
    env = DistEnv(
        rank=_first_int(environ, ("RANK", "RANK_ID"), 0),
        world_size=world_size,
        local_rank=_first_int(environ, ("LOCAL_RANK", "DEVICE_ID"), 0),
        distributed=bool(environ.get("WORLD_SIZE")) or world_size > 1,
        mindspore=mindspore,
    )
    if env.world_size < 1 or not 0 <= env.rank < env.world_size:
        raise SystemExit(f"invalid rank {env.rank} for world size {env.world_size}")
    return env


def init_distributed(env: DistEnv) -> None:
    """Join the gloo process group via env:// (MASTER_ADDR/MASTER_PORT)."""
    if not env.distributed:
        return
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        raise SystemExit(f"world size {env.world_size} given but {', '.join(missing)} not set")
    dist.init_process_group(
        backend="gloo", init_method="env://", rank=env.rank, world_size=env.world_size
    )


# --------------------------------------------------------------------------
# CIFAR-10 binary format
# --------------------------------------------------------------------------


def parse_cifar_records(data: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode CIFAR-10 binary records into (labels uint8 [N], images uint8 [N,3,32,32]).

    The bytes are viewed in place with ``torch.frombuffer`` so a 30 MB batch file
    costs one copy, and a truncated file is an error rather than silent data loss.
    """
    if len(data) % RECORD_BYTES:
        raise ValueError(
            f"CIFAR-10 binary data of {len(data)} bytes is not a whole number "
            f"of {RECORD_BYTES}-byte records"
        )
    if not data:
        return torch.empty(0, dtype=torch.uint8), torch.empty(0, *IMAGE_SHAPE, dtype=torch.uint8)
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(-1, RECORD_BYTES)
    labels = raw[:, 0].clone()
    if labels.numel() and int(labels.max()) >= NUM_CLASSES:
        raise ValueError(f"label {int(labels.max())} out of range 0..{NUM_CLASSES - 1}")
    images = raw[:, 1:].reshape(-1, *IMAGE_SHAPE).clone()
    return labels, images


def encode_cifar_records(labels: torch.Tensor, images: torch.Tensor) -> bytes:
    """Inverse of :func:`parse_cifar_records` (numpy-free, via the tensor's buffer)."""
    records = torch.cat([labels.view(-1, 1), images.reshape(-1, IMAGE_BYTES)], dim=1)
    records = records.to(torch.uint8).contiguous()
    return ctypes.string_at(records.data_ptr(), records.numel())


def record_count(path: Path) -> int:
    """Number of records in a binary file, from its size (no read needed)."""
    size = path.stat().st_size
    if size % RECORD_BYTES:
        raise ValueError(f"{path}: size {size} is not a multiple of {RECORD_BYTES}")
    return size // RECORD_BYTES


def shard_rows(offset: int, count: int, shard_id: int, num_shards: int) -> range:
    """Rows of a file (starting at global record ``offset``) that belong to a shard.

    Shards are strided over the global record index, like MindSpore's
    ``num_shards``/``shard_id``: record g goes to shard ``g % num_shards``.
    """
    first = (shard_id - offset) % num_shards
    return range(first, count, num_shards)


def load_shard(
    files: list[Path], shard_id: int, num_shards: int, limit: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Read the shard's records from ``files``, the first ``limit`` records only when given:
    (global indices, labels, images).

    Only the shard's rows are kept, so memory per rank shrinks with world size.
    """
    indices, labels, images = [], [], []
    offset = 0
    for path in files:
        if limit is not None and offset >= limit:
            break
        with open(path, "rb") as handle:
            data = handle.read() if limit is None else handle.read((limit - offset) * RECORD_BYTES)
        file_labels, file_images = parse_cifar_records(data)
        rows = shard_rows(offset, len(file_labels), shard_id, num_shards)
        picked = torch.tensor(list(rows), dtype=torch.long)
        indices.append(picked + offset)
        labels.append(file_labels[picked])
        images.append(file_images[picked])
        offset += len(file_labels)
    return torch.cat(indices), torch.cat(labels), torch.cat(images)


def resolve_data_dir(path: str) -> Path:
    """Accept either ``cifar-10-batches-bin`` itself or the directory holding it.

    ``data_batch_1.bin`` and ``test_batch.bin`` are enough (the later training files are read when
    there): the synthetic set a run without data prints ("data: .../cifar-10-batches-bin (synthetic)")
    holds only the files its samples need, and giving that directory back must work.
    """
    given = Path(path).expanduser()
    for candidate in (given, given / BATCHES_DIR):
        if all((candidate / name).is_file() for name in (TRAIN_FILES[0], TEST_FILE)):
            return candidate
    raise SystemExit(
        f"no CIFAR-10 binary data at {given}: expected {TRAIN_FILES[0]} (and {TRAIN_FILES[1]}... "
        f"{TRAIN_FILES[-1]} when present) and {TEST_FILE} there or in {given / BATCHES_DIR}"
    )


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv+BN, identity or 1x1 projection shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """A three-stage ResNet, narrow enough for 8 ranks sharing 2 CPU cores.

    The stem downsamples to 16x16 at once: the full-resolution stage is where
    a CIFAR ResNet spends most of its FLOPs, and this job is about the
    launcher, not about squeezing out accuracy.
    """

    def __init__(self, width: int = 16, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        self.layers = nn.Sequential(
            BasicBlock(width, width),
            BasicBlock(width, 2 * width, stride=2),
            BasicBlock(2 * width, 4 * width, stride=2),
        )
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 NCHW -> float, rescaled and normalized like the MindSpore recipe."""
    return (images.float() / 255.0 - CIFAR_MEAN) / CIFAR_STD


# --------------------------------------------------------------------------
# Checkpointing and logging
# --------------------------------------------------------------------------


def save_checkpoint(state: dict, directory: str, prefix: str, epoch: int, step: int,
                    async_save: bool = False) -> Path:
    """Save ``state`` as ``{directory}/{prefix}-{epoch}_{step}.pt`` with dlaunch's atomic save.

    Same naming as MindSpore's ModelCheckpoint; a rank killed mid-save leaves
    its previous checkpoint intact and nothing that looks like a checkpoint.
    With ``async_save`` the state is copied and training goes on while the file
    is written in the background.
    """
    from launcher import checkpoint

    saved = checkpoint.save(state, epoch, step, prefix=prefix, directory=directory, async_save=async_save)
    return Path(saved.path if async_save else saved)


def wait_for_every_rank(prefix: str, epoch: int, step: int, world_size: int, limit: float = 60.0) -> None:
    """Before a simulated crash: wait (at most ``limit`` seconds) until every rank's checkpoint of ``epoch`` is
    on disk, so the node fails between epochs and leaves a complete step to resume from.  Without it, on a
    loaded machine another rank could still be writing that file when this one dies, and the launcher's
    fail-fast would stop it mid-save: nothing complete to resume, a different test outcome."""
    import glob
    import time

    if epoch < 1:
        return
    name = glob.escape(f"{prefix}-{epoch}_{step}.pt")
    run_dir = os.environ.get("DLAUNCH_RUN_DIR")
    pattern = os.path.join(glob.escape(run_dir), "*", "ckpt", name) if run_dir else os.path.join("ckpt_*", name)
    deadline = time.monotonic() + limit
    while len(glob.glob(pattern)) < world_size and time.monotonic() < deadline:
        time.sleep(0.02)


def format_loss(value: float) -> str:
    """Shortest text that round-trips as float32, matching MindSpore's numpy output."""
    target = struct.pack("<f", value)
    text = repr(value)
    for digits in range(1, 10):
        candidate = f"{value:.{digits}g}"
        if struct.pack("<f", float(candidate)) == target:
            text = candidate
            break
    if text.lstrip("-").replace(".", "", 1).isdigit() and "." not in text:
        text += ".0"
    return text


def log(message: str) -> None:
    """Write one whole line and flush, so a launcher streaming our pipe sees it now.

    One ``write`` call (not print's text-then-newline) keeps lines from ranks
    that share a stdout, as under plain torchrun, from splicing together.
    """
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------


def epoch_order(size: int, seed: int, epoch: int, rank: int) -> torch.Tensor:
    """Deterministic per-(seed, epoch, rank) shuffle of a shard's positions."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch * 1009 + rank)
    return torch.randperm(size, generator=generator)


@torch.no_grad()
def evaluate(model: nn.Module, labels: torch.Tensor, images: torch.Tensor, batch_size: int) -> float:
    """Top-1 accuracy of ``model`` on one rank's test shard."""
    model.eval()
    correct = 0
    for start in range(0, len(labels), batch_size):
        logits = model(normalize(images[start:start + batch_size]))
        correct += int((logits.argmax(1) == labels[start:start + batch_size].long()).sum())
    model.train()
    return correct / max(len(labels), 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--log-every", type=int, default=4,
                        help="print a loss line every N steps (MindSpore per_print_times)")
    parser.add_argument("--data-path", default=os.environ.get("DATA_PATH"),
                        help="cifar-10-batches-bin or its parent (default: $DATA_PATH, "
                             "else synthetic data)")
    parser.add_argument("--samples", type=int, default=4096,
                        help=f"synthetic training set size, total across ranks (at most {MAX_SAMPLES})")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (default: as OMP_NUM_THREADS says)")
    parser.add_argument("--width", type=int, default=16, help="channels of the first stage")
    parser.add_argument("--ckpt-prefix", default="resnet")
    parser.add_argument("--async-save", action="store_true",
                        help="write checkpoints in the background (checkpoint.save(..., async_save=True))")
    parser.add_argument("--crash-at-epoch", type=int, default=0, metavar="E",
                        help="simulate a node failure: --crash-rank SIGKILLs itself as epoch E starts "
                             "(first attempt only, so --max-restarts can recover)")
    parser.add_argument("--crash-rank", type=int, default=0, metavar="R")
    parser.add_argument("--print-shard", action="store_true",
                        help="print the global record indices of this rank's train shard")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "log_every", "samples", "width"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.samples > MAX_SAMPLES:
        parser.error(f"--samples must be at most {MAX_SAMPLES}")
    return args


def prepare_data(args: argparse.Namespace, env: DistEnv):
    """Locate or synthesize the dataset and load this rank's train and test shards."""
    if args.data_path:
        data_dir = resolve_data_dir(args.data_path)
        limit, test_limit = None, None
    else:
        data_dir = ensure_synthetic_cifar(default_cache_root(), args.samples, args.seed)
        limit, test_limit = args.samples, max(args.samples // 4, NUM_CLASSES)
    log(f"data: {data_dir}{'' if args.data_path else ' (synthetic)'}")
    train_files = []
    for name in TRAIN_FILES:   # data_batch_1.bin on, up to the first one missing
        if not (data_dir / name).is_file():
            break
        train_files.append(data_dir / name)
    train = load_shard(train_files, env.rank, env.world_size, limit)
    test = load_shard([data_dir / TEST_FILE], env.rank, env.world_size, test_limit)
    # Equal step counts on every rank, or DDP's all-reduce would hang: trim every
    # shard to the smallest one (computable from file sizes alone), then drop the
    # last partial batch like the recipe's batch(drop_remainder=True).
    total = sum(record_count(path) for path in train_files)
    per_rank = (total if limit is None else min(limit, total)) // env.world_size
    train = tuple(t[:per_rank] for t in train)
    return train, test


def resume(net: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the checkpoint dlaunch --resume names (DLAUNCH_RESUME_FROM); returns the epoch it completed (0: none).

    Checkpoints are taken at epoch ends and the data order depends only on
    (seed, epoch, rank), so a resumed run continues exactly where it stopped.
    """
    from launcher import checkpoint

    path = os.environ.get("DLAUNCH_RESUME_FROM")
    state = checkpoint.load(path, weights_only=False) if path else None
    if state is None:
        return 0
    net.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    log(f"resumed from {path}: epoch {state['epoch']} done, continuing at epoch {state['epoch'] + 1}")
    return int(state["epoch"])


def train(args: argparse.Namespace, env: DistEnv) -> None:
    torch.manual_seed(args.seed)
    (indices, labels, images), (_, test_labels, test_images) = prepare_data(args, env)
    if args.print_shard:
        log(f"shard: rank={env.rank} world_size={env.world_size} size={len(indices)} "
            f"indices={','.join(str(i) for i in indices.tolist())}")
    steps = len(labels) // args.batch_size
    if steps == 0:
        raise SystemExit(f"shard of {len(labels)} samples is smaller than one batch "
                         f"of {args.batch_size}; use more --samples or a smaller --batch-size")

    net = SmallResNet(args.width)
    model: nn.Module = net
    if env.world_size > 1:
        model = nn.parallel.DistributedDataParallel(net)  # averages gradients
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    ckpt_dir = os.environ.get("DLAUNCH_CKPT_DIR") or f"./ckpt_{env.rank}"
    start_epoch = resume(net, optimizer) + 1

    for epoch in range(start_epoch, args.epochs + 1):
        if (epoch == args.crash_at_epoch and env.rank == args.crash_rank
                and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"):
            from launcher import checkpoint

            checkpoint.wait_for_saves()   # the crash strikes once the previous epoch's file is on disk
            wait_for_every_rank(args.ckpt_prefix, epoch - 1, steps, env.world_size)
            log(f"rank {env.rank} simulates a crash at the start of epoch {epoch}")
            os.kill(os.getpid(), signal.SIGKILL)
        order = epoch_order(len(labels), args.seed, epoch, env.rank)
        for step in range(1, steps + 1):
            batch = order[(step - 1) * args.batch_size: step * args.batch_size]
            loss = F.cross_entropy(model(normalize(images[batch])), labels[batch].long())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % args.log_every == 0:
                log(f"epoch: {epoch} step: {step}, loss is {format_loss(loss.item())}")
        state = {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        save_checkpoint(state, ckpt_dir, args.ckpt_prefix, epoch, steps, args.async_save)
    if args.async_save:
        from launcher import checkpoint

        checkpoint.wait_for_saves()   # a failed background save fails the job

    # Evaluate the bare module: test shards differ in size and DDP's forward
    # may issue collectives, which would then hang.
    accuracy = evaluate(net, test_labels, test_images, args.batch_size)
    log(f"epoch: {args.epochs} accuracy: {accuracy:.4f}")
    log("training finished")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    env = read_dist_env()
    mindspore = " ".join(f"{k}={v}" for k, v in env.mindspore.items())
    log(f"rank {env.rank}/{env.world_size} local_rank {env.local_rank} "
        f"threads {torch.get_num_threads()}" + (f" ({mindspore})" if mindspore else ""))
    init_distributed(env)
    try:
        train(args, env)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
