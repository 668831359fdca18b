"""What a run writes: ``config.json``, ``metrics.jsonl`` (one line per step), the scalars to
the trackers of ``report_to`` (:mod:`trackers`), and ``summary.json`` (status, curve
reading, gradient shares, frozen roles).

Why its own room: a run record must be honest whatever happens to the process (a crash is
``failed`` with its error, an interrupt says how to resume, a torn last line of
``metrics.jsonl`` from a kill is skipped, not fatal), and the same rules serve the report.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import IO, Any

from flowzoo.agents.runs.safefile import (
    UnsafeRunPath,
    append,
    atomic_write,
    check_entry,
    read_regular,
)
from flowzoo.agents.runs.signals import critical
from flowzoo.analysis.curves import mean_grad_share
from flowzoo.analysis.readings import evals_of, trajectory
from flowzoo.analysis.records import parse_metrics
from flowzoo.config import TrainConfig


class SafeStream:
    """A text stream for progress bars and notices that a reader going away cannot break:
    after a failed write (EPIPE once ``| tee`` died with Ctrl-C, EIO from a closed terminal,
    a closed file) later output is dropped. Nothing a run records goes only to a stream, so
    dropping it loses nothing, while the error would have stopped the run's last records."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream, self.broken = stream, False

    @property
    def stream(self) -> IO[str] | None:
        """The stream given, else the process's stderr at the time of writing."""
        return self._stream if self._stream is not None else sys.stderr

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self.stream.write(text)  # type: ignore[union-attr]
            except (OSError, ValueError, AttributeError):  # AttributeError: no stderr at all
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()  # type: ignore[union-attr]
            except (OSError, ValueError, AttributeError):
                self.broken = True

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's own
        return getattr(self.stream, name)


#: the training bar: tqdm's own rate and remaining time left out (the postfix holds the ETA)
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


class StepClock:
    """The training bar's ETA from steady-state steps: the session's first step (warm-up,
    allocation) is left out of the rate and evaluations are timed apart, so neither the base
    evaluation nor a step that also evaluated inflates the seconds per step."""

    def __init__(self, window: int = 20) -> None:
        self.window = window
        self.steps: list[float] = []
        self.evals: list[float] = []

    def step(self, seconds: float) -> None:
        """A training step's rollout and update (its evaluation not included)."""
        self.steps.append(seconds)

    def evaluation(self, seconds: float) -> None:
        self.evals.append(seconds)

    @property
    def step_s(self) -> float | None:
        """Seconds per step over the recent steps after the first (None: not measured yet)."""
        steady = self.steps[1:][-self.window :]
        return sum(steady) / len(steady) if steady else None

    def eta(self, steps_left: int, evals_left: int) -> float | None:
        """Seconds to the end: the steps left at the steady rate, the evaluations left at
        their mean cost (None until one steady step is measured)."""
        per_step = self.step_s
        if per_step is None:
            return None
        per_eval = sum(self.evals) / len(self.evals) if self.evals else 0.0
        return steps_left * per_step + evals_left * per_eval

    def line(
        self,
        steps_left: int,
        evals_left: int,
        m: dict | None = None,
        last_eval: float | None = None,
    ) -> str:
        """The bar's postfix: ``eta 12:04 (3.1s/step + 4 evals x 20s)``, then the step's
        reward and accuracy and the last held-out accuracy where given."""
        eta = self.eta(steps_left, evals_left)
        if eta is None:
            out = ["eta after the 2nd step" if steps_left else "eta 0:00"]
        else:
            mins, secs = divmod(int(round(eta)), 60)
            h, mins = divmod(mins, 60)
            clock = f"{h}:{mins:02d}:{secs:02d}" if h else f"{mins}:{secs:02d}"
            evals = ""
            if evals_left and self.evals:
                evals = f" + {evals_left} evals x {sum(self.evals) / len(self.evals):.0f}s"
            out = [f"eta {clock} ({self.step_s:.1f}s/step{evals})"]
        if m is not None:
            out += [f"reward {m['reward']:.2f}", f"acc {m['train_acc']:.2f}"]
        if last_eval is not None:
            out.append(f"eval {last_eval:.2f}")
        return ", ".join(out)


def evals_left(step: int, steps: int, every: int) -> int:
    """Evaluations a run at ``step`` still makes: every ``every`` steps and at the end."""
    if every <= 0 or step >= steps:
        return 0
    due = steps // every - step // every
    return due + (steps % every != 0)


#: the largest metrics.jsonl a run reads back (a line per step: far more than any run writes)
METRICS_LIMIT = 1 << 30


def own_metrics(path: Path) -> list[dict]:
    """The run's own metrics lines: read without following a link or blocking on a FIFO
    (a name swapped for one mid-run is not the run's record: none are read), at most
    ``METRICS_LIMIT`` bytes."""
    try:
        return parse_metrics(read_regular(path, METRICS_LIMIT))
    except (OSError, UnsafeRunPath):  # unreadable (permissions too): no metrics of ours
        return []


