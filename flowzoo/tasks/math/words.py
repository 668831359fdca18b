"""Words after (or around) a number that change its value: multipliers (``3 thousand``,
``2 dozen``), powers (``5 squared``, ``2 to the power of 10``), fractions and ratios
(``3 and a half``, ``two thirds``, ``7 percent``), factorials and operator words (``3 plus 4``,
``6 divided by 2``).

Why: the unit rules accept a word after a number when the gold has none (``14 eggs`` answers
14), so a word that is not a unit but changes the value (``3 thousand`` for 3) would be dropped
and a wrong answer rewarded. Such a phrase is either read to its exact value (``3 thousand`` is
3000, ``5 squared`` 25) or, where it cannot be read whole, refused: it equals only the same text.
Pure string work on short answers; every value is exact (rationals) and bounded in size.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

#: multipliers by word (a plural multiplies too: ``3 hundreds`` is 300)
MULTIPLIERS: dict[str, int] = {
    "hundred": 100,
    "thousand": 10**3,
    "million": 10**6,
    "billion": 10**9,
    "trillion": 10**12,
    "quadrillion": 10**15,
    "quintillion": 10**18,
    "sextillion": 10**21,
    "dozen": 12,
    "lakh": 10**5,
    "crore": 10**7,
}
MULTIPLIERS.update({w + "s": v for w, v in list(MULTIPLIERS.items())})
MULTIPLIERS.update({"score": 20, "tens": 10})
_ORDINALS = (
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
    "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth"
).split()
#: ordinal words as exponents (``to the third power``)
ORDINAL_VALUES: dict[str, int] = {w: i for i, w in enumerate(_ORDINALS, 1)}
ORDINAL_VALUES.update(
    {
        w + "ieth": 10 * i
        for i, w in enumerate("twent thirt fort fift sixt sevent eight ninet".split(), 2)
    }
)
ORDINAL_VALUES.update({"hundredth": 100, "thousandth": 1000})
#: fraction words by denominator: ``3 quarters`` is 3/4. Never ``second(s)`` (a time unit) or
#: ``first``
DENOMINATORS: dict[str, int] = {"half": 2, "halves": 2, "halfs": 2, "quarter": 4, "quarters": 4}
for _w, _v in ORDINAL_VALUES.items():
    if _v > 2:
        DENOMINATORS[_w] = DENOMINATORS[_w + "s"] = _v
for _w, _v in (("millionth", 10**6), ("billionth", 10**9), ("trillionth", 10**12)):
    DENOMINATORS[_w] = DENOMINATORS[_w + "s"] = _v
POWERS = {"squared": 2, "cubed": 3}
PERCENT = frozenset({"percent", "percents", "pct", "percentage"})
#: binary operator words; ``multiplied``/``divided`` take a ``by``
OPERATORS = frozenset({"plus", "minus", "times", "over", "mod", "modulo", "multiplied", "divided"})
#: words that make a value approximate (never read, and never part of a phrase taken out of
#: prose: "roughly 6.02e23" states 6.02e23)
APPROXIMATE = frozenset("approximately approx roughly about around nearly almost circa ish".split())
#: words that change or qualify a value and are never read here: an answer with one of them
#: equals only the same text (``3 fold``, ``5 grand``, ``about 5``, ``2 root 3``, ``5 below``)
REFUSED = APPROXIMATE | frozenset(
    "scores gross grand mil mill mln mn bn bln thou permille mille bps ppm ppb ppt basis fold "
    "twice thrice double doubled triple tripled quadruple quadrupled halved square cube root "
    "power powers exponent raised factorial inverse reciprocal negative negated opposite "
    "minimum maximum zillion zillions gazillion bazillion jillion myriad googol mils lac lacs "
    "bil tril trn mio mrd hundo cubic below under googolplex umpteen".split()
)
#: multipliers and hundreds in other languages (Latin script; a word in another script is
#: no LaTeX the checker reads): never read, never taken for a unit
FOREIGN = frozenset(
    "tausend tausende hundert hunderte millionen milliarde milliarden billionen mille milliard "
    "milliards millon millones cien ciento cientos mila milione milioni miliardo miliardi cento "
    "milhao milhoes bilhao biliao duizend honderd miljoen miljoenen miljard tusen tusind hundra "
    "hundre miljon miljoner milion miliony milionow miliard miliardy tysiac tysiace tysiecy tisic "
    "tisice tuhat tuhatta miljoona miljoonaa ezer millio milliardo ribu juta ratus miliar nghin "
    "ngan trieu elfu hazar hazaar hajar lakhs crores kharab".split()
)
#: endings of multiplier words a list cannot hold (``septillion``, ``Milliarden``, ``tenfold``)
SUFFIXES = ("fold", "illion", "illions", "illiard", "illiards", "illiarde", "illionen")
#: every word that makes an answer a value phrase rather than a number with a unit
VALUE_WORDS = frozenset(MULTIPLIERS) | frozenset(DENOMINATORS) | frozenset(POWERS) | PERCENT
VALUE_WORDS |= OPERATORS | REFUSED | FOREIGN
#: a word (a run of letters not part of a LaTeX command name)
_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]+")
#: value words of two parts: "7 per cent", "2 and 3/4"
_PAIRED_RE = re.compile(r"\bper\s+cent\b|\d\s+and\s+(?:\d+\s*/|\\frac)", re.IGNORECASE)
#: unit words that ``square``/``cube``/``squared``/``cubed`` may go with (``24 square units``,
#: ``5 meters squared``): there they name an area or a volume, not a power
_AREA = frozenset({"square", "cube", "cubic", "squared", "cubed"})
_NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty "
    "ninety hundred thousand million billion and".split()
)
_TOKEN_RE = re.compile(
    r"\s*(?:(?P<frac>\\frac\{(\d+)\}\{(\d+)\})|(?P<num>\d+(?:\.\d+)?(?:/\d+)?)"
    r"(?:(?P<ord>st|nd|rd|th)(?![a-z]))?|(?P<word>[a-z]+)|(?P<sym>[-%]))"
)
#: the largest value written out here, in characters (``2 to the power of 1000`` is 302)
MAX_DIGITS = 400
MAX_EXPONENT = 4096
MAX_FACTORIAL = 300
#: what :func:`read` answers for a phrase with a value word that it cannot read whole
UNREAD = "\x00unread"


_ONES = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen".split()
    )
}
_TENS = {
    w: 10 * i
    for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)
}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9}


def number_words(s: str) -> int | None:
    """The integer English words name (``six``, ``twenty-one``, ``three hundred and five``,
    ``minus two``), else None. Strict: ``five five`` or ``twenty thirty`` name no number."""
    words = [w for w in re.split(r"[\s-]+", s.lower().strip()) if w]
    sign = 1
    if words and words[0] in ("minus", "negative"):
        sign, words = -1, words[1:]
    if not words or len(words) > 20:
        return None
    total, group, last_scale, stage = 0, 0, None, 0  # stage: 0 start, 1 hundreds, 2 tens, 3 ones
    for w in words:
        if w in _ONES and stage < 3 and not (stage == 2 and (_ONES[w] == 0 or _ONES[w] > 9)):
            group, stage = group + _ONES[w], 3
        elif w in _TENS and stage < 2:
            group, stage = group + _TENS[w], 2
        elif w == "hundred" and stage == 3 and 0 < group < 10:
            group, stage = group * 100, 1
        elif w == "and" and stage == 1:
            continue
        elif w in _SCALES and stage and group and (last_scale is None or _SCALES[w] < last_scale):
            total, group, last_scale, stage = total + group * _SCALES[w], 0, _SCALES[w], 0
        else:
            return None
    if stage == 0 and last_scale is None:
        return None
    return sign * (total + group)


class _Unread(Exception):
    """A value word in a phrase this grammar does not read whole."""


def has_value_word(s: str) -> bool:
    """Whether ``s`` has a word that changes a value (not inside a LaTeX command name). A set
    lookup per word: one regex alternation over every value word costs ~50x more."""
    found = {w.lower() for w in _WORD_RE.findall(s)}
    if found & VALUE_WORDS or any(w.endswith(SUFFIXES) for w in found):  # "threefold"
        return True
    return bool(found & {"per", "and"}) and _PAIRED_RE.search(s) is not None


def is_value_word(w: str) -> bool:
    """Whether one (lowercase) word changes a value: a value word, or one with a
    multiplier's ending."""
    return w in VALUE_WORDS or w.endswith(SUFFIXES)


