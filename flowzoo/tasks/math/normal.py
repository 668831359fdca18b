"""Normalising an answer for comparison, and the exact value of a numeric one.

Pure string work (no sympy): it runs on every answer of every rollout, so it is written to be
fast and to accept anything, including huge or non-ASCII text. Every value is exact (a
rational), and no conversion is unbounded in size.
"""

from __future__ import annotations

import re
from fractions import Fraction

from flowzoo.tasks.math.words import number_words

#: spacing: ``~``, ``\\ ``, ``\\quad``, ``\\qquad``, ``\\:``, ``\\>`` (``\\,`` is handled apart:
#: it may group thousands)
_SPACING_RE = re.compile(r"~|(?<!\\)\\ |\\q?quad(?![a-zA-Z])|\\[:>]|\\enspace|\\hspace\{[^{}]*\}")
_STYLE_RE = re.compile(r"\\(?:textstyle|scriptstyle|displaystyle)(?![a-zA-Z])")
_DOLLAR_WORD_RE = re.compile(r"\b(?:dollars?|usd)\b", re.IGNORECASE)
_TEXT_CMD_RE = re.compile(
    r"\\(?:text|textbf|textit|textrm|textsf|mathrm|mathbf|mathit|mathsf|boldsymbol|bm|mbox"
    r"|operatorname|underline|emph|textcolor\s*\{[a-zA-Z]*\})\s*\{([^{}]*)\}"
)
#: a colour switch (``\\color{red}``) styles what follows, never changes its value
_COLOR_RE = re.compile(r"\\color\s*\{[a-zA-Z]*\}")
_THIN_GROUPS_RE = re.compile(r"(?<![\d.])\d{1,3}(?:\\,\d{3})+(?![\d,])")
_SCI_RE = re.compile(
    r"^([-+]?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|\*|x|×)\s*10\s*\^\s*\{?\s*([-+]?\d{1,4})\s*\}?$"
)


_VULGAR = dict(
    zip(
        "½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅐⅛⅜⅝⅞⅑⅒",
        "1/2 1/3 2/3 1/4 3/4 1/5 2/5 3/5 4/5 1/6 5/6 1/7 1/8 3/8 5/8 7/8 1/9 1/10".split(),
        strict=True,
    )
)
_VULGAR_RE = re.compile(f"(\\d?)([{''.join(_VULGAR)}])")
_SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺"
_SUPERSCRIPT_RE = re.compile(f"[{_SUPERSCRIPTS}]+")
_SUPERSCRIPT_OF = str.maketrans(_SUPERSCRIPTS, "0123456789-+")


def _unicode_math(s: str) -> str:
    """Unicode math written as the checker reads it: ``2½`` is the mixed number ``2 1/2``,
    ``5²`` is ``5^{2}``, ``×`` and ``÷`` are ``\\times`` and ``\\div``, ``⁄`` is ``/``."""
    s = _VULGAR_RE.sub(lambda m: (m.group(1) + " " if m.group(1) else "") + _VULGAR[m.group(2)], s)
    s = _SUPERSCRIPT_RE.sub(lambda m: "^{" + m.group(0).translate(_SUPERSCRIPT_OF) + "}", s)
    return s.replace("\u2044", "/").replace("×", "\\times ").replace("÷", "\\div ")


def normalize(ans: str) -> str:
    r"""Canonical text of an answer: LaTeX wrappers, ``$`` and thousands separators removed,
    degree signs written as the unit word, so that equal answers usually compare equal as
    strings. It removes only what cannot change the value: a variable name (``x =``) and a
    unit stay (see :func:`units.split_unit`), and spaces are collapsed, not removed."""
    # never cut: a cut could drop what follows a run of padding ("42", 2,000 spaces, "43");
    # callers bound the length (``verify.MAX_ANSWER_CHARS``)
    s = ans.strip().replace("\u2212", "-")  # U+2212 MINUS SIGN
    if not s.isascii():
        s = _unicode_math(s)
    # a dollar sign is a currency, so a unit (``\\$5`` is ``5 dollars``, never 5 cents); one
    # before a digit is currency too when the ``$`` do not pair up as math delimiters
    cur = "\\$" in s or (s.count("$") % 2 == 1 and re.search(r"\$\s*[-+]?\d", s) is not None)
    s = s.replace("\\$", "").replace("$", "").replace("\\!", "")
    s = _SPACING_RE.sub(" ", s)
    s = _COLOR_RE.sub("", _STYLE_RE.sub("", s))
    # a thin space groups thousands (12\,345) or is a space: "1\,0" is not 10
    s = _THIN_GROUPS_RE.sub(lambda m: m.group(0).replace("\\,", ""), s)
    s = s.replace("\\,", " ").replace("\\;", " ")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("^\\circ", " degrees").replace("^{\\circ}", " degrees").replace("°", " degrees")
    s = s.replace("\\%", "%")
    for _ in range(3):
        s2 = _TEXT_CMD_RE.sub(r"\1", s)
        if s2 == s:
            break
        s = s2
    s = s.strip().rstrip(".,").strip()
    s = re.sub(r"\s+", " ", s)
    if cur and not _DOLLAR_WORD_RE.search(s):
        s = f"{s} dollars"
    # scientific notation is read as its exact value: 6.02 \times 10^{23} -> 6.02e23
    s = _SCI_RE.sub(r"\1e\2", s)
    # thousands separators: 1,234,567 -> 1234567 (only when every group has 3 digits)
    s = re.sub(r"(?<![\d.])(\d{1,3}(?:,\d{3})+)(?![\d,])", lambda m: m.group(1).replace(",", ""), s)
    return s


