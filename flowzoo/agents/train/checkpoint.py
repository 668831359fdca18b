"""Save / load / resume: everything a run needs to continue exactly, written atomically.

A checkpoint holds every policy (or adapter), the optimizers, PPO critics, the damper's EMA,
the step, the eval curve and the torch RNG, keyed by the config's identity. It may also hold
a *pending* metrics line: the step finished its update but was interrupted before its
evaluation or log line, so the resumed run evaluates (on the very same weights) and writes
it first — an interrupt loses nothing. Under FSDP each process writes its own shards.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import torch

from flowzoo.agents.models import threads
from flowzoo.agents.train import distributed, runlog

#: what every checkpoint holds (checked before anything of it is used)
KEYS = ("identity", "step", "router", "opts", "heads", "damper", "eval_curve", "torch_rng")
#: how a refused resume says to start over
RESTART = "restart with --resume false (resume=False: its checkpoint and metrics are removed)"


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
        # results depend on the thread count in the last bits: a resume reuses it
        "threads": torch.get_num_threads(),
    }
    runlog.atomic_write(tr.ckpt_path, lambda f: torch.save(state, f))


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
    state = read(p, cfg.identity(), tr.learner)
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
    try:  # names were checked by read(); a mismatch left (a shape) is still this file's
        tr.router.load_state_dict(state["router"])
        for pol in tr.router.policies.values():
            pol.sync_backend()
        for n, o in ln.opts.items():
            o.load_state_dict(state["opts"][n])
        for n, h in ln.heads.items():
            h.load_state_dict(state["heads"][n])
        if ln.damper and state["damper"]:
            ln.damper.load_state_dict(state["damper"])
        torch.set_rng_state(state["torch_rng"])
    except (RuntimeError, KeyError, ValueError, TypeError) as e:
        raise ValueError(
            f"{p} does not fit this run's model ({type(e).__name__}: {str(e)[:160]}); {RESTART}"
        ) from None
    if state.get("threads") and threads.automatic(cfg.threads):  # else the user pinned it
        threads.restore(state["threads"], announce=dist.main)
    tr.step = state["step"]
    tr.eval_curve = [tuple(x) for x in state["eval_curve"]]
    return True, state.get("pending")


def read(p: Path, identity: str, learner: Any) -> dict[str, Any]:
    """A checkpoint file, checked whole before anything of it is used: readable, every key
    there, this configuration's, one state per optimizer and head. Any failure is a
    ValueError naming the file and how to start over (never a raw torch error)."""
    try:
        state = torch.load(p, weights_only=False, map_location="cpu")
    except Exception as e:  # a torn or foreign file: pickle, zip and torch errors alike
        raise ValueError(
            f"{p} is not a readable checkpoint ({type(e).__name__}: {str(e)[:120]}); it is "
            f"corrupt or truncated: {RESTART}, or use another out_dir"
        ) from None
    missing = [k for k in KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(f"{p} is not a flowzoo checkpoint (it lacks {missing}); {RESTART}")
    if state["identity"] != identity:
        raise ValueError(
            f"{p} belongs to a different configuration; use another out_dir or {RESTART}"
        )
    step = state["step"]
    if not isinstance(step, int) or step < 0 or not isinstance(state["eval_curve"], list):
        raise ValueError(f"{p} holds a bad step {step!r} or eval curve; {RESTART}")
    for what, have in (("opts", learner.opts), ("heads", learner.heads)):
        got = state[what]
        if not isinstance(got, dict) or set(got) != set(have):
            shown = sorted(got) if isinstance(got, dict) else type(got).__name__
            raise ValueError(
                f"{p} holds {what} for {shown}, this run has {sorted(have)}; {RESTART}"
            )
    return state


def check_weights(folder: str | Path) -> None:
    """Every ``*.safetensors`` under ``folder`` whole: its header parses and the file is as
    long as the header says. A truncated weights file is a ValueError naming it (a raw
    safetensors error names no file), checked before any model is built from it."""
    root = Path(folder)
    if not root.is_dir():
        return
    for f in sorted(root.rglob("*.safetensors")):
        try:
            with f.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                if n > 100 << 20:
                    raise ValueError(f"header of {n:,} bytes")
                header = json.loads(fh.read(n))
            end = max(
                (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
                default=0,
            )
            if f.stat().st_size < 8 + n + end:
                raise ValueError(f"{f.stat().st_size:,} bytes, the header needs {8 + n + end:,}")
        except (struct.error, ValueError, KeyError, TypeError, IndexError, OSError) as e:
            raise ValueError(
                f"{f} is truncated or corrupt ({e}); copy the weights again, or train them "
                "again (a run's final/ is rewritten when it completes)"
            ) from None
