"""``flowzoo sweep CONFIG``: run a matrix of training runs, resumably.

A sweep file (TOML or YAML) has ``name``, ``out_dir``, a ``[base]`` table of TrainConfig
fields shared by every run, a ``[grid]`` table of lists whose cartesian product makes the
runs, and optional ``[[extra]]`` runs (e.g. single-agent controls). ``--subset key=value,...``
runs a slice. Backends: ``local`` (default: one worker process per core; a finished run is
skipped, a crashed run is retried once and reported) and ``ray`` (the same runs as Ray tasks,
``ray.init(address=...)``, a local Ray when no address is given).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowzoo.agents.models.threads import usable_cores
from flowzoo.agents.train import rundir

BACKENDS = ("local", "ray")


@dataclass
class SweepSpec:
    name: str
    out_dir: str
    base: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    extra: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RunSpec:
    run_id: str
    config: dict[str, Any]


def load_sweep(path: str | os.PathLike) -> SweepSpec:
    from flowzoo.config import read_config_file

    p = Path(path)
    data = read_config_file(p)
    bad = set(data) - {"name", "out_dir", "base", "grid", "extra"}
    if bad:
        raise ValueError(
            f"unknown sweep keys {sorted(bad)} in {p}; valid: name, out_dir, base, grid, extra"
        )
    return SweepSpec(
        data.get("name", p.stem),
        data.get("out_dir", f"runs/{p.stem}"),
        data.get("base", {}),
        data.get("grid", {}),
        data.get("extra", []),
    )


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
    for k, v in spec.grid.items():
        if not isinstance(v, list) or not v:
            raise ValueError(f"grid entry {k!r} must be a non-empty list")
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
    for r in runs:
        try:
            c = TrainConfig.from_dict(r.config, source=f"sweep {spec.name!r}, run {r.run_id}")
        except (ValueError, TypeError) as e:
            raise ValueError(f"sweep {spec.name!r}, run {r.run_id}: {e}") from None
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
        runs = [r for r in runs if all(str(r.config.get(k)) == v for k, v in subset.items())]
    for r in runs:
        r.config["out_dir"] = str(Path(spec.out_dir) / r.run_id)
    return runs


def parse_subset(arg: str | None) -> dict[str, str]:
    if not arg:
        return {}
    out = {}
    for part in arg.split(","):
        k, _, v = part.partition("=")
        if not k or not v:
            raise ValueError(f"bad --subset entry {part!r}; expected key=value")
        out[k.strip()] = v.strip()
    return out


def is_done(run: RunSpec) -> bool:
    p = Path(run.config["out_dir"]) / "summary.json"
    if not p.exists():
        return False
    try:
        s = json.loads(p.read_text())
    except json.JSONDecodeError:
        return False
    return s.get("status") == "completed" and s.get("steps_done", -1) >= int(
        run.config.get("steps", 0)
    )


def _run_local(run: RunSpec) -> dict:
    out = Path(run.config["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "run_config.json"
    rundir.write_json(cfg_path, run.config)
    log = out / "train.log"
    code = "import json,sys; from flowzoo.agents.train.trainer import TrainConfig, Trainer; Trainer(TrainConfig.from_dict(json.load(open(sys.argv[1]))), progress=False).train()"
    # one thread per run (runs share the cores); the trainer reads it (threads.pick_threads)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("FLOWZOO_SWEEP_THREADS", "1")}
    with log.open("a") as f:
        rc = subprocess.call(
            [sys.executable, "-c", code, str(cfg_path)], stdout=f, stderr=subprocess.STDOUT, env=env
        )
    return {"run_id": run.run_id, "rc": rc}


def _run_inprocess(config: dict) -> dict:
    from flowzoo.agents.train.trainer import TrainConfig, Trainer

    s = Trainer(TrainConfig.from_dict(config), progress=False).train()
    return {"status": s["status"]}


def run_sweep(
    spec: SweepSpec,
    backend: str = "local",
    workers: int | None = None,
    subset: dict | None = None,
    address: str | None = None,
    progress: bool = True,
) -> dict:
    """Run every unfinished run; returns {run_id: "skipped" | "completed" | "failed: ..."}."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown sweep backend {backend!r}; valid: {', '.join(BACKENDS)}")
    runs = expand(spec, subset)
    results: dict[str, str] = {}
    todo = []
    for r in runs:
        if is_done(r):
            results[r.run_id] = "skipped"
        else:
            todo.append(r)
    t0 = time.time()
    if backend == "local":
        n = workers or usable_cores()  # the cores this process may use, not the machine's
        from tqdm import tqdm

        bar = tqdm(
            total=len(todo), desc=f"sweep {spec.name}", disable=not progress, file=sys.stderr
        )

        def one(r: RunSpec) -> tuple[str, str]:
            for attempt in range(2):
                res = _run_local(r)
                if res["rc"] == 0 and is_done(r):
                    return r.run_id, "completed" if attempt == 0 else "completed after retry"
            return r.run_id, f"failed (exit {res['rc']}; see {r.config['out_dir']}/train.log)"

        with ThreadPoolExecutor(n) as ex:
            for rid, status in ex.map(one, todo):
                results[rid] = status
                bar.update(1)
        bar.close()
    else:
        import ray

        ray.init(
            address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False
        )
        remote = ray.remote(num_cpus=1, max_retries=1)(_run_inprocess)
        refs = {r.run_id: remote.remote(r.config) for r in todo}
        for rid, ref in refs.items():
            try:
                ray.get(ref)
                results[rid] = "completed"
            except Exception as e:
                results[rid] = f"failed ({type(e).__name__}: {str(e)[:200]})"
    report = {
        "sweep": spec.name,
        "backend": backend,
        "wall_s": round(time.time() - t0, 1),
        "runs": results,
    }
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    rundir.write_json(Path(spec.out_dir) / "sweep.json", report)
    return report
