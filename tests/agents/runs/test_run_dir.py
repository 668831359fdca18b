"""A run directory on a shared machine: locked while a run is live (a second run there fails
naming the holder's pid), a resume of another configuration names the settings that differ,
a directory that is not a flowzoo run is refused with nothing in it touched, the weights
a run writes get the umask's mode, not safetensors' 0600, Ctrl-C under ``| tee`` still
records the run as interrupted, and the progress a user watches keeps moving (an ETA from
steady steps, evaluations with a bar of their own)."""

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowzoo.agents.runs import rundir, runlog
from flowzoo.agents.runs.rundir import RunDirInUse, RunLock, prepare_dir
from flowzoo.config import TrainConfig


def _default_stop_signals() -> None:
    """A child's stop signals at their defaults, whatever this session inherited (nohup
    ignores SIGHUP, a background job SIGINT): a run keeps the handlers it starts with, so a
    test of them must start it as a terminal would."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _cfg(out, **kw) -> TrainConfig:
    return TrainConfig(out_dir=str(out), **kw)


def _tree(d) -> dict:
    """Every file under ``d`` with its bytes and mode (what "untouched" compares)."""
    return {
        str(p.relative_to(d)): (p.read_bytes(), p.stat().st_mode)
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


@contextlib.contextmanager
def _holding(out: Path, take: str):
    """Another process that runs ``take`` (with ``out`` bound to the run directory) to
    take the directory's lock, and holds it until the block ends; yields its pid."""
    code = f"import sys; from pathlib import Path\nout = Path(sys.argv[1])\n{take}"
    code += "print('locked', flush=True); sys.stdin.read()\n"
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder.pid
    finally:
        holder.stdin.close()
        holder.wait()


def test_a_live_run_holds_its_directory_and_another_process_is_told_its_pid(tmp_path):
    out = tmp_path / "run"
    take = (
        "from flowzoo.config import TrainConfig\n"
        "from flowzoo.agents.runs.rundir import prepare_dir\n"
        "lock = prepare_dir(out, TrainConfig(out_dir=str(out)))\n"
    )
    with _holding(out, take) as pid:
        before = _tree(out)
        for resume in (True, False):  # a fresh start must not clear a live run's files either
            with pytest.raises(RunDirInUse, match=rf"in use by another flowzoo run \(pid {pid}\)"):
                prepare_dir(out, _cfg(out, resume=resume))
            assert _tree(out) == before
    # the kernel dropped the lock with the process: the directory is free again
    prepare_dir(out, _cfg(out)).release()


def test_the_lock_is_released_and_taken_again_in_one_process(tmp_path):
    out = tmp_path / "run"
    lock = prepare_dir(out, _cfg(out))
    with pytest.raises(RunDirInUse, match=f"pid {os.getpid()}"):
        RunLock(out)
    lock.release()
    RunLock(out).release()


def test_a_resume_of_another_config_names_what_differs(tmp_path):
    out = tmp_path / "run"
    prepare_dir(out, _cfg(out, lr=1e-5, seed=0)).release()
    before = _tree(out)
    with pytest.raises(ValueError, match="different configuration") as e:
        prepare_dir(out, _cfg(out, lr=2e-5, seed=3, steps=99))
    msg = str(e.value)
    assert "lr: 1e-05 -> 2e-05" in msg and "seed: 0 -> 3" in msg
    # a run's length does not shape it (a resume may change it); the cosine's horizon,
    # fixed to the steps the config was made with, does, and is named
    assert "; steps:" not in msg and "(steps:" not in msg and "lr_decay_steps: 50 -> 99" in msg
    assert _tree(out) == before
    # a key no longer a setting (a record from another version) is named too
    stored = json.loads((out / "config.json").read_text())
    assert rundir.config_diff({**stored, "old_knob": 1}, _cfg(out, lr=1e-5)) == [
        "old_knob: 1 -> (not a setting)"
    ]


