"""End-to-end training throughput on the map's configuration: this checkout vs a fixed
baseline commit, in the same run.

Each side runs in its own Python process with ``PYTHONPATH`` at its source tree (the baseline
a ``git worktree`` of ``BASELINE``, made in a temporary directory): the same tiny-s model,
seed, workflow and batch (``baselines/sweeps/map-math.toml``'s: 8 problems x G=8, the
protocol's filtering and masking, an evaluation of 100 held-out problems x 4 samples plus
greedy every 10 steps). A step's time is rollout + scoring + update; the evaluation's time
divided by ``eval_every`` is added (amortised). Peak RSS of each process is reported beside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import Row

#: the commit the throughput target is measured against (before flowzoo's own forward pass)
BASELINE = "921d9c2"
WORKFLOWS = ("voting-math", "eval-opt-math", "orch-workers-math")
EVAL_EVERY = 10

#: runs in the measured process; only APIs both trees have (TrainConfig, Trainer)
_CHILD = r"""
import json, resource, statistics, sys, tempfile, time
import torch
torch.manual_seed(0)
from flowzoo.agents.train.trainer import TrainConfig, Trainer
env, steps, episodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = TrainConfig(env=env, model="tiny-s", steps=steps + 1, problems_per_step=8, group_size=8,
    lr=5e-5, filter_groups=True, mask_truncated=True, eval_every=10, eval_episodes=episodes,
    eval_samples=4, save_every=0, seed=0, out_dir=tempfile.mkdtemp(prefix="fz-bench-train-"))
tr = Trainer(cfg, progress=False)
tr.train_step()
times = []
for _ in range(steps):
    t = time.perf_counter(); tr.train_step(); times.append(time.perf_counter() - t)
t = time.perf_counter(); tr.evaluate(); ev = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
import flowzoo
out = {"step": statistics.median(times), "eval": ev, "rss_mb": rss, "file": flowzoo.__file__}
print(json.dumps(out))
"""


def _worktree(commit: str) -> Path | None:
    root = Path(__file__).resolve().parents[1]
    dest = Path(tempfile.mkdtemp(prefix="fz-baseline-")) / "tree"
    got = subprocess.run(
        ["git", "-C", str(root), "worktree", "add", "--detach", str(dest), commit],
        capture_output=True,
        text=True,
    )
    return dest if got.returncode == 0 else None


def _remove(tree: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    subprocess.run(
        ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], capture_output=True
    )


def _measure(tree: Path, env: str, steps: int, episodes: int) -> dict:
    e = {**os.environ, "PYTHONPATH": str(tree)}
    got = subprocess.run(
        [sys.executable, "-c", _CHILD, env, str(steps), str(episodes)],
        env=e,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if got.returncode != 0:
        raise RuntimeError(f"training benchmark failed in {tree}: {got.stderr[-2000:]}")
    out = json.loads(got.stdout.strip().splitlines()[-1])
    if not Path(out["file"]).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"the benchmark imported {out['file']}, not the tree {tree}")
    return out


def run(quick: bool = False) -> list[Row]:
    steps, episodes = (2, 20) if quick else (5, 100)
    here = Path(__file__).resolve().parents[1]
    base = _worktree(BASELINE)
    if base is None:
        print(f"[train] no baseline: git worktree of {BASELINE} failed", file=sys.stderr)
        return []
    rows = []
    try:
        for env in WORKFLOWS:
            old = _measure(base, env, steps, episodes)
            new = _measure(here, env, steps, episodes)

            def per_step(m: dict) -> float:
                return m["step"] + m["eval"] / EVAL_EVERY

            rows.append(
                Row(
                    "train",
                    f"{env}: steps/s (rollout+update+eval/{EVAL_EVERY})",
                    1 / per_step(new),
                    1 / per_step(old),
                    f"commit {BASELINE}",
                    "steps/s",
                    target=4.0,
                    note=(
                        f"step {new['step']:.2f}s vs {old['step']:.2f}s; eval {new['eval']:.1f}s"
                        f" vs {old['eval']:.1f}s; peak RSS {new['rss_mb']:.0f} vs"
                        f" {old['rss_mb']:.0f} MB"
                    ),
                )
            )
            rows.append(
                Row(
                    "train",
                    f"{env}: peak RSS",
                    new["rss_mb"],
                    old["rss_mb"],
                    f"commit {BASELINE}",
                    "MB",
                    lower_is_better=True,
                )
            )
    finally:
        _remove(base)
    return rows
