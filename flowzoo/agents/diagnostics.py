"""Role-level gradient dynamics and the peak / final / cliff reading of accuracy curves.

Why: the study explains its cliffs by per-role gradient norms (isolated policies: parallel
same-role agents on shared prompts amplify a role's gradient) and by gradient-mass share
(shared policy: the dominant role captures the policy). These helpers compute both from
per-role gradient vectors, and classify a held-out accuracy curve.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from flowzoo.agents.curves import CurveSummary, analyze_curve

__all__ = ["CoherenceDamper", "CurveSummary", "analyze_curve", "flat_grad", "role_gradient_stats"]


def flat_grad(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """All gradients of ``params`` as one float64 vector (zeros where a grad is None)."""
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).double()
            for p in params
        ]
    )


def role_gradient_stats(role_grads: dict[str, torch.Tensor]) -> dict:
    """Per-role norms, mass shares ``||g_r|| / sum ||g||`` and pairwise cosines."""
    norms = {r: float(g.norm()) for r, g in role_grads.items()}
    total = sum(norms.values())
    shares = {r: (n / total if total > 0 else 0.0) for r, n in norms.items()}
    cos = {}
    roles = list(role_grads)
    for i, a in enumerate(roles):
        for b in roles[i + 1 :]:
            na, nb = norms[a], norms[b]
            cos[f"{a}|{b}"] = (
                float(role_grads[a] @ role_grads[b] / (na * nb)) if na > 0 and nb > 0 else 0.0
            )
    return {"norm": norms, "share": shares, "cosine": cos}


class CoherenceDamper:
    """Scale a role's gradient by ``1 - lam * max(0, cos(g, EMA(g)))`` before the step: a
    role that keeps pushing in the same direction is slowed (the study's intervention)."""

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
        self.ema[key] = g.clone() if prev is None else self.decay * prev + (1 - self.decay) * g
        return scale

    def state_dict(self) -> dict:
        return {"lam": self.lam, "decay": self.decay, "ema": dict(self.ema)}

    def load_state_dict(self, s: dict) -> None:
        self.lam, self.decay, self.ema = s["lam"], s["decay"], dict(s["ema"])