@pytest.mark.parametrize("resume", [True, False])
def test_a_directory_that_is_not_a_flowzoo_run_is_refused_untouched(tmp_path, resume):
    out = tmp_path / "mine"
    (out / "final").mkdir(parents=True)
    (out / "final" / "notes.txt").write_text("my notes")
    (out / "metrics.jsonl").write_text('{"someone": "else"}\n')
    (out / "config.json").write_text('{"hidden_size": 64}')  # a model's config, not a run's
    before = _tree(out)
    with pytest.raises(ValueError, match="holds no flowzoo run") as e:
        prepare_dir(out, _cfg(out, resume=resume))
    assert str(out) in str(e.value) and "config.json" in str(e.value)
    assert _tree(out) == before and not (out / rundir.LOCK_FILE).exists()


def test_a_flowzoo_run_and_a_sweeps_pre_run_files_are_accepted(tmp_path):
    sweep_run = tmp_path / "sweep-run"  # the sweep writes these before the trainer starts
    sweep_run.mkdir()
    (sweep_run / "run_config.json").write_text("{}")
    (sweep_run / "train.log").write_text("")
    prepare_dir(sweep_run, _cfg(sweep_run)).release()
    (sweep_run / "metrics.jsonl").write_text("{}\n")
    prepare_dir(sweep_run, _cfg(sweep_run, resume=False)).release()  # its own run: cleared
    assert not (sweep_run / "metrics.jsonl").exists()
    assert (sweep_run / "train.log").exists()


def test_weights_written_0600_get_the_umasks_mode(tmp_path):
    old = os.umask(0o022)
    try:
        f = tmp_path / "final" / "solver" / "model.safetensors"
        f.parent.mkdir(parents=True)
        f.write_bytes(b"x")
        f.chmod(0o600)
        keep = tmp_path / "final" / "tool.sh"
        keep.write_text("")
        keep.chmod(0o750)  # not 0600: not ours to change
        rundir.umask_modes(tmp_path / "final")
        assert f.stat().st_mode & 0o777 == 0o644
        assert keep.stat().st_mode & 0o777 == 0o750
    finally:
        os.umask(old)


def test_a_trained_run_releases_its_lock_and_its_weights_are_readable(tiny_model, tmp_path):
    """The real trainer: a tiny run's final weights get the umask's mode (safetensors writes
    0600), the lock is free when it ends, and a held directory stops a second run before its
    files are touched."""
    pytest.importorskip("torch")
    from flowzoo.agents.train.trainer import Trainer
    from tests.agents.train.test_training import _cfg as tiny_cfg

    old = os.umask(0o022)
    try:
        out = tmp_path / "run"
        cfg = tiny_cfg(tiny_model, tmp_path, out_dir=str(out), problems_per_step=1, group_size=2)
        Trainer(cfg, progress=False).train()
    finally:
        os.umask(old)
    weights = [p for p in (out / "final").rglob("*.safetensors")]
    assert weights and all(p.stat().st_mode & 0o777 == 0o644 for p in weights)
    lock = RunLock(out)  # free again after the run
    before = _tree(out)
    try:
        with pytest.raises(RunDirInUse, match=f"pid {os.getpid()}"):
            Trainer(cfg, progress=False).train()  # resume=False: would clear the run
        assert _tree(out) == before
    finally:
        lock.release()


