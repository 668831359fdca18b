"""An answer line's leading value and the remark after it (``18 apples in total``, ``18, i.e.
eighteen``): the number patterns a completion writes, and when what follows a value is a remark
that states no other value. Pure string work beside :mod:`extract`, which reads answer lines
with it.
"""

from __future__ import annotations

import re
from fractions import Fraction

from flowzoo.tasks.math import words as value_words
from flowzoo.tasks.math.beside import _words_after
from flowzoo.tasks.math.normal import normalize, to_number
from flowzoo.tasks.math.units import PROSE

#: how much of a line on either side of the final answer is read for what stands beside it
REGION_CHARS = 600

#: a number as a completion writes it; an exponent stays attached (``6.02e23`` is one number)
_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+(?![\w])|/\d+)?|[-+]?\.\d+"
#: a mixed number or a LaTeX fraction is one number (``2 1/2``, ``2\\frac{1}{2}``, ``2½``)
_FRACTION = r"\\[dt]?frac\{\d+\}\{\d+\}|\\[dt]?frac\d\d"
_MIXED = rf"[-+]?\d+(?:[ \t]+\d+/\d+(?![\d/])|[ \t]*(?:{_FRACTION})|[½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞])|[-+]?(?:{_FRACTION})"


def valued(s: str) -> tuple[Fraction, bool] | None:
    """The number ``s`` states, a value phrase read (``3 thousand`` is 3000)."""
    v = to_number(s)
    if v is None and value_words.has_value_word(s):
        r = value_words.read(s)
        v = None if r is None or r == value_words.UNREAD else to_number(r)
    return v


#: pictographs beside an answer (``✅``, ``🍎``): decoration, never part of a value
_PICTOGRAPH_RE = re.compile(r"[\u2600-\u27bf\u2b00-\u2bff\ufe0f\U0001f000-\U0001faff]")
_LEAD_NUMBER_RE = re.compile(f"(?:{_MIXED}|{_NUMBER})")
_LEAD_WORD_RE = re.compile(r"[A-Za-z]+(?:[ -]+[A-Za-z]+){0,5}")
#: what opens a remark after an answer line's value: a clause break, a parenthesis, a dash, or
#: a prose word (``18 apples in total``, ``18, i.e. eighteen``, ``18 (12 + 6)``)
_REMARK_RE = re.compile(r"\s*(?:[,;.!?](?:\s|$)|\(|[—–]|--)|\s+([A-Za-z]+)\b")
_PAREN_RE = re.compile(r"\([^()]*\)")
#: a parenthesis that works the answer out (an operator, ``=``, or words), dropped from a remark
_WORKING_RE = re.compile(r"[-+*/=×÷]|\\(?:times|cdot|div|frac)|[A-Za-z]{2,}")
_VALUE_TOKEN_RE = re.compile(r"[A-Za-z]+|\d+(?:[.,/]\d+)*")
_SCALE_WORDS = (
    frozenset(value_words.MULTIPLIERS)
    | frozenset(value_words.DENOMINATORS)
    | frozenset(value_words.POWERS)
    | value_words.PERCENT
    | value_words.REFUSED
    | value_words.FOREIGN
)


def _lead_value(s: str) -> str:
    """An answer line's value without the remark that follows it: the leading number (or
    number words) with its value phrase and unit words, when what follows is a remark (a
    clause break, a parenthesis, prose) that states no other value: ``18 apples in total``,
    ``18, i.e. eighteen``, ``eighteen (18)``, ``18 (12 + 6)``. Anything else is left whole
    (``18 + 1``, ``18, 19``, ``18 (in thousands)``) for the checker to judge or refuse."""
    m = _LEAD_NUMBER_RE.match(s)
    if m is not None:
        cut = m.end()
    else:
        w = _LEAD_WORD_RE.match(s)
        words = w.group(0).replace("-", " ").split() if w else []
        cut = 0
        for n in range(len(words), 0, -1):
            if value_words.number_words(" ".join(words[:n])) is not None:
                cut = [t.end() for t in re.finditer(r"[A-Za-z]+", s)][n - 1]
                break
        if not cut:
            return s
    lead = _plain_value(s[:cut])
    unit = _words_after(s[cut:], keep_known=True)
    cut += unit
    rest = s[cut:]
    if lead is None or not rest.strip():
        return s
    paren = _PAREN_RE.match(rest.lstrip())
    if paren and not unit:  # "2 (x+1)" is a product: only words or a restatement are a remark
        inner = paren.group(0)[1:-1]
        if not re.search(r"[A-Za-z]{2,}|=", inner) and _plain_value(inner) != lead:
            return s
    r = _REMARK_RE.match(rest)
    if r is None or (r.group(1) is not None and r.group(1).lower() not in PROSE):
        return s
    return s[:cut].strip() if _remark_agrees(rest, lead) else s


def _plain_value(t: str) -> Fraction | None:
    """The value of a number or of number words, else None."""
    n = value_words.number_words(t.strip())
    if n is not None:
        return Fraction(n)
    v = valued(normalize(t))
    return None if v is None else v[0]


def _remark_agrees(rest: str, lead: Fraction) -> bool:
    """Whether a remark after an answer states no value but ``lead``: a parenthesis that
    works it out is dropped (unless it scales, ``(in thousands)``); every other number or
    number-word run must be ``lead``, and no scale word may stand there."""
    for _ in range(4):
        t = _PAREN_RE.sub(
            lambda m: (
                " "
                if _WORKING_RE.search(m.group(0)[1:-1]) and not _scales(m.group(0))
                else m.group(0)[1:-1]
            ),
            rest,
        )
        if t == rest:
            break
        rest = t
    run: list[str] = []
    for tok in [*_VALUE_TOKEN_RE.findall(rest[:REGION_CHARS]), ""]:
        low = tok.lower()
        if low in _SCALE_WORDS:
            return False
        if tok and (tok[0].isdigit() or value_words.number_words(low) is not None):
            run.append(low)
            continue
        if run and _plain_value(" ".join(run)) != lead:
            return False
        run = []
    return True


def _scales(t: str) -> bool:
    return any(w.lower() in _SCALE_WORDS for w in _VALUE_TOKEN_RE.findall(t))
