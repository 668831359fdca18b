"""What a parser would read only in part: the checks that run before an answer reaches the
symbolic grader (math-verify), since its fallbacks read such answers as one of their pieces.

Malformed LaTeX (brackets or environments that do not close in order), relations and prose
hedges the gold lacks, commands and symbols it does not evaluate, digits apart, other
variables, and numbers with a base subscript. Pure string work, linear in the answer.
"""

from __future__ import annotations

import re

from flowzoo.tasks.math.normal import squeeze
from flowzoo.tasks.math.units import UNITS

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
_UNIT_WORD_RE = re.compile(f"(?:{UNITS})", re.IGNORECASE)
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
