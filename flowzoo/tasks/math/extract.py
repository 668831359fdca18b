"""Pull the final answer out of a completion and normalise it for comparison.

Pure string work (no sympy): it runs on every completion of every rollout, so it is
written to be fast and to accept anything, including huge or non-ASCII text.
"""

from __future__ import annotations

import re
from fractions import Fraction

from flowzoo.tasks.math import words as value_words
from flowzoo.tasks.math.words import number_words

#: Only the tail of a huge completion is searched for ``####``, ``Answer:`` and a last number:
#: the final answer sits at the end, and regexes over megabytes of garbage would stall a rollout
MAX_SCAN_CHARS = 20_000
#: Boxes are searched in the whole completion (a hedge hidden before the tail still counts), up
#: to this size; a longer text is no completion (the envs cap an action at 8,192 characters)
MAX_BOX_SCAN_CHARS = 4_000_000

#: a number as a completion writes it; an exponent stays attached (``6.02e23`` is one number)
_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+(?![\w])|/\d+)?|[-+]?\.\d+"
#: a mixed number or a LaTeX fraction is one number (``2 1/2``, ``2\\frac{1}{2}``, ``2½``)
_FRACTION = r"\\[dt]?frac\{\d+\}\{\d+\}|\\[dt]?frac\d\d"
_MIXED = rf"[-+]?\d+(?:[ \t]+\d+/\d+(?![\d/])|[ \t]*(?:{_FRACTION})|[½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞])|[-+]?(?:{_FRACTION})"
_NUMBER_RE = re.compile(f"{_MIXED}|{_NUMBER}")
_HASHES_RE = re.compile(r"####\s*([^\n]+)")
_ANSWER_RE = re.compile(
    r"(?:final\s+answer|answer)\s*(?:is|:|=)?\s*[:=]?\s*([^\n]+)", re.IGNORECASE
)


_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_BARE_BOX_RE = re.compile(r"\s+([^\s${}]+)")


def boxes(text: str) -> tuple[list[str], bool]:
    r"""Contents of every ``\boxed{...}`` / ``\fbox{...}`` (the whole balanced group), in
    order, and whether every box was closed. Linear in the text: boxes are read from the last
    to the first, and a box inside another is jumped over, never read again (a tower of 3,000
    nested boxes once took 13 s)."""
    found = list(_BOX_RE.finditer(text))
    spans: list[tuple[int, str | None] | None] = [None] * len(found)
    known: dict[int, int | None] = {}  # a box's group start -> its end (None: never closed)
    for i in range(len(found) - 1, -1, -1):
        spans[i] = _box_span(text, found[i], known)
    out: list[str] = []
    for span in spans:
        if span is None:
            return out, False
        if span[1] is not None:
            out.append(span[1])
    return out, True


def _box_span(
    text: str, m: re.Match, known: dict[int, int | None] | None = None
) -> tuple[int, str | None] | None:
    """(end, content) of the box whose command ``m`` matched (content None: a bare command
    with nothing to box); None when it is never closed. ``known``: the ends of the groups of
    boxes after this one, jumped over (and this box's group end is added to it)."""
    p = m.end()
    while p < len(text) and text[p] in " \t":
        p += 1
    if p >= len(text) or text[p] != "{":
        bare = _BARE_BOX_RE.match(text, m.end())  # `\boxed 5` (no braces) is legal LaTeX
        return (bare.end(), bare.group(1)) if bare else (m.end(), None)
    depth, start = 0, p
    end: int | None = None
    while p < len(text):
        if known and p != start and p in known:  # an inner box's group: balanced, or never
            jump = known[p]  # closed (then neither is this one)
            if jump is None:
                break
            p = jump
            continue
        c = text[p]
        if c == "\\":  # an escaped brace (`\{`) is no group
            p += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                end = p + 1
                break
        p += 1
    if known is not None:
        known[start] = end
    return None if end is None else (end, text[start + 1 : end - 1])


