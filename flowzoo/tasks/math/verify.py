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
import queue
import re
import select
import subprocess
import sys
import threading
import time
from fractions import Fraction

from flowzoo.tasks.base import Verdict
from flowzoo.tasks.math.exact import exact_check, irrational
from flowzoo.tasks.math.extract import (
    _UNITS,
    decimal_key,
    normalize,
    split_unit,
    squeeze,
    to_number,
)

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


def fast_check(ng: str, npred: str) -> bool | None:
    """True/False when two normalised values are decidable without sympy, None when a
    symbolic check is needed. Bounded: no exact conversion of a number whose exponent or
    length is unbounded."""
    if squeeze(ng).lower() == squeeze(npred).lower():
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
    exact = exact_check(ng, npred)
    if exact is not None:
        return exact
    return False if hedged(ng, npred) else None


def _looks_like_mixed(s: str) -> bool:
    # "2 2/3 cups" style leftovers that sympy would read as 2*2/3 or as 2
    parts = s.split()
    return len(parts) >= 2 and parts[0].lstrip("-").isdigit() and "/" in parts[1]


#: commands math-verify evaluates as the LaTeX means them; any other command a prediction
#: adds (``\cap``, ``\to``, ``\quad``, ``\pm``) it reads as one of its operands ("3 \cap 4" as 4)
_EVALUATED = frozenset(
    "frac sqrt pi cdot times div sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh "
    "log ln exp lg infty inf binom lfloor rfloor lceil rceil begin end alpha beta gamma delta "
    "epsilon varepsilon theta vartheta lambda mu nu rho sigma tau phi varphi omega".split()
)
#: characters of the arithmetic grammar; any other a prediction adds is an operator math-verify
#: does not evaluate as written (``:``, ``;``, ``→``, ``∩``)
_PLAIN = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 +-*/^_()[]{},.!'%|\\=<>"
)
#: separators that join values into a list math-verify reads as its last item ("3 ... 4")
_JOINERS = ("..",)
#: digits apart, not as a subscript or power ("1 0"; "\\log_2 4" is one value)
_SPLIT_NUMBER_RE = re.compile(r"(?<![_^\d])\d+ \d")
_ENV_RE = re.compile(r"\\(?:begin|end)\{[a-zA-Z*]*\}")


def _letters(s: str) -> set[str]:
    """The variables of an answer: its letters outside command names."""
    return set(re.findall(r"[a-zA-Z]", _COMMAND_RE.sub(" ", _ENV_RE.sub(" ", s))))


def unread(ng: str, npred: str) -> str | None:
    """Why math-verify would read less than the whole prediction, else None: a command or a
    symbol it does not evaluate (``3 \\cap 4``, ``3 : 4``), unless the gold has it too; an
    unpaired ``|`` (``3 | 4``); digits apart (``1 0``) that are no mixed number; other variables than the gold's (``2ab`` for 2, 2 for ``2m``). Its fallback reads such answers as
    one operand, so they would earn the reward of that operand."""
    cmds = set(_COMMAND_RE.findall(npred)) - set(_COMMAND_RE.findall(ng))
    if any(c[1:] not in _EVALUATED for c in cmds):
        return "unknown_operator"
    extra = set(npred) - set(ng) - _PLAIN
    if extra and not (extra == {"&"} and "\\begin" in npred):
        return "unknown_operator"
    if npred.count("|") % 2 or any(op in npred and op not in ng for op in _JOINERS):
        return "unknown_operator"
    if "\\\\" in npred and "\\begin" not in npred and "\\\\" not in ng:
        return "unknown_operator"  # a line break outside a matrix: "3 \\ 4"
    if _SPLIT_NUMBER_RE.search(squeeze(npred)) and not _SPLIT_NUMBER_RE.search(squeeze(ng)):
        return "split_number"  # "1 0": 10, or 1 * 0 as math-verify reads it?
    if _letters(npred) != _letters(ng):
        return "other_variables"  # math-verify drops some letters as units: "2m" reads as 2
    return None


