"""Contamination measured, not assumed: how much of one task set another already holds.

A held-out claim is only as good as the split behind it, so the library measures it. Two
tasks overlap when they ask the same thing, read five ways:

- ``key``: the same canonical key (a generated task's computation, template x constants);
- ``statement``: the same statement up to case, spacing and closing punctuation;
- ``tests``: (code) the same tests;
- ``solved``: (math) the same quantities stated and the same gold answer, whatever the
  words or their order: "Ana has 5 pens and buys 3" and "After buying three pens Ana has
  how many, if she had five?" solve one thing. A reworded or reordered copy keeps what is
  solved, so this catches what wording checks miss;
- ``ngram``: the word n-gram overlap evaluation harnesses use (:data:`NGRAM`-grams, at
  least :data:`NGRAM_COVERAGE` of a problem's n-grams found in one earlier problem), read
  among problems that state the same quantities and whose golds (math: the answer; code:
  the tests) do not differ.

Why the last two are tied to the quantities: problems that merely share a template ("Ana
has 5 pens ..." and "Ana has 7 pens ...", same wording, other numbers and answer) are
different problems, and a plain n-gram check would call them copies. Why they are read only
where a task carries no exact key on both sides: a generator's key *is* what is solved, so
between two generated tasks it decides alone (:func:`is_exact`); the quantities and gold are
the reading of what is solved where no computation is known (a user's rows).

``overlap(train, test)`` says how many of ``test``'s tasks ``train`` already holds by each
criterion, and which tasks repeat within each set; :func:`overlap_matches` names them.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from flowzoo.tasks.base import Task, normalise_statement

#: word n-grams compared: the short end of what evaluation harnesses use (8 to 13 words)
NGRAM = 8
#: share of a problem's n-grams that one earlier problem must hold for an n-gram match
NGRAM_COVERAGE = 0.5
#: fewest quantities a math problem must state for the ``solved`` reading: one number and an
#: answer are too little to say that two problems solve one thing
MIN_QUANTITIES = 2
#: an n-gram held by more problems than this is a template's phrase, not evidence of a copy:
#: it finds no candidates (it still counts toward coverage against a candidate)
COMMON_NGRAM = 64
#: the tasks sharing the most such n-grams whose coverage is checked, per problem
NGRAM_CANDIDATES = 32
#: the characters of a statement read (statements are capped far below at load; this bounds
#: the work for a task built in memory)
MAX_READ_CHARS = 100_000
#: criteria in the order they are reported
CRITERIA = ("key", "statement", "tests", "solved", "ngram")

_UNITS = (
    "zero two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
#: number words read as their value ("one" alone is too often a pronoun, "each one", to be
#: read), and words that state a number outright ("twice as many" is "2 times as many")
_WORDS = {
    **{w: str(0 if w == "zero" else i + 1) for i, w in enumerate(_UNITS)},
    "twice": "2",
    "thrice": "3",
    "dozen": "12",
}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}  # fmt: skip
#: what may follow a tens word in one number ("twenty-one", "thirty five")
_ONES = {w: i + 1 for i, w in enumerate("one two three four five six seven eight nine".split())}
#: a quoted literal: quotes around up to 24 characters without spacing, not an apostrophe
#: inside a word ("Ana's" is no literal)
_QUOTED = r"(?<![a-z0-9])(?:'[^'\s]{1,24}'|\"[^\"\s]{1,24}\")(?![a-z0-9])"
#: a number, signed where the minus is no operator ("or -1", "(-3", not "5-3" or "5 - 3")
_NUM = r"(?:(?<![\w)\]])-(?=\d))?\d+(?:,\d{3})+(?:\.\d+)?|(?:(?<![\w)\]])-(?=\d))?\d+(?:\.\d+)?"
#: words that sign the number after them
_SIGN_WORDS = frozenset({"minus", "negative"})
#: what may come right before a value, so that "minus" there signs it
_BEFORE_A_VALUE = frozenset("is was are were be at to from of reads shows = ( [ :".split())
_TOKEN = re.compile(_NUM + r"|[a-z_]+|" + _QUOTED + r"|[^\s\w]")


def is_exact(task: Task) -> bool:
    """Whether ``task`` carries a key that is what it solves (a generator's computation or
    template x constants), not a key a loader made from a row's text."""
    return bool(task.meta.get("key")) and task.meta.get("key_source") != "row"


def tests_key(task: Task) -> str | None:
    """A code task's tests as one normalised string (None for tasks without tests), so two
    statements of one program with the same tests are caught."""
    tests = task.meta.get("tests")
    if not tests:
        return None
    return "\n".join(sorted(" ".join(str(t).split()) for t in tests))


