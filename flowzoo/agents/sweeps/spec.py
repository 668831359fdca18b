"""A sweep file read and expanded into its runs, checked where it enters: each key's type
(a wrong one named with the key, the value and the type expected, never a traceback), every
run's config (before any run starts), and ``--subset`` (a key that is no setting, or a
selection that matches no run, is an error naming what is valid: never "runs nothing and
exits 0"). :mod:`flowzoo.agents.sweeps.runner` runs what this makes.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: how a sweep file spells each of its keys' types, for an error naming the one expected
_SPELLED = {
    "name": "a non-empty string",
    "out_dir": "a non-empty string (a directory)",
    "base": "a table of TrainConfig fields ([base])",
    "grid": "a table of non-empty lists ([grid]: key = [value, ...])",
    "extra": "a list of tables of TrainConfig fields ([[extra]])",
}


def _kind(v: Any) -> str:
    """The type of a value read from a sweep file, as its file would spell it."""
    kinds = {bool: "a bool", int: "an int", float: "a number", str: "a string"}
    kinds |= {list: "a list", dict: "a table"}
    return kinds.get(type(v), type(v).__name__)


@dataclass
class SweepSpec:
    """A sweep as its file gives it; each key's type is checked when it is made, so a
    wrong type is said naming the key, the value and the type expected (not a traceback
    deep inside the expansion)."""

    name: str
    out_dir: str
    base: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    extra: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        def refuse(key: str, v: Any, want: str) -> None:
            shown = repr(v) if len(repr(v)) <= 80 else repr(v)[:80] + "..."
            raise ValueError(f"sweep key {key} must be {want}, got {shown} ({_kind(v)})")

        for key, want in (("name", str), ("out_dir", str), ("base", dict), ("grid", dict)):
            v = getattr(self, key)
            if not isinstance(v, want) or (want is str and (not v or "\0" in v)):
                refuse(key, v, _SPELLED[key])
        for k, v in self.grid.items():
            if not isinstance(v, list) or not v:
                refuse(f"grid.{k}", v, "a non-empty list of values")
        if not isinstance(self.extra, list):
            refuse("extra", self.extra, _SPELLED["extra"])
        for i, e in enumerate(self.extra):
            if not isinstance(e, dict):
                refuse(f"extra[{i}]", e, "a table of TrainConfig fields")


@dataclass
class RunSpec:
    run_id: str
    config: dict[str, Any]


def load_sweep(path: str | os.PathLike) -> SweepSpec:
    from flowzoo.config import read_config_file

    p = Path(path)
    data = read_config_file(p)
    bad = set(data) - set(_SPELLED)
    if bad:
        raise ValueError(
            f"unknown sweep keys {sorted(bad, key=str)} in {p}; valid: {', '.join(_SPELLED)}"
        )
    try:
        return SweepSpec(
            data.get("name", p.stem),
            data.get("out_dir", f"runs/{p.stem}"),
            data.get("base", {}),
            data.get("grid", {}),
            data.get("extra", []),
        )
    except ValueError as e:
        raise ValueError(f"{p}: {e}") from None


def _slug(v: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", str(v)).strip("_")[:40]


def expand(spec: SweepSpec, subset: dict[str, str] | None = None) -> list[RunSpec]:
    """Every run of the sweep (grid product, then extras), optionally filtered; every run's
    config is validated here, before any run starts, and every run gets its own directory."""
    import hashlib

    from flowzoo.config import TrainConfig

    valid = {f.name for f in dataclasses.fields(TrainConfig)}
    for k in list(spec.base) + list(spec.grid) + [k for e in spec.extra for k in e]:
        if k not in valid:
            raise ValueError(f"unknown TrainConfig field {k!r} in sweep {spec.name!r}")
    keys = list(spec.grid)
    runs = []
    for combo in itertools.product(*(spec.grid[k] for k in keys)):
        point = dict(zip(keys, combo, strict=True))
        rid = "-".join(f"{k}={_slug(v)}" for k, v in point.items()) or "run"
        runs.append(RunSpec(rid, {**spec.base, **point}))
    for i, e in enumerate(spec.extra):
        rid = "extra" + str(i) + "-" + "-".join(f"{k}={_slug(v)}" for k, v in e.items())
        runs.append(RunSpec(rid, {**spec.base, **e}))
    # every run's config as parsed: two runs equal after parsing ("1e-4" and 0.0001) are one
    # run named twice, refused; ids cut or folded to one slug get the hash of the parsed config
    parsed: dict[str, str] = {}
    keys_of: dict[int, str] = {}
    configs: dict[int, TrainConfig] = {}
    for r in runs:
        try:
            c = TrainConfig.from_dict(r.config, source=f"sweep {spec.name!r}, run {r.run_id}")
        except (ValueError, TypeError) as e:
            raise ValueError(f"sweep {spec.name!r}, run {r.run_id}: {e}") from None
        configs[id(r)] = c
        key = json.dumps(dataclasses.asdict(c), sort_keys=True, default=str)
        if key in parsed:
            raise ValueError(
                f"sweep {spec.name!r}: runs {parsed[key]} and {r.run_id} are the same "
                "configuration once parsed; drop one"
            )
        parsed[key] = r.run_id
        keys_of[id(r)] = key
    seen: dict[str, int] = {}
    for r in runs:
        seen[r.run_id] = seen.get(r.run_id, 0) + 1
    for r in runs:
        if seen[r.run_id] > 1:
            r.run_id += "-" + hashlib.sha256(keys_of[id(r)].encode()).hexdigest()[:8]
    if subset:
        runs = _select(spec, runs, configs, subset)
    for r in runs:
        r.config["out_dir"] = str(Path(spec.out_dir) / r.run_id)
    return runs


def _matches(raw: Any, value: Any, text: str) -> bool:
    """Whether ``--subset``'s ``text`` names a run's setting: as the file wrote it (``raw``)
    or as parsed (``value``: a default, ``1e-4`` for 0.0001, ``true`` for True)."""
    if text in (str(raw), str(value)):
        return True
    if isinstance(value, bool):
        return text.lower() in (
            ("1", "true", "yes", "on") if value else ("0", "false", "no", "off")
        )
    if isinstance(value, (int, float)):
        try:
            return float(text) == value
        except ValueError:
            return False
    return False


def _select(
    spec: SweepSpec, runs: list[RunSpec], configs: dict[int, Any], subset: dict[str, str]
) -> list[RunSpec]:
    """The runs ``subset`` selects. A key that is no setting (a typo) is an error naming
    the sweep's own settings, and so is a selection that matches no run (naming the values
    each key takes): a misspelt ``--subset`` never runs nothing and exits 0."""
    from flowzoo.config import TrainConfig

    fields = [f.name for f in dataclasses.fields(TrainConfig)]
    own = list(dict.fromkeys([*spec.grid, *(k for e in spec.extra for k in e), *spec.base]))
    for k in subset:
        if k not in fields:
            raise ValueError(
                f"unknown --subset key {k!r}; valid: this sweep's settings "
                f"{', '.join(own) or '(none)'}, or any other TrainConfig field "
                "(flowzoo train --help lists them)"
            )
    chosen = [
        r
        for r in runs
        if all(_matches(r.config.get(k), getattr(configs[id(r)], k), v) for k, v in subset.items())
    ]
    if not chosen:
        takes = "; ".join(
            f"{k} takes {', '.join(sorted({str(getattr(configs[id(r)], k)) for r in runs}))}"
            for k in subset
        )
        given = ",".join(f"{k}={v}" for k, v in subset.items())
        raise ValueError(
            f"--subset {given} matches none of the {len(runs)} runs of sweep {spec.name!r}; {takes}"
        )
    return chosen


def parse_subset(arg: str | None) -> dict[str, str]:
    if not arg:
        return {}
    out: dict[str, str] = {}
    for part in arg.split(","):
        k, _, v = part.partition("=")
        if not k.strip() or not v.strip():
            raise ValueError(f"bad --subset entry {part!r}; expected key=value")
        if k.strip() in out:
            raise ValueError(f"--subset names {k.strip()!r} twice; give each key once")
        out[k.strip()] = v.strip()
    return out
