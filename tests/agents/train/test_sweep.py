"""``flowzoo sweep``: every run's directory passes the checks a single run's does, a run is
skipped only when it is this sweep's finished run, and a stop signal stops the whole sweep
(red team round 42: links followed, a FIFO hung it, a copied run was skipped, Ctrl-C retried).
Real tiny runs on the ``tiny_model`` fixture."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from flowzoo.agents.train.rundir import RunDirInUse, RunLock
from flowzoo.agents.train.sweep import SweepSpec, run_sweep

pytest.importorskip("torch")

BASE = {
    "env": "voting-math",
    "problems_per_step": 1,
    "group_size": 2,
    "max_new_tokens": 24,
    "eval_every": 0,
    "eval_episodes": 2,
    "eval_ood_episodes": 0,
    "save_every": 1,
}


def _spec(tiny_model, out, seeds, steps=1) -> SweepSpec:
    base = {**BASE, "model": str(tiny_model), "steps": steps}
    return SweepSpec("t", str(out), base, {"seed": list(seeds)})


def _tree(d) -> dict:
    """Every entry under ``d``: a file's bytes, a link's target, a FIFO as such."""
    out = {}
    for p in sorted(d.rglob("*")):
        key = str(p.relative_to(d))
        if p.is_symlink():
            out[key] = ("link", os.readlink(p))
        elif p.is_fifo():
            out[key] = ("fifo",)
        elif p.is_file():
            out[key] = (p.read_bytes(), p.stat().st_mode)
    return out


def test_planted_links_fifos_and_foreign_dirs_fail_their_run_untouched(tiny_model, tmp_path):
    """A train.log or run_config.json that is a link, a FIFO train.log (it hung the sweep),
    a run directory that is a link, and a directory of someone else's files: each run is
    recorded failed, naming the entry, and nothing there is written, followed or locked;
    the one clean run still runs."""
    out, precious = tmp_path / "sw", tmp_path / "precious.txt"
    precious.write_text("mine\n")
    (tmp_path / "elsewhere").mkdir()
    for s in (2, 3, 4, 5, 6):
        (out / f"seed={s}").mkdir(parents=True) if s != 5 else None
    (out / "seed=2" / "train.log").symlink_to(precious)
    (out / "seed=3" / "run_config.json").symlink_to(precious)
    os.mkfifo(out / "seed=4" / "train.log")
    (out / "seed=5").symlink_to(tmp_path / "elsewhere")
    (out / "seed=6" / "run_config.json").write_text('{"my": "own file"}')  # beside others
    (out / "seed=6" / "notes.txt").write_text("keep\n")
    before = (_tree(out), _tree(tmp_path / "elsewhere"), precious.read_bytes())

    runs = run_sweep(_spec(tiny_model, out, [1, 2, 3, 4, 5, 6]), workers=1, progress=False)["runs"]

    assert runs["seed=1"] == "completed"
    for s, said in [
        (2, "train.log is a symbolic link"),
        (3, "run_config.json is a symbolic link"),
        (4, "train.log is a FIFO"),
        (5, "seed=5 is a symbolic link"),
        (6, "holds no flowzoo run"),
    ]:
        assert runs[f"seed={s}"].startswith("failed") and said in runs[f"seed={s}"], runs
    after = _tree(out)
    assert {k: v for k, v in after.items() if not k.startswith(("seed=1", "sweep.json"))} == {
        k: v for k, v in before[0].items()
    }
    assert (_tree(tmp_path / "elsewhere"), precious.read_bytes()) == before[1:]


def test_only_this_sweeps_finished_run_is_skipped(tiny_model, tmp_path):
    """A completed run is skipped on the next sweep; a copy of it under another run's name
    (another seed) is not: its config.json differs, so the run is decided as a single run
    would be (resuming another configuration is refused, named, its files untouched); a
    completed run whose config.json is a link to the real one is not skipped either."""
    out = tmp_path / "sw"
    assert run_sweep(_spec(tiny_model, out, [1]), workers=1, progress=False)["runs"] == {
        "seed=1": "completed"
    }
    shutil.copytree(out / "seed=1", out / "seed=2")
    shutil.copytree(out / "seed=1", out / "seed=3")
    shutil.copytree(out / "seed=1", tmp_path / "real")
    (out / "seed=3" / "config.json").unlink()
    (out / "seed=3" / "config.json").symlink_to(tmp_path / "real" / "config.json")
    # seed=3's config, made real: it is this sweep's, so only the link keeps it from a skip
    real = json.loads((tmp_path / "real" / "config.json").read_text())
    (tmp_path / "real" / "config.json").write_text(json.dumps({**real, "seed": 3}))
    copies = {s: _tree(out / f"seed={s}") for s in (2, 3)}

    runs = run_sweep(_spec(tiny_model, out, [1, 2, 3]), workers=1, progress=False)["runs"]

    assert runs["seed=1"] == "skipped"
    assert runs["seed=2"].startswith("failed") and "different configuration" in runs["seed=2"]
    assert "seed: 1 -> 2" in runs["seed=2"]
    assert (
        runs["seed=3"].startswith("failed") and "config.json is a symbolic link" in runs["seed=3"]
    )
    assert {s: _tree(out / f"seed={s}") for s in (2, 3)} == copies


@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_a_stop_signal_stops_the_sweep_and_its_run_without_a_retry(tiny_model, tmp_path, sig):
    """Ctrl-C (SIGINT to the process group: the run gets it from the terminal and from the
    sweep) or SIGTERM to the sweep alone: the live run records itself interrupted, is not retried, the next run never starts,
    sweep.json says so, and the sweep exits 128 + the signal."""
    out = tmp_path / "sw"
    spec = _spec(tiny_model, out, [1, 2], steps=500)
    # the CLI's `flowzoo sweep` for SIGINT; for SIGTERM the exit the CLI gives a Stopped
    code = (
        "import sys\n"
        "from flowzoo.agents.train.signals import Stopped\n"
        "from flowzoo.agents.train.sweep import SweepSpec, run_sweep\n"
        f"spec = SweepSpec(**{spec.__dict__!r})\n"
        "try:\n"
        "    run_sweep(spec, workers=1, progress=False)\n"
        "except Stopped as e:\n"
        "    sys.exit(128 + e.signum)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    signum = getattr(signal, f"SIG{sig}")
    metrics = out / "seed=1" / "metrics.jsonl"
    try:
        while proc.poll() is None and (not metrics.exists() or not metrics.read_text()):
            time.sleep(0.05)  # a step logged
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        if sig == "INT":
            os.killpg(proc.pid, signum)  # Ctrl-C: the terminal signals the process group
        else:
            os.kill(proc.pid, signum)  # a scheduler's kill of the sweep alone
        assert proc.wait(timeout=240) == 128 + signum, proc.stdout.read().decode()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        try:  # a run left behind still holds its lock: end it
            if (out / "seed=1").is_dir():
                RunLock(out / "seed=1").release()
        except RunDirInUse:
            holder = (out / "seed=1" / ".flowzoo.lock").read_text().strip()
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(holder), signal.SIGKILL)
    report = json.loads((out / "sweep.json").read_text())
    assert report["runs"] == {"seed=1": "interrupted", "seed=2": "interrupted (not started)"}
    summary = json.loads((out / "seed=1" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps_done"] < 500
    log = (out / "seed=1" / "train.log").read_text()
    assert log.count("== flowzoo sweep: run seed=1, attempt") == 1  # never retried
    assert not (out / "seed=2").exists()
