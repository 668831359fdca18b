"""Pull the final answer out of a completion and normalise it for comparison.

Pure string work (no sympy): it runs on every completion of every rollout, so it is
written to be fast and to accept anything, including huge or non-ASCII text.
"""

from __future__ import annotations

import re
from fractions import Fraction

#: Only the tail of a huge completion is searched for ``####``, ``Answer:`` and a last number:
#: the final answer sits at the end, and regexes over megabytes of garbage would stall a rollout
MAX_SCAN_CHARS = 20_000
#: Boxes are searched in the whole completion (a hedge hidden before the tail still counts), up
#: to this size; a longer text is no completion (the envs cap an action at 8,192 characters)
MAX_BOX_SCAN_CHARS = 4_000_000

#: a number as a completion writes it; an exponent stays attached (``6.02e23`` is one number)
_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+(?![\w])|/\d+)?|[-+]?\.\d+"
_NUMBER_RE = re.compile(_NUMBER)
_HASHES_RE = re.compile(r"####\s*([^\n]+)")
_ANSWER_RE = re.compile(
    r"(?:final\s+answer|answer)\s*(?:is|:|=)?\s*[:=]?\s*([^\n]+)", re.IGNORECASE
)


_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_BARE_BOX_RE = re.compile(r"\s+([^\s${}]+)")


def boxes(text: str) -> tuple[list[str], bool]:
    r"""Contents of every ``\boxed{...}`` / ``\fbox{...}`` (the whole balanced group), in
    order, and whether every box was closed. Linear in the text."""
    out: list[str] = []
    for m in _BOX_RE.finditer(text):
        p = m.end()
        while p < len(text) and text[p] in " \t":
            p += 1
        if p >= len(text) or text[p] != "{":
            bare = _BARE_BOX_RE.match(text, m.end())  # `\boxed 5` (no braces) is legal LaTeX
            if bare:
                out.append(bare.group(1))
            continue
        depth, start = 0, p
        while p < len(text):
            c = text[p]
            if c == "\\":  # an escaped brace (`\{`) is no group
                p += 2
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            p += 1
        if depth != 0:
            return out, False
        out.append(text[start + 1 : p])
    return out, True


def find_boxed(text: str) -> list[str]:
    r"""Contents of every closed ``\boxed{...}`` / ``\fbox{...}``, in order."""
    return boxes(text)[0]


