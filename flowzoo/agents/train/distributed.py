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

import contextlib
import os
from collections.abc import Callable
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


class Replicated:
    """How the update meets the processes when each holds a full copy of every policy (one
    process, or data parallel): the update step calls these and never asks which layout it
    runs under (:class:`Sharded` is the other one)."""

    #: a micro-batch that ran out of memory may be retried smaller (no collective is pending)
    retries_oom = True

    def __init__(self, info: DistInfo) -> None:
        self.info = info

    def backward(self, loss: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
        """Add d(loss)/d(params) to ``.grad``, all or nothing (see :func:`accumulate`)."""
        if loss.requires_grad:
            accumulate(loss, params)

    def idle_passes(self, passes: int) -> int:
        """Zero-loss passes this process adds so every process makes as many: none here."""
        return 0

    def micro_batches(
        self,
        items: list,
        size: int,
        run: Callable[[list], None],
        idle: Callable[[], None],
    ) -> int:
        """``run`` on ``items`` in slices of ``size``, then the zero-loss ``idle`` passes that
        keep every process's collectives in step. Out of memory halves the size and retries
        the slice (nothing of a failed slice reached ``.grad``: :func:`accumulate`) where the
        layout allows it. Returns the size in use at the end."""
        idle_n = self.idle_passes(-(-len(items) // size))
        i = 0
        while i < len(items):
            mb = items[i : i + size]
            try:
                run(mb)
            except torch.OutOfMemoryError:
                if size == 1 or not self.retries_oom:
                    raise
                size = max(1, size // 2)
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                continue
            i += len(mb)
        for _ in range(idle_n):
            idle()
        return size

    def role_gradient(self, delta: torch.Tensor) -> torch.Tensor:
        """A role's whole gradient from this process's part: summed over the processes."""
        return sum_(delta, self.info)

    def install(self, params: list[torch.nn.Parameter], total: torch.Tensor) -> None:
        """Make ``.grad`` the summed gradient ``total`` (each process holds only its share)."""
        if self.info.active:
            write_flat_grad(params, total)

    def sum_shards(self, values: list[float]) -> list[float]:
        """Sums of per-parameter quantities (dot products, norms): whole already, unchanged."""
        return list(values)

    def gram_reduce(self):
        """What completes a Gram matrix of role gradients: nothing (they are whole)."""
        return None

    def shard(self, models: list[torch.nn.Module]) -> None:
        """Lay the models out over the processes: whole copies stay as they are."""

    def gathered(self, models: list[torch.nn.Module]):
        """A context in which ``models`` hold their full parameters (for generation)."""
        return contextlib.nullcontext()


class Sharded(Replicated):
    """FSDP2: each process holds a shard of every policy. Gradients are reduce-scattered by
    backward hooks (so ``backward()`` runs them), every process makes the same passes, and
    quantities summed over parameters are summed over the shards."""

    retries_oom = False  # the others are mid-collective: an out-of-memory error ends the run

    def backward(self, loss: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
        """FSDP reduce-scatters from backward hooks, which ``autograd.grad`` skips."""
        loss.backward()

    def idle_passes(self, passes: int) -> int:
        """As many passes on every process (the most any makes): the shortfall."""
        return max_int(passes, self.info) - passes

    def role_gradient(self, delta: torch.Tensor) -> torch.Tensor:
        """Each process holds its shard of the summed gradient already."""
        return delta

    def install(self, params: list[torch.nn.Parameter], total: torch.Tensor) -> None:
        """The reduce-scatter left each process's shard of the sum in ``.grad`` already."""

    def sum_shards(self, values: list[float]) -> list[float]:
        return sum_floats(values, self.info)

    def gram_reduce(self):
        """Norms and cosines of sharded gradients: the Gram matrix summed over the shards."""

        def reduce(g: torch.Tensor) -> torch.Tensor:
            return torch.tensor(sum_floats(g.flatten().tolist(), self.info)).view_as(g)

        return reduce

    def shard(self, models: list[torch.nn.Module]) -> None:
        """``fully_shard`` per decoder layer (:mod:`flowzoo.agents.models.sharding`)."""
        from flowzoo.agents.models import sharding

        for m in models:
            sharding.shard(m)

    def gathered(self, models: list[torch.nn.Module]):
        """The full parameters, gathered once for a block of generation (a collective)."""
        from flowzoo.agents.models import sharding

        return sharding.gathered(models)


def layout(info: DistInfo, sharded: bool) -> Replicated:
    """The update's view of the processes: :class:`Sharded` under ``fsdp=True``, else
    :class:`Replicated` (the one place the choice is made)."""
    return Sharded(info) if sharded else Replicated(info)


def accumulate(loss: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
    """Add d(loss)/d(params) to ``.grad``. Why not ``backward()``: if the device runs out of
    memory half-way, backward leaves some gradients accumulated and others not; here nothing
    is written until the whole gradient exists, so the micro-batch can be retried smaller."""
    live = [p for p in params if p.requires_grad]
    grads = torch.autograd.grad(loss, live, allow_unused=True)
    for p, g in zip(live, grads, strict=True):
        if g is None:
            continue
        if p.grad is None:
            p.grad = g
        else:
            p.grad.add_(g)


def write_flat_grad(params: list[torch.nn.Parameter], flat: torch.Tensor) -> None:
    """Set every ``.grad`` from one flat vector (in :func:`diagnostics.flat_grad`'s order)."""
    i = 0
    for p in params:
        n = p.numel()
        p.grad = flat[i : i + n].view_as(p).to(p.dtype).clone()
        i += n


def check_supported(cfg: Any, info: DistInfo) -> None:
    """What data-parallel processes and FSDP cannot run, as one clear error before a model is
    built (instead of a silently different run, or a hang between processes)."""
    if info.active and cfg.adv_norm in ("global", "per-role"):
        raise ValueError(
            f"adv_norm={cfg.adv_norm!r} normalises over the whole batch, which data-parallel "
            "processes do not share; use adv_norm='group' or 'none' under torchrun"
        )
    if cfg.fsdp:
        check_fsdp(cfg, info)
    if info.active and cfg.resample_rounds > 0:
        raise ValueError(
            "resample_rounds (dynamic sampling) decides per process how many problems to "
            "roll out; under torchrun use filter_groups alone"
        )
    if info.active and cfg.policy_devices:
        raise ValueError(
            "policy_devices places policies on one process's GPUs; under torchrun every "
            "process trains on its own GPU (drop policy_devices, or run one process)"
        )


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
