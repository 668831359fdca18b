"""The symbolic check's worker processes: math-verify in a child process under a hard time
limit, a small pool of them, one process-wide.

Why a child: math-verify's own timeouts use ``signal.alarm`` (main thread only), and sympy can
hang on a pathological expression. The child runs with its timeouts disabled; the parent waits
at most the limit and kills and replaces the child when it overruns. :mod:`verify` decides what
reaches it (and remembers its verdicts).
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import queue
import select
import subprocess
import sys
import threading
import time

from flowzoo.tasks.math.guards import malformed

DEFAULT_TIMEOUT_S = 3.0


# ---------------------------------------------------------------- symbolic worker (child)


def _worker_main() -> None:  # pragma: no cover - runs in the child process
    """Serve ``[gold, pred]`` JSON lines on stdin with ``[equal, reason]`` lines on stdout."""
    import json
    import sys

    logging.disable(logging.CRITICAL)
    out = sys.stdout
    sys.stdout = sys.stderr  # stray prints from libraries must not corrupt the protocol
    try:
        import sympy
        from math_verify import LatexExtractionConfig, parse, verify
    except Exception as e:  # math-verify missing: report and exit
        out.write(json.dumps(["unavailable", repr(e)]) + "\n")
        out.flush()
        return
    import math_verify.parser as mv_parser

    # an answer that does not parse whole is unread, never its last equation ("13 ( 14 = 14")
    mv_parser.get_last_eq = lambda latex: latex
    latex_only = [LatexExtractionConfig(boxed_match_priority=0)]

    @functools.lru_cache(maxsize=8192)
    def parse_answer(s: str):
        # wrapping in $\boxed{}$ makes the LaTeX extractor take the whole string as one
        # expression, which is what an already-extracted answer is. LaTeX only: the free-text
        # extractor would take a number out of what LaTeX cannot read ("13 ( 14" as 14); a
        # bare string back means the parse failed
        if malformed(s):
            return []
        got = parse("$\\boxed{" + s + "}$", extraction_config=latex_only, parsing_timeout=None)
        return got if len(got) == 2 and not isinstance(got[0], str) else []

    def tiny_guard(g, p) -> bool:
        """False when both are tiny numbers that differ (math-verify rounds them to 0)."""
        try:
            if not (getattr(g, "is_number", False) and getattr(p, "is_number", False)):
                return True
            gv, pv = sympy.N(g, 60), sympy.N(p, 60)
            big = max(abs(gv), abs(pv))
            if big == 0 or big > 1e-4:
                return True
            return bool(abs(gv - pv) <= 1e-9 * big)
        except Exception:
            return True

    out.write(json.dumps(["ready", ""]) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            gold, pred = json.loads(line)
            g, p = parse_answer(gold), parse_answer(pred)
            if not g or not p:
                res = [False, "unparsed"]
            elif verify(g, p, timeout_seconds=None):
                res = [True, "symbolic"] if tiny_guard(g[0], p[0]) else [False, "guard_magnitude"]
            else:
                res = [False, "symbolic_mismatch"]
        except Exception as e:
            res = [False, f"error:{type(e).__name__}"]
        out.write(json.dumps(res) + "\n")
        out.flush()


_BOOT = (
    "import sys; sys.path[:0] = {path!r}; "
    "from flowzoo.tasks.math.worker import _worker_main; _worker_main()"
)


class SymbolicChecker:
    """One child process running math-verify; replaced when a check overruns its limit.

    A plain subprocess speaking JSON lines (not ``multiprocessing``), so it never re-imports
    the user's ``__main__`` and works from notebooks, stdin scripts and threads alike."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, start_timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._buf = b""
        self.timeouts = 0
        self.starts = 0
        self.unavailable: str | None = None

    def _start(self) -> None:
        code = _BOOT.format(path=[p for p in sys.path if p])
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._buf = b""
        self.starts += 1
        msg = self._read_line(self.start_timeout_s)
        if msg is None:
            self._kill()
            self.unavailable = "math-verify worker did not start"
            return
        if msg[0] != "ready":
            self._kill()
            self.unavailable = str(msg[1])

    def _read_line(self, timeout: float) -> list | None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _kill(self) -> None:
        if self._proc is not None:
            try:
                self._proc.kill()
                self._proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            for f in (self._proc.stdin, self._proc.stdout):
                if f is not None:
                    f.close()
        self._proc = None

    def check(self, gold: str, pred: str, timeout_s: float | None = None) -> tuple[bool, str]:
        """(equal, reason); reason is ``timeout`` when the limit was hit."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            if self.unavailable:
                return False, "symbolic_unavailable"
            if self._proc is None or self._proc.poll() is not None:
                self._kill()
                self._start()
                if self.unavailable:
                    return False, "symbolic_unavailable"
            proc = self._proc
            assert proc is not None and proc.stdin is not None  # started above
            try:
                proc.stdin.write((json.dumps([gold, pred]) + "\n").encode())
                proc.stdin.flush()
                msg = self._read_line(limit)
            except (OSError, ValueError):
                self._kill()
                return False, "worker_died"
            if msg is not None:
                return bool(msg[0]), str(msg[1])
            if proc.poll() is not None:
                self._kill()
                return False, "worker_died"
            self.timeouts += 1
            self._kill()
            return False, "timeout"

    def close(self) -> None:
        with self._lock:
            self._kill()


#: workers of the process-wide pool: a few, since each holds sympy (~150 MB)
POOL_SIZE = max(2, min(4, (os.cpu_count() or 2) // 2))


class SymbolicPool:
    """Up to ``size`` workers, started as needed, each serving one check at a time: a check
    that runs to its limit holds one worker while the others serve the rest."""

    def __init__(self, size: int = POOL_SIZE, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.size, self.timeout_s = size, timeout_s
        self._idle: queue.LifoQueue[SymbolicChecker] = queue.LifoQueue()  # warm ones first
        self._all: list[SymbolicChecker] = []
        self._lock = threading.Lock()

    def _acquire(self) -> SymbolicChecker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if len(self._all) < self.size:
                self._all.append(SymbolicChecker(self.timeout_s))
                return self._all[-1]
        return self._idle.get()

    def check(self, gold: str, pred: str, timeout_s: float | None = None) -> tuple[bool, str]:
        """(equal, reason) from a free worker; reason is ``timeout`` when the limit was hit."""
        worker = self._acquire()
        try:
            return worker.check(gold, pred, timeout_s)
        finally:
            self._idle.put(worker)

    @property
    def timeouts(self) -> int:
        return sum(w.timeouts for w in self._all)

    def close(self) -> None:
        for w in list(self._all):
            w.close()


_CHECKER: SymbolicPool | None = None
_CHECKER_LOCK = threading.Lock()


def get_checker() -> SymbolicPool:
    """The process-wide pool of symbolic workers (each started on first use)."""
    global _CHECKER
    with _CHECKER_LOCK:
        if _CHECKER is None:
            _CHECKER = SymbolicPool()
            atexit.register(_CHECKER.close)
        return _CHECKER
