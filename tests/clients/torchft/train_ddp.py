# changed: random tensors (seed 0) instead of the CIFAR10 download, plain DataLoader (num_workers=0) instead of torchdata's
# StatefulDataLoader, no torchvision/torchdata imports, no 1 GB 'useless' embedding, no profiler, stop after env
# TORCHFT_STEPS (default 60) steps instead of 10000, one flushed 'step=...' line per step (and a 'healed ...' line
# when the step applied a checkpoint from a peer) instead of the every-100-steps loss print, sleep env
# TORCHFT_STEP_SLEEP (default 0.05) s per step.
# From meta-pytorch/torchft (https://github.com/meta-pytorch/torchft) at 7eb7087, train_ddp.py.
# Copyright (c) Meta Platforms, Inc. and affiliates.
# All rights reserved.
#
# This source code is licensed under the BSD-style license found in the
# LICENSE file in the root directory of this source tree.

import logging
import os
import sys
import time
from datetime import timedelta

REPLICA_GROUP_ID = int(os.environ.get("REPLICA_GROUP_ID", 0))
os.environ["CUDA_VISIBLE_DEVICES"] = str(REPLICA_GROUP_ID % 4)
os.environ["NCCL_HOSTID"] = str(REPLICA_GROUP_ID)
# Set XPU device visibility for Intel XPU devices
if "XPU_VISIBLE_DEVICES" not in os.environ:
    os.environ["XPU_VISIBLE_DEVICES"] = str(REPLICA_GROUP_ID % 4)

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import DataLoader, TensorDataset
from torchft import (
    DistributedDataParallel,
    DistributedSampler,
    Manager,
    Optimizer,
    ProcessGroupGloo,
    ProcessGroupNCCL,
    ProcessGroupXCCL,
)
from torchft.checkpointing.pg_transport import PGTransport

logging.basicConfig(level=logging.INFO)


@record
def main() -> None:
    REPLICA_GROUP_ID = int(os.environ.get("REPLICA_GROUP_ID", 0))
    NUM_REPLICA_GROUPS = int(os.environ.get("NUM_REPLICA_GROUPS", 2))

    TORCHFT_STEPS = int(os.environ.get("TORCHFT_STEPS", 60))
    TORCHFT_STEP_SLEEP = float(os.environ.get("TORCHFT_STEP_SLEEP", 0.05))
    RANK = int(os.environ.get("RANK", 0))

    # CIFAR10-shaped random data, the same on every rank.
    g = torch.Generator().manual_seed(0)
    trainset = TensorDataset(
        torch.randn(2048, 3, 32, 32, generator=g),
        torch.randint(0, 10, (2048,), generator=g),
    )

    # This shards the training set across all ranks and replica groups. We manage
    # the dataloaders on a per replica group basis with the assumption that the
    # majority of groups will be available so few batches will be dropped.
    sampler = DistributedSampler(
        trainset,
        replica_rank=REPLICA_GROUP_ID,
        num_replica_groups=NUM_REPLICA_GROUPS,
        group_rank=0,
        # for DDP we can use replica groups of size 1, FSDP/PP/CP would need more.
        num_replicas=1,
        shuffle=True,
    )

    trainloader = DataLoader(trainset, batch_size=64, num_workers=0, sampler=sampler)

    def load_state_dict(state_dict):
        m.load_state_dict(state_dict["model"])
        optimizer.load_state_dict(state_dict["optim"])

    def state_dict():
        return {
            "model": m.state_dict(),
            "optim": optimizer.state_dict(),
        }

    if torch.cuda.is_available():
        device = "cuda"
        pg = ProcessGroupNCCL(timeout=timedelta(seconds=30))
    elif torch.xpu.is_available():
        device = "xpu"
        pg = ProcessGroupXCCL(timeout=timedelta(seconds=30))
    else:
        device = "cpu"
        pg = ProcessGroupGloo(timeout=timedelta(seconds=5))

    transport = PGTransport(
        pg,
        timeout=timedelta(seconds=10),
        device=(
            "cuda"
            if torch.cuda.is_available()
            else "xpu"
            if torch.xpu.is_available()
            else "cpu"
        ),
    )

    manager = Manager(
        pg=pg,
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"train_ddp_{REPLICA_GROUP_ID}",
        timeout=timedelta(seconds=30),
        checkpoint_transport=transport,
    )

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(
                nn.Conv2d(3, 6, 5),
                nn.ReLU(),
                nn.MaxPool2d(2, 2),
                nn.Conv2d(6, 16, 5),
                nn.ReLU(),
                nn.MaxPool2d(2, 2),
            )

            final_dim = 10

            self.classifier = nn.Sequential(
                nn.Linear(16 * 5 * 5, 120),
                nn.ReLU(),
                nn.Linear(120, 84),
                nn.ReLU(),
                nn.Linear(84, final_dim),
            )

        def forward(self, x):
            x = self.cnn(x)
            x = torch.flatten(x, 1)  # flatten all dimensions except batch
            x = self.classifier(x)
            return x

    m = Net().to(device)
    m = DistributedDataParallel(manager, m)
    optimizer = Optimizer(manager, optim.AdamW(m.parameters()))
    criterion = nn.CrossEntropyLoss()

    print(m)
    num_params = sum(p.numel() for p in m.parameters())
    print(f"Total number of parameters: {num_params}")

    # You can use an epoch based training but with faults it's easier to use step
    # based training.
    while True:
        for i, (inputs, labels) in enumerate(trainloader):
            inputs = inputs.to(device)
            labels = labels.to(device)

            # must be called at the beginning of each train loop
            # Quorum computation is triggered here but only needed in the backwards pass.
            optimizer.zero_grad()

            out = m(inputs)
            loss = criterion(out, labels)

            # Gradient allreduce overlaps with the backwards pass.
            loss.backward()

            # must be called at the end of the train loop
            # This may not actually step the optimizer if an error occured during grad allreduce.
            optimizer.step()

            # one write per line so lines of ranks sharing a pipe don't interleave
            line = (
                f"step={manager.current_step()} group={REPLICA_GROUP_ID} rank={RANK} "
                f"participants={manager.num_participants()} loss={loss.item():.4f}\n"
            )
            if manager._healing:  # this step loaded a checkpoint from a peer
                line = (
                    f"healed group={REPLICA_GROUP_ID} rank={RANK} "
                    f"step={manager.current_step()}\n" + line
                )
            print(line, end="", flush=True)
            time.sleep(TORCHFT_STEP_SLEEP)

            # TODO (by the user): periodically checkpoint model, optim, manager and dataloader

            # You typically want to checkpoint dataloader frequently (every step?) to
            # avoid repeated batches as it's replica group specific.

            # Model, optim and manager checkpoints can be done more infrequently as
            # they're shared across all groups and will load from existing replicas as
            # long as not every worker goes down.

            if manager.current_step() >= TORCHFT_STEPS:
                # complete training
                exit()


if __name__ == "__main__":
    main()