def _split_top(s: str, sep: str) -> list[str]:
    """``s`` split on ``sep`` outside brackets; ``=`` only where it is not part of ``<=``,
    ``>=``, ``!=`` or ``==``."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(s):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == sep and depth == 0:
            if sep == "=" and (s[k - 1 : k] in ("<", ">", "!", "=") or s[k + 1 : k + 2] == "="):
                continue
            parts.append(s[start:k])
            start = k + 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


_NAME_RE = re.compile(r"[a-zA-Z](?:_\{?\w+\}?)?(?:\([a-zA-Z]\))?")


def statement(s: str) -> tuple[str, list[str]] | None:
    """What a normalised answer states: ``("", [s])`` for a value; ``(name, values)`` for an
    assignment (``x = 5``, ``f(x) = 2x + 3``) or a chain of constants (``2 + 1 = 3``: every
    value stated); None for an equation to solve (``x = 2x + 3``, ``x^2 = 4``) or a system."""
    parts = _split_top(s, "=")
    if len(parts) == 1:
        return "", parts
    if not all(parts) or len(_split_top(s, ",")) > 1:
        return None
    head = parts[0]
    if _NAME_RE.fullmatch(head):
        if any(head[0] in _letters(p) for p in parts[1:]):
            return None  # the name is on the right too: an equation, not its solution
        return head, parts[1:]
    return ("", parts) if not any(_letters(p) for p in parts) else None


def _system_ok(s: str) -> bool:
    """Whether every item of a comma-separated system assigns one value to a name
    (``x = 2, y = 3``); ``x = 2, 4 = 3`` states something false or unread."""
    for item in _split_top(s, ","):
        st = statement(item)
        if st is None or (len(st[1]) > 1 or ("=" in item and not st[0])):
            return False
    return True


def judge(ng: str, npred: str, timeout_s: float | None = None) -> tuple[bool, str]:
    """(equal, reason) for two normalised answers. A prediction is right only if everything
    it states is: each value of a chain (``4 = 3`` is not 3), its variable's name where both
    name one (``y = 2x + 3`` is not ``x = 2x + 3``); an unsolved equation answers no value."""
    sg, sp = statement(ng), statement(npred)
    if sp is None:
        if "," in npred and not _system_ok(npred):
            return False, "false_statement"
        if sg is not None and len(_split_top(npred, ",")) == 1:
            return False, "equation"
        return compare(ng, npred, timeout_s)
    if sg is None:
        return compare(ng, npred, timeout_s)
    (lg, vg), (lp, vp) = sg, sp
    if lg and lp and lg != lp:
        return False, "other_variable"
    verdict = (False, "no_answer")
    for v in vp:
        verdict = compare(vg[-1], v, timeout_s)
        if not verdict[0]:
            return verdict
    return verdict


def compare(ng: str, npred: str, timeout_s: float | None = None) -> tuple[bool, str]:
    """One normalised value against another: units by name (a unit on one side only is the
    one the question asked for; two units must be the same), then exactly, then math-verify
    on what it reads whole."""
    ng, ug = split_unit(ng)
    npred, up = split_unit(npred)
    if ug and up and ug != up:
        return False, "unit_mismatch"
    fast = fast_check(ng, npred)
    if fast is not None:
        return fast, "exact" if fast else "mismatch"
    why = unread(ng, npred)
    if why:
        return False, why
    if len(npred) > MAX_SYMBOLIC_CHARS or len(ng) > MAX_SYMBOLIC_CHARS:
        return False, "too_long"
    return symbolic(ng, npred, timeout_s)


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


#: symbolic verdicts by (gold, prediction), with the limit they were reached under: a group of
#: G samples repeats its answers, and a problem is scored many times over a run. A timeout is
#: kept too, so an answer built to exhaust the limit costs it once, not once per sample; it
#: answers later checks whose limit is no longer than the one it ran out
_MEMO: dict[tuple[str, str], tuple[bool, str, float]] = {}
_MEMO_MAX = 1 << 16
_MEMO_REASONS = frozenset(
    {"symbolic", "symbolic_mismatch", "unparsed", "guard_magnitude", "timeout"}
)
_MEMO_LOCK = threading.Lock()
#: checks in flight by key: a second asker waits for the first instead of taking a worker
_PENDING: dict[tuple[str, str], threading.Event] = {}


def _remember(key: tuple[str, str], verdict: tuple[bool, str, float]) -> None:
    with _MEMO_LOCK:
        if len(_MEMO) >= _MEMO_MAX:  # drop the oldest half (dicts keep insertion order)
            for k in list(_MEMO)[: _MEMO_MAX // 2]:
                del _MEMO[k]
        _MEMO[key] = verdict


def symbolic(gold: str, pred: str, timeout_s: float | None = None) -> tuple[bool, str]:
    """math-verify's verdict, remembered; one check per (gold, prediction) at a time."""
    checker = get_checker()
    limit = checker.timeout_s if timeout_s is None else timeout_s
    key = (gold, pred)
    while True:
        with _MEMO_LOCK:
            hit = _MEMO.get(key)
            if hit is not None and (hit[1] != "timeout" or limit <= hit[2]):
                return hit[0], hit[1]
            busy = _PENDING.get(key)
            if busy is None:
                _PENDING[key] = done = threading.Event()
                break
        busy.wait()
    try:
        ok, reason = checker.check(gold, pred, timeout_s)
        if reason in _MEMO_REASONS:
            _remember(key, (ok, reason, limit))
        return ok, reason
    finally:
        with _MEMO_LOCK:
            del _PENDING[key]
        done.set()


_INT_RE = re.compile(r"-?\d{1,18}")


def check(gold: str, prediction: str | None, timeout_s: float | None = None) -> Verdict:
    """Score an extracted answer against the gold answer; never raises."""
    try:
        if prediction is None or not str(prediction).strip():
            return Verdict(0.0, False, None, "no_answer")
        gold, prediction = str(gold), str(prediction)
        if len(prediction) > MAX_ANSWER_CHARS:
            return Verdict(0.0, False, prediction[:MAX_ANSWER_CHARS], "too_long")
        g, p = gold.strip(), prediction.strip()
        if _INT_RE.fullmatch(g) and _INT_RE.fullmatch(p):  # most RL answers: nothing to parse
            ok = int(g) == int(p)
        else:
            ok, reason = judge(normalize(gold), normalize(prediction), timeout_s)
            return Verdict(float(ok), ok, prediction, reason)
        return Verdict(float(ok), ok, prediction, "exact" if ok else "mismatch")
    except Exception as e:  # a verdict, never an exception, whatever the input
        return Verdict(0.0, False, None if prediction is None else str(prediction), f"error:{e!r}")


def is_equivalent(gold: str, prediction: str | None) -> bool:
    """Whether an extracted answer equals the gold answer (math-aware)."""
    return check(gold, prediction).correct