def read(s: str) -> str | None:
    """``s`` with its value phrase written as the exact number and whatever unit words follow
    kept (``3 thousand dollars`` -> ``3000 dollars``, ``7 percent`` -> ``7%``, ``3 and a half``
    -> ``7/2``); None when ``s`` has no value word; :data:`UNREAD` when it has one that cannot
    be read whole (``3 thousand 5 thousand``, ``x squared``, ``3 times``)."""
    if not has_value_word(s):
        return None
    try:
        return _Reader(s).phrase()
    except (_Unread, ValueError, ZeroDivisionError, OverflowError):
        return UNREAD


def text_of(v: Fraction, pct: bool = False) -> str:
    """A value as the checker's number syntax: ``3000``, ``-7/2``, ``25%``."""
    out = str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"
    if len(out) > MAX_DIGITS:
        raise _Unread("value too long")
    return out + ("%" if pct else "")


class _Reader:
    """A cursor over the tokens of one answer, read front to back."""

    def __init__(self, s: str) -> None:
        self.s = s
        low = s.lower()
        self.toks: list[tuple[str, str, int]] = []  # (kind, text, start)
        pos = 0
        while pos < len(low) and low[pos:].strip():
            m = _TOKEN_RE.match(low, pos)
            if m is None:
                raise _Unread(f"unread character at {pos}")
            kind = next(k for k in ("frac", "num", "word", "sym") if m.group(k) is not None)
            start = m.start(kind)
            if kind == "num" and m.group("ord"):
                kind = "ord"
            text = m.group(kind if kind != "ord" else "num")
            if kind == "sym" and text == "-" and self.toks:
                # a hyphen joins words (``two-thirds``, ``3-dozen``); after a word it is a sign
                # (``to the power of -2``); between numbers it is arithmetic, not read here
                if low[m.end() : m.end() + 1].isalpha():
                    pos = m.end()
                    continue
                if self.toks[-1][0] != "word":
                    raise _Unread("minus between numbers")
            self.toks.append((kind, text, start))
            pos = m.end()
        self.i = 0

    # -------------------------------------------------------------- cursor

    def peek(self, k: int = 0) -> tuple[str, str]:
        j = self.i + k
        return self.toks[j][:2] if j < len(self.toks) else ("", "")

    def word(self, k: int = 0) -> str:
        kind, text = self.peek(k)
        return text if kind == "word" else ""

    def accept(self, *words: str) -> bool:
        if self.word() in words:
            self.i += 1
            return True
        return False

    # -------------------------------------------------------------- grammar

    def phrase(self) -> str:
        """[sign] operand [operator operand] [unit words]"""
        sign = -1 if self.peek() == ("sym", "-") or self.word() in ("minus", "negative") else 1
        if sign < 0:
            self.i += 1
        v, pct = self.operand()
        v *= sign
        op = self.word()
        if op in OPERATORS:
            if pct:
                raise _Unread("a percentage in arithmetic")
            self.i += 1
            if op in ("multiplied", "divided") and not self.accept("by"):
                raise _Unread(f"{op} without by")
            w, wpct = self.operand()
            if wpct:
                raise _Unread("a percentage in arithmetic")
            v = _apply(op, v, w)
        return (text_of(v, pct) + " " + self.rest()).strip()

    def operand(self) -> tuple[Fraction, bool]:
        """quantity [power | factorial] [percent] [of operand]"""
        v, fractional = self.quantity()
        v = self.postfix(v)
        pct = self.percent()
        if (pct or fractional) and self.accept("of"):
            w, wpct = self.operand()
            if wpct:
                raise _Unread("a percentage of a percentage")
            v, pct = (v / 100 if pct else v) * w, False
        return v, pct

    def quantity(self) -> tuple[Fraction, bool]:
        """(value, whether it is a fraction word's): a whole with its multipliers, a fraction
        (``two thirds``, ``a half``), or a whole and a fraction (``3 and a half``, ``2 1/2``),
        then multipliers if none came yet (``2 and a half million``, ``half a dozen``)."""
        v, scaled = self.whole()
        fractional = False
        if v is None:
            f = self.fraction()
            if f is None:
                raise _Unread("no number")
            v, fractional = f, True
        else:  # a whole and a fraction: "3 and a half", "2 and 3/4", "2 1/2 dozen"
            save = self.i
            self.accept("and")
            f = self.fraction()
            kind, text = self.peek()
            if f is None and (kind == "frac" or (kind == "num" and "/" in text)):
                f = self.number()
            if f is not None and 0 < f < 1 and v.denominator == 1:
                v += f
            else:
                self.i = save
        if not scaled:
            save = self.i
            self.accept("a", "an")
            m = self.multipliers()
            if m > 1:
                v, fractional = v * m, False
            else:
                self.i = save
        return v, fractional

    def whole(self) -> tuple[Fraction | None, bool]:
        """A number and its multipliers, then smaller terms (``3 thousand 5 hundred and 2``)."""
        total: Fraction | None = None
        prev = 0
        scaled = False
        while True:
            save = self.i
            if total is not None:
                self.accept("and")
            n = self.number()
            if n is None or self.word() in DENOMINATORS:
                self.i = save
                break
            m = self.multipliers()
            if total is not None:
                if prev == 1 or n * m >= prev:
                    self.i = save
                    break
                total += n * m
            else:
                total = n * m
            scaled = scaled or m > 1
            prev = m
            if m == 1:
                break
        return total, scaled

    def multipliers(self) -> int:
        """The product of the multiplier words here, each larger than the one before
        (``hundred thousand``); 1 without one."""
        out, last = 1, 0
        while self.word() in MULTIPLIERS and MULTIPLIERS[self.word()] > last:
            last = MULTIPLIERS[self.word()]
            out *= last
            self.i += 1
        return out

    def fraction(self) -> Fraction | None:
        """``two thirds``, ``3 quarters``, ``a half``, ``one-half``, ``half``; None (cursor
        kept) when there is none here."""
        save = self.i
        if self.word() in ("a", "an") and self.word(1) in DENOMINATORS:
            self.i += 1
            n: Fraction | None = Fraction(1)
        elif self.word() in DENOMINATORS:
            n = Fraction(1)
        else:
            n = self.number()
        if n is not None and self.word() in DENOMINATORS:
            d = DENOMINATORS[self.word()]
            self.i += 1
            return n / d
        self.i = save
        return None

    def number(self) -> Fraction | None:
        """A number written in digits, as ``\\frac{a}{b}``, or in words (``twenty-one``);
        ``a``/``an`` before a multiplier is one. None (cursor kept) otherwise."""
        kind, text = self.peek()
        if kind == "num":
            self.i += 1
            return Fraction(text)
        if kind == "frac":
            self.i += 1
            a, b = re.findall(r"\d+", text)
            return Fraction(int(a), int(b))
        if text in ("a", "an") and self.word(1) in MULTIPLIERS:
            self.i += 1
            return Fraction(1)
        run = 0
        while run < 20 and self.word(run) in _NUMBER_WORDS:  # no number has more words
            run += 1
        for k in range(run, 0, -1):
            words = [self.word(j) for j in range(k)]
            if words[-1] == "and":
                continue
            n = number_words(" ".join(words))
            if n is not None:
                self.i += k
                return Fraction(n)
        return None

    def postfix(self, v: Fraction) -> Fraction:
        """``squared``, ``cubed``, ``to the power of N``, ``to the Nth (power)``, ``raised to
        (the power of) N``, ``factorial``."""
        w = self.word()
        if w in POWERS:
            self.i += 1
            return _power(v, POWERS[w])
        if w == "factorial":
            self.i += 1
            if v.denominator != 1 or not 0 <= v <= MAX_FACTORIAL:
                raise _Unread("factorial out of range")
            return Fraction(math.factorial(int(v)))
        if w == "raised" or (w == "to" and self.word(1) == "the"):  # "from 2 to 3" is no power
            self.i += 1
            if w == "raised" and not self.accept("to"):
                raise _Unread("raised without to")
            self.accept("the")
            if self.accept("power", "powers"):
                self.accept("of")
            return _power(v, self.exponent())
        return v

    def exponent(self) -> int:
        sign = -1 if self.peek() == ("sym", "-") or self.word() in ("minus", "negative") else 1
        if sign < 0:
            self.i += 1
        kind, text = self.peek()
        if kind == "ord" or (kind == "word" and text in ORDINAL_VALUES):
            self.i += 1
            e = int(text) if kind == "ord" else ORDINAL_VALUES[text]
            self.accept("power")
        else:
            n = self.number()
            if n is None or n.denominator != 1:
                raise _Unread("no integer exponent")
            e = int(n)
            self.accept("power")
        return sign * e

    def percent(self) -> bool:
        if self.peek() == ("sym", "%") or self.accept(*PERCENT):
            if self.peek() == ("sym", "%"):
                self.i += 1
            self.accept("point", "points")  # percentage points
            return True
        if self.word() == "per" and self.word(1) == "cent":
            self.i += 2
            return True
        return False

    def rest(self) -> str:
        """What follows the value: unit words only (``dollars``, ``square meters``)."""
        if self.i >= len(self.toks):
            return ""
        words = [t for k, t, _ in self.toks[self.i :] if k == "word"]
        if len(words) != len(self.toks) - self.i:
            raise _Unread("more after the value than unit words")
        bad = [w for w in words if is_value_word(w) and w not in _AREA]
        area = [w for w in words if w in _AREA]
        if bad or (area and len(area) == len(words)):
            raise _Unread(f"value words where a unit belongs: {bad or area}")
        return self.s[self.toks[self.i][2] :].strip()


def _power(v: Fraction, e: int) -> Fraction:
    big = max(v.numerator.bit_length(), v.denominator.bit_length())
    if abs(e) > MAX_EXPONENT or big * abs(e) > 4 * MAX_DIGITS or (v == 0 and e < 0):
        raise _Unread("power out of range")
    return v**e


def _apply(op: str, a: Fraction, b: Fraction) -> Fraction:
    if op == "plus":
        return a + b
    if op == "minus":
        return a - b
    if op in ("times", "multiplied"):
        return a * b
    if op in ("over", "divided"):
        return a / b
    if a.denominator != 1 or b.denominator != 1 or b == 0:  # mod
        raise _Unread("mod of non-integers")
    return a % b


__all__ = ["UNREAD", "VALUE_WORDS", "has_value_word", "is_value_word", "number_words", "read"]
