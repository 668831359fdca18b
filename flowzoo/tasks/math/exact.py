"""Exact in-process equality for the closed forms most LaTeX answers take, so they need no
symbolic worker: rational multiples of a square root and a power of pi (``\\frac{3\\sqrt{2}}{4}``,
``2\\pi``, ``\\sqrt{8}``), sets, intervals, tuples and matrices of them (``\\{1, 2\\}``,
``[1, 5)``, ``\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}``), numbers written with thousands
separators (``12{,}345``), and polynomials in one variable (:mod:`poly`).

Why it is exact: such a value is ``c * sqrt(s) * pi**k`` with ``c`` rational and ``s``
square-free, and for distinct square-free ``s`` the square roots are linearly independent over
the rationals and pi is transcendental, so two values are equal exactly when their canonical
triples are. Anything outside the grammar (a decimal point, a variable, a sum, ``\\infty``)
returns None and goes to the symbolic check. Bounded: short strings, small integers.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from flowzoo.tasks.math.normal import compact, squeeze
from flowzoo.tasks.math.poly import Cursor, polynomial

#: longer strings are not tried here (the symbolic check takes them)
MAX_CHARS = 120
#: radicands above this are not factorised here
MAX_RADICAND = 10**6
_TOKEN = re.compile(r"\\[dt]?binom|\\frac|\\sqrt|\\pi|\\cdot|\\times|\d+|[{}()*/+\-^!e]")
#: the longest integer read here
MAX_DIGITS = 18
#: the largest numerator or denominator built here (powers, factorials, binomials), in bits
#: (under Python's 4,300-digit limit on writing an integer out): sizes are estimated before
#: computing, so ``9^{9^{9}}`` is refused in microseconds
MAX_BITS = 14_000
MAX_POWER = 4096
#: (rational coefficient, square-free radicand, power of pi)
Closed = tuple[Fraction, int, int]
#: a closed form with a power of e too: (coefficient, radicand, power of pi, power of e)
Value = tuple[Fraction, int, int, int]
_ONE: Value = (Fraction(1), 1, 0, 0)


def _square_free(n: int) -> tuple[int, int]:
    """(k, s) with n = k*k*s and s square-free (n <= MAX_RADICAND)."""
    k, s, d = 1, n, 2
    while d * d <= s:
        while s % (d * d) == 0:
            s //= d * d
            k *= d
        d += 1
    return k, s


def _bits(x: Fraction) -> int:
    return max(x.numerator.bit_length(), x.denominator.bit_length())


def _mul(a: Value, b: Value) -> Value:
    k, s = _square_free(a[1] * b[1]) if a[1] * b[1] <= MAX_RADICAND else (0, 0)
    if s == 0:
        raise ValueError("radicand too large")
    if _bits(a[0]) + _bits(b[0]) > MAX_BITS:
        raise ValueError("coefficient too large")
    return a[0] * b[0] * k, s, a[2] + b[2], a[3] + b[3]


def _inv(a: Value) -> Value:
    if a[0] == 0:
        raise ZeroDivisionError
    return 1 / (a[0] * a[1]), a[1], -a[2], -a[3]  # 1/(c sqrt s) = sqrt(s) / (c s)


def _power(a: Value, n: int) -> Value:
    """``a**n`` for an integer ``n``, refused past the size bounds before it is computed."""
    if abs(n) > MAX_POWER or (_bits(a[0]) + a[1].bit_length()) * abs(n) > MAX_BITS:
        raise ValueError("power too large")
    if n < 0:
        a, n = _inv(a), -n
    c, s = a[0] ** n * Fraction(a[1]) ** (n // 2), a[1] if n % 2 else 1
    return c, s, a[2] * n, a[3] * n


def _integer(v: Value, most: int) -> int:
    if v[1:] != (1, 0, 0) or v[0].denominator != 1 or not 0 <= v[0] <= most:
        raise ValueError("not a small non-negative integer")
    return int(v[0])


class _Parser(Cursor):
    def expr(self) -> Value:
        """[sign] product ['/' product]"""
        sign = 1
        if self.peek() in ("-", "+"):
            sign = -1 if self.take() == "-" else 1
        v = self.product()
        if self.peek() == "/":
            self.take()
            v = _mul(v, _inv(self.product()))
        return v[0] * sign, v[1], v[2], v[3]

    def product(self) -> Value:
        prev = self.peek()
        v = self.power()
        while self.peek() not in (None, "}", "/", ")"):
            if self.peek() in ("\\cdot", "\\times", "*"):
                self.take()
            elif prev is not None and prev.isdigit() and self.peek() == "\\frac":
                raise ValueError("3\\frac{1}{2} may be a mixed number: not read here")
            prev = self.peek()
            v = _mul(v, self.power())
        return v

    def power(self) -> Value:
        """factor ['!'] ['^' integer]: ``2^{10}``, ``\\pi^2``, ``e^{-1}``, ``5!``"""
        v = self.factor()
        if self.peek() == "!":
            self.take()
            if self.peek() == "!":
                raise ValueError("a double factorial is not read here")
            n = _integer(v, 1000)
            v = (Fraction(math.factorial(n)), 1, 0, 0)
        if self.peek() != "^":
            return v
        self.take()
        if self.peek() == "{":
            self.take()
            sign = -1 if self.peek() == "-" else 1
            if self.peek() in ("-", "+"):
                self.take()
            exp = self.take()
            self.take("}")
        else:  # LaTeX takes one character: 2^10 is 2^1 then 0, not read here
            sign, exp = 1, self.take()
            if len(exp) > 1:
                raise ValueError("an unbraced exponent of several digits")
        if not exp.isdigit() or len(exp) > 5:
            raise ValueError("not a small integer exponent")
        return _power(v, sign * int(exp))

    def factor(self) -> Value:
        tok = self.take()
        if tok.isdigit():
            if len(tok) > MAX_DIGITS:
                raise ValueError("integer too long")
            return Fraction(int(tok)), 1, 0, 0
        if tok == "\\pi":
            return Fraction(1), 1, 1, 0
        if tok == "e":
            return Fraction(1), 1, 0, 1
        if tok == "(":
            return self.within_rest(self.expr, ")")
        if tok == "\\sqrt":
            n = self.within("{", self.take, "}")
            if not n.isdigit() or len(n) > 7 or int(n) > MAX_RADICAND:
                raise ValueError("not a small integer radicand")
            k, s = _square_free(int(n))
            return Fraction(k) if int(n) else Fraction(0), s, 0, 0
        if tok == "\\frac":
            num = self.within("{", self.expr, "}")
            return _mul(num, _inv(self.within("{", self.expr, "}")))
        if tok.endswith("binom"):
            n = _integer(self.within("{", self.expr, "}"), 5000)
            k = _integer(self.within("{", self.expr, "}"), 5000)
            return Fraction(math.comb(n, k)), 1, 0, 0
        raise ValueError(f"not a closed-form factor: {tok!r}")

    def within_rest(self, parse, close: str):
        inner = parse()
        self.take(close)
        return inner


#: a number in scientific notation (``1e3``, ``2e-5``): a decimal, never ``1 * e * 3``
_SCI_E = re.compile(r"\de[-+]?\d")


def closed_value(s: str) -> Value | None:
    """The canonical ``(c, s, k, m)`` of ``c * sqrt(s) * pi**k * e**m`` for a normalised answer
    in the grammar (integers, ``\\frac``, ``\\sqrt``, ``\\pi``, ``e``, integer powers,
    factorials, binomials, products, parentheses), else None."""
    s = compact(s)
    if not s or len(s) > MAX_CHARS or "." in s or _SCI_E.search(s):
        return None
    tokens = _TOKEN.findall(s)
    if "".join(tokens) != s:  # something outside the grammar (a variable, a decimal, ...)
        return None
    try:
        p = _Parser(tokens)
        v = p.expr()
        if p.peek() is not None:
            return None
    except (ValueError, ZeroDivisionError):
        return None
    return (Fraction(0), 1, 0, 0) if v[0] == 0 else v


def closed_form(s: str) -> Closed | None:
    """The canonical triple ``(c, s, k)`` of ``c * sqrt(s) * pi**k`` for a normalised answer in
    the grammar without ``e``, else None."""
    v = closed_value(s)
    return None if v is None or v[3] else v[:3]


def same_value(g: Value, p: Value) -> bool | None:
    """Whether two closed values are equal, where that is proven: the same canonical form, or
    forms with the same power of pi or the same power of e (pi and each power of e are
    transcendental); None for two that differ in both (whether pi/e is rational is open)."""
    if g == p or g[0] == 0 or p[0] == 0:
        return g == p
    return False if g[2] == p[2] or g[3] == p[3] else None


def _split_top(s: str) -> list[str]:
    """Split on commas outside braces."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in s:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def composite(s: str) -> tuple[str, tuple] | None:
    """A set ``\\{a, b\\}`` (order and repeats ignored), or an interval or tuple ``(a, b]`` of
    closed forms: (its brackets, its canonical elements), else None. A two-element bracket
    whose ends do not increase is left to the symbolic check (as an interval it is empty)."""
    s = compact(s)
    if len(s) > MAX_CHARS:
        return None
    if s.startswith("\\{") and s.endswith("\\}"):
        kind, inner = "set", s[2:-2]
    elif len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        kind, inner = s[0] + s[-1], s[1:-1]
    else:
        return None
    items = [closed_form(x) for x in _split_top(inner)]
    if len(items) < 2 or any(x is None for x in items):
        return None
    if kind != "set" and len(items) == 2 and not _increasing(items[0], items[1]):
        return None  # (6, 6] and [6, 5) are both empty as intervals: the symbolic check decides
    return (kind, tuple(sorted(set(items)))) if kind == "set" else (kind, tuple(items))


