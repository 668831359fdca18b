"""The sandbox protocol: run an untrusted Python program, get an ExecResult. Knows nothing of
tasks or environments."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Protocol, runtime_checkable

from flowzoo.sandbox.guard import _FZ_UNFILTERED_EXIT, _FZ_UNFILTERED_MARK

#: host dirs a sandbox shows read-only so the interpreter and its libraries can run
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")


def outside_system_dirs(path: str) -> bool:
    """Whether ``path`` (e.g. the interpreter's prefix) needs a bind of its own."""
    return not any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS)


STATUSES = ("ok", "error", "timeout", "memory", "killed", "sandbox_error")


@dataclass(frozen=True)
class ExecResult:
    """What happened to one program. ``status`` is one of :data:`STATUSES`."""

    status: str
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    #: the signal that ended the program, when one did
    signal: int | None = None
    #: stdout or stderr went over the output cap and was cut
    truncated: bool = False
    #: the backend and its isolation mechanisms, for the record
    backend: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Job:
    """One program for :meth:`Sandbox.run_many`."""

    source: str
    files: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None
    timeout_s: float | None = None
    memory_mb: int | None = None


class SandboxUnavailable(RuntimeError):
    """The requested backend or isolation mechanism does not work on this machine."""


@runtime_checkable
class Sandbox(Protocol):
    """A place to run untrusted Python programs with limits."""

    name: str

    @property
    def isolation(self) -> tuple[str, ...]:
        """The isolation mechanisms actually in force (never more than are)."""
        ...

    def run(
        self,
        source: str,
        *,
        files: dict[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float | None = None,
        memory_mb: int | None = None,
    ) -> ExecResult: ...

    def run_many(self, jobs: Sequence[Job], max_workers: int | None = None) -> list[ExecResult]: ...

    def close(self) -> None: ...


class ConcurrentRunMixin:
    """``run_many`` on top of ``run``: a thread pool (runs are subprocess waits), results in
    job order."""

    default_workers: int = 4

    def run_many(self, jobs: Sequence[Job], max_workers: int | None = None) -> list[ExecResult]:
        jobs = list(jobs)
        if not jobs:
            return []
        workers = max(1, min(max_workers or self.default_workers, len(jobs)))

        def one(j: Job) -> ExecResult:
            return self.run(
                j.source, files=j.files, stdin=j.stdin, timeout_s=j.timeout_s, memory_mb=j.memory_mb
            )

        if workers == 1:
            return [one(j) for j in jobs]
        with ThreadPoolExecutor(workers) as ex:
            return list(ex.map(one, jobs))


def popen_isolated(
    cmd: list[str], stdin, env: dict[str, str], cwd: str | None, pass_fds: tuple[int, ...] = ()
):
    """Start a sandbox process: its own session (a kill of its process group reaches all it
    started), piped stdout/stderr, nothing inherited but what is passed (and ``pass_fds``)."""
    import subprocess

    return subprocess.Popen(
        cmd,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
        pass_fds=pass_fds,
    )


def classify(exit_code: int | None, sig: int | None, stderr: str, timed_out: bool) -> str:
    """Map how a program ended to a status (a run whose start code could not install the
    program's seccomp filter, ``guard.py``, never ran the program: ``sandbox_error``)."""
    if timed_out:
        return "timeout"
    if exit_code == _FZ_UNFILTERED_EXIT and stderr.startswith(_FZ_UNFILTERED_MARK):
        return "sandbox_error"
    tail = stderr[-2000:]
    if "MemoryError" in tail or "Cannot allocate memory" in tail:
        return "memory"
    if sig is not None:
        if sig == 24:  # SIGXCPU: the CPU-time limit
            return "timeout"
        return "killed"
    if exit_code == 0:
        return "ok"
    return "error"


#: the program file every backend runs
MAIN = "main.py"


#: a file on a run's disk (a tmpfs) takes whole pages
PAGE_BYTES = 4096


def checked_files(
    source: str, files: dict[str, str], stdin: str | None = None, disk_mb: int | None = None
) -> dict[str, str]:
    """``files`` plus ``main.py`` under normalised names, or a ValueError: every backend
    applies this one check (names relative, inside the work dir, not ``.stdin``, a name the
    file system can hold, no two names for one file; text only; with ``disk_mb``, the files
    and ``stdin`` fit on that many MiB of tmpfs, each in whole pages: a request past its
    run's disk is refused here, with its size, not lost inside the run)."""
    if not isinstance(source, str):
        raise ValueError(f"source must be a str, got {type(source).__name__}")
    out: dict[str, str] = {}
    for name, text in {**files, MAIN: source}.items():
        p = PurePosixPath(name)
        if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] == ".stdin":
            raise ValueError(f"file name {name!r} must be relative and stay inside the work dir")
        try:
            os.fsencode(name)
        except UnicodeEncodeError:
            raise ValueError(f"file name {name!r} is no file name (a lone surrogate)") from None
        if not isinstance(text, str):
            raise ValueError(f"file {name!r} must be a str, got {type(text).__name__}")
        key = "/".join(p.parts)
        if key in out:
            raise ValueError(f"two names in the request name one file, {key!r}")
        out[key] = text
    if disk_mb is not None:
        texts = [*out.values(), *([] if stdin is None else [stdin])]
        # an ASCII text's UTF-8 is as long as the text: no copy made to count it (every run)
        sizes = [len(t) if t.isascii() else len(t.encode("utf-8", "surrogatepass")) for t in texts]
        need = sum(-(-n // PAGE_BYTES) * PAGE_BYTES for n in sizes)
        if need > disk_mb << 20:
            raise ValueError(
                f"the program's files and stdin ({sum(sizes):,} bytes) need {need:,} bytes of "
                f"disk in {PAGE_BYTES}-byte pages, more than the {disk_mb} MiB "
                f"({disk_mb << 20:,} bytes) a run has"
            )
    return out


def collect(proc: subprocess.Popen, deadline: float, cap: int) -> tuple[bytes, bytes, bool, bool]:
    """Read stdout/stderr until both close, the program exits, or the deadline passes.

    Output beyond ``cap`` bytes per stream is read and dropped (so a flood cannot block the
    program on a full pipe, nor fill our memory). Moved here from ``process.py``."""
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None  # popen_isolated pipes both
    sel = selectors.DefaultSelector()
    bufs = {stdout.fileno(): bytearray(), stderr.fileno(): bytearray()}
    for f in (stdout, stderr):
        sel.register(f.fileno(), selectors.EVENT_READ)
    truncated = timed_out = False
    exited_at: float | None = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                timed_out = proc.poll() is None
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.2:
                break  # the program is gone; something it left behind holds the pipes
            for key, _ in sel.select(min(deadline - now, 0.05)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                room = cap - len(buf)
                if room > 0:
                    buf += chunk[:room]
                if len(chunk) > max(room, 0):
                    truncated = True
    finally:
        sel.close()
    if not timed_out:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    out, err = bytes(bufs[stdout.fileno()]), bytes(bufs[stderr.fileno()])
    stdout.close()
    stderr.close()
    return out, err, truncated, timed_out


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the program's whole process group (its own session), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