def test_ctrl_c_under_a_pipe_whose_reader_died_records_the_run_as_interrupted(tiny_model, tmp_path):
    """``flowzoo train ... 2>&1 | tee log`` and Ctrl-C: the signal reaches the whole process
    group, so ``tee`` is gone before the run's last words. The bar's updates, the interrupt
    notice and the bar's close then write to a pipe with no reader (EPIPE); none of that may
    stop the run from saving its checkpoint and writing summary.json as interrupted."""
    import signal

    pytest.importorskip("torch")
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "flowzoo.cli", "train", "--model", str(tiny_model),
            "--env", "voting-math", "--steps", "500", "--problems-per-step", "1",
            "--group-size", "2", "--max-new-tokens", "24", "--eval-every", "2",
            "--eval-episodes", "2", "--eval-ood-episodes", "0", "--save-every", "0",
            "--out-dir", str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # a test session started in the background (`pytest &` in a script) inherits SIGINT
    # ignored, and so would the run: give it the terminal's default, as Ctrl-C meets it
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
        preexec_fn=_default_stop_signals,
    )
    try:
        seen = b""
        while b"| 1/500 [" not in seen:  # the training bar after its first step
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"flowzoo train ended before training: {seen.decode()[-2000:]}"
            seen += chunk
        proc.stdout.close()  # the reader is gone (tee, killed by the same Ctrl-C)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the process group
        assert proc.wait(timeout=240) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps_done"] < 500
    assert (out / "checkpoint").exists() and not (out / "final").exists()
    RunLock(out).release()  # the lock went with the process


def test_the_eta_counts_steady_steps_and_evaluations_apart():
    """The first step (warm-up) is not the rate, and evaluations are costed apart: a step
    that also evaluated does not make every later step look slower."""
    clock = runlog.StepClock()
    clock.evaluation(20.0)  # the base evaluation
    clock.step(30.0)  # the first step: allocation, caches
    assert clock.eta(9, 2) is None and clock.line(9, 2).startswith("eta after the 2nd step")
    for _ in range(3):
        clock.step(2.0)
    clock.evaluation(20.0)
    assert clock.step_s == 2.0
    assert clock.eta(10, 2) == 10 * 2.0 + 2 * 20.0
    assert clock.line(10, 2, {"reward": 0.5, "train_acc": 0.25}, 0.4) == (
        "eta 1:00 (2.0s/step + 2 evals x 20s), reward 0.50, acc 0.25, eval 0.40"
    )
    # evaluations a run still makes: every 4 steps (4, 8) and at its end (10)
    assert runlog.evals_left(3, 10, 4) == 3 and runlog.evals_left(8, 10, 4) == 1
    assert runlog.evals_left(0, 10, 5) == 2 and runlog.evals_left(3, 10, 0) == 0


@pytest.mark.parametrize("progress", [True, False])
def test_evaluations_show_their_own_progress_unless_progress_is_off(
    tiny_model, tmp_path, capsys, progress
):
    """The training bar does not sit frozen through an evaluation: it says it is evaluating
    and a bar below it counts the evaluated episodes; with progress off, neither is drawn."""
    pytest.importorskip("torch")
    from flowzoo.agents.train.trainer import Trainer
    from tests.agents.train.test_training import _cfg as tiny_cfg

    cfg = tiny_cfg(tiny_model, tmp_path, steps=2, problems_per_step=1, group_size=2,
                   eval_every=1, eval_episodes=2, eval_ood_episodes=0)  # fmt: skip
    Trainer(cfg, progress=progress).train()
    err = capsys.readouterr().err
    shown = ["evaluating at step 0", "eval step 0 (T=", "eval step 2 (T=", "2/2 [", "eta "]
    assert all((s in err) == progress for s in shown), err[-3000:]


