"""The cliff early warning: an online monitor over a run's training-time signals (no torch).

Why here, torch-free: the trainer feeds it each step's metrics line as the step ends, and
``baselines/warning_eval.py`` replays committed runs' metrics lines through the very same
class, so the detector that was evaluated is the detector that ships. It reads only what a
step's line says about training (never the held-out ``eval`` entry), so it needs no
evaluation to run.

Two rules, each a signal with a threshold (0 turns a rule off), each warning at most once
for the monitor's life (a rollback starts a fresh one):

- ``update_size``: how far one update moved the policy on its own samples, the largest over
  the trained roles of the step's mean ``|pi_new / pi_old - 1|`` (the learner's
  ``ratio_dev``), averaged over the last ``update_window`` steps. A trust-region reading:
  on the committed lr ladders the runs that fell are the ones whose updates moved the
  policy furthest per step (``baselines/results/warning-eval/``).
- ``reward_drop``: the training reward's mean over the last ``reward_window`` steps fell
  below the highest earlier such mean by more than the threshold (what a user watching the
  reward curve sees).

A warning is an :class:`Alarm`: the step's line, the signal, its value, the threshold, and
the role it was read on (``None``: the whole team).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: what the trainer does on a warning: print and record it; also end the run cleanly; or
#: restore the last checkpoint saved before it and continue at a lower lr
RESPONSES = ("warn", "stop", "rollback")
#: the signals a warning can name, in the order they are checked each step
SIGNALS = ("update_size", "reward_drop")


@dataclass(frozen=True)
class Alarm:
    """One warning: at metrics line ``step`` (``step + 1`` steps done), ``signal`` read
    ``value``, past ``threshold``, on ``role`` (``None``: the team reward)."""

    step: int
    signal: str
    value: float
    threshold: float
    role: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, d: dict[str, Any]) -> Alarm:
        """An alarm from its recorded dict (a metrics line's ``monitor`` entry)."""
        return cls(
            int(d["step"]),
            str(d["signal"]),
            float(d["value"]),
            float(d["threshold"]),
            d.get("role"),
        )

    def text(self) -> str:
        """The line the trainer prints and the summary lists."""
        on = f" (role {self.role!r})" if self.role else ""
        return (
            f"early warning at step {self.step}: {self.signal} {self.value:.4g} past its "
            f"threshold {self.threshold:.4g}{on}"
        )


@dataclass(frozen=True)
class Thresholds:
    """The monitor's settings (the config's ``monitor_*`` fields; 0 turns a rule off)."""

    update_size: float
    update_window: int
    reward_drop: float
    reward_window: int

    def __post_init__(self) -> None:
        for name in ("update_size", "reward_drop"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"monitor {name} must be a finite number >= 0, got {v!r}")
            if v < 0:
                raise ValueError(f"monitor {name} must be >= 0 (0: off), got {v!r}")
        for name in ("update_window", "reward_window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"monitor {name} must be an int >= 1, got {v!r}")

    @classmethod
    def of(cls, cfg: Any) -> Thresholds:
        """The thresholds a :class:`~flowzoo.config.TrainConfig` (or its recorded dict) sets."""

        def get(k: str) -> Any:
            return cfg[k] if isinstance(cfg, dict) else getattr(cfg, k)

        return cls(
            float(get("monitor_update_size")),
            int(get("monitor_update_window")),
            float(get("monitor_reward_drop")),
            int(get("monitor_reward_window")),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def update_size(line: dict) -> tuple[float, str] | None:
    """The step's largest per-role ``ratio_dev`` and its role (None: no trained role has
    one, e.g. a line written before updates were measured)."""
    best: tuple[float, str] | None = None
    for role, row in (line.get("roles") or {}).items():
        v = row.get("ratio_dev") if isinstance(row, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            if best is None or v > best[0]:
                best = (float(v), role)
    return best


@dataclass
class Monitor:
    """Fed one metrics line per step (:meth:`observe`), in step order; says the warnings it
    calls for. Holds only the last few values it needs, so a run of any length costs the
    same per step."""

    thresholds: Thresholds
    #: every warning so far, in order
    alarms: list[Alarm] = field(default_factory=list)
    _sizes: deque = field(default_factory=deque, repr=False)
    _rewards: deque = field(default_factory=deque, repr=False)
    _best_reward: float = field(default=-math.inf, repr=False)
    _said: set = field(default_factory=set, repr=False)

    def observe(self, line: dict) -> list[Alarm]:
        """The warnings step line ``line`` calls for (each signal warns once). A line that
        is not a training step's (the base evaluation's, step -1) is skipped."""
        step = line.get("step")
        if not isinstance(step, int) or step < 0 or "roles" not in line:
            return []
        th, new = self.thresholds, []
        size = update_size(line)
        if size is not None:
            self._sizes.append(size)
            while len(self._sizes) > th.update_window:
                self._sizes.popleft()
        if th.update_size > 0 and len(self._sizes) == th.update_window:
            mean = sum(v for v, _ in self._sizes) / len(self._sizes)
            if mean > th.update_size:
                role = max(self._sizes)[1]
                new.append(Alarm(step, "update_size", mean, th.update_size, role))
        reward = line.get("reward")
        if isinstance(reward, (int, float)) and math.isfinite(reward):
            self._rewards.append(float(reward))
            while len(self._rewards) > th.reward_window:
                self._rewards.popleft()
            if len(self._rewards) == th.reward_window:
                mean = sum(self._rewards) / len(self._rewards)
                drop = self._best_reward - mean
                if th.reward_drop > 0 and drop > th.reward_drop:
                    new.append(Alarm(step, "reward_drop", drop, th.reward_drop))
                self._best_reward = max(self._best_reward, mean)
        new = [a for a in new if a.signal not in self._said]
        self._said.update(a.signal for a in new)
        self.alarms += new
        return new

    @property
    def first(self) -> Alarm | None:
        return self.alarms[0] if self.alarms else None


def replay(lines: Iterable[dict], thresholds: Thresholds) -> list[Alarm]:
    """Every warning a monitor at ``thresholds`` gives over a run's metrics lines, fed in
    step order exactly as the trainer feeds them (a torn or foreign line is skipped)."""
    m = Monitor(thresholds)
    steps = [x for x in lines if isinstance(x, dict) and isinstance(x.get("step"), int)]
    for line in sorted(steps, key=lambda x: x["step"]):
        m.observe(line)
    return m.alarms


def run_warnings(
    summary: dict, metrics: list[dict], config: dict, defaults: dict
) -> tuple[list[Alarm], str]:
    """A run's early warnings and where they come from: its own record (``summary.json``'s
    ``monitor``), else, for a run from before the monitor, a replay of its lines at the
    thresholds its config sets, else ``defaults``' (the shipped config's) — ``"replayed"``."""
    mon = summary.get("monitor")
    if isinstance(mon, dict) and isinstance(mon.get("warnings"), list):
        return [Alarm.of(a) for a in mon["warnings"]], str(mon.get("response", "warn"))
    known = {f: config[f] for f in config if f.startswith("monitor_")}
    return replay(metrics, Thresholds.of({**defaults, **known})), "replayed"


def warning_rows(runs: Iterable[Any], defaults: dict) -> list[str]:
    """The report's section: per run that warned, its warnings (step, signal, value,
    threshold), the response and what it did; runs from before the monitor are replayed at
    the thresholds they would have had (``defaults``: the config's) and say so."""
    rows, quiet, replayed = [], 0, 0
    for r in runs:
        alarms, how = run_warnings(r.summary, r.metrics, r.config, defaults)
        replayed += how == "replayed"
        if not alarms:
            quiet += 1
            continue
        mon = r.summary.get("monitor") or {}
        did = []
        if mon.get("rollbacks"):
            did.append(f"{len(mon['rollbacks'])} rollbacks")
        if mon.get("stopped_early"):
            did.append(f"stopped at step {mon['stopped_early'].get('at_step')}")
        said = "; ".join(
            f"step {a.step}: {a.signal} {a.value:.4g} > {a.threshold:.4g}"
            + (f" ({a.role})" if a.role else "")
            for a in alarms
        )
        rows.append(f"| {Path(r.path).name} | {how} | {said} | {', '.join(did) or '-'} |")
    out = [
        "## Early warnings",
        "",
        f"The cliff early-warning monitor (training-time signals only; docs/training.md): "
        f"{len(rows)} runs warned, {quiet} did not"
        + (
            f"; {replayed} runs predate it and were replayed at the thresholds they would "
            "have had (their config's, else the shipped defaults)"
            if replayed
            else ""
        )
        + ".",
        "",
    ]
    if rows:
        out += ["| run | response | warnings | what it did |", "|---|---|---|---|", *rows, ""]
    return out
