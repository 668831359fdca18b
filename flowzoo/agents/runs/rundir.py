"""The run directory: what a run writes where, and how, so that nothing else is touched
(each file is read and written by :mod:`safefile`'s rules; they are re-exported here).

A live run locks its directory (a second run stops, naming the holder's pid); a directory
that is not a flowzoo run is refused untouched; nothing is written through a link, into a
FIFO or over a file that is not the run's own; every record is written whole or not at all
(:func:`atomic_write`); a fresh start removes only what a run writes.

Why its own module: these rules guard the user's files, whatever the run's records say
(:mod:`runlog`), and the CLI, the trainer, the checkpoint and sweeps all apply them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from flowzoo.agents.runs.safefile import (
    OWN_COPY_LIMIT,
    UnsafeRunPath,
    _kind,
    _umask,
    append,
    atomic_write,
    check_entry,
    open_append,
    open_regular,
    read_regular,
    same_file,
    umask_modes,
    write_json,
)
from flowzoo.config import LATER_FIELDS, NOT_SHAPING, TrainConfig

#: what a fresh start (``resume=False``) removes from a run directory before it begins
RUN_STATE = ("checkpoint", "final", "metrics.jsonl", "summary.json", "tensorboard", "mlruns")
#: the file a live run holds locked (``fcntl.flock``), its pid inside
LOCK_FILE = ".flowzoo.lock"
#: what flowzoo writes in a run directory before the run's config.json (a sweep writes its
#: run_config.json and train.log first): a directory holding only these is a run's
PRE_RUN = frozenset({"run_config.json", "train.log", LOCK_FILE})
#: keys every config.json a flowzoo run writes has (a model's config.json has none of them)
RUN_KEYS = ("env", "policy", "param", "algo", "model")
#: where ``final/`` is written before it is renamed into place, and where the old one waits
FINAL_PARTIAL, FINAL_OLD = ".final.partial", ".final.old"
#: the records a run writes in its directory: files (replaced whole, or appended to after a
#: check), directories (its own, entered only when they are real directories)
RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", LOCK_FILE)
RUN_DIRS = ("checkpoint", "final", "tensorboard", "mlruns", FINAL_PARTIAL, FINAL_OLD)
#: every name a run (or its sweep, or a tracker: wandb's own folder) writes at the top of
#: its directory: a run's config.json beside anything else is not a run's directory
RUN_OWN = frozenset({*RUN_FILES, *RUN_DIRS, *PRE_RUN, "wandb"})
#: a temp file :func:`atomic_write` (or a lock's renewal) leaves when the process is killed
#: mid-write: ``mkstemp``'s shape exactly (8 characters of its alphabet), so a user's file
#: of a similar name is never taken for one (nor removed by a fresh start)
RUN_TEMP = re.compile(
    r"\.(config\.json|summary\.json|metrics\.jsonl|train\.log|run_config\.json|flowzoo\.lock)"
    r"\.[a-z0-9_]{8}\.tmp"
)
#: a config.json is a flowzoo run's when every key is a setting (a few retired ones allowed)
#: and it holds all but a few of this version's settings: a look-alike written by another
#: tool (some of the same names) is not one, a run of an older version (fewer settings) is
RUN_CONFIG_SLACK = 12


class RunDirInUse(ValueError):
    """Another live process holds the run directory."""


class SharedLockFile(UnsafeRunPath):
    """A flowzoo lock file that has other names too (a ``cp -al`` backup of the directory):
    never written through; :class:`RunLock` gives the run's name a lock file of its own."""


def check_entries(out: Path) -> None:
    """Every name the run writes in ``out`` (and its checkpoint files) is absent or of the
    kind the run writes (:func:`check_entry`), checked before anything is written."""
    for name in RUN_FILES:  # the lock file's links are the lock's business (open_lock)
        check_entry(out / name, directory=False, single_link=False)
    for name in (*RUN_DIRS, "wandb"):  # wandb's folder: a tracker writes into it
        check_entry(out / name, directory=True)
    if (out / "checkpoint").is_dir():
        for p in sorted((out / "checkpoint").iterdir()):
            check_entry(p, directory=False, single_link=False)