def _number(text: str) -> str:
    """A written number in one form: ``1,000`` and ``1000``, ``3.50`` and ``3.5`` alike."""
    sign, text = ("-", text[1:]) if text.startswith("-") else ("", text)
    text = text.replace(",", "")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    text = text.lstrip("0") or "0"
    return sign + text if text != "0" else text


def tokens(text: str) -> list[str]:
    """A statement's words, numbers (number words as digits: "five", "twenty-one", "twice",
    "dozen"; not "one" alone), quoted literals and symbols, lower-cased: the units both
    readings compare."""
    raw = _TOKEN.findall(fold_number_forms(text[:MAX_READ_CHARS]).lower())
    out: list[str] = []
    i = 0
    while i < len(raw):
        t = raw[i]
        c = t[0]
        if t in _SIGN_WORDS and i + 1 < len(raw) and raw[i + 1][0].isdigit():
            # "negative 4" is -4; "minus 4" only where a value starts ("it is minus 4",
            # "at minus 4"): elsewhere it is the operator ("5 minus 4", "the sum, minus 4")
            if t == "minus" and out and out[-1] not in _BEFORE_A_VALUE:
                out.append("-")
            else:
                out.append(_number("-" + raw[i + 1]))
                i += 1
            i += 1
            continue
        if c.isdigit() or (c == "-" and len(t) > 1):
            t = _number(t)
        elif len(t) > 2 and c in "'\"" and t[-1] == c:
            t = f"'{t[1:-1]}'"  # 'a' and "a" are one literal
        elif t in _TENS:
            value = _TENS[t]
            k = i + 2 if i + 2 < len(raw) and raw[i + 1] == "-" else i + 1
            if k < len(raw) and raw[k] in _ONES:  # "twenty-one", "thirty five"
                value, i = value + _ONES[raw[k]], k
            t = str(value)
        else:
            t = _WORDS.get(t, t)
        out.append(t)
        i += 1
    return out


def _is_quantity(tok: str) -> bool:
    c = tok[0]
    return c.isdigit() or (c == "-" and len(tok) > 1) or (c == "'" and len(tok) > 2)


def quantities(toks: list[str]) -> tuple[str, ...]:
    """The quantities a statement states, as a sorted multiset: its numbers and quoted
    literals (the constants a template fills in), in any order."""
    return tuple(sorted(t for t in toks if _is_quantity(t)))


_FRAC = re.compile(r"\\d?frac\{([^{}]*)\}\{([^{}]*)\}")
_BOXED = re.compile(r"\\boxed\{(.*)\}")
#: a minus sign that is no ASCII hyphen: U+2212, the fullwidth and small hyphen-minus
_MINUS = str.maketrans({"\u2212": "-", "\uff0d": "-", "\ufe63": "-"})
#: a decimal comma: one comma between digits, not three after it (``1,200`` groups
#: thousands), no comma list around it (``1,2,3``) and no bracket (``(1,2)`` is a pair)
_DECIMAL_COMMA = re.compile(r"(?<![\d,.(\[{])(\d+),(\d{1,2}|\d{4,})(?![\d,)\]}])")
#: thousands grouped by spaces (``1 200``, ``12 345 678``; also no-break and thin spaces)
_SPACED_GROUPS = re.compile(r"(?<![\d.,])\d{1,3}(?:[ \u00a0\u202f\u2009]\d{3})+(?![\d.,/])")


def fold_number_forms(text: str) -> str:
    """``text`` with its numbers written one way: any script's decimal digits as ASCII (``５``,
    ``٥``), any minus sign as ``-``, a decimal comma as a point (``2,5``), thousands grouped
    by spaces joined (``1 200``). What a problem states and its gold are both read through
    it, so a copy in another script or locale states the same quantities."""
    if not text.isascii():
        text = re.sub(r"\d", lambda m: str(unicodedata.decimal(m[0], 0)), text.translate(_MINUS))
    text = _SPACED_GROUPS.sub(lambda m: re.sub(r"\D", "", m[0]), text)
    return _DECIMAL_COMMA.sub(r"\1.\2", text)


def _gold_value(a: str) -> Fraction | None:
    """The exact value a gold states, read as the math verifier reads an answer (its
    normaliser: ``\\$``, ``\\tfrac``, ``\\text{}``, thousands; its unit split: ``11
    dollars``, ``11 pens``; its number words: ``minus 4``, ``twelve``), or None."""
    from flowzoo.tasks.math import words
    from flowzoo.tasks.math.normal import normalize, to_number
    from flowzoo.tasks.math.units import split_unit

    try:
        value, _unit = split_unit(normalize(a))
        got = to_number(value)
        if got is None:
            said = words.read(value)
            got = None if said is None or said == words.UNREAD else to_number(said)
    except (ValueError, ArithmeticError, RecursionError):
        return None
    return None if got is None else got[0]  # ``50%`` and ``50``: one stated quantity


