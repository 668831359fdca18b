"""What stands beside a number in a final answer: a sign before it (a minus typeset as
text, ``\\text{-}``, or in words) and the words after it that change its value
(``thousand``, ``^2``, ``to the 2nd``, ``half``) or are only a unit or a counted noun.

Why its own module: both readers of :mod:`flowzoo.tasks.math.extract` (the box and the
bare final line) ask the same two questions of a number's neighbours, and a word that
changes a value must never be dropped as if it were a unit (a wrong answer rewarded).
"""

from __future__ import annotations

import re

from flowzoo.tasks.math import words as value_words
from flowzoo.tasks.math.boxes import DELIMS_RE
from flowzoo.tasks.math.units import KNOWN, PROSE, canonical

#: a math span's closing delimiter right after a number (``$18$ apples``)
_CLOSE_RE = re.compile(r"\$+|\\[)\]]")


def _sign_before(left: str) -> str | None:
    """The sign directly before the final box (``-\\boxed{5}``; "" for none, or a dash:
    ``Answer - \\boxed{5}``), or None when what stands before it puts the box inside an
    expression (``3 - \\boxed{5}``, ``10^\\boxed{2}``, ``2\\boxed{5}``,
    ``\\frac{1}{\\boxed{2}}``); a group that only styles it (``\\textbf{\\boxed{5}}``) is none."""
    left = _SIGN_TEXT_RE.sub("-", DELIMS_RE.sub("", left).replace("\u2212", "-"))
    left = _LATEX_SPACE_RE.sub(" ", left)
    if left.rstrip().endswith("{"):
        return "" if _STYLE_GROUP_RE.search(left.rstrip()) else None
    m = _LEFT_RE.search(left)
    if m is None:
        return ""
    if m.group("operand") is not None or m.group("op") is None:
        return None
    if m.group("op") in ("minus", "negative"):
        return "-"
    if m.group("gap"):  # "Answer - \boxed{5}": a dash after a word that is no link
        word = _LAST_WORD_RE.search(left, 0, m.start("op"))
        if word and word.group(1).lower() not in _LINKS:
            return ""
    return "-" if m.group("op") == "-" else m.group("op")


#: a sign written as text or a word before the final box (``\text{-}``, ``minus``)
_SIGN_TEXT_RE = re.compile(r"\\(?:text\w*|math\w*|mbox)\s*\{\s*[-\u2212]\s*\}")
_LATEX_SPACE_RE = re.compile(
    r"\\(?:q?quad|\w*space)(?![a-zA-Z])|\\[hv]space\*?\s*\{[^{}]*\}|\\[,;:! >]|~"
)
_LAST_WORD_RE = re.compile(r"([A-Za-z]+)[ \t]*$")
#: words after which a dash before the box is its sign ("the answer is - \boxed{5}")
_LINKS = frozenset("is are was were be equals equal makes gives get gets got".split())
#: the sign before the final box as written (to cut it from what stands around the box)
_RAW_SIGN_RE = re.compile(
    r"(?:[-+\u2212]|\\(?:text\w*|math\w*|mbox)\s*\{\s*[-\u2212]\s*\}|(?i:minus|negative))"
    r"(?:\s|~|\\[,;:! >]|\\q?quad(?![a-zA-Z])|\$+|\\[(\[])*$"
)


