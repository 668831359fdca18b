"""Pull the final answer out of a completion: the final box (with what stands beside it on its
line), ``####``, an answer line, or a last number, and whether that answer is a hedge.

Pure string work (no sympy): it runs on every completion of every rollout, so it is written
to be fast and to accept anything, including huge or non-ASCII text. Normalising the answer
for comparison is :mod:`normal`'s (re-exported here).
"""

from __future__ import annotations

import re
from fractions import Fraction
from itertools import pairwise

from flowzoo.tasks.math.beside import (
    _RAW_SIGN_RE,
    _continuation,
    _sign_before,
    _value_phrase,
)
from flowzoo.tasks.math.boxes import (  # noqa: F401  (re-exported: readers import them here)
    BOX_RE,
    DELIMS_RE,
    box_span,
    boxes,
    find_boxed,
    outside_boxes,
    top_boxes,
    wraps_box,
)
from flowzoo.tasks.math.lead import (
    _MIXED,
    _NUMBER,
    _PICTOGRAPH_RE,
    REGION_CHARS,
    _lead_value,
)
from flowzoo.tasks.math.lead import valued as _valued
from flowzoo.tasks.math.normal import (  # noqa: F401  (re-exported)
    compact,
    decimal_key,
    normalize,
    squeeze,
    to_number,
)
from flowzoo.tasks.math.units import split_unit
from flowzoo.tasks.math.words import number_words  # noqa: F401  (re-exported)

#: Only the tail of a huge completion is searched for ``####``, ``Answer:`` and a last number:
#: the final answer sits at the end, and regexes over megabytes of garbage would stall a rollout
MAX_SCAN_CHARS = 20_000
#: Boxes are searched in the whole completion (a hedge hidden before the tail still counts), up
#: to this size; a longer text is no completion (the envs cap an action at 8,192 characters)
MAX_BOX_SCAN_CHARS = 4_000_000
#: the most final marks (``####`` lines, answer lines) compared with each other
MAX_MARKS = 32

_NUMBER_RE = re.compile(f"{_MIXED}|{_NUMBER}")
_HASHES_RE = re.compile(r"####\s*([^\n]+)")
_ANSWER_RE = re.compile(
    r"(?:final\s+answer|answer)\s*(?:is|:|=)?\s*[:=]?\s*([^\n]+)", re.IGNORECASE
)
#: the marks a completion states a final answer with, each to be compared with the others:
#: ``####`` and a line that opens with "(The) (final) answer is" / "Answer:"
_FINAL_MARK_RE = re.compile(
    r"####[ \t]*([^\n]*)|^[ \t>*#_]*(?:the[ \t]+)?(?:final[ \t]+)?answer[ \t]*(?:is\b|:)"
    r"[ \t*:=]*([^\n]*)",
    re.IGNORECASE | re.MULTILINE,
)


def extract_answer(text: str | None) -> str | None:
    """The final answer in a completion, None where it states none (see :func:`read_answer`)."""
    return read_answer(text)[0]


