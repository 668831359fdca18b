"""Data-parallel training across processes: ``torchrun --nproc_per_node N $(which flowzoo)
train ...`` (gloo on CPUs, NCCL on GPUs, one GPU per process).

Every process holds a full copy of every policy. A step's problems are dealt out to the
processes (whole GRPO groups stay on one process, so group advantages are exact); each
process back-propagates its share with the *global* loss normalisers, then every per-role
gradient is summed across processes (the diagnostics need them, and their sum is the
policy's gradient), so all processes take the identical optimizer step and stay in sync.
Evaluation is dealt out the same way (counts summed); process 0 logs and writes
checkpoints.

``fsdp=True`` (FSDP2, ``fully_shard`` per decoder layer): each process holds 1/N of every
policy's parameters, gradients and AdamW state, for policies whose training state does not
fit one device. Gradients are reduce-scattered as sums (the same global normalisers), so the
per-role gradients are each process's shard and their norms and cosines are summed over the
processes. Generation gathers the full parameters once per rollout (every process samples a
different number of tokens, which a layer-by-layer gather cannot follow); the update runs the
same number of forward/backward passes on every process (a process out of micro-batches
joins with a zero-loss pass).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

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
        # generous: a process may wait at a collective while process 0 writes a checkpoint
        timeout = timedelta(seconds=float(os.environ.get("FLOWZOO_DIST_TIMEOUT_S", "3600")))
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo", timeout=timeout)
    return DistInfo(dist.get_rank(), dist.get_world_size(), device)


def sum_(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum ``t`` over the processes, in place (a no-op for a single process)."""
    if info.active:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def _reduce_scalars(values: list, dtype: torch.dtype, op, info: DistInfo) -> list:
    """All-reduce a few scalars (on the GPU where NCCL needs them there)."""
    t = torch.tensor(values, dtype=dtype)
    if dist.get_backend() == "nccl":
        t = t.to(info.device)
    dist.all_reduce(t, op=op)
    return t.cpu().tolist()


def sum_floats(values: list[float], info: DistInfo) -> list[float]:
    """Sum a few scalars over the processes."""
    if not info.active:
        return list(values)
    return _reduce_scalars(values, torch.float64, dist.ReduceOp.SUM, info)


def mine(n: int, info: DistInfo) -> list[int]:
    """The indices of ``n`` items (problems) this process handles."""
    return list(range(info.rank, n, info.world))


def max_int(n: int, info: DistInfo) -> int:
    """The largest ``n`` over the processes."""
    if not info.active:
        return n
    return int(_reduce_scalars([n], torch.int64, dist.ReduceOp.MAX, info)[0])


def check_fsdp(cfg: Any, info: DistInfo) -> None:
    """What ``fsdp=True`` supports, as one clear error instead of a hang between processes."""
    if not info.active:
        raise ValueError(
            "fsdp=True shards policies over torchrun processes; run it under "
            "`torchrun --nproc_per_node N` with N >= 2 (one process needs no sharding)"
        )
    bad = {
        "algo": (cfg.algo, "grpo"),
        "param": (cfg.param, "full"),
        "generation_backend": (cfg.generation_backend, "transformers"),
    }
    for key, (got, want) in bad.items():
        if got != want:
            raise ValueError(f"fsdp=True supports {key}={want!r} only, got {got!r}")
    if cfg.damper_lambda > 0:
        raise ValueError("fsdp=True does not support the coherence damper (damper_lambda > 0)")
