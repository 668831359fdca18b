"""Role-level gradient dynamics: per-role norms, mass shares and cosines, and the damper.

Why: the study explains its cliffs by per-role gradient norms (isolated policies: parallel
same-role agents on shared prompts amplify a role's gradient) and by gradient-mass share
(shared policy: the dominant role captures the policy). These helpers compute both from
per-role gradient vectors (the curve's reading is :mod:`flowzoo.analysis.readings`).
:class:`RoleProbe` is how the learner's update meets them: hooks at three points of an
optimizer step, so the update itself never handles a role gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from flowzoo.agents.models.sharding import local
from flowzoo.agents.train import distributed

__all__ = [
    "CoherenceDamper",
    "RoleProbe",
    "TrainingDiverged",
    "dot",
    "flat_grad",
    "role_gradient_stats",
]


class TrainingDiverged(RuntimeError):
    """A loss, gradient, reward or sampled distribution became NaN/inf; the last good
    checkpoint is kept."""


def flat_grad(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """All gradients of ``params`` as one float32 vector (zeros where a grad is None; under
    FSDP this process's shards). float32, the gradients' own precision: a step keeps one such
    vector per role plus two, which at billions of parameters is what bounds memory."""
    return torch.cat(
        [
            local(p.grad if p.grad is not None else torch.zeros_like(p))
            .detach()
            .reshape(-1)
            .float()
            for p in params
        ]
    )


def flat_params(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """All of ``params`` as one float32 vector, in :func:`flat_grad`'s order (under FSDP this
    process's shards): the step's actual update is the difference of two."""
    return torch.cat([local(p).detach().float().reshape(-1) for p in params])


def dot(a: torch.Tensor, b: torch.Tensor, chunk: int = 1 << 24) -> float:
    """``a . b`` accumulated in float64 chunk by chunk: float32 vectors of billions of entries
    keep their dot products exact enough for cosines without a float64 copy of either."""
    return sum(
        float(torch.dot(a[i : i + chunk].double(), b[i : i + chunk].double()))
        for i in range(0, a.numel(), chunk)
    )


def role_gradient_stats(
    role_grads: dict[str, torch.Tensor],
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> dict:
    """Per-role norms, mass shares ``||g_r|| / sum ||g||`` and pairwise cosines, all from the
    Gram matrix of the role gradients; ``reduce`` sums that matrix over processes whose
    gradients are shards (FSDP)."""
    roles = list(role_grads)
    k = len(roles)
    gram = torch.zeros(k, k, dtype=torch.float64)
    for i, a in enumerate(roles):
        for j in range(i, k):
            gram[i, j] = gram[j, i] = dot(role_grads[a], role_grads[roles[j]])
    if reduce is not None:
        gram = reduce(gram)
    norms = {r: float(gram[i, i].clamp_min(0).sqrt()) for i, r in enumerate(roles)}
    total = sum(norms.values())
    shares = {r: (n / total if total > 0 else 0.0) for r, n in norms.items()}
    cos = {}
    for i, a in enumerate(roles):
        for j in range(i + 1, k):
            b = roles[j]
            na, nb = norms[a], norms[b]
            cos[f"{a}|{b}"] = float(gram[i, j]) / (na * nb) if na > 0 and nb > 0 else 0.0
    return {"norm": norms, "share": shares, "cosine": cos}


class CoherenceDamper:
    """Scale a role's gradient by ``1 - lam * max(0, cos(g, EMA))`` before the step: a role
    that keeps pushing in the same direction is slowed (the study's intervention). The EMA
    follows the *damped* gradient, the one the step applies: tracking the raw one would let
    the damper reinforce itself (a damped role keeps a full-strength memory of its push)."""

    def __init__(self, lam: float, decay: float = 0.9) -> None:
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"damper lambda must be in [0, 1], got {lam}")
        self.lam, self.decay = lam, decay
        self.ema: dict[str, torch.Tensor] = {}

    def factor(self, key: str, g: torch.Tensor) -> float:
        prev = self.ema.get(key)
        if prev is None:
            scale = 1.0
        else:
            denom = float(prev.norm() * g.norm())
            c = float(prev @ g) / denom if denom > 0 else 0.0
            scale = 1.0 - self.lam * max(0.0, c)
        applied = scale * g
        self.ema[key] = (
            applied.clone() if prev is None else self.decay * prev + (1 - self.decay) * applied
        )
        return scale

    def state_dict(self) -> dict:
        return {"lam": self.lam, "decay": self.decay, "ema": dict(self.ema)}

    def load_state_dict(self, s: dict) -> None:
        self.lam, self.decay, self.ema = s["lam"], s["decay"], dict(s["ema"])


class RoleProbe:
    """The role-level diagnostics of one optimizer step, as hooks the update calls: after each
    role's micro-batches (:meth:`role_done`: the gradient that role added, kept apart from the
    others), before the step (:meth:`before_step`: per-role norms and cosines, the total norm
    and the damper's re-weighting; a non-finite gradient ends the run) and after it
    (:meth:`after_step`: what moved the weights, per role). Each writes its per-step numbers
    into the update's statistics (``stats["roles"|"cosine"|"policy"]``)."""

    def __init__(self, par: distributed.Replicated, damper: CoherenceDamper | None) -> None:
        self.par, self.damper = par, damper
        #: per policy, the last update's per-role gradients and their sum
        self.last: dict[str, dict] = {}

    def begin(self, params: list[torch.nn.Parameter]) -> None:
        """A step starts: ``.grad`` as it is now is what the first role's gradient adds to."""
        self.params = params
        self.prev = flat_grad(params)
        self.grads: dict[str, torch.Tensor] = {}

    def role_done(self, role: str) -> None:
        """``role``'s turns are all back-propagated: what ``.grad`` gained is its gradient
        (summed over the processes)."""
        cur = flat_grad(self.params)
        self.grads[role] = self.par.role_gradient(cur - self.prev)
        self.prev = cur

    def before_step(self, name: str, step: int, stats: dict[str, Any]) -> None:
        """Read the step's gradient before it is applied: per-role norms and cosines
        (:func:`role_gradient_stats`) and the total norm; then damp (the coherence damper
        re-weights each role's gradient and the step applies the damped sum)."""
        grads, params = self.grads, self.params
        total = sum(grads.values()) if grads else self.prev
        assert isinstance(total, torch.Tensor)
        self.par.install(params, total)
        self.last[name] = {"roles": grads, "total": total.clone()}
        self.rg = role_gradient_stats(grads, self.par.gram_reduce())
        total_norm = math.sqrt(self.par.sum_shards([dot(total, total)])[0])
        if not math.isfinite(total_norm):  # the same verdict on every process
            raise TrainingDiverged(f"non-finite gradient for policy {name!r} at step {step}")
        if self.damper is not None:
            total = torch.zeros_like(total)
            for role, g in grads.items():
                f = self.damper.factor(f"{name}/{role}", g)
                stats["roles"][role]["damper_factor"] += f
                total += f * g
            distributed.write_flat_grad(params, total)
            total_norm = math.sqrt(dot(total, total))  # the damped gradient the step applies
        for role in grads:
            stats["roles"][role]["grad_norm"] += self.rg["norm"][role]
        for pair, c in self.rg["cosine"].items():
            stats["cosine"][pair] += c
        stats["policy"]["grad_norm"] += total_norm
        stats["policy"]["grad_norm_sum_of_roles"] += sum(self.rg["norm"].values())
        self.before = flat_params(params)  # clipping changes gradients, not weights

    def after_step(self, stats: dict[str, Any]) -> None:
        """What moved the weights, per role: the step's actual update (after clipping and
        Adam) projected on each role's descent direction (``update_along``: its length along
        it) and each role's part of the update's total descent (``update_share``). Adam
        normalises step sizes, so raw gradient norms alone can mislead about amplification."""
        delta = flat_params(self.params) - self.before
        along = self.par.sum_shards([-dot(delta, g) for g in self.grads.values()])
        total = sum(along)
        for role, a in zip(self.grads, along, strict=True):
            rs = stats["roles"][role]
            rs["update_along"] += a / max(self.rg["norm"][role], 1e-12)
            rs["update_share"] += a / total if total else 0.0