#: spaces that can change the value: between two digits (``1 0``, ``2 1/2``) and between two
#: letters (``\pi r``); every other space is typography
_GAP_RE = re.compile(r"\s+")


def squeeze(s: str) -> str:
    """``s`` without the spaces that cannot change its value, the others kept as one space:
    ``2 \\pi`` -> ``2\\pi`` and ``x = 2`` -> ``x=2``, but ``1 0`` stays apart from ``10``."""

    def gap(m: re.Match) -> str:
        a = s[m.start() - 1] if m.start() else ""
        b = s[m.end()] if m.end() < len(s) else ""
        keep = a.isalpha() and b.isalpha() or a.isdigit() and b.isdigit()
        return " " if keep else ""

    return _GAP_RE.sub(gap, s)


def compact(s: str) -> str:
    """``s`` with no spaces, for the exact tokenisers (they read a command by its name, so
    ``\\cdot t`` is ``\\cdot``, ``t``); empty, which they read as nothing, where a space
    separates two digits (``1 0`` is not 10)."""
    t = squeeze(s)
    return "" if _DIGIT_GAP_RE.search(t) else t.replace(" ", "")


_DIGIT_GAP_RE = re.compile(r"\d \d")
_FRAC_RE = re.compile(r"^(-?)\\frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(-?\d+)\s*\}$")
_FRAC_SHORT_RE = re.compile(r"^(-?)\\frac(\d)(\d)$")
_MIXED_RE = re.compile(r"^(-?)(\d+)\s*(?:\s(\d+)\s*/\s*(\d+)|\\frac\s*\{(\d+)\}\s*\{(\d+)\})$")
_PLAIN_RE = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
#: exponents beyond this are not converted to exact rationals (``Fraction("1e99999999")``
#: builds a 100-million-digit integer); such numbers compare by :func:`decimal_key`
MAX_EXPONENT = 400


def decimal_key(s: str) -> tuple[int, str, int] | None:
    """(sign, significant digits, exponent) of a plain decimal such as ``-1.50e3``: equal
    keys <=> equal values, computed in time linear in the text, whatever the exponent."""
    if not _PLAIN_RE.match(s):
        return None
    sign = -1 if s.startswith("-") else 1
    s = s.lstrip("+-")
    mant, _, exp = s.lower().partition("e")
    whole, _, frac = mant.partition(".")
    digits = (whole + frac).lstrip("0")
    e = (int(exp) if exp else 0) - len(frac)
    if not digits:
        return (0, "", 0)
    stripped = digits.rstrip("0")
    return (sign, stripped, e + len(digits) - len(stripped))


def _exponent_ok(s: str) -> bool:
    _, _, exp = s.lower().partition("e")
    return not exp or len(exp.lstrip("+-")) <= 4 and abs(int(exp)) <= MAX_EXPONENT


_RATIO_RE = re.compile(r"^([-+]?\d+)\s*/\s*([-+]?\d+)$")


def to_number(s: str) -> tuple[Fraction, bool] | None:
    r"""Exact value of a normalised numeric answer, and whether it carried a ``%``.

    Handles integers, decimals, ``a/b``, ``\frac{a}{b}``, mixed numbers ``2 2/3`` and
    percentages. Exact rationals avoid float false positives on tiny magnitudes."""
    s = s.strip()
    pct = False
    if s.endswith("%"):
        pct, s = True, s[:-1].strip()
    if not s or len(s) > 200:
        return None
    if s[0].isalpha():
        n = number_words(s)
        return None if n is None else (Fraction(n), pct)
    try:
        if _PLAIN_RE.match(s):
            return (Fraction(s), pct) if _exponent_ok(s) else None
        m = _RATIO_RE.match(s)
        if m:
            den = int(m.group(2))
            return (Fraction(int(m.group(1)), den), pct) if den else None
        m = _FRAC_RE.match(s) or _FRAC_SHORT_RE.match(s)
        if m:
            den = int(m.group(3))
            if den == 0:
                return None
            v = Fraction(int(m.group(2)), den)
            return (-v if m.group(1) else v), pct
        m = _MIXED_RE.match(s)
        if m:
            num, den = (
                (int(m.group(3)), int(m.group(4)))
                if m.group(3)
                else (int(m.group(5)), int(m.group(6)))
            )
            if den == 0:
                return None
            v = int(m.group(2)) + Fraction(num, den)
            return (-v if m.group(1) else v), pct
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None
