"""Math-answer equivalence: exact fast paths first, then math-verify under a hard time limit.

Most answers never reach math-verify: integers, decimals, fractions, mixed numbers and
percentages are compared exactly (as rationals) in-process, and so are closed forms (rational
multiples of a square root, a power of pi and a power of e; integer powers, factorials,
binomials, logarithms of integers), sets, intervals and tuples of them (:mod:`exact`), and
words that change a value (:mod:`words`). The rest goes to a pool of worker processes
(:mod:`worker`) under a hard time limit, its verdicts remembered here.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from fractions import Fraction

from flowzoo.tasks.base import Verdict
from flowzoo.tasks.math import words
from flowzoo.tasks.math.exact import closed_value, exact_check, irrational
from flowzoo.tasks.math.extract import answer_text
from flowzoo.tasks.math.guards import _BASE_RE, _based, _letters, hedged, malformed, unread
from flowzoo.tasks.math.normal import decimal_key, normalize, squeeze, to_number
from flowzoo.tasks.math.units import known_unit, split_unit
from flowzoo.tasks.math.words import number_words
from flowzoo.tasks.math.worker import (  # noqa: F401  (re-exported: the checker's public names)
    DEFAULT_TIMEOUT_S,
    POOL_SIZE,
    SymbolicChecker,
    SymbolicPool,
    get_checker,
)
from flowzoo.tasks.memo import Memo

#: Inputs longer than this are not sent to sympy at all (they are not answers).
MAX_SYMBOLIC_CHARS = 400
#: Longer predictions are not answers: scored 0 without being read (bounds every path)
MAX_ANSWER_CHARS = 2000
#: Longest run of digits a gold or a prediction may hold (hex letters count: ``1011_2`` and
#: ``A3_{16}`` are numbers in a base). Longer is no answer a checker compares: refused, reason
#: ``too_many_digits``, before any conversion (a 50,000-digit gold once took 26 s to reject)
MAX_NUMBER_DIGITS = 1000
_DIGIT_RUN_RE = re.compile(r"[0-9A-Fa-f]+")


def _too_many_digits(s: str) -> bool:
    """Whether ``s`` holds a run of digits longer than :data:`MAX_NUMBER_DIGITS` (linear)."""
    return len(s) > MAX_NUMBER_DIGITS and any(
        m.end() - m.start() > MAX_NUMBER_DIGITS for m in _DIGIT_RUN_RE.finditer(s)
    )


#: what reading an answer may spend of its symbolic budget and still be given all of it
_GRACE_S = 0.1


def _numbers_equal(g: tuple[Fraction, bool], p: tuple[Fraction, bool]) -> bool:
    """Percent signs, one reading both ways: ``%`` is a unit the question asked for, so
    ``25%`` answers ``25%`` and ``25`` and a bare ``25`` answers ``25%``; ``p%`` is never
    ``p/100`` (``0.25`` and ``25%`` are two answers: no answer may be right for both golds)."""
    return g[0] == p[0]


def _big_numbers_equal(ng: str, npred: str) -> bool | None:
    """Plain decimals with an exponent too large to convert, compared by digits and exponent
    (percent signs as in :func:`_numbers_equal`); None when either is not a plain decimal."""
    gk = decimal_key(ng.rstrip("%").strip())
    pk = decimal_key(npred.rstrip("%").strip())
    return None if gk is None or pk is None else gk == pk


def fast_check(ng: str, npred: str) -> bool | None:
    """True/False when two normalised values are decidable without sympy, None when a
    symbolic check is needed. Bounded: no exact conversion of a number whose exponent or
    length is unbounded."""
    if squeeze(ng) == squeeze(npred):
        return True
    if _BASE_RE.search(ng) or _BASE_RE.search(npred):  # 1011_2: the base is part of the value
        return _based(ng) == _based(npred)
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
    if (gnum is None) != (pnum is None):  # a number against a rational closed form (2^{-3})
        c = closed_value(ng if gnum is None else npred)
        if c is not None and c[1:] == (1, 0, 0):
            return c[0] == (gnum or pnum)[0]  # type: ignore[index]
    exact = exact_check(ng, npred)
    if exact is not None:
        return exact
    return False if hedged(ng, npred) else None


def unwrap(s: str) -> str:
    """``s`` without brackets or braces around the whole of one value (``(0.333)``,
    ``{3.14}``): the value's own rules (exact decimals, tiny magnitudes) then apply to it. A
    bracket holding a list (``(1, 2)``) or a set (``\\{1\\}``) is kept."""
    for _ in range(8):
        t = s.strip()
        if len(t) < 2 or (t[0], t[-1]) not in (("(", ")"), ("{", "}")) or not _wraps(t):
            return t
        if "," in t and len(_split_top(t[1:-1], ",")) > 1:
            return t
        s = t[1:-1]
    return s.strip()


def _wraps(t: str) -> bool:
    """Whether the first bracket of ``t`` closes at its last character."""
    depth = 0
    for k, ch in enumerate(t):
        if ch == "\\" and t[k + 1 : k + 2] in ("{", "}"):
            return False  # a \\{ set brace: not a wrapper
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0:
            return k == len(t) - 1
    return False


def _container(s: str) -> str | None:
    """``set`` for ``\\{a, b\\}``, ``seq`` for a pair, tuple or interval ``(a, b]``, else None."""
    t = squeeze(s)
    if t.startswith("\\{") and t.endswith("\\}"):
        return "set"
    if t[:1] in "([" and t[-1:] in ")]" and _wraps(t) and len(_split_top(t[1:-1], ",")) > 1:
        return "seq"
    return None


def _looks_like_mixed(s: str) -> bool:
    # "2 2/3 cups" style leftovers that sympy would read as 2*2/3 or as 2
    parts = s.split()
    return len(parts) >= 2 and parts[0].lstrip("-").isdigit() and "/" in parts[1]


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
    if len(parts) == 2 and not _NAME_RE.fullmatch(head) and _NAME_RE.fullmatch(parts[1]):
        parts = parts[::-1]  # "2 = x" states x = 2
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


def judge(
    ng: str, npred: str, timeout_s: float | None = None, question: str | None = None
) -> tuple[bool, str]:
    """(equal, reason) for two normalised answers. A prediction is right only if everything
    it states is: each value of a chain (``4 = 3`` is not 3), its variable's name where both
    name one (``y = 2x + 3`` is not ``x = 2x + 3``); an unsolved equation answers no value.
    One symbolic time budget for the whole answer: a chain of parts shares it. A wrong list
    of different values for a gold of one value is a hedge. ``question``: the problem
    statement, whose words may stand after a number as its unit (:func:`units.known_unit`)."""
    ok, why = _judge(ng, npred, timeout_s, question)
    if not ok and why != "hedge" and _listed(ng, npred):
        return False, "hedge"
    return ok, why


def _listed(ng: str, npred: str) -> bool:
    """Whether a prediction lists different values (no prose among them) where the gold
    states one."""
    if len(_split_top(ng, ",")) > 1 or _PROSE_RE.search(npred):
        return False
    return len({squeeze(x) for x in _split_top(npred, ",")}) > 1


_PROSE_RE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}")


def _judge(ng: str, npred: str, timeout_s: float | None, question: str | None) -> tuple[bool, str]:
    """:func:`judge` without naming a list as a hedge."""
    budget = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + budget
    compare = functools.partial(_compare, deadline=deadline, budget=budget, question=question)
    sg, sp = statement(ng), statement(npred)
    if sp is None:
        if "," in npred and not _system_ok(npred):
            return False, "false_statement"
        if sg is not None and len(_split_top(npred, ",")) == 1:
            return False, "equation"
        return compare(ng, npred)
    if sg is None:
        return compare(ng, npred)
    (lg, vg), (lp, vp) = sg, sp
    if lg and lp and lg != lp:
        return False, "other_variable"
    verdict = (False, "no_answer")
    for v in vp:
        verdict = compare(vg[-1], v)
        if not verdict[0]:
            return verdict
    return verdict


def compare(ng: str, npred: str, timeout_s: float | None = None) -> tuple[bool, str]:
    """One normalised value against another (see :func:`_compare`), with its own budget."""
    budget = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    return _compare(ng, npred, time.monotonic() + budget, budget)


def _compare(
    ng: str, npred: str, deadline: float, budget: float, question: str | None = None
) -> tuple[bool, str]:
    """One normalised value against another: units by name (a unit on one side only is the
    one the question asked for, when it is a known unit or a word of ``question``: any other
    word is refused, never dropped; two units must be the same; ``%`` is a unit too), then
    exactly, then math-verify on what it reads whole, with every decimal as its exact
    fraction, until ``deadline``. Words that change a value (``3 thousand``, ``5 squared``,
    ``3 and a half``, ``7 percent``) are read first, never taken for a unit
    (:mod:`words`); one that cannot be read whole matches only the same text."""
    rg, rp = words.read(ng), words.read(npred)
    if rg == words.UNREAD or rp == words.UNREAD:
        same = squeeze(ng) == squeeze(npred)
        return same, "exact" if same else "value_words"
    ng, npred = rg or ng, rp or npred
    ng, ug = split_unit(ng)
    npred, up = split_unit(npred)
    if ug and up and ug != up or (ug and npred.endswith("%")) or (up and ng.endswith("%")):
        return False, "unit_mismatch"
    if up and not ug and not known_unit(up, question):
        return False, "unknown_word"  # "3 septillion", "3 tausend": not a unit the gold allows
    ng, npred = unwrap(ng), unwrap(npred)
    if ng.count("'") != npred.count("'"):
        return False, "prime"  # 14' (feet, or a derivative) is not 14
    cg, cp = _container(ng), _container(npred)
    if cg and cp and cg != cp:
        return False, "container_mismatch"  # a set is not a pair, tuple or interval
    fast = fast_check(ng, npred)
    if fast is not None:
        return fast, "exact" if fast else "hedge" if hedged(ng, npred) else "mismatch"
    why = unread(ng, npred)
    if why:
        return False, why
    if len(npred) > MAX_SYMBOLIC_CHARS or len(ng) > MAX_SYMBOLIC_CHARS:
        return False, "too_long"
    left = deadline - time.monotonic()
    if left <= 0:
        return False, "timeout"
    # the whole budget when little of it is spent, so a remembered timeout answers a repeat
    limit = budget if left >= budget - _GRACE_S else left
    return symbolic(exact_decimals(_no_pct(ng)), exact_decimals(_no_pct(npred)), limit)


_DECIMAL_RE = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.])")


def exact_decimals(s: str) -> str:
    """``s`` with every decimal literal as its exact fraction (``0.75`` ->
    ``{\\frac{75}{100}}``): math-verify compares floats rounded to 6 places, which would
    accept ``0.333333`` for 1/3 inside any wrapper."""
    return _DECIMAL_RE.sub(
        lambda m: f"{{\\frac{{{int(m.group(1) + m.group(2))}}}{{1{'0' * len(m.group(2))}}}}}", s
    )


def _no_pct(s: str) -> str:
    """A trailing ``%`` is a unit (see :func:`_numbers_equal`): math-verify would divide by 100."""
    return s[:-1].rstrip() if s.endswith("%") else s


#: symbolic verdicts by (gold, prediction), with the limit they were reached under: a group of
#: G samples repeats its answers, and a problem is scored many times over a run. A timeout is
#: kept too, so an answer built to exhaust the limit costs it once, not once per sample; it
#: answers later checks whose limit is no longer than the one it ran out
_MEMO: Memo[tuple[str, str], tuple[bool, str, float]] = Memo(1 << 16)
_MEMO_REASONS = frozenset(
    {"symbolic", "symbolic_mismatch", "unparsed", "guard_magnitude", "timeout"}
)
#: checks in flight by key: a second asker waits for the first instead of taking a worker
_PENDING: dict[tuple[str, str], threading.Event] = {}
_PENDING_LOCK = threading.Lock()


def symbolic(gold: str, pred: str, timeout_s: float | None = None) -> tuple[bool, str]:
    """math-verify's verdict, remembered; one check per (gold, prediction) at a time."""
    checker = get_checker()
    limit = checker.timeout_s if timeout_s is None else timeout_s
    key = (gold, pred)
    while True:
        with _PENDING_LOCK:  # a finished check is remembered before it leaves _PENDING
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
            _MEMO.put(key, (ok, reason, limit))
        return ok, reason
    finally:
        with _PENDING_LOCK:
            del _PENDING[key]
        done.set()


