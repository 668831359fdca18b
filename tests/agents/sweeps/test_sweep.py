"""``flowzoo sweep``: every run's directory passes the checks a single run's does, a run is
skipped only when it is this sweep's finished run, and a stop signal stops the whole sweep
(red team round 42: links followed, a FIFO hung it, a copied run was skipped, Ctrl-C retried).
Real tiny runs on the ``tiny_model`` fixture."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from flowzoo.agents.runs.rundir import RunDirInUse, RunLock
from flowzoo.agents.sweeps import runner as sweep
from flowzoo.agents.sweeps.runner import RunSpec, SweepSpec, is_done, run_sweep

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
    assert {
        k: v
        for k, v in after.items()
        if not k.startswith(("seed=1", "sweep.json", ".flowzoo-sweep.lock"))
    } == {k: v for k, v in before[0].items()}
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
    sweep.json says so, its bar does not count the stopped runs, and the sweep exits 128 + the
    signal."""
    out = tmp_path / "sw"
    spec = _spec(tiny_model, out, [1, 2], steps=500)
    # the CLI's `flowzoo sweep` for SIGINT; for SIGTERM the exit the CLI gives a Stopped
    code = (
        "import sys\n"
        "from flowzoo.agents.runs.signals import Stopped\n"
        "from flowzoo.agents.sweeps.runner import SweepSpec, run_sweep\n"
        f"spec = SweepSpec(**{spec.__dict__!r})\n"
        "try:\n"
        "    run_sweep(spec, workers=1, progress=True)\n"
        "except Stopped as e:\n"
        "    sys.exit(128 + e.signum)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    log = tmp_path / "sweep.out"  # a file, not a pipe: the bar's redraws never fill it
    with log.open("wb") as sink:  # the child holds its own copy
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=sink,
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
        assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
        if sig == "INT":
            os.killpg(proc.pid, signum)  # Ctrl-C: the terminal signals the process group
        else:
            os.kill(proc.pid, signum)  # a scheduler's kill of the sweep alone
        assert proc.wait(timeout=240) == 128 + signum, log.read_text(errors="replace")[-3000:]
        bars = log.read_text(errors="replace").replace("\r", "\n")
        # the bar says how far the sweep got: no run ended (it read 2/2, 100%, once stopped)
        assert "0/2" in bars and "2/2" not in bars and "1/2" not in bars, bars[-2000:]
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


# The sweep's own plumbing (its log, lock, records), tested with a stand-in for the trainer
# child (``sweep._CHILD``, given the run's config as argv[1]): no model is built.
STAND_IN = {"env": "voting-math", "steps": 1}


def test_a_link_made_while_a_run_is_live_keeps_its_bytes_and_no_output_is_lost(
    monkeypatch, tmp_path
):
    """The child's output reaches train.log through the sweep, which appends each chunk
    anew (red team round 3: the child held train.log's descriptor, so a ``cp -al`` backup
    made mid-run kept receiving the run's output). A hard link made while the run is live
    keeps its bytes; every byte the child wrote is logged, in order, though it ends by
    SIGKILL with its last output still in the pipe; and a child's child still holding the
    pipe does not keep the sweep waiting."""
    go, gpid, log = tmp_path / "go", tmp_path / "grandchild.pid", tmp_path / "sw/r/train.log"
    child = (
        (
            "import os, signal, subprocess, sys, time\n"
            "print('step 1', flush=True)\n"
            "while not os.path.exists(GO):\n"
            "    time.sleep(0.01)\n"
            "g = subprocess.Popen(['sleep', '600'])  # it holds the output pipe on\n"
            "open(GPID, 'w').write(str(g.pid))\n"
            "sys.stdout.write(''.join(f'line {i}\\n' for i in range(40000)))\n"
            "sys.stdout.flush()\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n"
        )
        .replace("GO", repr(str(go)))
        .replace("GPID", repr(str(gpid)))
    )
    monkeypatch.setattr(sweep, "_CHILD", child)
    got: dict = {}
    t = threading.Thread(
        target=lambda: got.update(
            rc=sweep._Sweep().run(RunSpec("r", {**STAND_IN, "out_dir": str(log.parent)}), 0)
        )
    )
    t.start()
    try:
        while b"step 1" not in (log.read_bytes() if log.exists() else b""):
            assert t.is_alive(), got
            time.sleep(0.02)
        os.link(log, tmp_path / "backup.log")  # a cp -al backup of the live run
        backup = (tmp_path / "backup.log").read_bytes()
        go.touch()
        t.join(timeout=120)  # a hang guard only
        hung = t.is_alive()
    finally:
        go.touch()
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(gpid.read_text()), signal.SIGKILL)
        t.join(timeout=120)
    assert not hung, "the sweep waited on a pipe that the child's child still held"
    assert got["rc"] == -signal.SIGKILL
    assert (tmp_path / "backup.log").read_bytes() == backup
    assert log.read_text() == (
        "== flowzoo sweep: run r, attempt 1\nstep 1\n"
        + "".join(f"line {i}\n" for i in range(40000))
    )