def _outside_boxes(text: str) -> str:
    """``text`` without its boxes (each whole, nested ones with it)."""
    out, pos = [], 0
    for m in _BOX_RE.finditer(text):
        if m.start() < pos:
            continue  # inside a box already taken out
        span = _box_span(text, m)
        out.append(text[pos : m.start()])
        pos = len(text) if span is None else span[0]
    out.append(text[pos:])
    return "".join(out)


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
    if any(b.strip() for b in found):
        return _one_answer(found)
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
        return _value_phrase(tail, nums[-1])
    return None


#: words a value phrase may hold before its last number (``2 to the power of 10``, ``half of
#: 10``, ``minus 5``, ``3 plus 4``)
_PHRASE_WORDS = (value_words.VALUE_WORDS - value_words.APPROXIMATE) | frozenset(
    "a an and of the to by per cent raised power zero one two three four five six seven eight "
    "nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
    "twenty thirty forty fifty sixty seventy eighty ninety".split()
)
_PHRASE_TOKEN_RE = re.compile(r"[A-Za-z]+|[-+]?\d+(?:\.\d+)?(?:/\d+)?")


def _value_phrase(tail: str, num: re.Match) -> str:
    """The last number of a completion with the words around it that change its value
    (``3 thousand``, ``5 squared``, ``minus 5``, ``2 to the power of 10``): never the bare
    number when such a word is there (the checker reads the phrase or refuses it)."""
    after = tail[num.end() :]
    start, end = num.start(), num.end()
    if value_words.has_value_word(after):
        end = num.end() + len(after.rstrip(" \t\n.,;:!?)$*"))
    toks = list(_PHRASE_TOKEN_RE.finditer(tail, max(0, start - 120), start))
    k, edge = len(toks), start
    while k:  # back over number and phrase words, only spaces or hyphens between them
        t = toks[k - 1]
        w = t.group(0).lower()
        if not (w in _PHRASE_WORDS or w[-1].isdigit()) or tail[t.end() : edge].strip(" \t-"):
            break
        k, edge = k - 1, t.start()
    while k < len(toks) and toks[k].group(0).lower() in ("the", "of", "to", "by", "and"):
        k += 1
    if k < len(toks) and value_words.has_value_word(tail[toks[k].start() : num.end()]):
        start = toks[k].start()
    return tail[start:end].strip() if (start, end) != num.span() else num.group(0)


#: what may follow a bare final number for it to be the answer: at most three words (a unit,
#: "in total"), then closing punctuation; a number followed by anything else (``1.\n-``, a
#: list item ``2. subtract``, an operator) ends nothing
_ANSWER_END_RE = re.compile(r"\s*(?:[A-Za-z]+\s*){0,3}[\s.,;:!?)$*]*")


def same_answer(a: str, b: str) -> bool:
    """Whether two boxed answers of one completion are one answer: the same text once
    normalised, or the same number (``5`` and ``5.0``); a box that holds nothing but another
    box (``\\boxed{\\boxed{18}}``) is that box's answer. Cheap on purpose; anything else is
    two answers."""
    na, nb = normalize(unbox(a)), normalize(unbox(b))
    if squeeze(na) == squeeze(nb):
        return True
    va, vb = _valued(na), _valued(nb)
    return va is not None and va == vb


def _valued(s: str) -> tuple[Fraction, bool] | None:
    """The number ``s`` states, a value phrase read (``3 thousand`` is 3000)."""
    v = to_number(s)
    if v is None and value_words.has_value_word(s):
        r = value_words.read(s)
        v = None if r is None or r == value_words.UNREAD else to_number(r)
    return v


_WRAPPED_RE = re.compile(r"^\s*(\*\*|__)((?:(?!\*\*|__).)+)\1\s*$", re.DOTALL)


def unbox(s: str) -> str:
    r"""``s`` without what wraps the whole of it and cannot change its value: ``\boxed{..}``
    / ``\fbox{..}`` around all of it (any depth: ``\boxed{\boxed{18}}`` is 18), markdown bold
    (``**18**``), ``$..$``. Anything else is left as it is."""
    for _ in range(8):
        t = s.strip()
        m = _WRAPPED_RE.match(t)
        if m:
            s = m.group(2)
            continue
        if len(t) > 1 and t[0] == "$" and t[-1] == "$" and "$" not in t.strip("$"):
            s = t.strip("$")
            continue
        m = _BOX_RE.match(t)
        span = _box_span(t, m) if m else None
        if span is not None and span[1] is not None and span[0] == len(t):
            s = span[1]
            continue
        return t
    return s.strip()


