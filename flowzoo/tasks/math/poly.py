"""Exact equality of polynomials in one variable with rational coefficients, in process
(``2x + 12`` against ``12 + 2x``, ``x^2 + 18x + 81`` against ``(x+9)^2``), so they need no
symbolic worker.

Why it is exact: two polynomials are equal as functions exactly when their coefficients are,
and the arithmetic here (sums, products, small integer powers, division by a non-zero
rational) is done on exact fractions. The grammar is small on purpose: one variable (a single
letter other than ``e`` and ``i``, which are constants), integers, ``+ - * / ^``, ``\\cdot``,
``\\times``, ``\\frac{p}{q}`` with a constant ``q``, parentheses and braces, implicit
products. Anything else (a decimal, a second letter, a function, an equation) returns None
and the symbolic check decides. Bounded: short strings, small powers, few terms.
"""

from __future__ import annotations

import re
from fractions import Fraction

from flowzoo.tasks.math.normal import compact

MAX_CHARS = 120
MAX_POWER = 12
MAX_DIGITS = 18
#: the largest numerator or denominator built here, in bits (about 10^4 digits): sizes are
#: estimated before multiplying, so nested constant powers (``((10^18)^{12})^{12}...``) are
#: refused in microseconds and left to the time-limited worker
MAX_BITS = 33_000
_TOKEN = re.compile(r"\\frac|\\cdot|\\times|\\left|\\right|\d+|[a-zA-Z]|[{}()*/^+-]")
#: a polynomial: power -> coefficient (no zero coefficients)
Poly = dict[int, Fraction]


def _clean(p: Poly) -> Poly:
    return {k: v for k, v in p.items() if v != 0}


def _add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, Fraction(0)) + sign * v
    return _clean(out)


def _mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for i, x in a.items():
        for j, y in b.items():
            if i + j > MAX_POWER:
                raise ValueError("degree too high")
            if _bits(x) + _bits(y) > MAX_BITS:
                raise ValueError("coefficient too large")
            out[i + j] = out.get(i + j, Fraction(0)) + x * y
    return _clean(out)


def _bits(x: Fraction) -> int:
    return max(x.numerator.bit_length(), x.denominator.bit_length())


def _const(p: Poly) -> Fraction | None:
    """The value of a constant polynomial, else None."""
    if not p:
        return Fraction(0)
    return p.get(0) if set(p) == {0} else None


class Cursor:
    """A token list read front to back (the exact paths' recursive-descent parsers share it)."""

    def __init__(self, tokens: list[str]) -> None:
        self.t, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise ValueError(f"expected {want!r}")
        self.i += 1
        return tok

    def within(self, open_: str, parse, close: str):
        """``open_`` then what ``parse()`` reads then ``close``: one bracketed group."""
        self.take(open_)
        inner = parse()
        self.take(close)
        return inner


class _Parser(Cursor):
    def __init__(self, tokens: list[str], var: str) -> None:
        super().__init__(tokens)
        self.var = var

    def sum(self) -> Poly:
        """[sign] term {(+|-) [sign] term}"""
        sign = -1 if self.peek() == "-" else 1
        if self.peek() in ("+", "-"):
            self.take()
        acc = _mul({0: Fraction(sign)}, self.term())
        while self.peek() in ("+", "-"):
            sign = 1 if self.take() == "+" else -1
            while self.peek() in ("+", "-"):  # "3x + -21", "6x - -26"
                sign *= 1 if self.take() == "+" else -1
            acc = _add(acc, self.term(), sign)
        return acc

    def term(self) -> Poly:
        """power {[* | \\cdot | \\times | /] power}, products implicit"""
        acc = self.power()
        while self.peek() not in (None, "+", "-", ")", "}"):
            op = self.peek()
            if op in ("*", "\\cdot", "\\times"):
                self.take()
            elif op == "/":
                self.take()
                acc = self._divide(acc, self.power())
                continue
            acc = _mul(acc, self.power())
        return acc

    def power(self) -> Poly:
        base = self.atom()
        if self.peek() != "^":
            return base
        self.take()
        n = self.within("{", self.take, "}") if self.peek() == "{" else self.take()
        if not n.isdigit() or int(n) > MAX_POWER:
            raise ValueError("not a small integer power")
        out: Poly = {0: Fraction(1)}
        for _ in range(int(n)):
            out = _mul(out, base)
        return out

    def atom(self) -> Poly:
        tok = self.take()
        if tok.isdigit():
            if len(tok) > MAX_DIGITS:
                raise ValueError("integer too long")
            return _clean({0: Fraction(int(tok))})
        if tok == self.var:
            return {1: Fraction(1)}
        if tok in ("(", "{"):
            inner = self.sum()
            self.take(")" if tok == "(" else "}")
            return inner
        if tok == "\\left":
            inner = self.within("(", self.sum, "\\right")
            self.take(")")
            return inner
        if tok == "\\frac":
            num = self.within("{", self.sum, "}")
            return self._divide(num, self.within("{", self.sum, "}"))
        raise ValueError(f"not a polynomial atom: {tok!r}")

    @staticmethod
    def _divide(num: Poly, den: Poly) -> Poly:
        c = _const(den)
        if c is None or c == 0:
            raise ValueError("only division by a non-zero constant")
        return {k: v / c for k, v in num.items()}


def polynomial(s: str) -> tuple[str, Poly] | None:
    """(its variable, its coefficients) for a normalised answer in the grammar, else None.
    A constant has variable ``""``."""
    s = compact(s)
    if not s or len(s) > MAX_CHARS:
        return None
    tokens = _TOKEN.findall(s)
    if "".join(tokens) != s:  # a decimal, a command outside the grammar, ...
        return None
    letters = {t for t in tokens if len(t) == 1 and t.isalpha()}
    if len(letters) > 1 or letters & {"e", "i", "E", "I"}:
        return None
    var = next(iter(letters), "")
    try:
        p = _Parser(tokens, var)
        poly = p.sum()
        if p.peek() is not None:
            return None
    except (ValueError, ZeroDivisionError, IndexError):
        return None
    return (var if any(k > 0 for k in poly) else ""), poly


__all__ = ["Cursor", "polynomial"]
