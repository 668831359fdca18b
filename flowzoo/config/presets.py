"""Named presets of a training config (``--preset study``: the study's protocol), applied
where the user gave no value of their own."""

from __future__ import annotations

import dataclasses
from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "study": dict(
        group_size=8,
        temperature=0.7,
        lr=2e-5,
        kl_coef=0.0,
        loss_agg="seq-mean-token-mean",
        clip_low=0.2,
        clip_high=0.28,
        grad_clip=1.0,
        group_by="task_role",
        ppo_mini_batch=4,
        lr_schedule="cosine",
        warmup_steps=15,
        filter_groups=True,
        mask_truncated=True,
        eval_samples=4,
        param="lora",
        lora_r=64,
        lora_alpha=32,
    ),
}


def apply_preset(cfg: Any, name: str, explicit: set[str] | None = None) -> None:
    """Fill ``cfg`` from preset ``name``, except the fields the user gave: those in
    ``explicit`` (a file's or the command line's keys) and any not at its default."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
    fields = {f.name: f for f in dataclasses.fields(type(cfg))}
    for k, v in PRESETS[name].items():
        f = fields[k]
        default = f.default_factory() if callable(f.default_factory) else f.default
        if k not in (explicit or ()) and getattr(cfg, k) == default:
            setattr(cfg, k, v)
