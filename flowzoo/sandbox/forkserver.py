"""Host side of the fork-server mode of the process sandbox (see ``forkserver_main.py``).

A :class:`ForkServer` is one long-lived server process inside one sandbox (bubblewrap or
unshare namespaces, its own cgroup) that runs one program at a time; ``ProcessSandbox``
keeps a pool of them, one per concurrent run. A server that dies (a program killed it),
stops answering, or was sized for less memory than a request asks is discarded and
replaced, so a run's fate never leaks into the next one.
"""

from __future__ import annotations

import json
import os
import queue
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from flowzoo.sandbox import cgroups
from flowzoo.sandbox.base import ExecResult, classify, popen_isolated
from flowzoo.sandbox.forksafe import ForkLock, track
from flowzoo.sandbox.forkserver_ns import _request_inodes

#: the jail (unshare's file system, a no-op elsewhere), the guard (seccomp), then the server:
#: its run side first (``forkserver_main.py`` imports it when imported as a module)
SERVER_FILES = ("forkserver_ns.py", "forkserver_io.py", "forkserver_main.py")
GUARD_SOURCE = "\n".join(Path(__file__).with_name(f).read_text() for f in ("jail.py", "guard.py"))
#: a run's namespaces and file systems, then the server's loop
SERVER_SOURCE = "\n".join(
    [GUARD_SOURCE, *(Path(__file__).with_name(f).read_text() for f in SERVER_FILES)]
)
T = TypeVar("T")


class ServerDied(RuntimeError):
    """The server exited or stopped answering during a request."""


class _Spawner:
    """Starts server processes from one long-lived daemon thread. Why: bubblewrap's
    ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which fires when the *thread* that started
    it exits; servers started from a thread-pool worker all died when the pool shut down."""

    def __init__(self) -> None:
        self._q: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = ForkLock()
        track(self)

    def _forked(self) -> None:
        """In a forked child: the parent's thread and whatever its queue held are not ours
        (the queue's own locks may be held); the child's first spawn starts a thread."""
        self._q = queue.Queue()
        self._thread = None

    def call(self, fn: Callable[[], T]) -> T:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="flowzoo-forkserver-spawner", daemon=True
                )
                self._thread.start()
        fut: Future = Future()
        self._q.put((fn, fut))
        return fut.result()

    def _loop(self) -> None:
        while True:
            fn, fut = self._q.get()
            try:
                fut.set_result(fn())
            except BaseException as e:  # handed to the caller
                fut.set_exception(e)


_SPAWNER = _Spawner()


#: how long the server may take to clean up after a run (it gives leftovers 5 s to die)
SETTLE_S = 15.0


@dataclass
class Reply:
    rc: int | None
    sig: int | None
    timed_out: bool
    truncated: bool
    wall: float
    out: bytes
    err: bytes
    memory_hit: bool
    #: the server emptied every dir the run could write (else it must be replaced); with
    #: ``request(settle=False)`` not yet known here (True), :meth:`ForkServer.settle` says
    clean: bool = True
    #: why the run's namespaces could not be made (the program never ran)
    failed: str | None = None

    def result(self, backend: str) -> ExecResult:
        """The run as an :class:`ExecResult` (a memory-limit hit explains a kill or error)."""
        stdout = self.out.decode("utf-8", errors="replace")
        stderr = self.err.decode("utf-8", errors="replace")
        if self.failed is not None:
            msg = f"the fork-server could not isolate the run: {self.failed}"
            return ExecResult("sandbox_error", None, "", msg, self.wall, backend=backend)
        status = classify(self.rc, self.sig, stderr, self.timed_out)
        if self.memory_hit and status in ("killed", "error"):
            status = "memory"
        return ExecResult(
            status, self.rc, stdout, stderr, self.wall, self.sig, self.truncated, backend
        )


#: mechanisms whose servers must give every run namespaces of its own (else no server)
NAMESPACED = ("bwrap", "unshare")