_INT_RE = re.compile(r"-?\d{1,18}")
_WORDS_RE = re.compile(r"[a-zA-Z]+(?:[ -][a-zA-Z]+)*")
_TEXT_RE = re.compile(r"\\(?:text|textbf|textit|mathrm|mbox|operatorname)\s*\{\s*[a-zA-Z]{2}")


def _text_answer(raw: str, norm: str) -> bool:
    """Whether a gold is words (``\\text{even}``, ``no solution``, ``East``): letters only, and
    written as text or longer than a two-letter product (``ab`` stays algebra)."""
    if not _WORDS_RE.fullmatch(norm) or number_words(norm) is not None:
        return False  # number words are a number ("six", "three thousand")
    if words.read(norm) not in (None, words.UNREAD):
        return False  # so is a value phrase ("two thirds", "half")
    return bool(_TEXT_RE.search(raw)) or " " in norm or "-" in norm or len(norm) >= 3


def _words(s: str) -> str:
    """Words compared case-insensitively (``Yes``, ``yes``), the only place case is dropped."""
    return " ".join(s.replace("-", " ").split()).casefold()


#: settled verdicts by (gold, prediction), and the problem statement where one was given (its
#: words may be units): the G samples of a group repeat their answers and a problem is scored
#: many times over a run, so the in-process work is done once per pair. Only short pairs,
#: never a verdict that depends on a time limit or a worker
_VERDICTS: Memo[tuple[str, ...], tuple[bool, str | None, str]] = Memo(1 << 13)
_MAX_MEMO_CHARS = 400
_UNSETTLED = frozenset({"timeout", "worker_died", "symbolic_unavailable"})


