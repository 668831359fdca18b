"""``flowzoo sweep CONFIG``: run a matrix of training runs, resumably.

A sweep file (TOML or YAML) has ``name``, ``out_dir``, a ``[base]`` table of TrainConfig
fields shared by every run, a ``[grid]`` table of lists whose cartesian product makes the
runs, and optional ``[[extra]]`` runs (e.g. single-agent controls). ``--subset key=value,...``
runs a slice (the file read and checked, the runs expanded: :mod:`flowzoo.agents.sweeps.spec`). Backends: ``local`` (default: one worker process per core; a finished run is
skipped, a crashed run is retried once and reported) and ``ray`` (the same runs as Ray tasks,
``ray.init(address=...)``, a local Ray when no address is given).

A sweep holds ``OUT_DIR/.flowzoo-sweep.lock`` (``SWEEP_LOCK``) for its whole life, so
two sweeps never claim the same runs. A run's output reaches its ``train.log`` through the
sweep (:class:`_Relay`), never through a descriptor the child holds: each chunk is appended
anew, so a name made for the file while the run is live (a ``cp -al`` backup) keeps its bytes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from flowzoo.agents.models.threads import usable_cores
from flowzoo.agents.runs import rundir, signals
from flowzoo.agents.sweeps.spec import RunSpec, SweepSpec, expand, load_sweep, parse_subset
from flowzoo.config.fields import Domain, problem

#: the sweep file's side (read, checked, expanded) lives in :mod:`flowzoo.agents.sweeps.spec`; named here too
__all__ = [
    "BACKENDS",
    "SWEEP_LOCK",
    "WORKERS",
    "RunSpec",
    "SweepNotRecorded",
    "SweepSpec",
    "expand",
    "is_done",
    "load_sweep",
    "parse_subset",
    "run_sweep",
]

BACKENDS = ("local", "ray")
#: a local sweep's runs at a time (``--workers``)
WORKERS = Domain(int, lo=1, hi=4096)


def _read_record(p: Path) -> Any:
    """A record the run wrote, parsed, or None: absent, unreadable, not a regular file (a
    link is not followed, a FIFO never blocks: :func:`rundir.read_regular`), or not JSON."""
    try:
        return json.loads(rundir.read_regular(p))
    except (OSError, ValueError, RecursionError):
        return None


def is_done(run: RunSpec) -> bool:
    """Skipped only when its summary says completed with all its steps (or stopped by the
    early-warning monitor, which a rerun repeats), its final/ model is
    there (a real directory) AND its config.json is the config this sweep gives it: a copy
    of another run's directory, or a run of an older sweep file, is not this run (the
    trainer then decides, as for a single run)."""
    from flowzoo.agents.train.watch import STOPPED
    from flowzoo.config import TrainConfig

    out = Path(run.config["out_dir"])
    s = _read_record(out / "summary.json")
    if not isinstance(s, dict) or s.get("status") not in ("completed", STOPPED):
        return False
    done = s.get("steps_done", -1)  # a run the monitor stopped is done where it stopped
    if not isinstance(done, int) or (
        s["status"] == "completed" and done < int(run.config.get("steps", 0))
    ):
        return False
    stored = _read_record(out / "config.json")
    if not rundir.is_run_config(stored):
        return False
    try:  # its final model too: a run without it is resumed, which writes it again
        if not rundir.check_entry(out / "final", directory=True):
            return False
    except (ValueError, OSError):  # a link or a file at final/: not the run's own
        return False
    return not rundir.config_diff(stored, TrainConfig.from_dict(run.config))


#: the child: the run's config as an argument (no file read between the check and the run);
#: a stop signal is recorded by the trainer (interrupted) and ends the child as 128 + it
_CHILD = """import json, sys
from flowzoo.agents.runs.signals import Stopped
from flowzoo.agents.train.trainer import TrainConfig, Trainer
try:
    Trainer(TrainConfig.from_dict(json.loads(sys.argv[1])), progress=False).train()
except Stopped as e:
    sys.exit(128 + e.signum)
except KeyboardInterrupt:
    sys.exit(130)