def read_answer(text: str | None) -> tuple[str | None, str]:
    r"""(the final answer in a completion, why it has none: ``hedge``, ``unclosed``,
    ``unreadable`` or ``no_answer``). The answer is the ``\boxed{}`` one, with what stands
    beside the final box on its line and changes its value (``\boxed{5}^2``, ``\boxed{3}
    thousand``, ``-\boxed{5}``, a unit); else ``####``'s, else an answer line's, else a last
    number that ends the completion (punctuation, a unit or a value phrase may follow). A hedge
    names no answer: boxes that disagree anywhere in the completion, final marks that disagree
    (``#### 18`` and ``#### 19``, a box and an ``Answer:`` line), or different values joined
    as alternatives where the answer stands (``$18$ or $19$``, ``\\boxed{18}\\ \\text{or}\\
    19``, ``*18* or *19*``), or lines after the final answer that open with an alternative or
    end on another value (``\\nOr 19.``, ``\\nWait, it's 19.``); the same answer marked twice
    is one answer. A next line that goes on with the value (``\\nthousand``) is part of it.
    A box never closed is a truncated answer: none. Never raises."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_BOX_SCAN_CHARS:
        return None, "no_answer"
    found, closed = boxes(text)
    if not closed:
        return None, "unclosed"
    tail = text[-MAX_SCAN_CHARS:]
    if any(b.strip() for b in found):
        ans, why = _boxed_answer(text, found)
    else:
        ans, why = _marked_answer(tail, lead=False)
        if ans is None and not why:
            ans, why = _last_number(tail)
    if ans is not None and _marks_disagree(tail, ans):
        return None, "hedge"
    return ans, why


def _marked_answer(text: str, lead: bool) -> tuple[str | None, str]:
    """The answer the last ``####`` line states, else the last answer line (``lead``: only
    one that opens ``text``); (None, "") without either."""
    hashes = list(_HASHES_RE.finditer(text))
    if hashes and (lead or hashes[-1].group(1).strip()):
        return _after_line(text, hashes[-1])
    if lead:
        m = _LEAD_ANSWER_RE.match(text)
        return _line_answer(m.group(1)) if m else (None, "")
    for m in reversed(list(_ANSWER_RE.finditer(text))):
        if _trim_sentence(m.group(1)):
            return _after_line(text, m)
    return None, ""


def _after_line(text: str, m: re.Match) -> tuple[str | None, str]:
    """The answer a final mark's line states, a hedge when the lines after it state an
    alternative or end on another value (see :func:`_after_answer`)."""
    ans, why = _line_answer(m.group(1))
    if ans is None:
        return ans, why
    end = m.end()
    cont, at = _next_line(text, end)  # "The answer is $18$\nthousand": the value goes on
    if cont:
        ans, end = _joined_value(ans, cont), at
    return (None, "hedge") if _after_answer(text[end:], ans) else (ans, why)


#: what may close the line of the final box with nothing more said
_CLOSERS = " \t$.,;:!?*_)]}\\"
#: a line after the final answer that opens with an alternative ("Or 19.", "*or* 19")
_ALT_LINE_RE = re.compile(
    r"(?:[\s*_~$]|\\[(\[])*(?:or|vs\.?|versus|maybe|perhaps|possibly|alternatively)\b",
    re.IGNORECASE,
)


def _next_line(text: str, hi: int) -> tuple[str, int]:
    """What the first non-blank line after position ``hi`` adds to the final value when it
    goes on with it (``thousand``, ``\\times 1000``, ``^2``), and where that ends in ``text``;
    ("", 0) for a line that starts anew (a capital, a number, a list item)."""
    m = re.compile(r"\s*").match(text, hi)
    at = m.end() if m else hi
    line_end = text.find("\n", at)
    line = text[at : len(text) if line_end < 0 else line_end][:REGION_CHARS]
    if not line or line[0].isdigit() or line[0].isupper() or line[0] in "*-#>|+(":
        return "", 0
    cont, used = _continuation(" " + line)
    return (cont, at + used - 1) if cont else ("", 0)


def _after_answer(rest: str, ans: str) -> bool:
    """Whether what follows the final answer (the lines after it, to the end of the
    completion) takes it back: an alternative that opens them (``\\nOr 19.``), or a last
    number that ends the completion and is another value (``\\nWait, it's 19.``); prose,
    working that ends on the same value, and text without numbers change nothing."""
    if not rest.strip():
        return False
    if _ALT_LINE_RE.match(rest):
        return True
    tail = rest[-MAX_SCAN_CHARS:]
    nums = list(_NUMBER_RE.finditer(tail))
    if not nums or not _ANSWER_END_RE.fullmatch(tail[nums[-1].end() :]):
        return False
    num = nums[-1]
    lo = max(tail.rfind(c, 0, num.start()) for c in ".!?\n") + 1
    bare = not tail[lo : num.start()].strip(_CLOSERS)  # a value on a line of its own
    if not bare and not _RESTATE_RE.search(tail, lo, num.start()):
        return False  # "Let me know if you need step 2.": no value stated again
    said, last = _valued(normalize(unbox(ans))), _valued(normalize(num.group(0)))
    return said is not None and last is not None and said[0] != last[0]


#: what makes a sentence's last number a value stated again ("Wait, actually it's 19.",
#: "so the total is 19", "12 + 6 = 19")
_RESTATE_RE = re.compile(
    r"\b(?:wait|actually|correct\w*|instead|rather|oops|mistake|sorry|mean|should|answer|result"
    r"|total|it'?s|is|are|was|equals?|gives|makes|get|got)\b|=",
    re.IGNORECASE,
)


def _line_answer(line: str) -> tuple[str | None, str]:
    """The answer an answer line states (its first math span, or the line), or a hedge when
    the line joins different values as alternatives or lists delimited ones (``$18$ or $19$``,
    ``**18**, **19**``)."""
    if _joined(line[:REGION_CHARS], None, conj=True):
        return None, "hedge"
    ans = _trim_sentence(line)
    return (ans, "") if ans else (None, "no_answer")


def _last_number(tail: str) -> tuple[str | None, str]:
    """The last number when it ends the completion (with its value phrase), a hedge when it
    is joined to another value as an alternative (``18 or 19``)."""
    nums = list(_NUMBER_RE.finditer(tail))
    if not nums or not _ANSWER_END_RE.fullmatch(tail[nums[-1].end() :]):
        return None, "no_answer"
    num = nums[-1]
    lo = max(tail.rfind("\n", 0, num.start()) + 1, num.start() - REGION_CHARS)
    if _joined(tail[lo:], num.start() - lo, conj=False):
        return None, "hedge"
    if _BARE_LIST_RE.fullmatch(tail, lo, num.start()):
        return tail[lo : num.end()].strip(), ""  # a bare list ("18, 19"): the checker judges it
    return _value_phrase(tail, num), ""


#: a line that lists numbers before its last one, and nothing else
_BARE_LIST_RE = re.compile(rf"(?:[ \t]*(?:{_NUMBER})[ \t]*[,;])+[ \t]*")


# --------------------------------------------------------------- hedges: values joined


#: a value an answer region may state: a box (its group read by :func:`box_span`), a math
#: span, bold, a number, a number word
_ATOM_RE = re.compile(
    r"(?P<box>\\(?:boxed|fbox)(?![a-zA-Z]))"
    r"|(?<!\\)\$\$?(?P<math>[^$\s](?:[^$\n]{0,398}?[^$\s\\])?)\$\$?"  # "$5 or $6": prices
    r"|\\\((?P<paren>.{1,400}?)\\\)|\\\[(?P<brack>.{1,400}?)\\\]"
    r"|\*\*(?P<bold>[^*\n]{1,400}?)\*\*|(?<![\w])__(?P<under>[^_\n]{1,400}?)__"
    rf"|(?P<num>{_MIXED}|{_NUMBER})"
    r"|(?<![A-Za-z])(?P<word>(?i:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven"
    r"|twelve|twenty|thirty|forty|fifty|hundred))(?![A-Za-z])"
)
#: what joins two values as alternatives: "or" and its kin, after at most one word (a unit:
#: ``18 dollars or 19``), before fillers and a variable's name (``x = 18 or x = 19``)
_ALT_RE = re.compile(
    r"[\s(,;$.?!—–-]*(?:[A-Za-z]+\s+)?(?:or|vs\.?|versus|and/or|maybe|perhaps|possibly)\b[\s:]*"
    r"(?:(?:maybe|perhaps|possibly|probably|else|even|rather|alternatively|just|either|"
    r"equivalently)\b[\s,]*)*(?:[A-Za-z]\s*=\s*)?\\?\$?",
    re.IGNORECASE,
)
#: typography between two values that says nothing itself: LaTeX spaces and text groups
#: (``\\ \\text{or}\\ ``, ``~or~``, ``\\quad``), markdown emphasis (``*or*``), pictographs
_GAP_NOISE_RE = re.compile(
    r"\\(?:text\w*|math\w*|mbox|operatorname)\s*\{|\\[hv]space\*?\s*\{[^{}]*\}"
    r"|\\(?:q?quad|\w*space)(?![a-zA-Z])|\\[,;:! ]|[~*_{}$\u00a0]"
    r"|[\u2600-\u27bf\u2b00-\u2bff\ufe0f\U0001f000-\U0001faff]"
)
#: a range names no one value: "between 18 and 19"
_RANGE_GAP_RE = re.compile(r"\s*(?:and|to|-|–)\s*", re.IGNORECASE)
_RANGE_LEAD_RE = re.compile(r"\bbetween[\s$*_~]*$", re.IGNORECASE)
#: what lists two delimited values (``$18$, $19$``, ``**18** and **19**``, ``$18$/$19$``)
_CONJ_RE = re.compile(r"\s*(?:,|;|/|&|,?\s*and)\s*", re.IGNORECASE)


def _atoms(region: str) -> list[tuple[int, int, bool, str]]:
    """(start, end, delimited, value text) of each value ``region`` states, in order."""
    out: list[tuple[int, int, bool, str]] = []
    pos = 0
    while len(out) < 64:
        m = _ATOM_RE.search(region, pos)
        if m is None:
            break
        kind = m.lastgroup or ""
        if kind == "box":
            span = box_span(region, m)
            if span is None:
                break
            end, value = span[0], span[1] or ""
        else:
            end, value = m.end(), m.group(kind)
        out.append((m.start(), end, kind not in ("num", "word"), value))
        pos = max(end, m.start() + 1)
    return out


def _joined(region: str, focus: int | None, conj: bool, nested: bool = False) -> bool:
    """Whether ``region`` joins different values as alternatives (``18 or 19``, ``$18$ or
    maybe $19$``) or, with ``conj``, lists different delimited ones (``$18$, $19$``); with
    ``focus``, only a chain of joined values that holds that position counts; a delimited
    value that holds alternatives itself (``**18 or 19**``) is read one level down."""
    atoms = _atoms(region)
    for a in [] if nested else atoms:
        inner = a[3]
        if a[2] and inner and (focus is None or a[0] <= focus < a[1]):
            if _joined(inner, None, conj=False, nested=True):
                return True
    chain = atoms[:1]
    for prev, cur in pairwise(atoms):
        gap = _GAP_NOISE_RE.sub(" ", region[prev[1] : cur[0]])
        if (
            _ALT_RE.fullmatch(gap)
            or (conj and prev[2] and cur[2] and _CONJ_RE.fullmatch(gap))
            or (_RANGE_GAP_RE.fullmatch(gap) and _RANGE_LEAD_RE.search(region, 0, prev[0]))
        ):
            chain.append(cur)
            continue
        if _differ(chain, focus):
            return True
        chain = [cur]
    return _differ(chain, focus)


def _differ(chain: list[tuple[int, int, bool, str]], focus: int | None) -> bool:
    if len(chain) < 2 or (focus is not None and not any(a <= focus < b for a, b, *_ in chain)):
        return False
    return any(not same_answer(chain[0][3], c[3]) for c in chain[1:])


def _marks_disagree(text: str, answer: str | None) -> bool:
    """Whether the final marks of ``text`` (each ``####`` line, each line opening with an
    answer, and ``answer``) state two different values; a mark that states no plain value
    (prose, an expression) is not compared."""
    found = list(_FINAL_MARK_RE.finditer(text))[-MAX_MARKS:]
    marks = [m.group(1) if m.group(1) is not None else m.group(2) for m in found]
    seen = None
    for mark in [*marks, *([answer] if answer is not None else [])]:
        v = _mark_value(mark)
        if v is None:
            continue
        if seen is None:
            seen = v
        elif v != seen:
            return True
    return False


def _mark_value(mark: str) -> Fraction | None:
    """The plain value a final mark states (``18``, ``$18$.``, ``18 dollars``), else None."""
    t = _trim_sentence(mark)
    if not t or len(t) > 100:
        return None
    v = _valued(split_unit(normalize(t))[0])
    return None if v is None else v[0]


# ------------------------------------------------------------ the final box and beside it


def _boxed_answer(text: str, found: list[str], whole: bool = False) -> tuple[str | None, str]:
    """The answer the boxes of ``text`` state, with what stands beside the final box on its
    line (see :func:`_continuation`; a sign before it, ``-\\boxed{5}``, is part of it; an
    operator or a digit before it puts it inside an expression: unreadable). ``whole``: a
    prediction read whole, where any other number, sign or LaTeX outside the boxes makes
    the box not the whole answer: the text is returned as it is (and refused)."""
    ans, why = _one_answer(found)
    if ans is None:
        return None, why
    last = next((b for b in reversed(top_boxes(text)) if b[2] and b[2].strip()), None)
    if last is None:
        return ans, ""
    start, end = last[:2]
    lo = max(text.rfind("\n", 0, start) + 1, start - REGION_CHARS)
    hi = text.find("\n", end)
    hi = min(len(text) if hi < 0 else hi, end + REGION_CHARS)
    if _joined(text[lo:hi], start - lo, conj=False):
        return None, "hedge"
    sign = _sign_before(text[lo:start])
    if sign is None:
        return None, "unreadable"
    if sign:
        m = _RAW_SIGN_RE.search(text, lo, start)
        start = m.start() if m else start
    cont, used = _continuation(text[end:hi])
    if not cont and hi < len(text) and not text[end:hi].strip(_CLOSERS):
        cont, used = _next_line(text, hi)  # "\boxed{18}\nthousand": the value goes on
        used = used - end if cont else 0
    if cont:
        ans = _joined_value(ans, cont)
    if _after_answer(text[max(hi, end + used) :], ans):
        return None, "hedge"
    if sign:
        ans = sign + (ans if _NUMBER_RE.fullmatch(ans) else f"({ans})")
    if whole:
        around = outside_boxes(text[:start]) + outside_boxes(text[end + used :])
        if _NOT_PROSE_RE.search(DELIMS_RE.sub("", around)):
            return text, ""  # a number, sign or LaTeX beside a box: read whole (and refused)
    return ans, ""


#: what may follow a bare final number for it to be the answer: at most three words (a unit,
#: "in total"), then closing punctuation or math delimiters (``\(7\)``); a number followed
#: by anything else (``1.\n-``, a list item ``2. subtract``, an operator) ends nothing
_ANSWER_END_RE = re.compile(
    r"(?:\$+|\\[)\]])?\s*(?:[A-Za-z]+\s*){0,3}(?:[\s.,;:!?)$*]|\\[)\]]|[\u2600-\u27bf\ufe0f\U0001f000-\U0001faff])*"
)


# ------------------------------------------------------------ one answer, whatever wraps it


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
        m = BOX_RE.match(t)
        span = box_span(t, m) if m else None
        if span is not None and span[1] is not None and span[0] == len(t):
            s = span[1]
            continue
        return t
    return s.strip()


#: what marks a prediction as a completion rather than an extracted answer: a box, GSM8K's
#: ``####``, markdown bold, or a leading "The (final) answer is" / "Answer:"
_MARKED_RE = re.compile(
    r"\\(?:boxed|fbox)(?![a-zA-Z])|####|\*\*|^\s*__|^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is\b|:)",
    re.IGNORECASE,
)


def answer_text(s: str) -> tuple[str | None, str]:
    r"""(the answer a prediction states, why none) when it is written as a completion rather
    than as an extracted answer: ``\boxed{18}`` and ``\boxed{\boxed{18}}`` (every box of it
    must hold one answer, as in :func:`read_answer`; text around a box is prose, a math
    delimiter too: ``\(\boxed{7}\)``), ``#### 18``, ``**18**``, ``The answer is **18**.``.
    ``(s, "")`` when it has no such marker. No last-number fallback: a prediction is read
    whole (``**18** or **19**`` is a hedge, a number beside a box is refused)."""
    if not _MARKED_RE.search(s):
        return s, ""
    bare = unbox(s)
    if _marks_disagree(bare, None):
        return None, "hedge"
    if BOX_RE.search(bare):
        found, closed = boxes(bare)
        if not closed:
            return None, "unclosed"
        return _boxed_answer(bare, found, whole=True)
    ans, why = _marked_answer(bare, lead=True)
    if ans is not None or why:
        return ans, why
    return (None, "hedge") if _joined(bare[:REGION_CHARS], None, conj=True) else (bare, "")


#: what may not stand beside a box in a prediction read as a completion: the box is then not
#: the whole answer (``3 \cdot \boxed{5}``, ``\boxed{7 } 6}``)
_NOT_PROSE_RE = re.compile(r"[\d{}\\^_=+\-*/<>|&%]")
_LEAD_ANSWER_RE = re.compile(
    r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is\b|:)\s*[:=]?\s*(.*)$", re.IGNORECASE | re.DOTALL
)


def _one_answer(found: list[str]) -> tuple[str | None, str]:
    """The answer boxes hold: the last box's, when every box holds the same answer (a box
    around nothing but another box holds that box's answer); else a hedge."""
    # a box holding nothing but the next box is that box (compared in C: a tower of nested
    # boxes costs no quadratic reading)
    nxt: list[str | None] = [*found[1:], None]
    kept = [b for b, n in zip(found, nxt, strict=True) if n is None or not wraps_box(b, n)]
    boxed = [b.strip() for b in kept if b.strip()]
    if not boxed:
        return None, "no_answer"
    last = boxed[-1]
    same = all(same_answer(b, last) for b in set(boxed[:-1]))  # each distinct text once
    return (last, "") if same else (None, "hedge")


_MATH_SPAN_RE = re.compile(r"\$+([^$]+)\$+|\\\((.+?)\\\)|\\\[(.+?)\\\]")


def _trim_sentence(s: str) -> str:
    """The answer in an answer line: its first math span (``$...$``, ``\\(...\\)``,
    ``\\[...\\]``) where it has one (Minerva's "The final answer is $14$. I hope it is
    correct."), else the line without trailing punctuation."""
    s = _PICTOGRAPH_RE.sub("", s).strip().strip("*").strip()
    m = _MATH_SPAN_RE.search(s)
    if m:
        inner = next(g for g in m.groups() if g is not None)
        after = s[m.end() :]  # "$18$ thousand", "$18$^2": what changes it
        cont, _ = _continuation(after)
        nl = after.find("\n")
        if not cont and nl >= 0 and not after[:nl].strip(_CLOSERS):
            cont = _next_line(after, nl)[0]  # a line of its own: "$18$\nthousand"
        s = _joined_value(inner, cont) if cont else inner
    else:
        s = _lead_value(s)
    for _ in range(3):  # "**18**." and "**18.**": emphasis and punctuation in either order
        s = s.rstrip(" .;,").strip("*_ ").strip()
    return unbox(s)


def _joined_value(ans: str, cont: str) -> str:
    """A value with what follows it and changes it (see :func:`_continuation`)."""
    plain = _NUMBER_RE.fullmatch(ans.strip()) is not None
    value = ans.strip() if plain or cont[0] == " " else f"{{{ans.strip()}}}"
    return value + (" " if cont[0].isdigit() else "") + cont
