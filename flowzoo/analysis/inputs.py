"""What ``flowzoo report`` takes in, checked where it enters (no torch).

Why here and not where each value is used: a knob out of its domain (``window`` 0 averages
the base into the final accuracy; a negative ``floor`` lets a flat run "rise") changes
verdicts without a word, and a record value of the wrong type or out of range (an accuracy
of 1.5, a NaN, ``"env": 3``) is either averaged in silently or ends the whole report with a
traceback far from the file that held it. So:

- the knobs (:data:`KNOBS`) are refused, naming their domain, before anything is read;
- a run whose ``config.json`` does not hold what a run's does (:func:`config_fault`: a
  setting of the wrong type or out of its declared domain, a cell key missing) is *left
  out* and listed as unreadable, and the report goes on with the others;
- a run whose ``summary.json`` or ``metrics.jsonl`` holds an accuracy outside [0, 1], a
  non-finite number, or a value of the wrong shape where the report reads one
  (:func:`record_fault`) is left out the same way, the file, the field and the value named.
  Chosen over refusing the whole report: one bad run among a sweep's hundred should not
  hide the other ninety-nine, and the left-out list (stderr and report.md's "Runs left out")
  says which run and why, so it is never averaged in silently.

Where it writes is checked the way a run checks its own directory, by the same code
(:mod:`flowzoo.files`): the output directory and every file the report writes (report.md,
cells.json, the plots) must be a real directory and regular files or absent; a link, FIFO or
device planted at any of those names is refused, named, before anything is written, and
each file is replaced whole (a temp file renamed over it), never written through.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flowzoo.config import FIELD_DOMAINS
from flowzoo.config.fields import Domain, problem
from flowzoo.files import check_entry, write_whole

#: the report's knobs, named as ``flowzoo report``'s flags: ``window`` is the run side's
#: ``cliff_window`` (evaluations averaged for the final accuracy); ``floor`` is its
#: ``cliff_margin``, a margin in accuracy units, so at most 1 (a floor of 1 or more would
#: let nothing rise or fall, whatever the runs did)
KNOBS: dict[str, Domain] = {
    "window": FIELD_DOMAINS["cliff_window"],
    "floor": Domain(float, lo=0, hi=1),
}
#: the config keys a cell is named by: a run without one cannot be placed in a cell
CELL_KEYS = ("env", "model", "policy", "param")
#: per-role rates an evaluation records (each a fraction of the role's turns)
RATE_MAPS = ("behaviour", "parse_fail", "no_answer", "truncated")


def check_knobs(**knobs: Any) -> None:
    """Refuse a report knob out of its domain (:data:`KNOBS`), naming the knob, the value
    and the domain; an unknown knob is a programming error, named too."""
    for name, v in knobs.items():
        if name not in KNOBS:
            raise ValueError(f"unknown report knob {name!r}; valid: {', '.join(KNOBS)}")
        if msg := problem(name, v, KNOBS[name]):
            raise ValueError(f"report: {msg}")


def config_fault(config: dict[str, Any]) -> str | None:
    """Why a run's parsed ``config.json`` cannot be read by the report (None: it can): a
    cell key missing, a setting of the wrong type or out of its domain (choices are not
    checked: an env or option renamed since the run was made stays readable), an env id
    that is not ``<workflow>-<task>``. A key that is no setting now (retired) is not read."""
    for k in CELL_KEYS:
        if k not in config:
            return f"no {k!r} setting (a run's config names {', '.join(CELL_KEYS)})"
    for k, v in config.items():
        d = FIELD_DOMAINS.get(k)
        if d is None:
            continue
        if d.choices is not None:
            d = dataclasses.replace(d, choices=None)
        if msg := problem(k, v, d):
            return msg if len(msg) <= 300 else msg[:300] + "..."
    workflow, _, task = config["env"].rpartition("-")
    if not workflow or not task:
        return f"env must be an id <workflow>-<task> (voting-math), got {_shown(config['env'])}"
    return None


def _shown(v: Any) -> str:
    """A value as a message shows it: its repr, cut short (a record can hold megabytes)."""
    r = repr(v)
    return r if len(r) <= 80 else r[:80] + "..."


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _fraction(where: str, v: Any) -> str | None:
    """Why ``v`` is no accuracy (a finite number in [0, 1]), or None."""
    if not _number(v) or not math.isfinite(v) or not 0.0 <= v <= 1.0:
        return f"{where} must be a number in [0, 1], got {_shown(v)}"
    return None


def _non_finite(where: str, v: Any, depth: int = 0) -> str | None:
    """The first NaN or infinity in a parsed JSON value (its path named), or None."""
    if isinstance(v, float) and not math.isfinite(v):
        return f"{where} must be a finite number, got {_shown(v)}"
    if depth > 8:  # a record is a few levels deep; deeper nesting is not read
        return None
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, x in items:
        if msg := _non_finite(f"{where}[{k!r}]", x, depth + 1):
            return msg
    return None


def _is_fraction_key(key: str, extras: tuple[str, ...]) -> bool:
    return key == "accuracy" or key.endswith(("_correct", "_accuracy")) or key in extras


def eval_fault(where: str, ev: Any, extras: tuple[str, ...] = ()) -> str | None:
    """Why one recorded evaluation cannot be read (None: it can): not a table, its accuracy
    (and every other fraction it records: ``*_correct``, ``*_accuracy``, the workflow's
    extras, per-role rates) not in [0, 1], its CI not two fractions in order, its sample
    and problem counts not counts, a per-problem count outside 0..samples; a nested
    evaluation (greedy, out of distribution) is read by the same rules."""
    if not isinstance(ev, dict):
        return f"{where} must be a table, got {_shown(ev)}"
    if "accuracy" not in ev:
        return f"{where} has no accuracy"
    for k, v in ev.items():
        at = f"{where}[{k!r}]"
        if isinstance(k, str) and _is_fraction_key(k, extras) and (msg := _fraction(at, v)):
            return msg
        if k in RATE_MAPS:
            if not isinstance(v, dict):
                return f"{at} must be a table of role: rate, got {_shown(v)}"
            for role, x in v.items():
                if msg := _fraction(f"{at}[{role!r}]", x):
                    return msg
        if k == "behaviour_n" and not (isinstance(v, dict) and all(_count(x) for x in v.values())):
            return f"{at} must be a table of role: count, got {_shown(v)}"
        if isinstance(v, dict) and "accuracy" in v and (msg := eval_fault(at, v, extras)):
            return msg
    samples = ev.get("samples", 1)
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        return f"{where}['samples'] must be an int >= 1, got {_shown(samples)}"
    episodes = ev.get("episodes", 1)
    if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 0:
        return f"{where}['episodes'] must be an int >= 0, got {_shown(episodes)}"
    if "ci" in ev:
        ci = ev["ci"]
        if not (isinstance(ci, list) and len(ci) == 2):
            return f"{where}['ci'] must be [low, high], got {_shown(ci)}"
        for i, x in enumerate(ci):
            if msg := _fraction(f"{where}['ci'][{i}]", x):
                return msg
        if ci[0] > ci[1]:
            return f"{where}['ci'] must be [low, high] with low <= high, got {_shown(ci)}"
    pp = ev.get("per_problem")
    if pp is not None:
        if not isinstance(pp, list):
            return f"{where}['per_problem'] must be a list of counts, got {_shown(pp)}"
        for i, c in enumerate(pp):
            if not _number(c) or not math.isfinite(c) or not 0 <= c <= samples:
                return (
                    f"{where}['per_problem'][{i}] must be a count in 0..{samples}, got {_shown(c)}"
                )
    return None


def _readings_fault(readings: Any) -> str | None:
    """Why a run's recorded readings (what the study reads from its workflow) cannot be
    read, or None: a table whose partner and partner-quality rule are names (or null) and
    whose extras and parallel roles are lists of names."""
    if not isinstance(readings, dict):
        return f" must be a table, got {_shown(readings)}"
    for k in ("partner", "partner_quality"):
        v = readings.get(k)
        if v is not None and not isinstance(v, str):
            return f"[{k!r}] must be a name or null, got {_shown(v)}"
    for k in ("extras", "parallel"):
        v = readings.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            return f"[{k!r}] must be a list of names, got {_shown(v)}"
    return None


def record_fault(summary: dict[str, Any], metrics: list[dict[str, Any]]) -> str | None:
    """Why a finished run's records cannot be read by the report (None: they can), naming
    the file, the field and the value: ``summary.json``'s ``eval_curve`` (a list of
    [step, accuracy], steps ints >= 0, accuracies in [0, 1]), out-of-distribution finals
    and recorded readings; every ``metrics.jsonl`` line's step (an int >= -1), its evaluation
    (:func:`eval_fault`), its ``roles`` and ``policies`` (tables of tables of numbers) and
    ``sampled`` (a table of numbers), and no NaN or infinity anywhere in a line."""
    readings = summary.get("readings")
    if readings is not None and (msg := _readings_fault(readings)):
        return f"summary.json: readings{msg}"
    extras_v = readings.get("extras") if isinstance(readings, dict) else None
    extras = tuple(x for x in extras_v if isinstance(x, str)) if isinstance(extras_v, list) else ()
    curve = summary.get("eval_curve", [])
    if not isinstance(curve, list):
        return f"summary.json: eval_curve must be a list of [step, accuracy], got {_shown(curve)}"
    for i, x in enumerate(curve):
        at = f"summary.json: eval_curve[{i}]"
        if not (isinstance(x, list) and len(x) == 2):
            return f"{at} must be [step, accuracy], got {_shown(x)}"
        if not isinstance(x[0], int) or isinstance(x[0], bool) or x[0] < 0:
            return f"{at}: its step must be an int >= 0, got {_shown(x[0])}"
        if msg := _fraction(f"{at}: its accuracy", x[1]):
            return msg
    ood = summary.get("ood")
    if ood:
        if not isinstance(ood, dict):
            return f"summary.json: ood must be a table, got {_shown(ood)}"
        if "final" not in ood:  # the report reads it: a table without it is not a reading
            return f"summary.json: ood has no 'final' (its keys: {_shown(sorted(ood))})"
        for k in ("base", "final"):
            if k in ood and (msg := _fraction(f"summary.json: ood[{k!r}]", ood[k])):
                return msg
    for row in metrics:
        at = f"metrics.jsonl (the line of step {_shown(row.get('step'))})"
        step = row.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < -1:
            return f"{at}: step must be an int >= -1"
        for k, v in row.items():
            if msg := _non_finite(f"{at}: {k}", v):
                return msg
        if "eval" in row and (msg := eval_fault(f"{at}: eval", row["eval"], extras)):
            return msg
        for k in ("roles", "policies"):
            v = row.get(k, {})
            if not isinstance(v, dict) or not all(
                isinstance(x, dict) and all(map(_number, x.values())) for x in v.values()
            ):
                return f"{at}: {k} must be a table of tables of numbers, got {_shown(v)}"
        v = row.get("sampled", {})
        if not isinstance(v, dict) or not all(map(_number, v.values())):
            return f"{at}: sampled must be a table of numbers, got {_shown(v)}"
    return None


#: how the report names itself, and the way around, when it refuses a path
_WRITER, _ELSEWHERE = "the report", "another --out"


def _cannot(path: Path, e: OSError) -> ValueError:
    return ValueError(f"cannot write {path}: {e.strerror or e}; use {_ELSEWHERE}")


def check_out(out: Path, names: Iterable[str]) -> None:
    """Refuse, before anything is written, an output directory that is not a real
    directory (a link, a file) and any of the files ``names`` in it that is not a regular
    file (a link planted where report.md will go, a FIFO); a path that cannot be looked at
    (a parent that is a file) is said, named."""
    try:
        check_entry(out, directory=True, writer=_WRITER, elsewhere=_ELSEWHERE)
        for name in names:
            check_entry(
                out / name, directory=False, single_link=False, writer=_WRITER, elsewhere=_ELSEWHERE
            )
    except OSError as e:
        raise _cannot(out, e) from None


def make_out(out: Path) -> None:
    """The report's directory made (its parents too), or why not, named (a parent that is
    a file, no permission, a read-only file system): never a bare OSError."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _cannot(out, e) from None


def write_out(path: Path, data: str | bytes) -> None:
    """One output of the report written whole, never through a link (:func:`write_whole`);
    a write that fails (a full disk) is said naming the file."""
    try:
        write_whole(path, data, writer=_WRITER, elsewhere=_ELSEWHERE)
    except OSError as e:
        raise _cannot(path, e) from None