def extract_answer(text: str | None) -> str | None:
    r"""The final answer in a completion: the ``\boxed{}`` answer, else ``####``, else
    ``Answer:``, else a last number that ends the completion (punctuation or a unit may follow). None when there is nothing answer-like, when two
    boxes anywhere in the completion hold different answers (a hedge names no single answer;
    the same answer boxed twice is one answer), and when a box is never closed (a truncated
    answer is no answer). Never raises."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_BOX_SCAN_CHARS:
        return None
    found, closed = boxes(text)
    if not closed:
        return None
    boxed = [b.strip() for b in found if b.strip()]
    if boxed:
        last = boxed[-1]
        return last if all(same_answer(b, last) for b in boxed[:-1]) else None
    tail = text[-MAX_SCAN_CHARS:]
    hashes = _HASHES_RE.findall(tail)
    if hashes and hashes[-1].strip():
        return _trim_sentence(hashes[-1])
    for m in reversed(list(_ANSWER_RE.finditer(tail))):
        cand = _trim_sentence(m.group(1))
        if cand:
            return cand
    nums = list(_NUMBER_RE.finditer(tail))
    if nums and _ANSWER_END_RE.fullmatch(tail[nums[-1].end() :]):
        return nums[-1].group(0)
    return None


#: what may follow a bare final number for it to be the answer: at most three words (a unit,
#: "in total"), then closing punctuation; a number followed by anything else (``1.\n-``, a
#: list item ``2. subtract``, an operator) ends nothing
_ANSWER_END_RE = re.compile(r"\s*(?:[A-Za-z]+\s*){0,3}[\s.,;:!?)$*]*")


def same_answer(a: str, b: str) -> bool:
    """Whether two boxed answers of one completion are one answer: the same text once
    normalised, or the same number (``5`` and ``5.0``). Cheap on purpose; anything else is two
    answers."""
    na, nb = normalize(a), normalize(b)
    if squeeze(na) == squeeze(nb):
        return True
    va, vb = to_number(na), to_number(nb)
    return va is not None and va == vb


_MATH_SPAN_RE = re.compile(r"\$+([^$]+)\$+")


def _trim_sentence(s: str) -> str:
    """The answer in an answer line: its first ``$...$`` span where it has one (Minerva's
    "The final answer is $14$. I hope it is correct."), else the line without trailing
    punctuation."""
    s = s.strip().strip("*").strip()
    m = _MATH_SPAN_RE.search(s)
    if m:
        s = m.group(1)
    s = s.rstrip(" .;,")
    return s.strip()


#: spacing: ``~``, ``\\ ``, ``\\quad``, ``\\qquad``, ``\\:``, ``\\>`` (``\\,`` is handled apart:
#: it may group thousands)
_SPACING_RE = re.compile(r"~|(?<!\\)\\ |\\q?quad(?![a-zA-Z])|\\[:>]|\\enspace|\\hspace\{[^{}]*\}")
_STYLE_RE = re.compile(r"\\(?:textstyle|scriptstyle|displaystyle)(?![a-zA-Z])")
_DOLLAR_WORD_RE = re.compile(r"\b(?:dollars?|usd)\b", re.IGNORECASE)
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
    "minute": "minutes minute mins min",
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
    s = ans.strip().replace("\u2212", "-")  # U+2212 MINUS SIGN
    # a dollar sign is a currency, so a unit (``\\$5`` is ``5 dollars``, never 5 cents); one
    # before a digit is currency too when the ``$`` do not pair up as math delimiters
    cur = "\\$" in s or (s.count("$") % 2 == 1 and re.search(r"\$\s*[-+]?\d", s) is not None)
    s = s.replace("\\$", "").replace("$", "").replace("\\!", "")
    s = _SPACING_RE.sub(" ", s)
    s = _STYLE_RE.sub("", s)
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


#: a word the question may have asked for after a number (``14 \\text{ eggs}``): three or more
#: letters after a space, not a function name (``2 m`` and ``2ab`` stay variables)
_WORD_UNIT_RE = re.compile(r"^(.*?[\d}%])\s+\(?([a-zA-Z]{3,}(?:\s+[a-zA-Z]{3,}){0,2})\)?\s*\.?$")
_NOT_UNITS = frozenset(
    "sqrt frac sin cos tan cot sec csc log exp max gcd lcm mod inf infty".split()
)


def split_unit(s: str) -> tuple[str, str]:
    """(value, canonical unit) of a normalised answer: ``5 cm`` -> ``("5", "centimeter")``,
    ``2 miles per hour`` -> ``("2", "mile per hour")``, ``14 eggs`` -> ``("14", "egg")`` (a
    word not in the list is a unit by its lowercase singular); ``(s, "")`` without one."""
    m = _UNIT_RE.match(s)
    if m is None or not m.group(1).strip():
        w = _WORD_UNIT_RE.match(s)
        words = w.group(2).lower().split() if w else []
        if not words or not w.group(1).strip() or _NOT_UNITS & set(words):
            return s, ""
        return w.group(1).strip(), " ".join(_UNIT_OF.get(x, x.rstrip("s")) for x in words)
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


#: environments an answer may use (matrices, cases, alignments); any other name is no LaTeX
#: the checker reads, and math-verify would read one of its operands
ENVIRONMENTS = frozenset(
    "matrix pmatrix bmatrix Bmatrix vmatrix Vmatrix smallmatrix array cases aligned align align* "
    "gathered split".split()
)
_STRUCT_RE = re.compile(
    r"\\\\|\\begin\{([^{}]*)\}|\\end\{([^{}]*)\}|\\(?:begin|end)(?![a-zA-Z])|\\[{}()\[\]]"
    r"|\\[lr](?:floor|ceil|angle)(?![a-zA-Z])|\\langle|\\rangle|[{}()\[\]]"
)
_OPENERS = {"{": "{", "\\{": "\\{", "(": "(", "[": "(", "\\lfloor": "floor", "\\lceil": "ceil"}
_OPENERS["\\langle"] = "angle"
_CLOSERS = {"}": "{", "\\}": "\\{", ")": "(", "]": "(", "\\rfloor": "floor", "\\rceil": "ceil"}
_CLOSERS["\\rangle"] = "angle"


def malformed(s: str) -> str | None:
    r"""Why an answer is not well-formed LaTeX, else None: a bracket, brace, ``\{``, floor,
    ceiling or environment that is not closed in order (``13 ( 14``, ``14 } 13``,
    ``\begin{x}..\end{x}``), an unknown environment, or a math delimiter inside the answer
    (``13 \( 14 \)``). Round and square brackets pair with each other (``[1, 5)``). Such
    answers are wrong: a parser would read one of their pieces. Linear in the text."""
    stack: list[str] = []
    for m in _STRUCT_RE.finditer(s):
        tok = m.group(0)
        if tok == "\\\\":
            continue
        if tok in ("\\(", "\\)", "\\[", "\\]") or tok in ("\\begin", "\\end"):
            return "malformed"
        if m.group(1) is not None:
            if m.group(1) not in ENVIRONMENTS:
                return "unknown_environment"
            stack.append("env:" + m.group(1))
        elif m.group(2) is not None:
            if not stack or stack.pop() != "env:" + m.group(2):
                return "unbalanced"
        elif tok in _OPENERS:
            stack.append(_OPENERS[tok])
        elif not stack or stack.pop() != _CLOSERS[tok]:
            return "unbalanced"
    return "unbalanced" if stack else None


# ------------------------- what a parser would read only in part (the symbolic check's guards)

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


#: Greek letters that name variables, in both cases (``\\Delta`` is not ``\\delta``; ``\\pi`` is a
#: constant, ``\\Pi`` a variable)
_GREEK = frozenset(
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu "
    "xi rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma "
    "Upsilon Phi Psi Omega".split()
)


def _letters(s: str) -> set[str]:
    """The variables of an answer, case kept: its letters outside command names, and its
    Greek-letter commands."""
    s = _ENV_RE.sub(" ", s)
    greek = {c for c in _COMMAND_RE.findall(s) if c[1:] in _GREEK}
    return set(re.findall(r"[a-zA-Z]", _COMMAND_RE.sub(" ", s))) | greek


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


#: a number with a base subscript (``1011_2``, ``A3_{16}``); ``x_1`` is a variable's name
_BASE_RE = re.compile(r"(?<![\w\\])([0-9A-Fa-f]*\d[0-9A-Fa-f]*)_\{?(\d{1,2})\}?")


def _based(s: str) -> str:
    """``s`` with each based number as its value and base: ``1011_{2}`` -> ``<11_2>``."""

    def one(m: re.Match) -> str:
        digits, base = m.group(1), int(m.group(2))
        try:
            return f"<{int(digits, base)}_{base}>" if 2 <= base <= 36 else m.group(0)
        except ValueError:  # a digit the base does not have: compared as written
            return f"<{digits.upper()}_{base}>"

    return _BASE_RE.sub(one, squeeze(s))
