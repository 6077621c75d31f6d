"""A real CUDA rank (tests/e2e/test_cuda_job.py): NCCL all-reduce on ``cuda:LOCAL_RANK``, as torchrun's users
write it, then a record of where it ran.  Writes ``cuda.json`` into its rank directory: its rank, the
CUDA_VISIBLE_DEVICES it was given (None: unset), the UUID of the GPU that ``cuda:LOCAL_RANK`` is, and the
all-reduced sum (every rank adds 1: the world size when the collective worked)."""

import json
import os

import torch
import torch.distributed as dist


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    total = torch.ones(1, device=device)
    dist.all_reduce(total)
    record = {"rank": dist.get_rank(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "uuid": str(torch.cuda.get_device_properties(device).uuid), "sum": total.item()}
    dist.destroy_process_group()
    with open(os.path.join(os.environ["DLAUNCH_RANK_DIR"], "cuda.json"), "w") as fh:
        json.dump(record, fh)


if __name__ == "__main__":
    main()