def check(
    gold: str, prediction: str | None, timeout_s: float | None = None, question: str | None = None
) -> Verdict:
    """Score an extracted answer against the gold answer; never raises. ``question``: the
    problem statement, whose nouns may follow the number as its unit (``3 marbles``); without
    it only the unit lexicon's words may (:func:`units.known_unit`)."""
    if not isinstance(gold, str) or not isinstance(prediction, str):
        return _check(gold, prediction, timeout_s, None)
    if not isinstance(question, str):
        question = None
    key = (gold, prediction) if question is None else (gold, prediction, question)
    hit = _VERDICTS.get(key)
    if hit is not None:
        return Verdict(float(hit[0]), hit[0], hit[1], hit[2])
    v = _check(gold, prediction, timeout_s, question)
    settled = v.reason not in _UNSETTLED and not v.reason.startswith("error:")
    if settled and len(gold) + len(prediction) <= _MAX_MEMO_CHARS:
        _VERDICTS.put(key, (v.correct, v.extracted, v.reason))
    return v


def _check(
    gold: str, prediction: str | None, timeout_s: float | None, question: str | None
) -> Verdict:
    """:func:`check` without the memo of settled verdicts."""
    try:
        if prediction is None or not str(prediction).strip():
            return Verdict(0.0, False, None, "no_answer")
        gold, prediction = str(gold), str(prediction)
        if len(prediction) > MAX_ANSWER_CHARS:
            return Verdict(0.0, False, prediction[:MAX_ANSWER_CHARS], "too_long")
        if _too_many_digits(gold) or _too_many_digits(prediction):
            return Verdict(0.0, False, prediction, "too_many_digits")
        # a prediction written as a completion (``#### 18``, ``**18**``, ``\\boxed{18}``) states
        # the answer it marks; two boxes with different answers (a hedge) state none
        stated, why = answer_text(prediction)
        if stated is None or not stated.strip():
            return Verdict(0.0, False, prediction, why or "no_answer")
        prediction = stated
        gold = answer_text(gold)[0] or gold
        g, p = gold.strip(), prediction.strip()
        if _INT_RE.fullmatch(g) and _INT_RE.fullmatch(p):  # most RL answers: nothing to parse
            ok = int(g) == int(p)
        else:
            ng, npred = normalize(gold), normalize(prediction)
            bad = malformed(npred)
            if bad:  # a parser would read one of its pieces
                return Verdict(0.0, False, prediction, bad)
            if _text_answer(gold, ng):  # words are compared as words, never as letter products
                ok = _words(ng) == _words(npred)
                return Verdict(float(ok), ok, prediction, "text" if ok else "text_mismatch")
            ok, reason = judge(ng, npred, timeout_s, question)
            return Verdict(float(ok), ok, prediction, reason)
        return Verdict(float(ok), ok, prediction, "exact" if ok else "mismatch")
    except Exception as e:  # a verdict, never an exception, whatever the input
        return Verdict(0.0, False, None if prediction is None else str(prediction), f"error:{e!r}")


def is_equivalent(gold: str, prediction: str | None) -> bool:
    """Whether an extracted answer equals the gold answer (math-aware)."""
    return check(gold, prediction).correct