def test_a_look_alike_config_does_not_make_a_foreign_directory_a_run(tmp_path):
    """Another tool's config.json with some of the run's keys is not a run's: refused, and
    ``--resume false`` removes nothing. A run's own config.json (a committed record, or one
    of an older version lacking a few newer settings) is still recognised."""
    import dataclasses
    import glob

    out = tmp_path / "theirs"
    (out / "final").mkdir(parents=True)
    (out / "final" / "model.bin").write_bytes(b"their weights")
    (out / "metrics.jsonl").write_text('{"step": 0, "loss": 1}\n')
    ours = dataclasses.asdict(TrainConfig())
    look_alike = {k: ours[k] for k in list(ours)[:30]} | {"env": "CartPole-v1", "tool": "sb3"}
    for cfg_json in (look_alike, {k: ours[k] for k in rundir.RUN_KEYS}):
        (out / "config.json").write_text(json.dumps(cfg_json))
        before = _tree(out)
        for resume in (True, False):
            with pytest.raises(ValueError, match="holds no flowzoo run"):
                prepare_dir(out, _cfg(out, resume=resume))
            assert _tree(out) == before
    (committed,) = sorted(glob.glob("baselines/results/*/runs/*/config.json"))[:1]
    stored = json.loads(open(committed).read())
    older = {k: v for k, v in stored.items() if k not in list(ours)[-5:]}
    for record in (stored, older):
        run = tmp_path / f"run{len(record)}"
        (run / "checkpoint").mkdir(parents=True)
        (run / "checkpoint" / "state.pt").write_bytes(b"x")
        (run / "config.json").write_text(json.dumps(record))
        assert rundir.is_run_config(record)
        prepare_dir(run, _cfg(run, resume=False)).release()  # its own run: started over
        assert not (run / "checkpoint").exists()


def test_two_runs_started_at_once_the_second_is_told_the_first_ones_pid(tmp_path):
    """The first run holds the lock and is writing its config.json (a temp file beside it,
    no config.json yet): the second is told the directory is in use and by whom, not that
    it is a stranger's; the same once the first's config is there."""
    out = tmp_path / "run"
    take = (
        "from flowzoo.agents.runs.rundir import RunLock\n"
        "out.mkdir(); lock = RunLock(out)\n"
        "(out / '.config.json.k2j3h4ab.tmp').write_text('{\"env\": ')\n"
    )
    with _holding(out, take) as pid:
        for resume in (True, False):
            with pytest.raises(RunDirInUse, match=rf"\(pid {pid}\)"):
                prepare_dir(out, _cfg(out, resume=resume))
    prepare_dir(out, _cfg(out)).release()  # free: a killed write's temp file is not foreign
    assert not list(out.glob(".config.json.*.tmp")) or (out / "config.json").exists()


def test_a_torn_config_of_our_own_run_is_said_to_be_unreadable(tmp_path):
    out = tmp_path / "run"
    prepare_dir(out, _cfg(out)).release()
    cfg_path = out / "config.json"
    cfg_path.write_bytes(cfg_path.read_bytes()[:300])
    before = _tree(out)
    with pytest.raises(ValueError, match=r"config.json cannot be read .*--resume false"):
        prepare_dir(out, _cfg(out))
    assert _tree(out) == before
    prepare_dir(out, _cfg(out, resume=False)).release()  # started over: a whole config again
    assert rundir.is_run_config(json.loads(cfg_path.read_text()))


@pytest.mark.parametrize("case", ["dangling link", "parent is a file", "long name", "not utf-8"])
def test_an_out_dir_no_run_can_write_is_refused_before_a_model_loads(tmp_path, case):
    """Said at the boundary, naming the path: Trainer refuses it before the model (here one
    that does not exist) is even looked at, and the CLI says it without a traceback."""
    pytest.importorskip("torch")
    from flowzoo.agents.train.trainer import Trainer
    from flowzoo.cli import main

    if case == "dangling link":
        out = tmp_path / "link"
        out.symlink_to(tmp_path / "gone" / "deeper")
        want = "does not exist"
    elif case == "parent is a file":
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "run"
        want = "is a file, not a directory"
    elif case == "long name":
        out = tmp_path / ("d" * 300)
        want = "longer than this file system takes"
    else:
        out = tmp_path / "bad\udcff"
        want = "not valid UTF-8"
    cfg = TrainConfig(out_dir=str(out), model=str(tmp_path / "no-model"), env="voting-math")
    with pytest.raises(ValueError, match=want):
        Trainer(cfg, progress=False)
    argv = ["train", "--model", str(tmp_path / "no-model"), "--out-dir", str(out)]
    assert main(argv) == 2
    assert not (tmp_path / "gone").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a mode-0555 directory")