def gold_form(answer: str) -> str:
    """A gold answer in one form: a number as its exact value, whatever its writing
    (``0.5``, ``1/2``, ``\\tfrac{1}{2}``; ``11``, ``\\$11``, ``11 dollars``, ``11 pens``;
    ``-5``, ``\u22125``, ``minus 4``; ``５``; ``2,5``; ``1 200``): marked ``=``; anything else
    without spacing, case or dollar signs."""
    a = answer[:200].strip()
    if a.isascii() and a.isdigit():  # the common case, at once
        return f"={int(a)}"
    m = _BOXED.fullmatch(a)
    a = fold_number_forms(m[1] if m else a)
    v = _gold_value(a)
    if v is not None:
        return f"={v}"
    a = a.replace("$", "").replace("\\!", "").replace("\\%", "%")
    a = _FRAC.sub(r"(\1)/(\2)", "".join(a.split())).rstrip(".%").lower()
    if "," in a:  # a tuple or a list ("(1,2)"), never one number
        return a.lstrip("=")
    num = a.replace("(", "").replace(")", "")
    try:
        n, _, d = num.partition("/")
        return f"={Fraction(n) / Fraction(d) if d else Fraction(n)}"
    except (ValueError, ZeroDivisionError):
        return a.lstrip("=")  # "=" marks a number's form alone


def _grams(toks: list[str]) -> set[int]:
    if len(toks) < NGRAM:
        return {hash(tuple(toks))} if toks else set()
    return {hash(tuple(toks[i : i + NGRAM])) for i in range(len(toks) - NGRAM + 1)}


@dataclass
class _Read:
    """What the ``solved`` and ``ngram`` readings need of one task."""

    exact: bool
    qty: tuple[str, ...]
    #: what the task's answer is checked against: a math gold in one form (:func:`gold_form`),
    #: a code task's tests (:func:`tests_key`); None: none known
    gold: str | None
    grams: set[int]
    math: bool

    @property
    def solved(self) -> tuple | None:
        if not self.math or self.gold is None or len(self.qty) < MIN_QUANTITIES:
            return None
        return (self.qty, self.gold)


def _read(task: Task) -> _Read:
    toks = tokens(task.question)
    math = task.family == "math"
    gold = (gold_form(task.answer) if task.answer.strip() else None) if math else tests_key(task)
    return _Read(is_exact(task), quantities(toks), gold, _grams(toks), math)


def _differ(a: str | None, b: str | None) -> bool:
    """Whether two golds say two answers: both numbers (after :func:`gold_form`: ``8 pens``
    is the number 8) of other values, or both text that differs (a number and a text, ``24``
    and ``x = 24``, cannot be told apart)."""
    if a is None or b is None or a.startswith("=") != b.startswith("="):
        return False
    return a != b


class _Index:
    """One task set, indexed for every criterion (the two readings built on first use)."""

    def __init__(self, tasks: list[Task]) -> None:
        self.tasks = tasks
        self.keys = {str(t.meta["key"]) for t in tasks if t.meta.get("key")}
        self.stmts = {normalise_statement(t.question) for t in tasks}
        self.tests = {k for k in map(tests_key, tasks) if k is not None}
        self.inexact = any(not is_exact(t) for t in tasks)
        self._reads: list[_Read] | None = None
        #: solved reading -> whether a task without an exact key holds it
        self.solved: dict[tuple, bool] = {}
        #: quantities -> n-gram -> the tasks (by position) holding it
        self.postings: dict[tuple, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))

    @property
    def reads(self) -> list[_Read]:
        if self._reads is None:
            self._reads = [_read(t) for t in self.tasks]
            for i, r in enumerate(self._reads):
                s = r.solved
                if s is not None:
                    self.solved[s] = self.solved.get(s, False) or not r.exact
                for g in r.grams:
                    self.postings[r.qty][g].append(i)
        return self._reads

    def matches(self, task: Task) -> tuple[str, ...]:
        """The criteria by which this set already holds ``task``."""
        key, tk = task.meta.get("key"), tests_key(task)
        hit = [
            bool(key) and str(key) in self.keys,
            normalise_statement(task.question) in self.stmts,
            tk is not None and tk in self.tests,
        ]
        if is_exact(task) and not self.inexact:  # generated on both sides: the key decides
            return tuple(c for c, h in zip(CRITERIA, hit, strict=False) if h)
        reads, r = self.reads, _read(task)
        s = r.solved
        hit.append(s is not None and s in self.solved and (self.solved[s] or not r.exact))
        hit.append(self._ngram(r, reads))
        return tuple(c for c, h in zip(CRITERIA, hit, strict=True) if h)

    def _ngram(self, r: _Read, reads: list[_Read]) -> bool:
        """Whether one task of this set stating the same quantities, with no other gold and
        not both exactly keyed, holds :data:`NGRAM_COVERAGE` of ``r``'s n-grams."""
        posts = self.postings.get(r.qty)
        if not posts or not r.grams:
            return False
        shared: Counter[int] = Counter()
        for g in r.grams:
            hold = posts.get(g, ())
            if len(hold) <= COMMON_NGRAM:
                shared.update(hold)
        need = NGRAM_COVERAGE * len(r.grams)
        for i, _ in shared.most_common(NGRAM_CANDIDATES):
            other = reads[i]
            if r.exact and other.exact:
                continue
            if _differ(r.gold, other.gold):
                continue  # the same words asking for another answer (tests): a sibling
            if len(r.grams & other.grams) >= need:
                return True
        return False


