"""What a run writes into its directory, never through what was planted there: a link or
FIFO among a run's files is refused and its target kept, records never write through a
link made while the run is live or through a hard link's other names, a ``cp -al`` backup
stays intact, and a resume removes only its own killed writes' temp files."""

import os

import pytest

from flowzoo.agents.runs import rundir, runlog
from flowzoo.agents.runs.rundir import RunDirInUse, RunLock, prepare_dir
from tests.agents.runs.test_run_dir import _cfg, _tree


@pytest.fixture
def alarm():
    """A FIFO that blocked the run would hang the test: SIGALRM turns that into a failure."""
    import signal

    def hung(*_):
        raise AssertionError("blocked on a planted file (a FIFO opened for reading)")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _plant(out, name, kind, precious):
    """Put ``kind`` at ``out/name``: a link to the precious file (or a folder), a FIFO, a
    hard link, a file of other data."""
    p = out / name
    if p.is_dir():
        import shutil

        shutil.rmtree(p)
    elif p.exists():
        p.unlink()
    if kind == "symlink":
        p.symlink_to(precious if name not in ("checkpoint", "final") else precious.parent)
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "hardlink":
        os.link(precious, p)
    else:  # a regular file holding something else
        p.write_text("not a pid: someone's notes\n")
    return p


CASES = [
    (".flowzoo.lock", "symlink"),
    (".flowzoo.lock", "hardlink"),
    (".flowzoo.lock", "fifo"),
    (".flowzoo.lock", "other data"),
    ("config.json", "symlink"),
    ("config.json", "fifo"),
    ("metrics.jsonl", "symlink"),
    ("metrics.jsonl", "fifo"),
    ("summary.json", "symlink"),
    ("summary.json", "fifo"),
    ("checkpoint", "symlink"),
    ("final", "symlink"),
]


@pytest.mark.parametrize("resume", [True, False])
@pytest.mark.parametrize("name,kind", CASES)
def test_a_link_or_fifo_planted_among_a_runs_files_is_refused_and_its_target_kept(
    tmp_path, alarm, name, kind, resume
):
    """A run never opens a name it writes through a link, never blocks on a FIFO, never
    truncates a lock file it did not make: each is refused, named, before anything is
    written or removed (``--resume false`` included), and what it points at is intact."""
    out = tmp_path / "run"
    prepare_dir(out, _cfg(out)).release()  # a flowzoo run's directory
    (out / "checkpoint").mkdir()
    (out / "checkpoint" / "state.pt").write_bytes(b"x")
    precious = tmp_path / "elsewhere" / "precious.txt"
    precious.parent.mkdir()
    precious.write_text("precious\n")
    _plant(out, name, kind, precious)
    before, outside = _tree(out), _tree(precious.parent)
    with pytest.raises(ValueError, match=rf"{out / name} is ") as e:
        prepare_dir(out, _cfg(out, resume=resume))
    assert "symbolic link" in str(e.value) or kind != "symlink"
    assert _tree(out) == before and _tree(precious.parent) == outside
    assert (out / name).is_symlink() == (kind == "symlink")


def test_the_records_never_write_through_a_link_made_while_the_run_is_live(tmp_path, alarm):
    """Checked where each record is written too: a link or FIFO put there after the run's
    checks is refused by the write itself (replaced records and the appended metrics)."""
    out = tmp_path / "run"
    lock = prepare_dir(out, _cfg(out))
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    log = runlog.RunLog(out, main=True)
    log.start(None)
    log.append({"step": 0})
    (out / "metrics.jsonl").unlink()
    os.mkfifo(out / "metrics.jsonl")
    with pytest.raises(ValueError, match="FIFO"):
        log.append({"step": 1})
    (out / "summary.json").symlink_to(precious)
    with pytest.raises(ValueError, match="symbolic link"):
        rundir.write_json(out / "summary.json", {"status": "completed"})
    assert precious.read_text() == "precious\n"
    lock.release()


def test_appending_to_a_hard_linked_record_never_writes_through_its_other_names(tmp_path):
    """A hard link to a run's appended record (a ``cp -al`` backup of a live run, or a name
    planted to point at another file) is never written through: the run's name gets a copy
    of its own and the run goes on, the other name keeping its bytes."""
    out = tmp_path / "run"
    lock = prepare_dir(out, _cfg(out))
    log = runlog.RunLog(out, main=True)
    log.start(None)
    log.append({"step": 0})
    os.chmod(out / "metrics.jsonl", 0o600)  # a private record stays private on its copy
    backup = tmp_path / "backup-metrics.jsonl"
    os.link(out / "metrics.jsonl", backup)  # the backup made while the run is live
    snapshot = backup.read_bytes()
    log.append({"step": 1})
    assert backup.read_bytes() == snapshot
    assert os.stat(out / "metrics.jsonl").st_nlink == 1 == os.stat(backup).st_nlink
    assert os.stat(out / "metrics.jsonl").st_mode & 0o777 == 0o600
    assert [m["step"] for m in runlog.own_metrics(out / "metrics.jsonl")] == [0, 1]
    # a planted name pointing at someone's file: the file is never appended to
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    (out / "metrics.jsonl").unlink()
    os.link(precious, out / "metrics.jsonl")
    log.append({"step": 2})
    assert precious.read_text() == "precious\n" and os.stat(precious).st_nlink == 1
    assert [m["step"] for m in runlog.own_metrics(out / "metrics.jsonl")] == [2]
    assert not [q for q in out.iterdir() if q.name.endswith(".tmp")]  # no temp file left
    lock.release()