def _value(c: Closed) -> float:
    return float(c[0]) * math.sqrt(c[1]) * math.pi ** c[2]


def _increasing(lo: Closed, hi: Closed) -> bool:
    """lo < hi by a clear margin (an interval that is not empty or degenerate)."""
    a, b = _value(lo), _value(hi)
    return b - a > 1e-9 * max(1.0, abs(a), abs(b))


def _terms(s: str) -> list[str]:
    """A sum split into its signed terms, outside braces (``1-\\frac{1}{2}+\\sqrt{3}``)."""
    s = compact(s)
    out, depth, start = [], 0, 0
    for k, ch in enumerate(s):
        depth += ch == "{"
        depth -= ch == "}"
        if ch in "+-" and depth == 0 and k > start:
            out.append(s[start:k])
            start = k
    out.append(s[start:])
    return out


def irrational(s: str) -> bool:
    """Whether ``s`` is a closed form, or a sum of closed forms, with an irrational value
    (``\\sqrt{2}``, ``3\\pi``, ``1 + \\sqrt{2}``): no finite decimal equals it, so a decimal
    answer is an approximation. A sum is irrational exactly when one of its irrational parts
    keeps a non-zero coefficient: the ``sqrt(s) * pi**k`` of distinct square-free ``s`` and
    powers ``k`` are linearly independent over the rationals."""
    if len(s) > MAX_CHARS:
        return False
    parts: dict[tuple[int, int, int], Fraction] = {}
    for term in _terms(s):
        c = closed_value(term)
        if c is None:
            return False
        parts[c[1:]] = parts.get(c[1:], Fraction(0)) + c[0]
    live = [key for key, v in parts.items() if v != 0 and key != (1, 0, 0)]
    if any(k[1] for k in live) and any(k[2] for k in live):
        return False  # pi and e together: whether such a sum can be rational is open
    return bool(live)  # e**m (m != 0) are independent over the algebraics (Lindemann)


