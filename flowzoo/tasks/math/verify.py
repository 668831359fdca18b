"""Math-answer equivalence: exact fast paths first, then math-verify under a hard time limit.

Why a worker process: math-verify's own timeouts use ``signal.alarm`` (main thread only), and
sympy can hang on a pathological expression. The symbolic check therefore runs in a child
process with its timeouts disabled; the parent waits at most ``timeout_s`` and kills and
replaces the child when it overruns. Most answers never get there: integers, decimals,
fractions, mixed numbers and percentages are compared exactly (as rationals) in-process, and
so are rational multiples of a square root and a power of pi and sets, intervals and tuples
of them (:mod:`exact`).
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
import time
from fractions import Fraction

from flowzoo.tasks.base import Verdict
from flowzoo.tasks.math.exact import exact_check, irrational
from flowzoo.tasks.math.extract import _UNITS, decimal_key, normalize, to_number

DEFAULT_TIMEOUT_S = 3.0
#: Inputs longer than this are not sent to sympy at all (they are not answers).
MAX_SYMBOLIC_CHARS = 400
#: Longer predictions are not answers: scored 0 without being read (bounds every path)
MAX_ANSWER_CHARS = 2000


def _numbers_equal(g: tuple[Fraction, bool], p: tuple[Fraction, bool]) -> bool:
    """Percent signs, one reading per gold: a ``%`` on both sides or neither compares values;
    a bare gold in (0, 1) reads a predicted ``p%`` as p/100 ("50%" for 0.5), any other bare
    gold reads it as a unit ("3%" for 3, never "300%"); a bare prediction against a ``p%``
    gold may give the value or the number of percent ("0.25" or "25" for "25%")."""
    gv, gpct = g
    pv, ppct = p
    if gpct == ppct:
        return gv == pv
    if ppct:
        return pv / 100 == gv if 0 < abs(gv) < 1 else pv == gv
    return pv == gv or pv == gv / 100


def _big_numbers_equal(ng: str, npred: str) -> bool | None:
    """Plain decimals with an exponent too large to convert, compared by digits and exponent
    (percent signs as in :func:`_numbers_equal`); None when either is not a plain decimal."""
    gpct, ppct = ng.endswith("%"), npred.endswith("%")
    gk = decimal_key(ng.rstrip("%").strip())
    pk = decimal_key(npred.rstrip("%").strip())
    if gk is None or pk is None:
        return None
    if gpct == ppct:
        return gk == pk
    shift = lambda k, d: k if k[0] == 0 else (k[0], k[1], k[2] + d)  # noqa: E731
    if ppct:  # only the unit reading (a gold this large is never in (0, 1))
        return pk == gk
    return pk == gk or pk == shift(gk, -2)


#: relations and hedges a prediction may not add to what the gold says: math-verify reads
#: "3 \\approx 4" as 3 and "3 (or maybe 4)" as 3, so they would earn the reward of "3"
_RELATION_RE = re.compile(
    r"\\(?:approx|sim|simeq|cong|equiv|neq|ne|leq?|geq?|lt|gt|ll|gg|propto|lesssim|gtrsim)"
    r"(?![a-zA-Z])|[<>≈≠≤≥~]|!="
)
_UNIT_WORD_RE = re.compile(f"(?:{_UNITS})", re.IGNORECASE)
_COMMAND_RE = re.compile(r"\\[a-zA-Z]+")
_WORD_RE = re.compile(r"[a-zA-Z]{2,}")
_NUM_RE = re.compile(r"\d+(?:\.\d+)?")
#: words a mathematical answer may contain without the gold containing them
_MATH_WORDS = frozenset(
    "sqrt frac pi sin cos tan cot sec csc log ln exp lg max min gcd lcm deg mod arcsin arccos "
    "arctan sinh cosh tanh det inf infty infinity oo cdot times div".split()
)


def hedged(gold: str, pred: str) -> bool:
    """Whether a (normalised) prediction says more than one answer: a relation the gold does
    not have (``3 \\approx 4``, ``x < 3``), or prose the gold does not have around more than one
    number (``3 (or maybe 4)``, ``5 or 6``, ``between 3 and 5``). One number with a word
    (``5 cookies``, ``about 5``) still names a single value and is read as that value."""
    rel_g = set(_RELATION_RE.findall(gold))
    if any(r not in rel_g for r in _RELATION_RE.findall(pred)):
        return True
    words_g = {w.lower() for w in _WORD_RE.findall(_COMMAND_RE.sub(" ", gold))}
    prose = any(
        w.lower() not in words_g and w.lower() not in _MATH_WORDS and not _UNIT_WORD_RE.fullmatch(w)
        for w in _WORD_RE.findall(_COMMAND_RE.sub(" ", pred))
    )
    return prose and len(_NUM_RE.findall(pred)) > len(_NUM_RE.findall(gold))


def fast_check(gold: str, pred: str) -> bool | None:
    """True/False when decidable without sympy, None when a symbolic check is needed.
    Bounded: no exact conversion of a number whose exponent or length is unbounded."""
    ng, npred = normalize(gold), normalize(pred)
    if ng.replace(" ", "").lower() == npred.replace(" ", "").lower():
        return True
    gnum, pnum = to_number(ng), to_number(npred)
    if gnum is not None and pnum is not None:
        return _numbers_equal(gnum, pnum)
    if gnum is None or pnum is None:  # perhaps a decimal whose exponent was too large to convert
        big = _big_numbers_equal(ng, npred)
        if big is not None:
            return big
        if pnum is None and decimal_key(npred.rstrip("%").strip()) is not None:
            return False  # 1e999999999 against a symbolic gold: never handed to sympy
    if gnum is not None and pnum is None and _looks_like_mixed(npred):
        return False
    if pnum is not None and gnum is None and irrational(ng):
        return False  # a decimal is rational: an approximation of an irrational gold scores 0
    if hedged(ng, npred):
        return False
    return exact_check(ng, npred)


def _looks_like_mixed(s: str) -> bool:
    # "2 2/3 cups" style leftovers that sympy would read as 2*2/3 or as 2
    parts = s.split()
    return len(parts) >= 2 and parts[0].lstrip("-").isdigit() and "/" in parts[1]


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
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    except Exception as e:  # math-verify missing: report and exit
        out.write(json.dumps(["unavailable", repr(e)]) + "\n")
        out.flush()
        return
    latex_first = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]

    @functools.lru_cache(maxsize=8192)
    def parse_answer(s: str):
        # wrapping in $\boxed{}$ makes the LaTeX extractor take the whole string as one
        # expression, which is what an already-extracted answer is
        got = parse("$\\boxed{" + s + "}$", extraction_config=latex_first, parsing_timeout=None)
        if not got:
            got = parse(s, extraction_config=latex_first, parsing_timeout=None)
        return got

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
    "from flowzoo.tasks.math.verify import _worker_main; _worker_main()"
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
            try:
                self._proc.stdin.write((json.dumps([gold, pred]) + "\n").encode())
                self._proc.stdin.flush()
                msg = self._read_line(limit)
            except (OSError, ValueError):
                self._kill()
                return False, "worker_died"
            if msg is not None:
                return bool(msg[0]), str(msg[1])
            if self._proc.poll() is not None:
                self._kill()
                return False, "worker_died"
            self.timeouts += 1
            self._kill()
            return False, "timeout"

    def close(self) -> None:
        with self._lock:
            self._kill()


_CHECKER: SymbolicChecker | None = None
_CHECKER_LOCK = threading.Lock()


def get_checker() -> SymbolicChecker:
    """The process-wide symbolic checker (started on first use)."""
    global _CHECKER
    with _CHECKER_LOCK:
        if _CHECKER is None:
            _CHECKER = SymbolicChecker()
            atexit.register(_CHECKER.close)
        return _CHECKER


#: symbolic verdicts by (gold, prediction): a group of G samples repeats its answers, and a
#: problem is scored many times over a run; only settled verdicts (not timeouts) are kept
_MEMO: dict[tuple[str, str], tuple[bool, str]] = {}
_MEMO_MAX = 1 << 16
_MEMO_REASONS = frozenset({"symbolic", "symbolic_mismatch", "unparsed", "guard_magnitude"})
_MEMO_LOCK = threading.Lock()


def _remember(key: tuple[str, str], verdict: tuple[bool, str]) -> None:
    with _MEMO_LOCK:
        if len(_MEMO) >= _MEMO_MAX:  # drop the oldest half (dicts keep insertion order)
            for k in list(_MEMO)[: _MEMO_MAX // 2]:
                del _MEMO[k]
        _MEMO[key] = verdict


def check(gold: str, prediction: str | None, timeout_s: float | None = None) -> Verdict:
    """Score an extracted answer against the gold answer; never raises."""
    try:
        if prediction is None or not str(prediction).strip():
            return Verdict(0.0, False, None, "no_answer")
        gold, prediction = str(gold), str(prediction)
        if len(prediction) > MAX_ANSWER_CHARS:
            return Verdict(0.0, False, prediction[:MAX_ANSWER_CHARS], "too_long")
        fast = fast_check(gold, prediction)
        if fast is not None:
            return Verdict(float(fast), fast, prediction, "exact" if fast else "mismatch")
        if len(prediction) > MAX_SYMBOLIC_CHARS or len(gold) > MAX_SYMBOLIC_CHARS:
            return Verdict(0.0, False, prediction, "too_long")
        key = (gold, prediction)
        hit = _MEMO.get(key)
        if hit is None:
            hit = get_checker().check(gold, prediction, timeout_s)
            if hit[1] in _MEMO_REASONS:
                _remember(key, hit)
        ok, reason = hit
        return Verdict(float(ok), ok, prediction, reason)
    except Exception as e:  # a verdict, never an exception, whatever the input
        return Verdict(0.0, False, None if prediction is None else str(prediction), f"error:{e!r}")


def is_equivalent(gold: str, prediction: str | None) -> bool:
    """Whether an extracted answer equals the gold answer (math-aware)."""
    return check(gold, prediction).correct
