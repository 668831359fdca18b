"""The judge's trusted replay in a process of its own, so its deadline can always end it.

Why: the replay runs the task's (trusted) test code on the candidate's answers. Its 60 s
deadline interrupts Python bytecode only: a candidate's value that drives a long C-level
computation inside the test code (``x ** y`` on a huge int, ``"a" * n``, a regex on a long
string) or a blocking call there held a verdict, and the trainer with it, for minutes. Here
each replay runs in a worker process (stdlib and ``flowzoo.tasks`` only; started once, reused
for every replay) and the host waits for it at most the replay's limit plus a grace period:
past that the worker is killed, the verdict's cases fail as ``JudgeLimit`` and a fresh
worker starts for the next replay.

Protocol (length-prefixed frames on the worker's stdin/stdout): the host sends a pickle of
``(source, known, max_calls, time_limit_s)`` — trusted data: the test code's source and the
candidate's answers, already decoded to plain builtins by :mod:`wire`; the worker answers
JSON ``{"cases": [[passed, value, error] | null, ...], "calls": [...], "keys": [...]}``, so
nothing the worker writes is ever unpickled by the host.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from typing import Any

#: how long past the replay's own limit the host waits before it kills the worker
GRACE_S = 5.0
_HEADER = struct.Struct(">I")


class ReplayKilled(Exception):
    """The replay overran its limit (a C-level computation or a blocking call): killed."""


def _write(stream, payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    """``n`` bytes from ``fd`` (None at EOF); ReplayKilled past ``deadline``."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ReplayKilled("the replay did not finish in time")
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError("the replay process closed its pipe")
        buf += chunk
    return bytes(buf)


class ReplayProcess:
    """One worker: ``replay(...)`` sends a request and waits for the answer, bounded."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "flowzoo.tasks.code.replay_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def replay(
        self, source: tuple, known: dict, max_calls: int, time_limit_s: float
    ) -> dict[str, Any]:
        try:
            _write(self.proc.stdin, pickle.dumps((source, known, max_calls, time_limit_s)))
            fd = self.proc.stdout.fileno()
            deadline = time.monotonic() + time_limit_s + GRACE_S
            (n,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
            return json.loads(_read_exact(fd, n, deadline))
        except (ReplayKilled, EOFError, BrokenPipeError, OSError, ValueError) as e:
            self.close()
            raise ReplayKilled(str(e)) from None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for s in (self.proc.stdin, self.proc.stdout):
            try:
                s.close()
            except OSError:
                pass


class ReplayPool:
    """Idle workers handed out one per concurrent replay (the family scores from threads)."""

    def __init__(self, max_idle: int = 4) -> None:
        self.pid = os.getpid()
        self.max_idle = max_idle
        self._idle: list[ReplayProcess] = []
        self._lock = threading.Lock()

    def replay(self, source: tuple, known: dict, max_calls: int, time_limit_s: float) -> dict:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is not None and not worker.alive():
            worker.close()  # its pipes too
            worker = None
        if worker is None:
            worker = ReplayProcess()
        out = worker.replay(source, known, max_calls, time_limit_s)  # a killed one is closed
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(worker)
                worker = None
        if worker is not None:
            worker.close()
        return out

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for w in idle:
            w.close()


_POOL: ReplayPool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> ReplayPool:
    """This process's pool (a forked child gets its own: pipes are not shared)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            _POOL = ReplayPool()
            atexit.register(_POOL.close)
        return _POOL


def _serve() -> None:
    """The worker's loop: one replay per request until the host closes the pipe."""
    from flowzoo.tasks.code.judge import replay
    from flowzoo.tasks.code.testcode import judge_spec

    # the protocol gets its own copy of stdout; anything the test code prints goes to stderr
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    fd = sys.stdin.buffer.fileno()
    while True:
        try:
            (n,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, None))
        except EOFError:
            return
        source, known, max_calls, time_limit_s = pickle.loads(_read_exact(fd, n, None))
        cases, session = replay(judge_spec(*source), known, max_calls, time_limit_s)
        reply = {
            "cases": [None if c is None else [c.passed, c.value, c.error] for c in cases],
            "calls": session.calls,
            "keys": session.keys,
        }
        _write(out, json.dumps(reply).encode())


if __name__ == "__main__":
    _serve()
