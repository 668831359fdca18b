"""A bounded, thread-safe memo: the verifiers' remembered verdicts (math's symbolic checks,
code's sandbox runs) are one idea, so one piece of code."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from flowzoo.sandbox.forksafe import ForkLock

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    """Remembered values by key, oldest out first past ``size``, safe to share between
    threads. A copy or a pickle is the memo by value."""

    def __init__(self, size: int = 16384) -> None:
        if size < 1:
            raise ValueError(f"a memo holds at least one value, got size={size}")
        self.size = size
        self._d: dict[K, V] = {}
        self._lock = ForkLock()  # a forked child gets it free (``forksafe.py``)

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._d.get(key)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._d.pop(key, None)
            if len(self._d) >= self.size:
                self._d.pop(next(iter(self._d)))
            self._d[key] = value

    def discard(self, key: K) -> None:
        with self._lock:
            self._d.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._d

    def __reduce__(self) -> tuple:
        with self._lock:
            return (_memo_of, (self.size, tuple(self._d.items())))


def _memo_of(size: int, items: tuple) -> Memo:
    memo: Memo = Memo(size)
    memo._d.update(items)
    return memo