@dataclass
class Overlap:
    """How much of ``b`` is already in ``a``, by each criterion, and repeats within each."""

    a: str
    b: str
    n_a: int
    n_b: int
    #: tasks of b whose canonical key (generated tasks: what is solved) occurs in a
    by_key: int
    #: tasks of b whose normalised statement occurs in a
    by_statement: int
    #: tasks of b whose tests occur in a (code)
    by_tests: int
    #: tasks of b overlapping a by any criterion
    any: int
    #: tasks in a (b) that repeat an earlier task of the same set by key or statement
    duplicates_a: int = 0
    duplicates_b: int = 0
    #: a few overlapping ids of b, to look at
    examples: list[str] = field(default_factory=list)
    #: tasks of b stating the quantities of a task of a with its gold (reworded, reordered)
    by_solved: int = 0
    #: tasks of b whose word n-grams one task of a holds (same quantities, no other gold)
    by_ngram: int = 0

    @property
    def fraction(self) -> float:
        """Share of b's tasks that a already holds (by any criterion)."""
        return self.any / self.n_b if self.n_b else 0.0

    def as_dict(self) -> dict:
        return {**self.__dict__, "fraction": self.fraction}

    def counts(self) -> str:
        """The counts by criterion, for a printed line."""
        return (
            f"by key {self.by_key}, statement {self.by_statement}, tests {self.by_tests}, "
            f"solved (quantities + gold) {self.by_solved}, {NGRAM}-gram {self.by_ngram}"
        )


def _duplicates(tasks: list[Task]) -> int:
    seen: set[str] = set()
    dup = 0
    for t in tasks:
        key = t.meta.get("key")
        mine = {f"s:{normalise_statement(t.question)}"} | ({f"k:{key}"} if key else set())
        dup += bool(mine & seen)
        seen |= mine
    return dup


def overlap_matches(a: Iterable[Task], b: Iterable[Task]) -> dict[str, tuple[str, ...]]:
    """Each task of ``b`` that ``a`` already holds (by id), with the criteria that say so."""
    index = _Index(list(a))
    out = {}
    for t in b:
        hit = index.matches(t)
        if hit:
            out[t.id] = hit
    return out


def overlap(a: Iterable[Task], b: Iterable[Task], names: tuple[str, str] = ("a", "b")) -> Overlap:
    """How many tasks of ``b`` (say a test split) ``a`` (a train split, a pretraining
    corpus) already holds, by each of :data:`CRITERIA`."""
    a, b = list(a), list(b)
    found = overlap_matches(a, b)
    c: Counter[str] = Counter(k for hit in found.values() for k in hit)
    return Overlap(
        a=names[0],
        b=names[1],
        n_a=len(a),
        n_b=len(b),
        by_key=c["key"],
        by_statement=c["statement"],
        by_tests=c["tests"],
        any=len(found),
        duplicates_a=_duplicates(a),
        duplicates_b=_duplicates(b),
        examples=list(found)[:5],
        by_solved=c["solved"],
        by_ngram=c["ngram"],
    )


def overlapping(a: Iterable[Task], b: Iterable[Task]) -> list[str]:
    """The ids of every task of ``b`` that ``a`` already holds (by the criteria of
    :func:`overlap`), so a held-out set can be cut down to what is really held out."""
    return list(overlap_matches(a, b))