_MATRIX = re.compile(r"^\\begin\{([pb]?)matrix\}(.*)\\end\{\1matrix\}$")
#: thousands separators LaTeX writes (``{,}``, a thin space ``\,``) between digit groups
_GROUPED = re.compile(r"^-?\d{1,3}(?:(?:\{,\}|\\,)\d{3})+$")


def matrix(s: str) -> tuple | None:
    """The rows of a ``pmatrix``/``bmatrix``/``matrix`` of closed forms (the brackets are
    typography: the same matrix), else None."""
    m = _MATRIX.match(compact(s))
    if m is None or len(s) > 4 * MAX_CHARS:
        return None
    rows = [r.split("&") for r in m.group(2).split("\\\\")]
    cells = [[closed_form(c) for c in r] for r in rows]
    if len({len(r) for r in cells}) != 1 or any(c is None for r in cells for c in r):
        return None
    return tuple(tuple(r) for r in cells)


def _ungroup(s: str) -> str:
    """``12{,}345`` and ``12\\,345`` as ``12345``; anything else unchanged."""
    t = squeeze(s)
    return re.sub(r"\{,\}|\\,", "", t) if _GROUPED.match(t) else s


def exact_check(gold: str, pred: str) -> bool | None:
    """True/False when both normalised answers are closed forms (thousands separators read),
    sets/intervals/tuples of them with the same brackets, matrices of them (a column vector
    is its tuple), intervals written either way (``(2, \\infty)``, ``x > 2``), or polynomials
    in the same one variable; None otherwise (the symbolic check decides)."""
    gold, pred = _ungroup(gold), _ungroup(pred)
    g, p = closed_value(gold), closed_value(pred)
    if g is not None and p is not None:
        return same_value(g, p)
    lg, lp = log_value(gold), log_value(pred)
    if lg is not None and lp is not None:
        return lg == lp if lg[0] == lp[0] else None  # \ln against \log: the grader's call
    mg, mp = matrix(gold), matrix(pred)
    if mg is not None and mp is not None:
        return mg == mp
    vg, vp = _vector(gold, mg), _vector(pred, mp)
    if vg is not None and vp is not None:
        return vg == vp
    ig, ip = interval(gold), interval(pred)
    if ig is not None and ip is not None:  # the same set, and the same variable if both name one
        if ig[0] is None and ip[0] is not None and _pair(gold):
            return False  # the gold (3, 4) is an ordered pair: an inequality does not answer it
        return ig[1:] == ip[1:] and (ig[0] is None or ip[0] is None or ig[0] == ip[0])
    cg, cp = composite(gold), composite(pred)
    if cg is None or cp is None:
        return _polynomials(gold, pred)
    if cg[0] == cp[0]:
        return cg[1] == cp[1]
    if cg[0] in _INTERVALS and cp[0] in _INTERVALS and len(cg[1]) == len(cp[1]) == 2:
        return False  # two non-empty intervals with different ends included
    return None  # (a, b) against {a, b}: how lenient to be is the symbolic grader's call