def test_a_cp_al_backup_of_a_run_leaves_its_lock_usable_and_the_backup_intact(tmp_path):
    """``cp -al`` of a run directory gives its lock file a second name: the next start gets a
    lock file of its own (the backup's keeps its bytes), and a live run's lock, hard-linked,
    still stops a second start, naming the holder."""
    out, backup = tmp_path / "run", tmp_path / "backup"
    prepare_dir(out, _cfg(out)).release()
    backup.mkdir()
    os.link(out / rundir.LOCK_FILE, backup / rundir.LOCK_FILE)
    before = (backup / rundir.LOCK_FILE).read_bytes()
    lock = prepare_dir(out, _cfg(out))  # refused before: "2 hard links"
    assert os.stat(out / rundir.LOCK_FILE).st_nlink == 1
    assert (backup / rundir.LOCK_FILE).read_bytes() == before
    assert (out / rundir.LOCK_FILE).read_text().strip() == str(os.getpid())
    os.link(out / rundir.LOCK_FILE, tmp_path / "live-link")  # a backup of the live run
    with pytest.raises(rundir.RunDirInUse, match=str(os.getpid())):
        rundir.RunLock(out)
    with pytest.raises(rundir.RunDirInUse):
        rundir.check_dir(out, _cfg(out))
    lock.release()
    assert not [q for q in out.iterdir() if q.name.endswith(".tmp")]


def test_a_start_that_opened_the_lock_before_another_renewed_it_looks_again(tmp_path, monkeypatch):
    """Two starts on a directory whose lock has a second name: one renews the lock file
    while the other holds a descriptor of the old one. The late one must not take the old
    file's lock (no start looks at it any more: two runs would be live), nor write its pid
    into the other name's file: it looks again and is told the first one's pid."""
    out, backup = tmp_path / "run", tmp_path / "backup"
    prepare_dir(out, _cfg(out)).release()
    backup.mkdir()
    os.link(out / rundir.LOCK_FILE, backup / rundir.LOCK_FILE)
    before = (backup / rundir.LOCK_FILE).read_bytes()
    first = RunLock(out)  # renews the lock file: the old one is now the backup's alone
    real, calls = rundir.open_lock, []

    def late(path, create):  # the second start's open, made before the renewal
        calls.append(path)
        if len(calls) == 1:
            return os.open(backup / rundir.LOCK_FILE, os.O_RDWR)
        return real(path, create)

    monkeypatch.setattr(rundir, "open_lock", late)
    with pytest.raises(RunDirInUse, match=str(os.getpid())):
        RunLock(out)
    assert len(calls) == 2 and (backup / rundir.LOCK_FILE).read_bytes() == before
    first.release()


def test_a_resume_removes_the_temp_files_of_killed_writes_and_nothing_else(tmp_path):
    """Kills mid-write leave mkstemp-shaped temps (a checkpoint's is the model's size): a
    resume removes them under the lock, so they do not pile up; other names stay."""
    out = tmp_path / "run"
    prepare_dir(out, _cfg(out)).release()
    (out / "checkpoint").mkdir()
    temps = [out / "checkpoint" / ".state.pt.k2j4h5g6.tmp", out / ".summary.json.a1b2c3d4.tmp"]
    keep = [out / "checkpoint" / "state.pt", out / "checkpoint" / ".state.pt.my-copy.tmp"]
    for p in temps + keep:
        p.write_bytes(b"x")
    prepare_dir(out, _cfg(out, resume=True)).release()
    assert not any(p.exists() for p in temps) and all(p.exists() for p in keep)


def test_temp_names_are_mkstemps_exactly(tmp_path):
    """A killed write's temp file (and a sweep's run_config.json's) does not make a run's
    directory foreign; a user's file of a similar name is not taken for one."""
    assert rundir.RUN_TEMP.fullmatch(".run_config.json.ab_3x9zq.tmp")
    assert rundir.RUN_TEMP.fullmatch(".flowzoo.lock.k2j4h5g6.tmp")
    assert not rundir.RUN_TEMP.fullmatch(".train.log.2024-06-01.tmp")
    assert not rundir.RUN_TEMP.fullmatch(".metrics.jsonl.backup-of-monday.tmp")


def test_a_wandb_link_is_refused_like_the_runs_other_folders(tmp_path):
    out = tmp_path / "run"
    prepare_dir(out, _cfg(out)).release()
    (tmp_path / "elsewhere").mkdir()
    (out / "wandb").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="wandb is a symbolic link"):
        prepare_dir(out, _cfg(out))