def test_a_train_log_with_other_names_gets_a_copy_of_its_own(monkeypatch, tmp_path):
    """A run's train.log hard-linked elsewhere (a backup) is no reason to fail the run: its
    name gets a copy of its own and the backup keeps its bytes; a directory at train.log
    is still refused, named, nothing written."""
    monkeypatch.setattr(sweep, "_CHILD", "print('run output')\nraise SystemExit(3)\n")
    out = tmp_path / "sw"
    spec = SweepSpec("t", str(out), STAND_IN, {"seed": [1, 2]})
    run_sweep(spec, workers=1, progress=False)
    os.link(out / "seed=1" / "train.log", tmp_path / "backup.log")
    backup = (tmp_path / "backup.log").read_bytes()
    (out / "seed=2" / "train.log").unlink()
    (out / "seed=2" / "train.log").mkdir()
    before2 = _tree(out / "seed=2")

    runs = run_sweep(spec, workers=1, progress=False)["runs"]

    assert runs["seed=1"] == f"failed (exit 3; see {out}/seed=1/train.log)"
    assert (tmp_path / "backup.log").read_bytes() == backup
    log = (out / "seed=1" / "train.log").read_text()
    assert log.startswith(backup.decode()) and log.count("run output\n") == 4
    assert runs["seed=2"].startswith("failed") and "train.log is a directory" in runs["seed=2"]
    assert _tree(out / "seed=2") == before2


def test_a_second_sweep_on_a_live_sweeps_out_dir_stops_before_writing(monkeypatch, tmp_path):
    """Two sweeps on one out_dir would claim the same runs (red team round 3: the run's lock
    is free between the claim and the child's start): the sweep holds a lock on its
    out_dir for its whole life; a second sweep there stops at once, naming the holder's
    pid, having written nothing."""
    out = tmp_path / "sw"
    second = tmp_path / "second.py"
    second.write_text(
        "from flowzoo.agents.sweeps import runner as sweep\n"
        "sweep._CHILD = 'raise SystemExit(5)'\n"
        f"spec = sweep.SweepSpec('t', {str(out)!r}, {STAND_IN!r}, {{'seed': [1]}})\n"
        "from flowzoo.cli import main\n"
        "import sys\n"
        "sweep.load_sweep = lambda p: spec\n"
        "sys.exit(main(['sweep', 'unused.toml']))\n"
    )
    # the first sweep's run starts the second sweep while it is live, listing the out_dir
    child = (
        "import json, os, subprocess, sys\n"
        "from pathlib import Path\n"
        "def listing(d):\n"
        "    return {str(p): [p.lstat().st_size, p.lstat().st_mtime_ns] for p in sorted(d.rglob('*'))}\n"
        "res = Path(RES)\n"
        "if not res.exists():\n"
        "    before = listing(Path(OUT))\n"
        "    p = subprocess.run([sys.executable, SECOND], capture_output=True, text=True)\n"
        "    res.write_text(json.dumps([p.returncode, p.stdout + p.stderr, before, listing(Path(OUT))]))\n"
        "raise SystemExit(3)\n"
    )
    for k, v in {"RES": tmp_path / "second.json", "OUT": out, "SECOND": second}.items():
        child = child.replace(k, repr(str(v)))
    monkeypatch.setattr(sweep, "_CHILD", child)

    runs = run_sweep(SweepSpec("t", str(out), STAND_IN, {"seed": [1]}), workers=1, progress=False)

    rc, said, before, after = json.loads((tmp_path / "second.json").read_text())
    assert rc == 2 and "Traceback" not in said, said
    assert "in use by another flowzoo sweep" in said and f"pid {os.getpid()}" in said, said
    assert after == before
    assert runs["runs"]["seed=1"] == f"failed (exit 3; see {out}/seed=1/train.log)"
    log = (out / "seed=1" / "train.log").read_text()
    assert log.count("== flowzoo sweep: run seed=1, attempt") == 2  # the first sweep's only