_LOG_RE = re.compile(
    r"^(?:(\d{1,6})(?:\\cdot|\*)?)?\\(ln|log)(?:\{(\d{1,8})\}|\((\d{1,8})\)|(\d{1,8}))$"
)


def log_value(s: str) -> tuple[str, tuple[tuple[int, Fraction], ...]] | None:
    """``c \\ln n`` as (function, the exponent of each prime in ``n**c``): ``2\\ln 3`` and
    ``\\ln 9`` and ``\\ln(9)`` read the same. Exact: the logarithms of primes are linearly
    independent over the rationals (unique factorisation). None outside that form (``n`` has
    at most 8 digits)."""
    m = _LOG_RE.match(compact(s))
    if m is None:
        return None
    c, fn = int(m.group(1) or 1), m.group(2)
    n = int(m.group(3) or m.group(4) or m.group(5))
    if n == 0:
        return None
    out: dict[int, int] = {}
    d = 2
    while d * d <= n:  # n < 10^8: at most 10^4 divisions
        while n % d == 0:
            out[d] = out.get(d, 0) + 1
            n //= d
        d += 1
    if n > 1:
        out[n] = out.get(n, 0) + 1
    return fn, tuple(sorted((p, Fraction(c * e)) for p, e in out.items() if c))


def _pair(s: str) -> bool:
    """Whether ``s`` is ``(a, b)`` with two finite ends: an ordered pair as much as an open
    interval, so only bracket notation answers it (an interval with an infinite or a closed
    end, ``(2, \\infty)``, ``[1, 4)``, is an interval)."""
    t = squeeze(s)
    return t.startswith("(") and t.endswith(")") and "\\infty" not in t and "oo" not in t


def _vector(s: str, rows: tuple | None) -> tuple | None:
    """The entries of a column vector (an n-by-1 matrix) or of a tuple ``(a, b, ...)`` of
    closed forms, n >= 2, in order; else None. A row matrix is not read as a tuple (it is
    not the column vector)."""
    if rows is not None:
        return tuple(r[0] for r in rows) if len(rows) >= 2 and len(rows[0]) == 1 else None
    t = squeeze(s)
    if len(t) > MAX_CHARS or not (t.startswith("(") and t.endswith(")")):
        return None
    items = [closed_form(x) for x in _split_top(t[1:-1])]
    return tuple(items) if len(items) >= 2 and None not in items else None


#: the ends of an interval: (variable or None for bracket notation, lower end included, lower
#: end (None: -infinity), upper end (None: +infinity), upper end included)
Interval = tuple[str | None, bool, Closed | None, Closed | None, bool]
_REL = {"<": (False, 1), ">": (False, -1), "\\lt": (False, 1), "\\gt": (False, -1)}
_REL.update({k: (True, 1) for k in ("\\le", "\\leq", "\\leqslant", "<=", "≤")})
_REL.update({k: (True, -1) for k in ("\\ge", "\\geq", "\\geqslant", ">=", "≥")})
_REL_SPLIT = re.compile(
    r"((?:\\leqslant|\\geqslant|\\leq|\\geq|\\le|\\ge|\\lt|\\gt)(?![a-zA-Z])|<=|>=|[<>≤≥])"
)
_INF = {"\\infty": 1, "+\\infty": 1, "-\\infty": -1, "\\inf": 1, "-\\inf": -1, "oo": 1, "-oo": -1}