"""


def _pending(fd: int) -> int:
    """The bytes waiting in pipe ``fd``."""
    import fcntl
    import termios

    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder)


class _Relay:
    """A child's stdout and stderr (one pipe) appended to its ``train.log`` chunk by chunk
    (up to ``CHUNK`` bytes), each through :func:`rundir.append`: the child never holds the log, so
    a name made for it meanwhile keeps its bytes. :meth:`finish` (the child has ended, by a
    signal too) logs what is left in the pipe, and only that: a child's child still holding
    the pipe never keeps the sweep waiting. A log that can no longer be written (a link put
    at ``train.log``, a full disk) is said in ``error``; the pipe is still drained, so the
    run goes on. Each chunk goes into the run's directory as it was when the relay started
    (held open; its name is looked up through that descriptor): a directory moved keeps its
    log, and a link put in its place never receives a byte."""

    CHUNK = 64 << 10

    def __init__(self, rfd: int, log: Path) -> None:
        self.rfd, self.log = rfd, log
        self.error: str | None = None
        self._dfd: int | None = None
        self._via = log
        try:  # the run's directory, whatever its name becomes; the pipe is drained regardless
            # O_PATH: a directory the sweep may write but not list is still held
            flags = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW
            self._dfd = os.open(log.parent, flags | os.O_CLOEXEC)
            # through the descriptor's /proc entry every check of ``rundir.append`` (no link,
            # no FIFO, a copy of its own for a hard-linked log) holds inside that directory;
            # without /proc (another OS, a masked /proc) each chunk checks the path first
            via = Path(f"/proc/self/fd/{self._dfd}")
            self._via = via / log.name if via.is_dir() else log
        except (OSError, ValueError) as e:  # ValueError: a NUL or an unencodable name
            self.error = f"{type(e).__name__}: {e}"
        self.logged = 0
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"log {log}", daemon=True)
        self._thread.start()

    def _put(self, data: bytes) -> None:
        if self.error is not None:
            return  # nothing after a gap: the log stops where it could not go on
        try:
            if self._via == self.log and self._dfd is not None:  # no /proc: a check, then the write
                st = os.lstat(self.log.parent)
                if not rundir.same_file(st, os.fstat(self._dfd)):
                    raise ValueError(f"{self.log.parent} was replaced while the run was live")
            rundir.append(self._via, data)
            self.logged += len(data)
        except (ValueError, OSError) as e:
            said = str(e).replace(str(self._via.parent), str(self.log.parent))
            self.error = f"{type(e).__name__}: {said}"

    def _loop(self) -> None:
        try:
            poll = select.poll()
            poll.register(self.rfd, select.POLLIN)
            while not self._ended.is_set():
                if poll.poll(100):  # data, or every writer gone (EOF)
                    chunk = os.read(self.rfd, self.CHUNK)
                    if not chunk:
                        return
                    self._put(chunk)
            left = _pending(self.rfd)  # all the ended child wrote is in the pipe by now
            while left > 0:
                chunk = os.read(self.rfd, min(left, self.CHUNK))
                if not chunk:
                    break
                self._put(chunk)
                left -= len(chunk)
        except OSError as e:  # the pipe itself: said, never raised in a thread
            self.error = self.error or f"{type(e).__name__}: {e}"
        finally:
            os.close(self.rfd)
            if self._dfd is not None:
                os.close(self._dfd)

    def finish(self) -> None:
        """Called once the child has ended: returns when its output is logged."""
        self._ended.set()
        self._thread.join()


def _claim(run: RunSpec) -> int:
    """The run's directory checked as a single run checks it (:func:`rundir.check_dir`: a
    path no run can write, a live run's, a link or FIFO where the run writes, a directory
    that is no flowzoo run, a run of another config when resuming), and the run directory
    itself not a link; then, under its lock (checked again), run_config.json written and
    train.log opened (a copy of its own if it has other names). Returns the log's
    descriptor, for the attempt's header only; raises (ValueError, OSError) untouched."""
    from flowzoo.config import TrainConfig

    out = Path(run.config["out_dir"])
    cfg = TrainConfig.from_dict(run.config)

    def check(probe_lock: bool = True) -> None:
        rundir.check_entry(out, directory=True)  # the sweep names it: a link is not its own
        rundir.check_dir(out, cfg, probe_lock)
        rundir.check_entry(out / "run_config.json", directory=False, single_link=False)
        rundir.check_entry(out / "train.log", directory=False, single_link=False)

    check()
    out.mkdir(parents=True, exist_ok=True)
    lock = rundir.RunLock(out)  # released before the child starts: the child takes it
    try:
        check(probe_lock=False)  # what changed meanwhile (the lock is ours)
        fd = rundir.open_append(out / "train.log")
        try:
            rundir.write_json(out / "run_config.json", run.config)
        except BaseException:
            os.close(fd)
            raise
    finally:
        lock.release()
    return fd


