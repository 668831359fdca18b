"""Text spaces that accept any Unicode string.

Gymnasium's ``Text`` rejects characters outside its charset (ASCII alphanumerics by default),
but prompts and completions are arbitrary Unicode. ``UnicodeText`` keeps ``Text``'s API (so
wrappers that special-case ``Text`` still recognise it) while ``contains`` checks only the
type and length; sampling still draws from a small charset so random agents stay cheap.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Text

_SAMPLE_CHARSET = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;+-*/=()\\{}$\n"
)


class UnicodeText(Text):
    """Any ``str`` of length ``min_length..max_length``; samples are at most
    ``sample_max_length`` characters long."""

    def __init__(
        self,
        max_length: int,
        *,
        min_length: int = 0,
        sample_max_length: int = 256,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=_SAMPLE_CHARSET, seed=seed)
        self.sample_max_length = max(min_length, min(sample_max_length, max_length))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            length = int(self.np_random.integers(self.min_length, self.sample_max_length + 1))
            idx = self.np_random.integers(0, len(self.character_list), size=length)
            return "".join(self.character_list[i] for i in idx)
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __hash__(self) -> int:
        return hash(("UnicodeText", self.min_length, self.max_length))