def test_a_read_only_out_dir_is_refused_before_any_run(tmp_path):
    """A sweep whose out_dir is on a read-only file system (archived results) says so, clearly,
    before any run starts, not a traceback at sweep.json's write (red team round 3)."""
    ro = tmp_path / "ro"
    (ro / "sw").mkdir(parents=True)
    spec = tmp_path / "sweep.toml"
    spec.write_text(
        f'name = "t"\nout_dir = "{ro / "sw"}"\n[base]\nenv = "voting-math"\nsteps = 1\n'
        "[grid]\nseed = [1, 2]\n"
    )
    mount = f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro}"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", mount], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private read-only mount here: {probe.stderr.decode()[-200:]}")
    code = f"import sys; from flowzoo.cli import main; sys.exit(main(['sweep', {str(spec)!r}]))"
    p = subprocess.run(
        ["unshare", "-m", "sh", "-c", f'{mount} && exec "$0" -c "$1"', sys.executable, code],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    said = p.stdout + p.stderr
    assert p.returncode == 2 and "Traceback" not in said, said
    assert f"{ro / 'sw'}" in said and "not writable" in said, said
    assert "seed=1" not in said  # refused before any run
    assert list((ro / "sw").iterdir()) == []


def test_a_sweep_json_that_cannot_be_written_is_said_with_the_results(
    monkeypatch, tmp_path, capsys
):
    """sweep.json's write failing at the end (a full disk; here a directory made there
    meanwhile) is a clear error naming the file, and each run's result is still shown."""
    out = tmp_path / "sw"
    blocker = out / "sweep.json" / "x"
    monkeypatch.setattr(
        sweep,
        "_CHILD",
        # the sweep's first sweep.json (written before any run) replaced by a directory
        f"import os\np = {str(out / 'sweep.json')!r}\nif os.path.isfile(p):\n    os.remove(p)\n"
        f"os.makedirs({str(blocker)!r}, exist_ok=True)\nraise SystemExit(3)\n",
    )
    with pytest.raises(ValueError, match="sweep.json") as e:
        run_sweep(SweepSpec("t", str(out), STAND_IN, {"seed": [1]}), workers=1, progress=False)
    assert str(out / "sweep.json") in str(e.value)
    err = capsys.readouterr().err
    assert f"failed (exit 3; see {out}/seed=1/train.log)" in err and "seed=1" in err, err


def test_sweep_json_names_the_declared_runs_before_any_run(monkeypatch, tmp_path):
    """A report read while a sweep runs (or after it was killed) must see every declared
    run: sweep.json lists them, status running, before the first run starts."""
    out = tmp_path / "sw"
    seen = tmp_path / "seen.json"
    monkeypatch.setattr(
        sweep,
        "_CHILD",
        f"import shutil\nshutil.copyfile({str(out / 'sweep.json')!r}, {str(seen)!r})\n"
        "raise SystemExit(3)\n",
    )
    run_sweep(SweepSpec("t", str(out), STAND_IN, {"seed": [1, 2]}), workers=1, progress=False,
              subset={"seed": 1})  # fmt: skip
    early = json.loads(seen.read_text())
    assert early["status"] == "running" and early["declared"] == ["seed=1", "seed=2"]
    assert early["runs"] == {"seed=1": "pending"}
    final = json.loads((out / "sweep.json").read_text())
    assert "status" not in final and final["declared"] == ["seed=1", "seed=2"]


def test_a_completed_run_without_its_final_model_is_not_done(tmp_path):
    """A run is skipped only when its final/ model is there too (red team round 3: a run
    whose final/ was moved away was skipped, while resuming it writes final/ again); a
    link at final/ is not the run's own."""
    from flowzoo.config import TrainConfig

    out = tmp_path / "r"
    run = RunSpec("r", {**STAND_IN, "out_dir": str(out)})
    out.mkdir()
    cfg = dataclasses.asdict(TrainConfig.from_dict(run.config))
    (out / "config.json").write_text(json.dumps(cfg, default=str))
    (out / "summary.json").write_text(json.dumps({"status": "completed", "steps_done": 1}))
    assert not is_done(run)
    (tmp_path / "elsewhere").mkdir()
    (out / "final").symlink_to(tmp_path / "elsewhere")
    assert not is_done(run)
    (out / "final").unlink()
    (out / "final").mkdir()
    assert is_done(run)


def test_a_run_the_monitor_stopped_is_done_where_it_stopped(tmp_path):
    """A run the early-warning monitor stopped (``monitor_response="stop"``) is not retried
    and reported failed by a sweep: a rerun would stop at the same step."""
    from flowzoo.agents.train.watch import STOPPED
    from flowzoo.config import TrainConfig

    out = tmp_path / "r"
    run = RunSpec("r", {**STAND_IN, "steps": 5, "out_dir": str(out)})
    out.mkdir()
    (out / "final").mkdir()
    cfg = dataclasses.asdict(TrainConfig.from_dict(run.config))
    (out / "config.json").write_text(json.dumps(cfg, default=str))
    (out / "summary.json").write_text(json.dumps({"status": STOPPED, "steps_done": 2}))
    assert is_done(run)
    (out / "summary.json").write_text(json.dumps({"status": "completed", "steps_done": 2}))
    assert not is_done(run)  # completed short of its steps: resumed
    (out / "summary.json").write_text(json.dumps({"status": "failed", "steps_done": 2}))
    assert not is_done(run)


def test_relay_writes_into_the_directory_it_started_with(tmp_path):
    """A live run's directory moved away and a link put in its place: the child's later
    output goes on into the moved directory's log, never through the link (round 4 checked
    the path before each write, a window a swap could slip into); a hard-linked log gets a
    copy of its own, the other name keeping its bytes."""
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    rfd, wfd = os.pipe()
    relay = sweep._Relay(rfd, run / "train.log")
    try:
        os.write(wfd, b"one\n")
        for _ in range(100):  # the relay polls every 0.1 s
            if (run / "train.log").exists():
                break
            time.sleep(0.05)
        os.link(run / "train.log", tmp_path / "backup.log")
        run.rename(tmp_path / "moved")
        run.symlink_to(elsewhere, target_is_directory=True)
        os.write(wfd, b"two\n")
    finally:
        os.close(wfd)
        relay.finish()
    assert relay.error is None, relay.error
    assert (tmp_path / "moved" / "train.log").read_bytes() == b"one\ntwo\n"
    assert (tmp_path / "backup.log").read_bytes() == b"one\n"
    assert not (elsewhere / "train.log").exists()


@pytest.mark.parametrize("name", ["missing/train.log", "nul\0byte/train.log"])
def test_a_relay_that_cannot_open_its_directory_still_drains_the_pipe(tmp_path, name):
    """A run directory the relay cannot hold (gone, a name the OS refuses) is said in its
    error, never raised out of the sweep, and the child's output is still read: a child
    writing more than a pipe holds never blocks."""
    rfd, wfd = os.pipe()
    relay = sweep._Relay(rfd, tmp_path / name)
    writer = threading.Thread(target=lambda: (os.write(wfd, b"x" * (1 << 20)), os.close(wfd)))
    writer.start()
    writer.join(timeout=600)
    relay.finish()
    assert not writer.is_alive()
    assert relay.error and relay.logged == 0
