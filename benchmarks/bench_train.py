"""End-to-end training throughput on the map's configuration: this checkout vs a fixed
baseline commit, in the same run.

Each side runs in its own Python process isolated to its source tree (``benchmarks.isolate``:
the baseline a ``git worktree`` of ``BASELINE`` in a temporary directory; every ``flowzoo``
module a side loads must come from its own tree) on the same weights (this checkout's tiny-s,
given to the baseline as a checkpoint path), seed, workflow and batch
(``baselines/sweeps/map-math.toml``'s: 8 problems x G=8, the protocol's filtering and masking,
an evaluation of 100 held-out problems x 4 samples plus greedy every 10 steps) and thread
count. A step's time is rollout + scoring + update; the evaluation's time divided by
``eval_every`` is added (amortised). Peak RSS of each process is reported beside. A side that
cannot run gives rows marked not measured, with the reason.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from benchmarks.common import Row, failed
from benchmarks.isolate import HERE, TreeError, run_code, worktree

#: the commit the throughput target is measured against (before flowzoo's own forward pass)
BASELINE = "921d9c2"
WORKFLOWS = ("voting-math", "eval-opt-math", "orch-workers-math")
EVAL_EVERY = 10
#: where each layout this project has had keeps ``Trainer`` and ``TrainConfig``, newest first
TRAINER_MODULES = (
    "flowzoo.agents.train.trainer",
    "flowzoo.train.trainer",
    "flowzoo.agents.trainer",
)

#: runs after ``isolate.PRELUDE`` in the measured process: only the API every layout has
#: (``TrainConfig`` with these fields, ``Trainer.train_step``, ``Trainer.evaluate``)
_CHILD = r"""
import dataclasses, importlib, resource, statistics, tempfile, time
mode, settings = sys.argv[1], json.loads(sys.argv[2])
mod = None
for name in json.loads(sys.argv[3]):
    try:
        mod = importlib.import_module(name)
        break
    except ModuleNotFoundError as e:
        if not (e.name and name.startswith(e.name)):
            fail(f"{name} needs {e.name!r}, which this environment lacks")
if mod is None:
    fail("no trainer module (looked for " + ", ".join(json.loads(sys.argv[3]))
         + "): this tree does not share the benchmark's API")
TrainConfig, Trainer = getattr(mod, "TrainConfig", None), getattr(mod, "Trainer", None)
if TrainConfig is None or not all(hasattr(Trainer, a) for a in ("train_step", "evaluate")):
    fail(f"{mod.__name__} lacks TrainConfig or Trainer.train_step/evaluate")
missing = sorted(set(settings) - {f.name for f in dataclasses.fields(TrainConfig)})
if missing:
    fail(f"its TrainConfig has no field {', '.join(missing)} (a baseline must share them)")
model = None
try:
    from flowzoo.tiny.build import resolve_model
    model = str(resolve_model(settings["model"]))
except Exception:
    pass
if mode == "probe":
    print(json.dumps({"trainer": mod.__name__, "file": flowzoo.__file__, "model": model,
                      "foreign": sitecustomize.foreign()}))
    sys.exit(0)
import torch
torch.manual_seed(0)
steps = settings.pop("steps")
cfg = TrainConfig(**settings, steps=steps + 1, out_dir=tempfile.mkdtemp(prefix="fz-bench-train-"))
tr = Trainer(cfg, progress=False)
tr.train_step()
times = []
for _ in range(steps):
    t = time.perf_counter(); tr.train_step(); times.append(time.perf_counter() - t)
t = time.perf_counter(); tr.evaluate(); ev = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"step": statistics.median(times), "eval": ev, "rss_mb": rss,
                  "threads": torch.get_num_threads(), "foreign": sitecustomize.foreign()}))
"""


def settings(env: str, model: str, steps: int, episodes: int) -> dict:
    """The ``TrainConfig`` fields both sides run with (``steps`` measured after a warm-up)."""
    return dict(
        env=env,
        model=model,
        steps=steps,
        problems_per_step=8,
        group_size=8,
        lr=5e-5,
        filter_groups=True,
        mask_truncated=True,
        eval_every=EVAL_EVERY,
        eval_episodes=episodes,
        eval_samples=4,
        save_every=0,
        seed=0,
    )


def threads() -> int:
    """One thread count for both sides: ``OMP_NUM_THREADS`` when set, else the CPU affinity."""
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(omp) if omp.isdigit() and int(omp) > 0 else len(os.sched_getaffinity(0))


def side(tree: Path, mode: str, cfg: dict, n_threads: int, timeout: float = 1800) -> dict:
    """Probe (import and API check only) or measure ``tree``'s trainer in its own process."""
    environ = {**os.environ, "OMP_NUM_THREADS": str(n_threads)}
    args = [mode, json.dumps(cfg), json.dumps(TRAINER_MODULES)]
    return run_code(tree, _CHILD, args, timeout=timeout, environ=environ)


def _metric(env: str) -> str:
    return f"{env}: steps/s (rollout+update+eval/{EVAL_EVERY})"


def run(quick: bool = False) -> list[Row]:
    steps, episodes = (2, 20) if quick else (5, 100)
    ref = f"commit {BASELINE}"
    n = threads()
    rows: list[Row] = []
    try:
        with worktree(BASELINE) as base:
            # both trees load and share the API before any training starts
            here = side(HERE, "probe", settings(WORKFLOWS[0], "tiny-s", steps, episodes), n)
            model = here["model"] or "tiny-s"
            side(base, "probe", settings(WORKFLOWS[0], model, steps, episodes), n)
            for env in WORKFLOWS:
                try:
                    new = side(HERE, "measure", settings(env, model, steps, episodes), n)
                    old = side(base, "measure", settings(env, model, steps, episodes), n)
                except TreeError as e:
                    print(f"[train] {env}: {e}", file=sys.stderr)
                    rows.append(failed("train", _metric(env), ref, "steps/s", str(e), target=4.0))
                    continue
                rows += _rows(env, new, old, ref)
    except TreeError as e:
        print(f"[train] cannot run: {e}", file=sys.stderr)
        rows = [
            failed("train", _metric(env), ref, "steps/s", str(e), target=4.0) for env in WORKFLOWS
        ]
    return rows


def _rows(env: str, new: dict, old: dict, ref: str) -> list[Row]:
    def per_step(m: dict) -> float:
        return m["step"] + m["eval"] / EVAL_EVERY

    note = (
        f"step {new['step']:.2f}s vs {old['step']:.2f}s; eval {new['eval']:.1f}s"
        f" vs {old['eval']:.1f}s; peak RSS {new['rss_mb']:.0f} vs {old['rss_mb']:.0f} MB;"
        f" {new['threads']} thread(s) each"
    )
    return [
        Row(
            "train",
            _metric(env),
            1 / per_step(new),
            1 / per_step(old),
            ref,
            "steps/s",
            target=4.0,
            note=note,
        ),
        Row(
            "train",
            f"{env}: peak RSS",
            new["rss_mb"],
            old["rss_mb"],
            ref,
            "MB",
            lower_is_better=True,
        ),
    ]
