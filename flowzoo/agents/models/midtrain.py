"""The behaviour mid-training stage (recipe 8, docs/testbed.md): the pretrained base continues
on a corpus re-written with per-role shortcut rates and coordination drills.

Why a stage and not a new pretraining mix: tiny-s learns to *chain* its step facts only past
a sharp transition late in pretraining; a from-scratch build on the behaviour mix learned
every single fact (0.998 greedy) and not the chaining (worked accuracy 0.9 -> 0.2 per level),
while the coordinating roles' rates are set by the mix in a few hundred steps. Pretraining
plants the primitives, mid-training sets the behaviour priors, RL moves them — the order of
Zhang, Neubig & Yue (2025)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from flowzoo.agents.models.corpus import make_corpus
from flowzoo.agents.models.pretrain_loop import train_loop
from flowzoo.agents.models.threads import apply_threads

if TYPE_CHECKING:
    from flowzoo.agents.models.tiny import PretrainConfig

#: warmup steps of the stage (its learning rate is otherwise constant)
WARMUP = 20


def midtrain(cfg: PretrainConfig, out_dir: str | os.PathLike, progress: bool = True) -> Path:
    """Continue ``cfg.base()`` (shipped, cached or built now) for ``cfg.midtrain_steps`` on
    ``make_corpus(cfg)``; saved like a pretrained build, resumable the same way."""
    from transformers import AutoModelForCausalLM

    from flowzoo.agents.models.tiny import _encode, build_tokenizer, ensure_tiny, save_build

    base = ensure_tiny(cfg.base(), progress=progress)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    apply_threads(0, announce=progress)
    t0 = time.time()
    rows = make_corpus(cfg, progress=progress)
    corpus_s = time.time() - t0
    tok = build_tokenizer()  # the base's own: the same characters, saved the same way
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    examples = _encode(tok, rows, cfg.max_len)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.midtrain_lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98)
    )

    def lr_at(step: int) -> float:
        return cfg.midtrain_lr * min(1.0, (step + 1) / WARMUP)

    losses = train_loop(
        model,
        opt,
        examples,
        tok.pad_token_id,
        cfg,
        cfg.midtrain_steps,
        lr_at,
        out / "checkpoint.pt",
        progress,
        f"mid-train {cfg.scale}",
    )
    return save_build(
        out,
        model,
        tok,
        cfg,
        len(examples),
        corpus_s,
        time.time() - t0,
        losses,
        base_key=cfg.base().key(),
    )
