"""Data-parallel LeNet on CIFAR-10 in MindSpore on CPU: the seeds' recipe, launched by dlaunch.

The seeds' data-parallel tutorial (``init()``, ``DATA_PARALLEL`` with ``gradients_mean``,
``GRAPH_MODE``, a sharded ``Cifar10Dataset``, ``Momentum``, ``ModelCheckpoint``), with a LeNet-sized
network so that several ranks train on a laptop's CPU::

    dlaunch run examples/train_cifar_mindspore.py --ranks 4 --ms-scheduler
    dlaunch run examples/train_cifar_mindspore.py --ranks 4 --ms-scheduler --resume   # from the latest run
    python examples/train_cifar_mindspore.py      # one process, no cluster

``--ms-scheduler`` gives every rank msrun's worker environment (``MS_ROLE``, ``MS_WORKER_NUM``,
``MS_SCHED_HOST``, ``MS_SCHED_PORT``, ``MS_NODE_ID``) and starts a scheduler process running this
same script, whose ``init()`` serves the cluster and which then exits without training.  Without
``MS_ROLE`` the script trains alone as rank 0 of 1.

Data: ``--data-path``/``DATA_PATH`` (a real ``cifar-10-batches-bin`` or its parent), else the
synthetic CIFAR-10 of ``synthetic_cifar.py`` (beside this file), written once under
``$XDG_CACHE_HOME``.  Every rank reads its shard (``num_shards=RANK_SIZE, shard_id=RANK_ID``) of
``--samples`` records.  Output, unprefixed (dlaunch adds the rank): ``epoch: 1 step: 4, loss is
2.0084016`` every ``--log-every`` steps, as the seeds' ``LossMonitor`` prints it, then ``training
finished``.  Each epoch ends with ``{prefix}-{epoch}_{step}.ckpt`` in ``$DLAUNCH_CKPT_DIR`` (each
rank its own directory; ``--ckpt-dir`` overrides), carrying the epoch and step it was saved at; with
``DLAUNCH_RESUME_FROM`` (``dlaunch run --resume``) the rank loads its file with ``load_checkpoint``
and continues with the next epoch.
"""

from __future__ import annotations

import argparse
import os
import sys

import mindspore as ms
import mindspore.dataset as ds
import mindspore.dataset.transforms as transforms
import mindspore.dataset.vision as vision
import numpy as np
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import Callback, CheckpointConfig, Model, ModelCheckpoint
from synthetic_cifar import (
    BATCHES_DIR,
    MAX_SAMPLES,
    NUM_CLASSES,
    TRAIN_FILES,
    default_cache_root,
    ensure_synthetic_cifar,
)

SYNTHETIC_SAMPLES = 4096

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)   # per-channel mean and std of real CIFAR-10, as in the recipe
CIFAR_STD = (0.2023, 0.1994, 0.2010)


def log(message: str) -> None:
    """One whole line, flushed, so a launcher streaming the pipe sees it now."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


class LeNet(nn.Cell):
    """LeNet-5 for 3x32x32 images: two conv+pool stages, three dense layers."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.features = nn.SequentialCell(
            nn.Conv2d(3, 6, 5, pad_mode="valid"), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(6, 16, 5, pad_mode="valid"), nn.ReLU(), nn.MaxPool2d(2, 2))
        self.flatten = nn.Flatten()
        self.classifier = nn.SequentialCell(
            nn.Dense(16 * 5 * 5, 120), nn.ReLU(), nn.Dense(120, 84), nn.ReLU(), nn.Dense(84, num_classes))

    def construct(self, x):
        return self.classifier(self.flatten(self.features(x)))


