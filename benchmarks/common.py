"""Timing helpers shared by the benchmarks: medians of repeats, rows with ratios and targets."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass
class Row:
    """One measured figure beside its same-run reference."""

    bench: str
    metric: str
    value: float
    reference: float
    ref_name: str
    unit: str
    #: target on value/reference (higher is better unless ``lower_is_better``)
    target: float | None = None
    lower_is_better: bool = False
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.value / self.reference if self.reference else float("nan")

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        return self.ratio <= self.target if self.lower_is_better else self.ratio >= self.target

    def as_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "met": self.met}


def rate(fn: Callable[[], int], repeats: int = 3) -> float:
    """Median items/second of ``fn`` (which returns how many items it processed)."""
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - t))
    return statistics.median(rates)


def seconds(fn: Callable[[], object], repeats: int = 3) -> float:
    """Median wall seconds of ``fn``."""
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)
