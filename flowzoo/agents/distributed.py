"""Data-parallel training across processes: ``torchrun --nproc_per_node N $(which flowzoo)
train ...`` (gloo on CPUs, NCCL on GPUs, one GPU per process).

Every process holds a full copy of every policy. A step's problems are dealt out to the
processes (whole GRPO groups stay on one process, so group advantages are exact); each
process back-propagates its share with the *global* loss normalisers, then every per-role
gradient is summed across processes (the diagnostics need them, and their sum is the
policy's gradient), so all processes take the identical optimizer step and stay in sync.
Process 0 evaluates, logs and writes checkpoints. Not FSDP: a policy that does not fit one
device is out of scope here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world: int = 1
    #: the device this process trains on (``cuda:<local rank>`` under torchrun on GPUs)
    device: str = "cpu"

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup(device: str) -> DistInfo:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1), else a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo(device=device)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        device = f"cuda:{local}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), device)


def sum_(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum ``t`` over the processes, in place (a no-op for a single process)."""
    if info.active:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def sum_floats(values: list[float], info: DistInfo) -> list[float]:
    """Sum a few scalars over the processes."""
    if not info.active:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.to(info.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return [float(x) for x in t.cpu()]


def mine(n: int, info: DistInfo) -> list[int]:
    """The indices of ``n`` items (problems) this process handles."""
    return list(range(info.rank, n, info.world))