class SeedsLossMonitor(Callback):
    """The seeds' loss line, ``epoch: E step: S, loss is L`` (S within the epoch, L as float32 prints)."""

    def __init__(self, every: int):
        super().__init__()
        self.every = every

    def on_train_step_end(self, run_context):
        params = run_context.original_args()
        step = (params.cur_step_num - 1) % params.batch_num + 1
        if step % self.every == 0:
            loss = params.net_outputs[0] if isinstance(params.net_outputs, (tuple, list)) else params.net_outputs
            log(f"epoch: {params.cur_epoch_num} step: {step}, loss is {np.float32(float(loss.asnumpy()))!s}")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--log-every", type=int, default=4, help="print a loss line every N steps")
    parser.add_argument("--data-path", default=os.environ.get("DATA_PATH"),
                        help="cifar-10-batches-bin or its parent (default: $DATA_PATH, else synthetic data)")
    parser.add_argument("--samples", type=int, default=None,
                        help=f"training samples per epoch, total across ranks (default: all of a real dataset, "
                             f"{SYNTHETIC_SAMPLES} synthetic; at most {MAX_SAMPLES} synthetic)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ckpt-prefix", default="lenet")
    parser.add_argument("--ckpt-dir", default=None,
                        help="where ModelCheckpoint saves (default: $DLAUNCH_CKPT_DIR, else ./ckpt_<rank>)")
    parser.add_argument("--keep-max", type=int, default=5, help="CheckpointConfig(keep_checkpoint_max)")
    args = parser.parse_args(argv)
    if args.samples is None and not args.data_path:
        args.samples = SYNTHETIC_SAMPLES
    for name in ("epochs", "batch_size", "log_every", "samples", "keep_max"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not args.data_path and args.samples > MAX_SAMPLES:
        parser.error(f"--samples must be at most {MAX_SAMPLES} with synthetic data")
    return args


def join_cluster() -> tuple[int, int]:
    """``init()`` through the scheduler dlaunch --ms-scheduler (or msrun) started; (rank, world size)."""
    if not os.environ.get("MS_ROLE"):
        if int(os.environ.get("RANK_SIZE") or 1) > 1:
            raise SystemExit("RANK_SIZE > 1 but no MS_ROLE: start this script with dlaunch run --ms-scheduler "
                             "(or msrun), which starts MindSpore's scheduler")
        return 0, 1
    init()
    if os.environ["MS_ROLE"] == "MS_SCHED":
        return -1, get_group_size()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    return get_rank(), get_group_size()


def create_dataset(args: argparse.Namespace, rank: int, world: int):
    """This rank's shard, rescaled, normalised, channel-first, batched (drop_remainder, like the recipe)."""
    if args.data_path:
        data_dir = args.data_path
        if not os.path.isfile(os.path.join(data_dir, TRAIN_FILES[0])):
            data_dir = os.path.join(data_dir, BATCHES_DIR)
        # data_batch_1.bin is enough: the synthetic set holds only the files its samples need
        missing = [n for n in TRAIN_FILES[:1] if not os.path.isfile(os.path.join(data_dir, n))]
        if missing:
            raise SystemExit(f"no CIFAR-10 binary data at {args.data_path}: {', '.join(missing)} missing")
    else:
        data_dir = str(ensure_synthetic_cifar(default_cache_root(), args.samples, args.seed))
    log(f"data: {data_dir}{'' if args.data_path else ' (synthetic)'}")
    per_rank = None if args.samples is None else args.samples // world
    if per_rank is not None and per_rank < args.batch_size:
        raise SystemExit(f"a shard of {per_rank} samples is smaller than one batch of {args.batch_size}; "
                         "use more --samples or a smaller --batch-size")
    data = ds.Cifar10Dataset(data_dir, usage="train", num_shards=world, shard_id=rank, shuffle=True,
                             num_samples=per_rank)
    image_ops = [vision.Rescale(1.0 / 255.0, 0.0), vision.Normalize(CIFAR_MEAN, CIFAR_STD), vision.HWC2CHW()]
    data = data.map(image_ops, input_columns="image")
    data = data.map(transforms.TypeCast(ms.int32), input_columns="label")
    return data.batch(args.batch_size, drop_remainder=True)


def resume(net: nn.Cell, optimizer: nn.Optimizer) -> int:
    """Load the checkpoint dlaunch --resume gave this rank (``DLAUNCH_RESUME_FROM``); the epoch it ends (0: none)."""
    path = os.environ.get("DLAUNCH_RESUME_FROM")
    if not path:
        return 0
    params = ms.load_checkpoint(path)
    if "epoch_num" in params:   # saved by this script (append_info)
        epoch, step = int(params.pop("epoch_num").asnumpy()), int(params.pop("step_num").asnumpy())
    else:                       # another script's: the step dlaunch read from the file name
        epoch, step = (int(part) for part in os.environ.get("DLAUNCH_RESUME_STEP", "0_0").split("_"))
    ms.load_param_into_net(net, params)
    ms.load_param_into_net(optimizer, params)
    log(f"resumed from {path}: epoch {epoch} (step {step} of the run) restored, continuing at epoch {epoch + 1}")
    return epoch


def train(args: argparse.Namespace, rank: int, world: int) -> None:
    ms.set_seed(args.seed)
    data = create_dataset(args, rank, world)
    steps = data.get_dataset_size()
    net = LeNet()
    optimizer = nn.Momentum(net.trainable_params(), args.lr, args.momentum)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    done = resume(net, optimizer)
    directory = args.ckpt_dir or os.environ.get("DLAUNCH_CKPT_DIR") or f"./ckpt_{rank}"
    config = CheckpointConfig(save_checkpoint_steps=steps, keep_checkpoint_max=args.keep_max,
                              append_info=["epoch_num", "step_num"])
    callbacks = [SeedsLossMonitor(args.log_every),
                 ModelCheckpoint(prefix=args.ckpt_prefix, directory=directory, config=config)]
    model = Model(net, loss_fn=loss_fn, optimizer=optimizer)
    if done < args.epochs:
        model.train(args.epochs, data, callbacks=callbacks, dataset_sink_mode=False, initial_epoch=done)
    log("training finished")


def main(argv=None) -> int:
    args = parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    rank, world = join_cluster()
    if rank < 0:
        return 0   # the scheduler: init() served the cluster
    named = " ".join(f"{k}={os.environ[k]}" for k in ("RANK_ID", "MS_NODE_ID") if k in os.environ)
    log(f"rank {rank}/{world}" + (f" ({named})" if named else ""))
    train(args, rank, world)
    return 0


if __name__ == "__main__":
    sys.exit(main())