def _ended(result: str) -> bool:
    """Whether a run's result counts on the sweep's bar: a stopped or never-started run does
    not (a stopped sweep's bar says how far it got, not 100%)."""
    return not result.startswith("interrupted")


class _Sweep:
    """The live children of a local sweep, so a stop signal sent to the sweep alone reaches
    each of them, and no run starts, or is retried, after it. They stay in the sweep's
    process group (a kill of the group ends them too); Ctrl-C then reaches a run twice (the
    terminal's, the sweep's), which the run takes as one (:class:`signals.StopSignals`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.stopped: int | None = None
        self.log_errors: dict[str, str] = {}  # run_id: why its train.log stopped short

    def stop(self, signum: int) -> None:
        with self.lock:
            if self.stopped is None:
                self.stopped = signum
                for p in self.procs:
                    if p.poll() is None:
                        p.send_signal(signum)

    def run(self, run: RunSpec, attempt: int) -> int | None:
        """The run's exit status (None: not started, the sweep was stopped). The child's
        output goes through a pipe to a :class:`_Relay` (never straight to train.log)."""
        fd = _claim(run)
        try:
            os.write(fd, f"== flowzoo sweep: run {run.run_id}, attempt {attempt + 1}\n".encode())
        finally:
            os.close(fd)
        # one thread per run (runs share the cores); the trainer reads it (threads)
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("FLOWZOO_SWEEP_THREADS", "1")}
        cmd = [sys.executable, "-c", _CHILD, json.dumps(run.config)]
        rfd, wfd = os.pipe()  # close-on-exec: no other child holds it
        try:
            with self.lock:
                if self.stopped is not None:
                    os.close(rfd)
                    return None
                try:
                    proc = subprocess.Popen(cmd, stdout=wfd, stderr=subprocess.STDOUT, env=env)
                except BaseException:
                    os.close(rfd)
                    raise
                self.procs.add(proc)
        finally:
            os.close(wfd)
        relay = _Relay(rfd, Path(run.config["out_dir"]) / "train.log")
        try:
            return proc.wait()
        finally:
            with self.lock:
                self.procs.discard(proc)
            relay.finish()
            if relay.error is not None:
                self.log_errors.setdefault(
                    run.run_id, f"its output after byte {relay.logged} lost: {relay.error}"
                )

    def one(self, r: RunSpec) -> str:
        said = self._one(r)
        err = self.log_errors.get(r.run_id)
        return f"{said}; train.log incomplete ({err})" if err else said

    def _one(self, r: RunSpec) -> str:
        rc: int | None = None
        for attempt in range(2):
            if self.stopped is not None:
                return "interrupted" if attempt else "interrupted (not started)"
            try:
                rc = self.run(r, attempt)
            except (ValueError, OSError) as e:  # the directory refused: nothing touched
                return f"failed ({type(e).__name__}: {e})"
            if rc is None:
                return "interrupted (not started)"
            if rc == 0 and is_done(r):
                return "completed" if attempt == 0 else "completed after retry"
            if self.stopped is not None:
                return "interrupted"  # recorded as such by the run; never retried
        return f"failed (exit {rc}; see {r.config['out_dir']}/train.log)"


#: the file a live sweep holds locked (``fcntl.flock``) in its out_dir, its pid inside
SWEEP_LOCK = ".flowzoo-sweep.lock"


def _take_out_dir(out: Path) -> rundir.RunLock:
    """The sweep's out_dir made and locked, or a clear error before any run starts: a path
    no run could write (:func:`rundir.check_out_path`: a read-only file system, say), a
    sweep.json that is a link, FIFO or directory, another live sweep there."""
    rundir.check_out_path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        # held for the sweep's whole life: a run's own lock is free between the sweep's
        # claim and its child's start, so without it two sweeps could claim one run
        lock = rundir.RunLock(out, SWEEP_LOCK, "sweep")
    except OSError as e:
        raise ValueError(
            f"cannot write the sweep's out_dir {out}: {e.strerror or e}; use another out_dir"
        ) from None
    try:
        rundir.check_entry(out / "sweep.json", directory=False, single_link=False)
    except BaseException:
        lock.release()
        raise
    return lock


class SweepNotRecorded(ValueError):
    """sweep.json could not be written (the runs ran; their results were shown)."""

    def __init__(self, msg: str, report: dict) -> None:
        super().__init__(msg)
        self.report = report


def _write_report(out: Path, report: dict) -> SweepNotRecorded | None:
    """sweep.json written; if it cannot be (a full disk), each run's result is shown on
    stderr, and the error naming the file is returned for the caller to raise."""
    path = out / "sweep.json"
    try:
        rundir.write_json(path, report)
        return None
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        for rid, said in report["runs"].items():
            print(f"{said:<22} {rid}", file=sys.stderr)
        return SweepNotRecorded(
            f"could not write {path}: {why}; each run's result is shown above", report
        )


def _record(spec: SweepSpec, backend: str, runs: dict[str, str], **more: Any) -> dict:
    """sweep.json's content: each run's result (or ``pending``), and every run the sweep file
    declares (a subset run too): the report reads no declared test from fewer runs."""
    return {
        "sweep": spec.name,
        "backend": backend,
        **more,
        "runs": runs,
        "declared": [r.run_id for r in expand(spec, None)],
    }


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
    """Run every unfinished run; returns {run_id: "skipped" | "completed" | "failed: ..."}.
    SIGINT, SIGTERM or SIGHUP stop a local sweep: its live runs get the same signal (each
    records itself interrupted), none is retried or started, sweep.json is written with
    them ``interrupted``, then KeyboardInterrupt (SIGINT) or ``signals.Stopped`` is raised.
    The out_dir is checked and locked (``SWEEP_LOCK``) before any run starts; a
    sweep.json that cannot be written raises :class:`SweepNotRecorded` (a ValueError) once
    each run's result is shown on stderr."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown sweep backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if workers is not None and (msg := problem("workers", workers, WORKERS)):
        raise ValueError(msg)
    runs = expand(spec, subset)
    lock = _take_out_dir(Path(spec.out_dir))
    try:
        return _run_locked(spec, runs, backend, workers, address, progress)
    finally:
        lock.release()