class RunLog:
    """Appends metrics lines (and tracker scalars) for process 0."""

    def __init__(self, out: Path, main: bool, cfg: TrainConfig | None = None) -> None:
        from flowzoo.agents.runs.trackers import open_trackers

        self.out, self.main = out, main
        self.path = out / "metrics.jsonl"
        names = cfg.trackers if (cfg is not None and main) else []
        config = dataclasses.asdict(cfg) if cfg is not None else {}
        self.trackers = open_trackers(names, out, config, out.name) if names else []

    def start(self, resumed_at: int | None) -> None:
        """A resumed run keeps the lines of the steps before ``resumed_at``; a new run none."""
        if not self.main:
            return
        exists = check_entry(self.path, directory=False, single_link=False)  # no link, FIFO
        if resumed_at is None:
            if exists:
                self.path.unlink()
            return
        # rewritten whole: the file appended to from here on is this run's own (one link)
        keep = [r for r in own_metrics(self.path) if r["step"] < resumed_at]
        atomic_write(self.path, "".join(json.dumps(r, default=float) + "\n" for r in keep))

    def append(self, row: dict) -> None:
        if not self.main:
            return
        with critical():  # appended in place: never through a link, a FIFO or another name
            append(self.path, (json.dumps(row, default=float) + "\n").encode("utf-8"))
        if self.trackers:
            from flowzoo.agents.runs.trackers import flat_scalars

            scalars, step = flat_scalars(row), int(row.get("step", 0)) + 1
            for t in self.trackers:
                t.log(scalars, step)

    def close(self, status: str = "completed") -> None:
        for t in self.trackers:
            t.finish(status)
        self.trackers = []


def cut_warnings(row: dict, said: set[str], limits: dict[str, int]) -> list[str]:
    """The warnings a metrics line ``row`` (a step's, or the base evaluation's) calls for:
    once per role whose prompts were cut to fit the model's context, in training or in an
    evaluation (``said`` holds the roles already named, and is updated)."""
    counts: dict[str, int] = defaultdict(int)
    ev = row.get("eval") or {}
    for part in (row, ev, ev.get("greedy") or {}, ev.get("ood") or {}):
        for role, n in (part.get("prompts_cut") or {}).items():
            counts[role] += int(n)
    out = []
    at = "the base evaluation" if row.get("step") == -1 else f"step {row.get('step')}"
    for role in sorted(set(counts) - said):
        said.add(role)
        out.append(
            f"prompt cut: {counts[role]} of role {role!r}'s prompts at {at} were longer "
            f"than the model's context leaves beside its "
            f"{limits.get(role, '?')}-token budget; each was cut in its middle (its head "
            "with the problem and its tail with the instruction kept), counted per step as "
            "prompts_cut: lower that role's max_new_tokens or use a longer-context model"
        )
    return out


def summary(
    cfg: TrainConfig,
    out: Path,
    status: str,
    steps_done: int,
    wall_s: float,
    resumed: bool,
    eval_curve: list[tuple[int, float]],
    error: str | None = None,
) -> dict:
    """The run's summary: how it ended (``completed``, ``interrupted``, ``diverged: ...``,
    ``failed: ...``), the curve's reading and the mean gradient-mass share per role."""
    s: dict[str, Any] = {
        "status": status,
        "steps_done": steps_done,
        "wall_s": round(wall_s, 2),
        "resumed": resumed,
        "env": cfg.env,
        "policy": cfg.policy,
        "param": cfg.param,
        "algo": cfg.algo,
        "model": cfg.model,
    }
    if error:
        s["error"] = error
    if status == "completed":
        s["weights"] = str(out / "final")
    metrics = own_metrics(out / "metrics.jsonl")
    evals = evals_of(metrics)
    if eval_curve and evals:
        s["curve"] = trajectory(evals, cfg.cliff_window, cfg.cliff_margin).as_dict()
        s["eval_curve"] = eval_curve
        first, last = evals[0][1], evals[-1][1]
        s["eval"] = {
            "problems": first.get("episodes"),
            "samples": first.get("samples", 1),
            "temperature": first.get("temperature"),
            "greedy_base": (first.get("greedy") or {}).get("accuracy"),
            "greedy_last": (last.get("greedy") or {}).get("accuracy"),
            "cost_s": round(
                sum(float((e.get("cost") or {}).get("wall_s", 0)) for _, e in evals), 1
            ),
            # each role's behaviour rate (the workflow's menu, docs/testbed.md), first and last
            "behaviour_base": first.get("behaviour") or {},
            "behaviour_last": last.get("behaviour") or {},
        }
        ood = [(step, e["ood"]) for step, e in evals if "ood" in e]
        if ood:
            # the second number: structure never trained, read by the same rules
            t = trajectory(ood, cfg.cliff_window, cfg.cliff_margin).as_dict()
            s["ood"] = {
                k: t[k] for k in ("base", "base_ci", "final", "final_ci", "gain", "gain_ci")
            }
            s["ood"]["problems"] = ood[0][1].get("episodes")
    s["mean_grad_share"] = mean_grad_share(metrics)
    return s
