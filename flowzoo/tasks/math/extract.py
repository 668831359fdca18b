"""Pull the final answer out of a completion and normalise it for comparison.

Pure string work (no sympy): it runs on every completion of every rollout, so it is
written to be fast and to accept anything, including huge or non-ASCII text.
"""

from __future__ import annotations

import re
from fractions import Fraction

#: Only the tail of a huge completion is searched: the final answer sits at the end, and
#: regexes over megabytes of garbage would stall a rollout.
MAX_SCAN_CHARS = 20_000

#: a number as a completion writes it; an exponent stays attached (``6.02e23`` is one number)
_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+(?![\w])|/\d+)?|[-+]?\.\d+"
_NUMBER_RE = re.compile(_NUMBER)
_HASHES_RE = re.compile(r"####\s*([^\n]+)")
_ANSWER_RE = re.compile(
    r"(?:final\s+answer|answer)\s*(?:is|:|=)?\s*[:=]?\s*([^\n]+)", re.IGNORECASE
)


def find_boxed(text: str) -> list[str]:
    r"""Contents of every ``\boxed{...}`` / ``\fbox{...}`` with balanced braces, in order."""
    out: list[str] = []
    i = 0
    while True:
        j = text.find("\\boxed", i)
        k = text.find("\\fbox", i)
        if j < 0 or (0 <= k < j):
            j = k
        if j < 0:
            return out
        start = text.find("{", j)
        # `\boxed 5` (no braces) is legal LaTeX
        head = text[j:start] if start >= 0 else text[j:]
        if start < 0 or head.strip() not in ("\\boxed", "\\fbox"):
            m = re.match(r"\\(?:boxed|fbox)\s+([^\s$]+)", text[j:])
            if m:
                out.append(m.group(1))
            i = j + 5
            continue
        depth, p = 0, start
        while p < len(text):
            c = text[p]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            p += 1
        if depth != 0:  # unbalanced: take the rest of the line
            out.append(text[start + 1 :].split("\n", 1)[0])
            return out
        out.append(text[start + 1 : p])
        i = p + 1


def extract_answer(text: str | None) -> str | None:
    r"""The final answer in a completion: the ``\boxed{}`` answer, else ``####``, else
    ``Answer:``, else the last number. None when there is nothing answer-like, and when two
    boxes hold different answers (a hedge names no single answer; the same answer boxed twice
    is one answer). Never raises."""
    if not isinstance(text, str) or not text.strip():
        return None
    tail = text[-MAX_SCAN_CHARS:]
    boxed = [b.strip() for b in find_boxed(tail) if b.strip()]
    if boxed:
        last = boxed[-1]
        return last if all(same_answer(b, last) for b in boxed[:-1]) else None
    hashes = _HASHES_RE.findall(tail)
    if hashes and hashes[-1].strip():
        return _trim_sentence(hashes[-1])
    for m in reversed(list(_ANSWER_RE.finditer(tail))):
        cand = _trim_sentence(m.group(1))
        if cand:
            return cand
    nums = _NUMBER_RE.findall(tail)
    if nums:
        return nums[-1]
    return None


def same_answer(a: str, b: str) -> bool:
    """Whether two boxed answers of one completion are one answer: the same text once
    normalised, or the same number (``5`` and ``5.0``). Cheap on purpose; anything else is two
    answers."""
    na, nb = normalize(a), normalize(b)
    if squeeze(na).lower() == squeeze(nb).lower():
        return True
    va, vb = to_number(na), to_number(nb)
    return va is not None and va == vb


def _trim_sentence(s: str) -> str:
    s = s.strip().strip("*").strip()
    if s.startswith("$") and s.count("$") >= 2:
        s = s[1 : s.index("$", 1)]
    s = s.rstrip(" .;")
    return s.strip()


_TEXT_CMD_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
#: unit words by canonical name. No one-letter unit: ``2m`` may be ``2 * m``. Units are
#: compared by name (``5 cm`` is not ``5 km``), never converted
_UNIT_WORDS = {
    "dollar": "dollars dollar usd",
    "cent": "cents cent",
    "unit": "units unit",
    "meter": "meters meter metres metre",
    "centimeter": "cm centimeters centimeter centimetres centimetre",
    "millimeter": "mm millimeters millimeter millimetres millimetre",
    "kilometer": "km kilometers kilometer kilometres kilometre",
    "kilogram": "kg kilograms kilogram",
    "gram": "grams gram",
    "liter": "liters liter litres litre",
    "pound": "pounds pound lbs lb",
    "hour": "hours hour hrs hr",
    "minute": "minutes minute mins",
    "second": "seconds second secs",
    "day": "days day",
    "week": "weeks week",
    "month": "months month",
    "year": "years year",
    "mile": "miles mile",
    "foot": "feet foot ft",
    "inch": "inches inch",
    "apple": "apples apple",
    "person": "people persons person",
    "point": "points point",
    "degree": "degrees degree",
    "mph": "mph",
}
_UNIT_OF = {w: name for name, words in _UNIT_WORDS.items() for w in words.split()}
_UNITS = "|".join(sorted(_UNIT_OF, key=len, reverse=True))
_UNIT_RE = re.compile(
    rf"^(.*?(?:[\d}}%]\s*|[a-zA-Z]\s+))((?:square\s+|sq\.?\s+|cubic\s+)?(?:{_UNITS})"
    rf"(?:\s+per\s+(?:{_UNITS}))?)\s*\.?$",
    re.IGNORECASE,
)
_THIN_GROUPS_RE = re.compile(r"(?<![\d.])\d{1,3}(?:\\,\d{3})+(?![\d,])")
_SCI_RE = re.compile(
    r"^([-+]?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|\*|x|×)\s*10\s*\^\s*\{?\s*([-+]?\d{1,4})\s*\}?$"
)


def normalize(ans: str) -> str:
    r"""Canonical text of an answer: LaTeX wrappers, ``$`` and thousands separators removed,
    degree signs written as the unit word, so that equal answers usually compare equal as
    strings. It removes only what cannot change the value: a variable name (``x =``) and a
    unit stay (see :func:`split_unit`), and spaces are collapsed, not removed."""
    # never cut: a cut could drop what follows a run of padding ("42", 2,000 spaces, "43");
    # callers bound the length (``verify.MAX_ANSWER_CHARS``)
    s = ans.strip()
    s = s.replace("\\$", "").replace("$", "").replace("\\!", "")
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
    s = s.strip().rstrip(".").strip()
    s = re.sub(r"\s+", " ", s)
    # scientific notation is read as its exact value: 6.02 \times 10^{23} -> 6.02e23
    s = _SCI_RE.sub(r"\1e\2", s)
    # thousands separators: 1,234,567 -> 1234567 (only when every group has 3 digits)
    s = re.sub(r"(?<![\d.])(\d{1,3}(?:,\d{3})+)(?![\d,])", lambda m: m.group(1).replace(",", ""), s)
    return s


def split_unit(s: str) -> tuple[str, str]:
    """(value, canonical unit) of a normalised answer: ``5 cm`` -> ``("5", "centimeter")``,
    ``2 miles per hour`` -> ``("2", "mile per hour")``; ``(s, "")`` without a unit word."""
    m = _UNIT_RE.match(s)
    if m is None or not m.group(1).strip():
        return s, ""
    words = re.split(r"\s+", m.group(2).lower().replace("sq.", "square").replace("sq ", "square "))
    return m.group(1).strip(), " ".join(_UNIT_OF.get(w, w) for w in words)


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