def _in_use(out: Path, holder: str, kind: str = "run") -> str:
    return (
        f"{out} is in use by another flowzoo {kind} (pid {holder}); nothing was written: wait "
        "for it to end, or use another out_dir"
    )


def open_lock(path: Path, create: bool) -> int | None:
    """A descriptor of the lock file (None: there is none and ``create`` is off). Made here
    (``O_EXCL``), or one a flowzoo run made: a regular file of one link, owned by this user,
    holding at most a pid. Anything else (a link, a hard link, a FIFO, a file with other
    content, which the pid's write would truncate) is refused, named, and left untouched."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):  # made or removed by another process meanwhile: look again
        if create:
            with contextlib.suppress(FileExistsError):
                return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            if not create:
                return None
            continue
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a link, socket, dir
                check_entry(path, directory=False)
            raise
        st, bad = os.fstat(fd), ""
        if not stat.S_ISREG(st.st_mode):
            bad = _kind(st)
        elif st.st_uid != os.geteuid():
            bad = f"owned by uid {st.st_uid}, not by this user"
        elif st.st_size > 32 or not re.fullmatch(rb"\s*\d*\s*", os.pread(fd, 33, 0)):
            bad = "a file holding other data than a pid"
        elif st.st_nlink != 1:
            os.close(fd)
            raise SharedLockFile(f"{path} has {st.st_nlink} hard links")
        if not bad:
            return fd
        os.close(fd)
        raise UnsafeRunPath(
            f"{path} is not a flowzoo lock file ({bad}); nothing was written to it: move it "
            "away or use another out_dir"
        )
    raise OSError(errno.EAGAIN, f"{path} keeps appearing and disappearing")


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` (not followed) still names the file ``fd`` holds."""
    try:
        return same_file(os.lstat(path), os.fstat(fd))
    except FileNotFoundError:
        return False


def _own_lock(path: Path, kind: str = "run") -> int | None:
    """A lock file of the run's own in place of one with other names, made while the old
    one is held (so a second start, on the old file or the new one, finds it held): the new
    file is locked before it is renamed over ``path``; the other names keep the old file.
    None: ``path`` was renewed by another start meanwhile (look again)."""
    import fcntl

    old = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(old).st_mode):
            check_entry(path, directory=False)
        try:
            fcntl.flock(old, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise RunDirInUse(_in_use(path.parent, _holder(old), kind)) from None
        if not _same_file(old, path):
            return None
        fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else has it yet
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return fd
    finally:
        os.close(old)


def _holder(fd: int) -> str:
    """The pid a lock holder wrote (it writes it just after locking: wait for it a little)."""
    import time

    for _ in range(50):
        pid = os.pread(fd, 64, 0).decode(errors="replace").strip()
        if pid:
            return pid
        time.sleep(0.02)
    return "unknown"


class RunLock:
    """An exclusive ``fcntl.flock`` on ``DIR/.flowzoo.lock`` while a run is live, so two
    trainings never interleave their checkpoints and metrics in one directory (a sweep holds
    one on its own lock file, ``name``, for its whole life: ``kind`` names the holder in
    the refusal). The kernel drops it when the process ends (a kill or a crash leaves no
    stale lock)."""

    def __init__(self, out: Path, name: str = LOCK_FILE, kind: str = "run") -> None:
        import fcntl

        self.path = out / name
        for _ in range(5):
            try:
                fd = open_lock(self.path, create=True)
                assert fd is not None
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # BlockingIOError: held; the holder writes its pid after locking
                    holder = _holder(fd)
                    os.close(fd)
                    raise RunDirInUse(_in_use(out, holder, kind)) from None
            except SharedLockFile:
                got = _own_lock(self.path, kind)
                if got is None:
                    continue
                fd = got
            # the name still the file locked? (another start may have renewed it meanwhile:
            # then this lock is on a file no start looks at any more)
            if _same_file(fd, self.path):
                break
            os.close(fd)
        else:
            raise OSError(errno.EAGAIN, f"{self.path} keeps being replaced")
        os.ftruncate(fd, 0)  # a lock file (checked: it held at most a pid), locked by us
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd: int | None = fd

    def release(self) -> None:
        """Unlock (the file stays: removing it would let a third process lock a new file
        while a second still waits on the old one)."""
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


def is_run_config(d: Any) -> bool:
    """``d`` (a parsed config.json) is a flowzoo run's: it names the run (``RUN_KEYS``),
    every key but a few retired ones is a setting, and all but ``RUN_CONFIG_SLACK`` of this
    version's settings are there. Another tool's config.json with some of the same names is
    not one (a fresh start there would remove files that are not a run's)."""
    if not isinstance(d, dict) or not all(k in d for k in RUN_KEYS):
        return False
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    # settings added after runs were recorded (the later fields, the monitor's) are not
    # missing from an older run's record: it ran before they existed
    later = set(LATER_FIELDS) | {f for f in fields if f.startswith("monitor_")}
    return len(set(d) - fields) <= 4 and len(fields - set(d) - later) <= RUN_CONFIG_SLACK


def _stored_config(p: Path) -> tuple[Any, str | None]:
    """config.json parsed (None when there is none), or why it cannot be read."""
    try:
        return json.loads(read_regular(p)), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, RecursionError) as e:  # a nesting bomb is unreadable too
        return None, f"{type(e).__name__}: {str(e)[:80]}"