def server_argv(argv: list[str]) -> list[str]:
    """``argv`` as a server needs it. Under bubblewrap: uid 0 with CAP_SYS_ADMIN and
    CAP_SETFCAP in the sandbox's own user namespace (the same host uid as any other uid
    there), which the server uses once: to mount a /proc without bubblewrap's locked covers
    (a run's nested mount ns may mount a /proc of its own only while one is visible) and to
    move into a user namespace of its own as uid 65534 (mapping a parent's uid 0 into a
    run's user namespace would need CAP_SETFCAP at every run); it drops every capability
    before it reads a request. With another ``--uid``, bubblewrap nests a second user
    namespace that does not own the mount namespace, and the mount fails."""
    out = list(argv)
    if "bwrap" not in map(os.path.basename, out):
        return out
    for flag in ("--uid", "--gid"):
        if flag in out:
            out[out.index(flag) + 1] = "0"
    i = out.index("--cap-drop") if "--cap-drop" in out else -1
    if i >= 0 and out[i + 1] == "ALL":
        out[i + 2 : i + 2] = ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETFCAP"]
    return out


class ForkServer:
    """One server process: ``argv`` starts the sandboxed clean interpreter (the server's
    source and ``server_args`` are appended). ``group`` (a cgroup the argv joins) and
    ``owned_dir`` (the host dir the runs live in) are the caller's, released on close.

    Every run gets a user, pid, mount, IPC and network namespace of its own and a fresh
    instance of every writable file system (``fresh_ns``; ``forkserver_ns.py``), so it can
    neither see, signal nor alter the server or a later run, nor leave it file-system
    state. A server under a mechanism in :data:`NAMESPACED` that cannot make them does not
    start (``OSError`` saying why); Docker's sandbox refuses such a server itself (it falls
    back to a fresh container per run); under the ``none`` mechanism runs share the server's
    namespaces and file systems and only the resets between runs apply."""

    def __init__(
        self,
        argv: list[str],
        server_args: list[str],
        env: dict[str, str],
        memory_mb: int,
        group: cgroups.RunGroup | None = None,
        owned_dir: str | None = None,
        start_timeout_s: float = 30.0,
    ) -> None:
        self.memory_mb = memory_mb
        self.group = group
        self.owned_dir = owned_dir
        #: the process that started it: only that process may kill it (a forked child that
        #: inherited this object forgets it instead, ``flowzoo/sandbox/forksafe.py``)
        self.owner_pid = os.getpid()
        strict = any(os.path.basename(a) in NAMESPACED for a in argv)
        cmd = [*server_argv(argv), "-c", SERVER_SOURCE, *server_args]
        self.proc = _SPAWNER.call(lambda: popen_isolated(cmd, subprocess.PIPE, env, owned_dir))
        #: what the server wrote and no reply has taken yet (a bytearray: appending is linear,
        #: where growing ``bytes`` copied it on every read, quadratic in a large output)
        self._buf = bytearray()
        #: a run's reply was read and the server's line after it (is it clean?) not yet
        self._unsettled = False
        try:
            hello = self._read_line(time.monotonic() + start_timeout_s)
        except ServerDied as e:
            err = self._stderr_tail()
            self.close()
            raise OSError(f"the sandbox fork-server did not start: {e}; {err}") from None
        info = json.loads(hello)
        self.pid = info.get("pid")
        self.fresh_ns = bool(info.get("fresh_ns"))
        #: why runs share the server's namespaces (None when they do not)
        self.why: str | None = info.get("why")
        if strict and not self.fresh_ns:
            self.close()
            raise OSError(
                "the sandbox fork-server cannot give each run namespaces of its own "
                f"({info.get('why')}): runs would share the server's process state; the "
                "kernel must allow unprivileged user namespaces (or use forkserver=False)"
            )

    def _stderr_tail(self) -> str:
        try:
            if self.proc.poll() is not None:
                return self.proc.stderr.read(4000).decode(errors="replace").strip()
        except (OSError, ValueError):
            pass
        return ""

    def _read_line(self, deadline: float) -> bytes:
        self._fill(lambda: b"\n" in self._buf, deadline)
        end = self._buf.index(b"\n")
        line = bytes(self._buf[:end])
        del self._buf[: end + 1]
        return line

    def _read_exact(self, n: int, deadline: float) -> bytes:
        self._fill(lambda: len(self._buf) >= n, deadline)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _fill(self, done: Callable[[], bool], deadline: float) -> None:
        """Read the server's output into the buffer until ``done``; ServerDied past the
        deadline or at its end."""
        fd = self.proc.stdout.fileno()
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerDied("no answer in time")
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                if self.proc.poll() is not None:
                    raise ServerDied(f"the server exited (code {self.proc.returncode})")
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise ServerDied(f"the server exited (code {self.proc.poll()})")
            self._buf += chunk

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _memory_hits(self) -> int:
        return self.group.memory_hits() if self.group is not None else 0

    def settle(self, timeout_s: float = SETTLE_S) -> bool:
        """Read the server's line after the last run: True when it emptied everything the
        run could write and may serve another run; False (or ServerDied) means replace it."""
        if not self._unsettled:
            return True
        line = self._read_line(time.monotonic() + timeout_s)
        self._unsettled = False
        return json.loads(line).get("clean") is True

    def request(
        self,
        files: dict[str, str],
        stdin: str | None,
        limits: list[tuple[int, int]],
        timeout_s: float,
        cap: int,
        settle: bool = True,
    ) -> Reply:
        """Run one program; raises :class:`ServerDied` if the server is lost meanwhile.

        ``settle=False`` returns at the run's reply, before the server has cleaned up after
        it (the run's namespaces torn down, leftovers killed, dirs emptied): the caller's
        own work overlaps that, and :meth:`settle` before the next request says whether the
        server may be reused (the reply's ``clean`` then speaks only of the run itself)."""
        if not self.settle():
            raise ServerDied("the server could not clean up after its last run")
        before = self._memory_hits()
        # the body: a JSON line of sizes and limits, then the files' bytes and stdin's, raw, so
        # that the run's process copies them out a chunk at a time (never whole in its memory)
        raw = [t.encode("utf-8", "surrogatepass") for t in files.values()]
        data_in = None if stdin is None else stdin.encode("utf-8", "surrogatepass")
        meta = {
            "files": [[n, len(b)] for n, b in zip(files, raw, strict=True)],  # pairs: no merging
            "stdin": None if data_in is None else len(data_in),
            "limits": [list(x) for x in limits],
        }
        body = b"".join([json.dumps(meta).encode(), b"\n", *raw, data_in or b""])
        # the header the server reads; the body it only moves (forkserver_main.py: no run's
        # data passes through the server's memory, which every later run inherits)
        head = {
            "timeout": timeout_s,
            "cap": cap,
            "size": len(body),
            "inodes": _request_inodes(meta),
        }
        try:
            # straight to the pipe, not through the buffered file: a buffered write holds a
            # lock, and a child forked meanwhile could never close its copy (forksafe.py)
            data = memoryview(json.dumps(head).encode() + b"\n" + body)
            fd = self.proc.stdin.fileno()
            while data:
                data = data[os.write(fd, data) :]
        except (BrokenPipeError, OSError, ValueError) as e:
            raise ServerDied(f"cannot send the program: {e}") from None
        # the server enforces the timeout itself; the margin covers clean-up after a run
        deadline = time.monotonic() + timeout_s + 10.0
        r = json.loads(self._read_line(deadline))
        out = self._read_exact(int(r["out"]), deadline)
        err = self._read_exact(int(r["err"]), deadline)
        self._unsettled = True
        clean = self.settle(deadline - time.monotonic()) if settle else True
        return Reply(
            r["rc"],
            r["sig"],
            r["timed_out"],
            r["truncated"],
            float(r["wall"]),
            out,
            err,
            self._memory_hits() > before,
            clean and r.get("failed") is None,
            r.get("failed"),
        )

    def forget(self) -> None:
        """Drop this process's copies of the server's pipes without touching the server: what
        a forked child does with its parent's servers (they keep serving the parent)."""
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except (OSError, ValueError):
                pass
        self.group = None
        self.owned_dir = None

    def close(self) -> None:
        """Kill the server and everything in its sandbox; remove its dirs and cgroup. In a
        process other than the one that started it (a forked child), only :meth:`forget`."""
        if os.getpid() != self.owner_pid:
            self.forget()
            return
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except (OSError, ValueError):
                pass
        if self.group is not None:
            self.group.destroy()
            self.group = None
        if self.owned_dir is not None:
            shutil.rmtree(self.owned_dir, ignore_errors=True)