def _run_locked(
    spec: SweepSpec,
    runs: list[RunSpec],
    backend: str,
    workers: int | None,
    address: str | None,
    progress: bool,
) -> dict:
    results: dict[str, str] = {}
    todo = []
    for r in runs:
        if is_done(r):
            results[r.run_id] = "skipped"
        else:
            todo.append(r)
    t0 = time.time()
    # sweep.json names every declared run before any runs, so a report read while the sweep
    # runs (or after it was killed) prints no declared verdict from the runs done so far
    so_far = {**{r.run_id: "pending" for r in todo}, **results}
    started = _write_report(Path(spec.out_dir), _record(spec, backend, so_far, status="running"))
    if started is not None:
        raise started
    # a local sweep's stop signals are only noted (held): the main thread passes them on to
    # the runs, and one arriving while sweep.json is written waits for it (Ray: as before)
    stop = signals.StopSignals()
    stop.hold()
    if backend == "local":
        stop.install()
    try:
        if backend == "local":
            n = workers or usable_cores()  # the cores this process may use, not the machine's
            from tqdm import tqdm

            bar = tqdm(
                total=len(todo), desc=f"sweep {spec.name}", disable=not progress, file=sys.stderr
            )

            sweep = _Sweep()
            try:
                with ThreadPoolExecutor(n) as ex:
                    futs = {ex.submit(sweep.one, r): r.run_id for r in todo}
                    pending = set(futs)
                    while pending:
                        done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                        if stop.received is not None:
                            sweep.stop(stop.received)
                        bar.update(
                            sum(f.exception() is not None or _ended(f.result()) for f in done)
                        )
            finally:
                bar.close()
            results.update({futs[f]: f.result() for f in futs})  # in the sweep's order
        else:
            import ray

            ray.init(
                address=address,
                ignore_reinit_error=True,
                include_dashboard=False,
                log_to_driver=False,
            )
            remote = ray.remote(num_cpus=1, max_retries=1)(_run_inprocess)
            refs = {r.run_id: remote.remote(r.config) for r in todo}
            for rid, ref in refs.items():
                try:
                    ray.get(ref)
                    results[rid] = "completed"
                except Exception as e:
                    results[rid] = f"failed ({type(e).__name__}: {str(e)[:200]})"
        report = _record(spec, backend, results, wall_s=round(time.time() - t0, 1))
        unrecorded = _write_report(Path(spec.out_dir), report)
    finally:
        stop.restore()
    stopped = stop.received
    if stopped is not None:  # exit 128 + it (the CLI): SIGINT as Ctrl-C always was
        if unrecorded is not None:
            print(f"flowzoo sweep: {unrecorded}", file=sys.stderr)
        raise KeyboardInterrupt if stopped == signal.SIGINT else signals.Stopped(stopped)
    if unrecorded is not None:
        raise unrecorded
    return report