def interval(s: str) -> Interval | None:
    """A non-empty interval of the real line, from bracket notation with two ends (``[1, 5)``,
    ``(2, \\infty)``) or from an inequality in one variable (``x > 2``, ``1 \\le x < 5``,
    ``x \\in [1, 5)``); ends are closed forms or infinities. None otherwise."""
    t = squeeze(s)
    if len(t) > MAX_CHARS:
        return None
    m = re.match(r"^([a-df-hj-zA-Z])\\in(?![a-zA-Z])(.*)$", t)
    if m:
        got = _bracketed(m.group(2))
        return None if got is None else (m.group(1), *got[1:])
    if t[:1] in "([" and t[-1:] in ")]":
        return _bracketed(t)
    parts = _REL_SPLIT.split(t)
    if len(parts) not in (3, 5):
        return None
    ops = [_REL[o] for o in parts[1::2]]
    if len({d for _, d in ops}) != 1:
        return None  # 1 < x > 3 is no interval
    if ops[0][1] < 0:  # written downwards: read it upwards
        parts, ops = parts[::-1], [(inc, 1) for inc, _ in reversed(ops)]
    terms = [x.strip() for x in parts[0::2]]
    var = [k for k, x in enumerate(terms) if re.fullmatch(r"[a-df-hj-zA-Z]", x)]  # e, i: constants
    if len(var) != 1 or (len(terms) == 3 and var[0] != 1):
        return None
    v = var[0]
    lo = _end(terms[v - 1]) if v > 0 else None
    hi = _end(terms[v + 1]) if v + 1 < len(terms) else None
    if (v > 0 and lo is None) or (v + 1 < len(terms) and hi is None):
        return None
    lo_c = lo if v > 0 else (-1, None)
    hi_c = hi if v + 1 < len(terms) else (1, None)
    lo_inc = ops[v - 1][0] if v > 0 else False
    hi_inc = ops[v][0] if v + 1 < len(terms) else False
    return _checked(terms[v], lo_inc, lo_c, hi_c, hi_inc)


def _end(s: str) -> tuple[int, Closed | None] | None:
    """An interval end: (0, closed form) or (+-1, None) for an infinity; None if neither."""
    if s in _INF:
        return _INF[s], None
    c = closed_form(s)
    return None if c is None else (0, c)


def _bracketed(t: str) -> Interval | None:
    if len(t) < 2 or t[0] not in "([" or t[-1] not in ")]":
        return None
    items = _split_top(t[1:-1])
    if len(items) != 2:
        return None
    lo, hi = _end(items[0]), _end(items[1])
    if lo is None or hi is None:
        return None
    return _checked(None, t[0] == "[", lo, hi, t[-1] == "]")


def _checked(var, lo_inc, lo, hi, hi_inc) -> Interval | None:
    """The interval, or None when it is empty or its ends are the wrong infinities."""
    if lo[0] > 0 or hi[0] < 0:
        return None  # (+oo, ...) or (..., -oo)
    if lo[0] == 0 and hi[0] == 0 and not _increasing(lo[1], hi[1]):
        return None
    lo_inc = lo_inc and lo[0] == 0  # an infinite end is never included
    hi_inc = hi_inc and hi[0] == 0
    return var, lo_inc, lo[1], hi[1], hi_inc


def _polynomials(gold: str, pred: str) -> bool | None:
    """Equal polynomials in one variable: the same variable and coefficients. Only decided
    where both sides have the variable (a constant against a polynomial is the symbolic
    check's: ``x = 2`` answers may be written either way)."""
    pg, pp = polynomial(gold), polynomial(pred)
    if pg is None or pp is None or not pg[0] or pg[0] != pp[0]:
        return None
    return pg[1] == pp[1]


#: the brackets of a two-element interval (open, closed, half-open)
_INTERVALS = ("()", "(]", "[)", "[]")


__all__ = [
    "closed_form",
    "closed_value",
    "composite",
    "exact_check",
    "interval",
    "log_value",
    "matrix",
]
