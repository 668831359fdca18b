"""Every random stream of a training run, derived from ``(seed, step, round)`` alone, so a
resumed run draws exactly what an unbroken one drew (the trainer's one source of seeds)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import torch


@dataclasses.dataclass(frozen=True)
class Seeds:
    """Every random stream of a run, derived here from ``(seed, step, round)`` alone: a run
    resumed at step ``k`` draws exactly what an unbroken run drew from there."""

    seed: int

    def initial_weights(self) -> None:
        """Seed torch's global stream, which initialises value heads and LoRA adapters."""
        torch.manual_seed(self.seed)

    def problems(self, step: int, round_: int) -> np.random.Generator:
        """Which problems step ``step`` (dynamic sampling's round ``round_``) draws."""
        return np.random.default_rng([self.seed, step] + ([round_] if round_ else []))

    def episode(self, step: int, round_: int, k: int, g: int) -> int:
        """The env seed of member ``g`` of problem ``k``'s group."""
        return int(self.seed * 1_000_003 + step * 1009 + k * 31 + g + round_ * 100_003)

    def sampler(self, step: int, round_: int, rank: int, device: str) -> torch.Generator:
        """Token sampling on process ``rank`` (each process its own stream)."""
        return torch.Generator(device=device).manual_seed(
            int(self.seed * 7_919 + step + 104_729 * rank + 15_485_863 * round_)
        )

    def tree(self, step: int) -> random.Random:
        """Where a tree rollout branches."""
        return random.Random(f"tree:{self.seed}:{step}")

    def minibatches(self, step: int) -> random.Random:
        """The learner's mini-batch order."""
        return random.Random(f"{self.seed}:{step}")
