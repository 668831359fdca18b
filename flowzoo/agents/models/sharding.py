"""Sharding a model across processes (FSDP2): the tensor-level helpers both the router
(saving and loading sharded weights) and the trainer (sharding, gathering for generation)
need. The process group itself is :mod:`flowzoo.agents.train.distributed`'s."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import cast

import torch


def local(t: torch.Tensor) -> torch.Tensor:
    """This process's shard of a sharded (DTensor) parameter or gradient; ``t`` otherwise."""
    return t.to_local() if hasattr(t, "to_local") else t


def shard(model: torch.nn.Module) -> list[torch.nn.Module]:
    """FSDP2-shard a Hugging Face causal LM (one unit per decoder layer, plus the root);
    gradients reduce as plain sums. Returns the FSDP units."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    blocks = set(getattr(model, "_no_split_modules", None) or ())
    for m in model.modules():
        if type(m).__name__ in blocks:
            fully_shard(m)
    fully_shard(model)
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for u in units:
        u.set_gradient_divide_factor(1.0)
        u.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum
    return cast("list[torch.nn.Module]", units)


@contextlib.contextmanager
def gathered(models: list[torch.nn.Module]) -> Iterator[None]:
    """Full parameters of sharded ``models`` on every process for the block (one all-gather,
    a collective), so each process may then run any number of forward passes on its own."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for model in models for m in model.modules() if isinstance(m, FSDPModule)]
    for u in units:
        u.set_reshard_after_forward(False, recurse=False)
        u.unshard()
    try:
        yield
    finally:
        roots = {id(m) for m in models}
        for u in units:
            u.reshard()
            # FSDP's own default: layers reshard after forward, the root keeps its parameters
            u.set_reshard_after_forward(id(u) not in roots, recurse=False)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole state of a sharded model on process 0's CPU (a collective; {} elsewhere)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # full_state_dict=True: every value is a plain tensor
    return cast("dict[str, torch.Tensor]", get_model_state_dict(model, options=opts))