#: what stands right before the final box (delimiters aside) and makes it part of a larger
#: expression: an operator, a digit against it, or a sign (after an operand: binary)
_LEFT_RE = re.compile(
    r"(?:(?P<operand>[\d)\]}]|(?<![A-Za-z\\])[A-Za-z])\s*)?(?P<op>[-+]|(?<![A-Za-z])(?i:minus|negative))"
    r"(?P<gap>\s*)$"
    r"|(?:[\^_*/]|\\(?:times|cdot|div|pm|mp|sqrt|frac)(?![a-zA-Z]))\s*$|\d$"
)
#: a brace before the box that opens a plain or styling group, not an operand
_STYLE_GROUP_RE = re.compile(
    r"(?:^|[\s=:(,])\{$"
    r"|\\(?:text\w*|math\w*|bf|underline|color\{[^{}]*\}|displaystyle|boxed|fbox)\s*\{$"
)
#: the pieces of what follows a box on its line
_CONT_RE = re.compile(
    r"(?P<close>\$+|\\[)\]]|\*\*|__|\}|\\end\{[^{}]*\}|\\right\s*\\?[)\].|}])"
    r"|(?P<space>[ \t]+|~|\\[,;:! ]|\\q?quad(?![a-zA-Z]))"
    r"|\\(?:text|textbf|textit|textrm|mathrm|mbox|operatorname)\s*\{(?P<text>[^{}]*)\}"
    r"|(?P<word>[A-Za-z]+(?:-[A-Za-z]+)*)"
    r"|(?P<num>\d+(?:[.,/]\d+)*)"
    r"|(?P<stop>\\\\|&|[.,;:!?](?=[\s$*}]|\\[)\]]|$)|[)\]\n]"
    r"|[\u2600-\u27bf\u2b00-\u2bff\ufe0f\U0001f000-\U0001faff])"
    r"|(?P<math>\\[a-zA-Z]+|\\.|.)",
    re.DOTALL,
)


def _continuation(after: str) -> tuple[str, int]:
    """What follows the final box on its line and belongs to its value, as text to append to
    the box's answer, and how many characters of ``after`` it takes: math (``^2``, ``\\times
    10^3``, ``!``, a digit, up to the end of the math, a clause break or a prose word), or
    words (a value phrase, ``thousand``, ``to the power of 10``; unit words, ``dollars``,
    ``\\text{ cm}``). ("", 0) when punctuation, prose, a parenthesis or nothing follows."""
    toks: list[re.Match] = []
    pos = 0
    while pos < len(after) and len(toks) < 64:
        m = _CONT_RE.match(after, pos)
        if m is None:
            break
        toks.append(m)
        pos = m.end()
    i = 0
    while i < len(toks) and toks[i].lastgroup in ("close", "space"):
        i += 1
    if i == len(toks) or toks[i].lastgroup == "stop":
        return "", 0
    first, tight = toks[i], i == 0
    if first.lastgroup in ("word", "text"):
        return _words_beside(toks, i)
    if not tight and first.group(0) in ("(", "["):
        return "", 0  # a parenthesis: prose ("\boxed{5} (five)")
    nxt = next((t for t in toks[i + 1 :] if t.lastgroup != "space"), None)
    if not tight and first.group(0) in ("-", "–") and (nxt is None or nxt.lastgroup != "num"):
        return "", 0  # a dash: prose ("\boxed{5} - done")
    pieces, j, depth = [], i, 0
    while j < len(toks):
        t, kind = toks[j], toks[j].lastgroup
        if kind == "close" and t.group(0) == "}" and depth:
            depth -= 1  # its own group (``^{3}``), not one around the box
        elif kind in ("stop", "close"):
            break
        depth += t.group(0) == "{"
        if kind == "space":
            w = next((u for u in toks[j + 1 :] if u.lastgroup != "space"), None)
            if w is None or (w.lastgroup == "word" and w.group(0).lower() in PROSE):
                break
        pieces.append(f" {t.group('text')} " if kind == "text" else t.group(0))
        j += 1
    return "".join(pieces).rstrip(), toks[j - 1].end()


def _words_beside(toks: list[re.Match], i: int) -> tuple[str, int]:
    """The words (and numbers) from token ``i`` on that belong to the value before them (see
    :func:`_words_after`), as text and the characters of the line they take."""
    text, ends = "", []  # ends: (end in text, end in the line) of each token taken
    for t in toks[i:]:
        kind = t.lastgroup
        if kind in ("stop", "close", "math"):
            break
        text += t.group("text") if kind == "text" else " " if kind == "space" else t.group(0)
        ends.append((len(text), t.end()))
    k = _words_after(text, keep_known=True)
    if not k:
        return "", 0
    return " " + text[:k].strip(), max((line for at, line in ends if at <= k), default=0)


