"""Save / load / resume: everything a run needs to continue exactly, written atomically.

A checkpoint holds every policy (or adapter), the optimizers, PPO critics, the damper's EMA,
the step, the eval curve and the torch RNG, keyed by the config's identity. It may also hold
a *pending* metrics line: the step finished its update but was interrupted before its
evaluation or log line, so the resumed run evaluates (on the very same weights) and writes
it first — an interrupt loses nothing. Under FSDP each process writes its own shards.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from flowzoo.train import distributed


def path(out: Path, dist: distributed.DistInfo, fsdp: bool) -> Path:
    """FSDP: one file per process (its shards); else one file, written by process 0."""
    return out / "checkpoint" / (f"state.rank{dist.rank}.pt" if fsdp else "state.pt")


def save(tr, pending: dict | None = None) -> None:
    """Write trainer ``tr``'s state (with an unwritten metrics line ``pending``)."""
    if not (tr.cfg.fsdp or tr.dist.main):
        return
    ln = tr.learner
    state = {
        "identity": tr.cfg.identity(),
        "world": tr.dist.world,
        "step": tr.step,
        "router": tr.router.state_dict(),
        "opts": {n: o.state_dict() for n, o in ln.opts.items()},
        "heads": {n: h.state_dict() for n, h in ln.heads.items()},
        "damper": ln.damper.state_dict() if ln.damper else None,
        "eval_curve": tr.eval_curve,
        "torch_rng": torch.get_rng_state(),
        "pending": pending,
    }
    p = tr.ckpt_path
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, p)


def load(tr) -> tuple[bool, dict | None]:
    """Restore ``tr`` from its checkpoint: (found, the pending metrics line if any)."""
    cfg, dist, p = tr.cfg, tr.dist, tr.ckpt_path
    found = p.exists()
    if cfg.fsdp:  # every process resumes, or none does
        n = int(distributed.sum_floats([float(found)], dist)[0])
        if 0 < n < dist.world:
            raise ValueError(
                f"{p.parent} holds shards for {n} of {dist.world} processes; resume with the "
                "world size that wrote it, or resume=False"
            )
    if not found:
        return False, None
    state: dict[str, Any] = torch.load(p, weights_only=False)
    if state["identity"] != cfg.identity():
        raise ValueError(
            f"{p} belongs to a different configuration; use another out_dir or resume=False"
        )
    if cfg.fsdp:
        if state.get("world") != dist.world:
            raise ValueError(
                f"{p} was written by {state.get('world')} FSDP processes, this run has "
                f"{dist.world}; resume with the same number"
            )
        lo = -distributed.max_int(-state["step"], dist)
        hi = distributed.max_int(state["step"], dist)
        if lo != hi:
            raise ValueError(f"FSDP shards in {p.parent} are of steps {lo}..{hi}")
    ln = tr.learner
    tr.router.load_state_dict(state["router"])
    for pol in tr.router.policies.values():
        pol.sync_backend()
    for n, o in ln.opts.items():
        o.load_state_dict(state["opts"][n])
    for n, h in ln.heads.items():
        h.load_state_dict(state["heads"][n])
    if ln.damper and state["damper"]:
        ln.damper.load_state_dict(state["damper"])
    tr.step = state["step"]
    tr.eval_curve = [tuple(x) for x in state["eval_curve"]]
    torch.set_rng_state(state["torch_rng"])
    return True, state.get("pending")
