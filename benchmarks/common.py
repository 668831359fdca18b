"""Timing helpers shared by the benchmarks: medians of repeats, rows with ratios and targets."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

NOT_MEASURED = "not measured: "


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
    def measured(self) -> bool:
        """False for a row :func:`failed` made (its note says why)."""
        return not self.note.startswith(NOT_MEASURED)

    @property
    def met(self) -> bool | None:
        if not self.measured:
            return False
        if self.target is None:
            return None
        return self.ratio <= self.target if self.lower_is_better else self.ratio >= self.target

    def as_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "met": self.met, "measured": self.measured}


def failed(bench: str, metric: str, ref_name: str, unit: str, why: str, **kw) -> Row:
    """A row that could not be measured: NaN figures (its target reads as not met) and the
    reason in its note, so one broken side shows in the table instead of stopping the run."""
    nan = float("nan")
    return Row(bench, metric, nan, nan, ref_name, unit, note=NOT_MEASURED + why, **kw)


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