#: words a value phrase may hold before its last number (``2 to the power of 10``, ``half of
#: 10``, ``minus 5``, ``3 plus 4``)
_PHRASE_WORDS = (value_words.VALUE_WORDS - value_words.APPROXIMATE) | frozenset(
    "a an and of the to by per cent raised power zero one two three four five six seven eight "
    "nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
    "twenty thirty forty fifty sixty seventy eighty ninety".split()
)
_PHRASE_TOKEN_RE = re.compile(r"[A-Za-z]+|[-+]?\d+(?:\.\d+)?(?:/\d+)?")
_TO_THE_RE = re.compile(
    r"[ \t]*to[ \t]+the[ \t]+(?:[-+]?\d+(?:st|nd|rd|th)?|(?!power\b)[A-Za-z]+)(?:[ \t]+power)?(?![\w])",
    re.IGNORECASE,
)
_GLUE = frozenset({"a", "an", "and", "of", "the", "to", "by"})


def _words_after(s: str, keep_known: bool) -> int:
    """How many characters of ``s`` (the text right after a number or a box) belong to the
    value: a value phrase (``thousand``, ``squared``, ``to the power of 10``, ``and a half``,
    a multiplier in another language), then at most three unit words, up to prose (``is``,
    ``in total``), punctuation or a capitalised word. ``keep_known`` False: unit words all of
    the lexicon (``apples``) are left out, as a unit the gold allows; an unknown word is kept
    for the checker to refuse or find in the problem. 0 when nothing belongs."""
    power = _TO_THE_RE.match(s)
    if power:  # "to the 2nd", "to the third power": a power, read or refused, never dropped
        return power.end()
    toks: list[re.Match] = []
    pos = 0
    for m in _PHRASE_TOKEN_RE.finditer(s):
        if s[pos : m.start()].strip(" \t-") or len(toks) >= 12:
            break
        toks.append(m)
        pos = m.end()
    k = 0
    while k < len(toks) and (
        toks[k].group(0).lower() in _PHRASE_WORDS
        or toks[k].group(0)[-1].isdigit()
        or value_words.is_value_word(toks[k].group(0).lower())
    ):
        k += 1
    while k and toks[k - 1].group(0).lower() in _GLUE:
        k -= 1
    end = toks[k - 1].end() if k and value_words.has_value_word(s[: toks[k - 1].end()]) else 0
    i = k if end else 0
    units: list[re.Match[str]] = []
    while i < len(toks) and len(units) < 3:
        w = toks[i].group(0)
        low = w.lower()
        if w[-1].isdigit() or low in PROSE:
            break
        if (
            w[0].isupper()
            and len(w) > 1
            and not (value_words.is_value_word(low) or canonical(low) in KNOWN)
        ):
            break  # a new sentence; a capital letter alone is a variable or a multiplier (3 K)
        units.append(toks[i])
        i += 1
    if units and (keep_known or end or not all(canonical(t.group(0)) in KNOWN for t in units)):
        end = units[-1].end()
    return end


def _value_phrase(tail: str, num: re.Match) -> str:
    """The last number of a completion with the words around it that change its value
    (``3 thousand``, ``5 squared``, ``minus 5``, ``2 to the power of 10``) or that the
    checker must judge (an unknown word: ``3 septillion``): never the bare number when such a
    word is there (the checker reads the phrase or refuses it)."""
    close = _CLOSE_RE.match(tail, num.end())
    after = close.end() if close else num.end()
    k = _words_after(tail[after:], keep_known=False)
    if close and k:  # "$18$ thousand": the words after the math span change its value too
        return f"{num.group(0)} {tail[after : after + k].strip()}"
    start, end = num.start(), num.end() + (0 if close else k)
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