def _wraps(outer: str, inner: str) -> bool:
    """Whether box content ``outer`` is one box around exactly ``inner``."""
    o = outer.strip()
    m = _BOX_RE.match(o)
    if m is None:
        return False
    rest = o[m.end() :].lstrip(" \t")
    return rest[:1] == "{" and rest[-1:] == "}" and rest[1:-1] == inner


#: what marks a prediction as a completion rather than an extracted answer: a box, GSM8K's
#: ``####``, markdown bold, or a leading "The (final) answer is" / "Answer:"
_MARKED_RE = re.compile(
    r"\\(?:boxed|fbox)(?![a-zA-Z])|####|\*\*|^\s*__|^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is\b|:)",
    re.IGNORECASE,
)


def answer_text(s: str) -> str | None:
    r"""The answer a prediction states when it is written as a completion rather than as an
    extracted answer: ``\boxed{18}`` and ``\boxed{\boxed{18}}`` (every box of it must hold
    one answer, as in :func:`extract_answer`; text around a box is prose), ``#### 18``,
    ``**18**``, ``The answer is **18**.``. ``s`` itself when it has no such marker; None when
    its boxes hold different answers or one is never closed. No last-number fallback: a
    prediction is read whole (``**18** or **19**`` stays a hedge)."""
    if not _MARKED_RE.search(s):
        return s
    bare = unbox(s)
    if _BOX_RE.search(bare):
        if _NOT_PROSE_RE.search(_outside_boxes(bare).replace("**", "")):
            return bare  # a number, sign or LaTeX beside a box: read whole (and refused)
        found, closed = boxes(bare)
        return _one_answer(found) if closed else None
    hashes = _HASHES_RE.findall(bare)
    if hashes:
        return _trim_sentence(hashes[-1]) or None
    m = _LEAD_ANSWER_RE.match(bare)
    return (_trim_sentence(m.group(1)) or None) if m else bare


#: what may not stand beside a box in a prediction read as a completion: the box is then not
#: the whole answer (``-\boxed{5}``, ``3 or \boxed{4}``, ``\boxed{7 } 6}``)
_NOT_PROSE_RE = re.compile(r"[\d{}\\^_=+\-*/<>|&%]")
_LEAD_ANSWER_RE = re.compile(
    r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is\b|:)\s*[:=]?\s*(.*)$", re.IGNORECASE | re.DOTALL
)


def _one_answer(found: list[str]) -> str | None:
    """The answer boxes hold: the last box's, when every box holds the same answer (a box
    around nothing but another box holds that box's answer); else None."""
    # a box holding nothing but the next box is that box (compared in C: a tower of nested
    # boxes costs no quadratic reading)
    nxt: list[str | None] = [*found[1:], None]
    kept = [b for b, n in zip(found, nxt, strict=True) if n is None or not _wraps(b, n)]
    boxed = [b.strip() for b in kept if b.strip()]
    if not boxed:
        return None
    last = boxed[-1]
    return last if all(same_answer(b, last) for b in boxed[:-1]) else None


_MATH_SPAN_RE = re.compile(r"\$+([^$]+)\$+")


def _trim_sentence(s: str) -> str:
    """The answer in an answer line: its first ``$...$`` span where it has one (Minerva's
    "The final answer is $14$. I hope it is correct."), else the line without trailing
    punctuation."""
    s = s.strip().strip("*").strip()
    m = _MATH_SPAN_RE.search(s)
    if m:
        s = m.group(1)
    for _ in range(3):  # "**18**." and "**18.**": emphasis and punctuation in either order
        s = s.rstrip(" .;,").strip("*_ ").strip()
    return unbox(s)


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
    unit stay (see :func:`split_unit`), and spaces are collapsed, not removed."""
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
