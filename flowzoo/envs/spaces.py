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


def replace_surrogates(text: str) -> tuple[str, bool]:
    """``text`` without surrogate code points (U+D800-U+DFFF), and whether it held any: a
    high-low pair is joined into the character it encodes, a lone one becomes U+FFFD. A
    Python ``str`` may hold them (``"\\ud800"``, JSON's ``\\ud800`` escape), but no UTF-8
    encoder, terminal or tokenizer takes them; text leaving the engine is always encodable."""
    if text.isascii():
        return text, False
    try:
        text.encode("utf-8")
        return text, False
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace"), True


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