def _unreadable(p: Path, why: str) -> ValueError:
    return ValueError(
        f"{p} cannot be read ({why}); the run there cannot be resumed: use another out_dir, "
        "or --resume false to start over there"
    )


def check_not_foreign(out: Path, resume: bool = True) -> None:
    """Refuse a non-empty directory that holds no flowzoo run: a run writes, replaces and
    (with ``resume=False``) removes files in its directory, never files it did not write.
    What a run (or a sweep) writes before its config.json, and the temp file of a write cut
    short, do not make a directory foreign; a torn config.json beside a run's lock file is
    a run of ours that cannot be read."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"out_dir {out} is a file, not a directory; use another out_dir")
    names = sorted(x.name for x in out.iterdir())
    if all(n in PRE_RUN or RUN_TEMP.fullmatch(n) for n in names):
        return
    stored, err = _stored_config(out / "config.json")
    if is_run_config(stored):
        stray = [n for n in names if n not in RUN_OWN and not RUN_TEMP.fullmatch(n)]
        if stray:  # a run's config.json copied into a project, say: the rest is not ours
            shown = ", ".join(stray[:5]) + (f", ... ({len(stray)})" if len(stray) > 5 else "")
            raise ValueError(
                f"{out} holds a flowzoo run's config.json beside entries no run writes "
                f"({shown}); nothing there was touched: move them out or use another out_dir"
            )
        return
    if "config.json" in names and not isinstance(stored, dict) and LOCK_FILE in names:
        if resume:  # ours (its lock is there), torn: said as such, not as a stranger's
            raise _unreadable(out / "config.json", err or "not a table")
        return
    why = (
        "no config.json"
        if "config.json" not in names
        else f"config.json cannot be read: {err}"
        if err
        else "its config.json is not a flowzoo run's"
    )
    shown = ", ".join(names[:5]) + (f", ... ({len(names)} entries)" if len(names) > 5 else "")
    raise ValueError(
        f"{out} is not empty and holds no flowzoo run ({why}; it has: {shown}); a run "
        "writes only into a new or empty directory or its own run's, so nothing there was "
        "touched: use another out_dir"
    )


def check_out_path(out: Path) -> None:
    """An out_dir no run could write, said before any model loads: a name that is not
    UTF-8 (the weights' files record it), a dangling link, a parent that is a file, a name
    longer than the file system takes, a directory this user cannot write."""
    try:
        str(out).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"out_dir {str(out)!r} is not valid UTF-8 (the run's files record their path as "
            "UTF-8); rename it or use another out_dir"
        ) from None
    anc = Path(os.path.abspath(out))
    while not os.path.exists(anc):  # (os.path: False on a name too long, said below)
        if os.path.islink(anc):
            raise ValueError(
                f"out_dir {out}: {anc} is a symbolic link to {os.readlink(anc)}, which does "
                "not exist; make its target or use another out_dir"
            )
        anc = anc.parent
    if not anc.is_dir():
        raise ValueError(
            f"out_dir {out} cannot be made: {anc} is a file, not a directory; use another out_dir"
        )
    try:
        name_max = os.pathconf(anc, "PC_NAME_MAX")
        path_max = os.pathconf(anc, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    for part in Path(os.path.abspath(out)).parts:
        if len(os.fsencode(part)) > name_max:
            raise ValueError(
                f"out_dir {out}: the name {part[:40]!r}... is {len(os.fsencode(part))} bytes, "
                f"longer than this file system takes ({name_max}); use a shorter out_dir"
            )
    if len(os.fsencode(os.path.abspath(out))) + 64 > path_max:
        raise ValueError(f"out_dir {out} is too long a path for this system; use a shorter one")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise ValueError(
            f"out_dir {out}: {anc} is not writable by this user (a read-only directory or "
            "file system); use another out_dir"
        )


def _shown(v: Any) -> str:
    s = json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= 60 else s[:57] + "..."


def config_diff(stored: dict, cfg: TrainConfig) -> list[str]:
    """The settings that shape a run (not its length or place: ``NOT_SHAPING``) on which a
    stored config.json and ``cfg`` differ, as ``key: stored -> now``. A key the stored run
    lacks ran at its default; one no longer a setting is a difference."""
    now = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in NOT_SHAPING}
    defaults = dataclasses.asdict(TrainConfig())
    out = []
    for k in sorted(set(now) | (set(stored) - set(NOT_SHAPING))):
        was = stored.get(k, defaults.get(k))
        if k not in now:
            out.append(f"{k}: {_shown(was)} -> (not a setting)")
        elif json.dumps(was, sort_keys=True, default=str) != json.dumps(
            now[k], sort_keys=True, default=str
        ):
            out.append(f"{k}: {_shown(was)} -> {_shown(now[k])}")
    return out


def check_dir(out: Path, cfg: TrainConfig, probe_lock: bool = True) -> None:
    """Everything that refuses a run directory, read-only (also called before any model is
    loaded, so a refusal comes in seconds, not after a build): a path no run can write
    (:func:`check_out_path`), one held by a live run (said first: a run starting beside it
    sees its half-written files), a name the run writes that is a link or a FIFO, a
    directory that is not a flowzoo run, and (with ``resume``) one holding a run of another
    configuration, naming the settings that differ."""
    check_out_path(out)
    if not out.is_dir():
        check_not_foreign(out)  # a file: said so
        return
    if probe_lock:  # without creating anything
        import fcntl

        try:
            fd = open_lock(out / LOCK_FILE, create=False)
        except SharedLockFile:  # probed without writing: read-only is enough for flock
            fd = os.open(
                out / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            )
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                raise RunDirInUse(_in_use(out, _holder(fd))) from None
            finally:
                os.close(fd)
    check_entries(out)
    check_not_foreign(out, cfg.resume)
    cfg_path = out / "config.json"
    if cfg.resume:
        stored, err = _stored_config(cfg_path)
        if err is not None:
            raise _unreadable(cfg_path, err)
        if stored is None:
            return
        diff = config_diff(stored, cfg) if isinstance(stored, dict) else ["(not a table)"]
        if diff:  # with or without a checkpoint: its records are another run's
            raise ValueError(
                f"{out} holds a run of a different configuration ({'; '.join(diff)}); use "
                "another out_dir, or resume=False to start over there (its checkpoint and "
                "metrics are removed)"
            )


def _cannot_write(out: Path, e: OSError) -> ValueError:
    return ValueError(
        f"cannot write the run directory {out}: {e.strerror or e}"
        + (f" ({e.filename})" if e.filename else "")
        + "; use another out_dir"
    )


def clear_run_state(out: Path) -> None:
    """A fresh start (``resume=False``) in a flowzoo run's directory: remove what a run
    writes there (``RUN_STATE``, final/'s staging, the temp files of a killed write) and
    nothing else, never following a link (each name checked: :func:`check_entries`)."""
    check_entries(out)
    for name in (*RUN_STATE, FINAL_PARTIAL, FINAL_OLD):
        p = out / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif check_entry(p, directory=False, single_link=False):
            p.unlink()
    remove_temps(out)


#: a checkpoint file's temp (``atomic_write``'s ``mkstemp`` shape) left by a killed write
CKPT_TEMP = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


def remove_temps(out: Path) -> None:
    """The temp files of killed writes (``RUN_TEMP`` at the top, ``CKPT_TEMP`` in
    checkpoint/), under the run's lock: a resume removes them too, so kills do not pile up
    copies of the weights. Only regular files of exactly that shape; nothing followed."""
    for d, shape in ((out, RUN_TEMP), (out / "checkpoint", CKPT_TEMP)):
        if not check_entry(d, directory=True):
            continue
        for p in d.iterdir():
            if p.name.startswith(".train.log."):  # the sweep's (it writes the log unlocked)
                continue
            if shape.fullmatch(p.name) and check_entry(p, directory=False, single_link=False):
                p.unlink()


def prepare_dir(
    out: Path, cfg: TrainConfig, steps_done: int | None = None, inputs: dict | None = None
) -> RunLock:
    """Check (:func:`check_dir`), lock, check again under the lock, then claim a run
    directory; returns the lock (release it when the run ends). Nothing in the directory
    changes before the checks pass and the lock is held; ``resume=False`` then starts the
    run over (:func:`clear_run_state`). A file system error is a ValueError naming it.
    With ``steps_done`` (the trainer's), the summary says ``running`` from the claim on: a
    kill that leaves no time for a record (OOM, ``kill -9``) leaves that, never an earlier,
    shorter run's ``completed``, and names the run's ``inputs`` (its build's and data files'
    digests: :func:`provenance.run_record`) from the claim on too."""
    check_dir(out, cfg)
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = RunLock(out)
    except OSError as e:
        raise _cannot_write(out, e) from None
    try:
        check_dir(out, cfg, probe_lock=False)  # what changed while the model loaded
        if not cfg.resume:
            clear_run_state(out)
        else:
            remove_temps(out)
        write_json(out / "config.json", dataclasses.asdict(cfg))
        if steps_done is not None:
            running = {"status": "running", "steps_done": steps_done, "steps": cfg.steps}
            write_json(out / "summary.json", {**running, "pid": os.getpid(), **(inputs or {})})
    except OSError as e:
        lock.release()
        raise _cannot_write(out, e) from None
    except BaseException:
        lock.release()
        raise
    return lock


__all__ = [
    "LOCK_FILE",
    "OWN_COPY_LIMIT",
    "RUN_OWN",
    "RUN_STATE",
    "RUN_TEMP",
    "RunDirInUse",
    "RunLock",
    "SharedLockFile",
    "UnsafeRunPath",
    "append",
    "atomic_write",
    "check_dir",
    "check_entries",
    "check_entry",
    "check_not_foreign",
    "check_out_path",
    "clear_run_state",
    "config_diff",
    "is_run_config",
    "open_append",
    "open_lock",
    "open_regular",
    "prepare_dir",
    "read_regular",
    "same_file",
    "umask_modes",
    "write_json",
]
