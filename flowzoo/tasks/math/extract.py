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
    r"""The final answer in a completion: last ``\boxed{}``, else ``####``, else ``Answer:``,
    else the last number. None when there is nothing answer-like. Never raises."""
    if not isinstance(text, str) or not text.strip():
        return None
    tail = text[-MAX_SCAN_CHARS:]
    boxed = find_boxed(tail)
    for b in reversed(boxed):
        if b.strip():
            return b.strip()
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


def _trim_sentence(s: str) -> str:
    s = s.strip().strip("*").strip()
    if s.startswith("$") and s.count("$") >= 2:
        s = s[1 : s.index("$", 1)]
    s = s.rstrip(" .;")
    return s.strip()


_TEXT_CMD_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_UNITS = (
    "dollars|dollar|cents|cent|units|unit|meters|meter|metres|cm|km|kg|grams|gram|g|"
    "hours|hour|minutes|minute|seconds|second|days|day|weeks|week|years|year|miles|mile|"
    "feet|foot|inches|inch|apples|apple|people|points|point|degrees|degree|mph|m"
)
_UNIT_SUFFIX_RE = re.compile(rf"(?<=[\d}}])\s*(?:{_UNITS})\s*\.?$", re.IGNORECASE)
_ASSIGN_RE = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?\s*=\s*(?!=)")
_SCI_RE = re.compile(
    r"^([-+]?\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|\*|x|×)\s*10\s*\^\s*\{?\s*([-+]?\d{1,4})\s*\}?$"
)


def normalize(ans: str) -> str:
    r"""Canonical text of an answer: LaTeX wrappers, ``$``, ``x =``, units and thousands
    separators stripped, so that equal answers usually compare equal as strings."""
    # never cut: a cut could drop what follows a run of padding ("42", 2,000 spaces, "43");
    # callers bound the length (``verify.MAX_ANSWER_CHARS``)
    s = ans.strip()
    s = s.replace("$", "").replace("\\!", "").replace("\\,", "").replace("\\;", "")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("^\\circ", "").replace("^{\\circ}", "").replace("°", "")
    s = s.replace("\\%", "%").replace("\\$", "")
    for _ in range(3):
        s2 = _TEXT_CMD_RE.sub(r"\1", s)
        if s2 == s:
            break
        s = s2
    s = s.strip()
    s = _ASSIGN_RE.sub("", s)
    s = _UNIT_SUFFIX_RE.sub("", s).strip()
    s = s.rstrip(".").strip()
    s = re.sub(r"\s+", " ", s)
    # scientific notation is read as its exact value: 6.02 \times 10^{23} -> 6.02e23
    s = _SCI_RE.sub(r"\1e\2", s)
    # thousands separators: 1,234,567 -> 1234567 (only when every group has 3 digits)
    s = re.sub(r"(?<![\d.])(\d{1,3}(?:,\d{3})+)(?![\d,])", lambda m: m.group(1).replace(",", ""), s)
    return s


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