def test_a_read_only_out_dir_is_refused_before_a_model_loads(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        with pytest.raises(ValueError, match="not writable"):
            rundir.check_dir(out / "run", _cfg(out / "run"))
    finally:
        out.chmod(0o755)


@pytest.mark.parametrize("sig,twice", [("TERM", True), ("HUP", False)])
def test_sigterm_and_sighup_are_taken_as_ctrl_c(tiny_model, tmp_path, sig, twice):
    """A scheduler's kill (SIGTERM) or a closed terminal (SIGHUP) reaching ``flowzoo train
    2>&1 | tee log``'s process group: the run saves its checkpoint and writes its summary as
    interrupted (a second signal, sent at once, does not cut the records short), and exits
    128 + the signal; the checkpoint passes its digest and resumes."""
    import signal

    pytest.importorskip("torch")
    from flowzoo.agents.train import checkpoint

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "flowzoo.cli", "train", "--model", str(tiny_model),
            "--env", "voting-math", "--steps", "500", "--problems-per-step", "1",
            "--group-size", "2", "--max-new-tokens", "24", "--eval-every", "0",
            "--eval-ood-episodes", "0", "--save-every", "1", "--out-dir", str(out)]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=_default_stop_signals,
    )
    signum = getattr(signal, f"SIG{sig}")
    try:
        metrics = out / "metrics.jsonl"  # (its early output fits in the pipe's buffer)
        while proc.poll() is None and (
            not metrics.exists() or len(metrics.read_text().splitlines()) < 2
        ):
            time.sleep(0.05)  # two steps logged
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        proc.stdout.close()  # the pipe's reader (tee) got the same signal and is gone
        os.killpg(proc.pid, signum)
        if twice:
            os.killpg(proc.pid, signum)
        assert proc.wait(timeout=240) == 128 + signum
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 2 <= summary["steps_done"] < 500
    assert checkpoint.last_good(out).startswith("the last good checkpoint")
    assert not (out / "final").exists()
    RunLock(out).release()


def test_a_runs_config_beside_foreign_entries_is_not_a_run_directory(tmp_path):
    """A real run's config.json copied into a project folder does not make the folder a
    run's: the other entries (sources, a notes file) are no run's, so the folder is refused
    with or without resume and nothing in it changes (red team round 2: the default resume
    deleted final/model.bin and replaced metrics.jsonl)."""
    import dataclasses

    out = tmp_path / "proj"
    (out / "src").mkdir(parents=True)
    (out / "src" / "main.py").write_text("print('mine')\n")
    (out / "final").mkdir()
    (out / "final" / "model.bin").write_bytes(b"their weights")
    (out / "metrics.jsonl").write_text('{"step": 0, "loss": 1}\n')
    (out / "config.json").write_text(json.dumps(dataclasses.asdict(_cfg(out))))
    before = _tree(out)
    for resume in (True, False):
        with pytest.raises(ValueError, match=r"beside entries no run writes \(src\)"):
            prepare_dir(out, _cfg(out, resume=resume))
        assert _tree(out) == before


def test_a_nesting_bomb_config_is_an_unreadable_config_not_a_traceback(tmp_path):
    """100,000 nested brackets in config.json exceed the JSON reader's recursion: that is a
    config that cannot be read, said at the boundary (red team round 2: a RecursionError
    traceback), and nothing in the folder changes."""
    out = tmp_path / "r"
    out.mkdir()
    (out / "config.json").write_text("[" * 100_000)
    before = _tree(out)
    for resume in (True, False):
        with pytest.raises(ValueError, match="config.json cannot be read: RecursionError"):
            prepare_dir(out, _cfg(out, resume=resume))
        assert _tree(out) == before
