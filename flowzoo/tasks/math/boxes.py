"""Reading ``\\boxed{...}`` / ``\\fbox{...}`` groups: their contents, where the final one
lies, and the text outside them.

Why a module of its own: every reading of an answer starts here (a completion's final box, a
prediction written as one, the hedge of two boxes), and the reading must stay linear in the
text whatever is planted in it (a tower of 3,000 nested boxes once took 13 s).
"""

from __future__ import annotations

import re

BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_BARE_BOX_RE = re.compile(r"\s+([^\s${}]+)")
#: math delimiters and markdown emphasis: typography around a box, never part of its value
DELIMS_RE = re.compile(r"\$+|\\[()\[\]]|\*\*|__")


def boxes(text: str) -> tuple[list[str], bool]:
    r"""Contents of every ``\boxed{...}`` / ``\fbox{...}`` (the whole balanced group), in
    order, and whether every box was closed. Linear in the text: boxes are read from the last
    to the first, and a box inside another is jumped over, never read again."""
    found = list(BOX_RE.finditer(text))
    spans: list[tuple[int, str | None] | None] = [None] * len(found)
    known: dict[int, int | None] = {}  # a box's group start -> its end (None: never closed)
    for i in range(len(found) - 1, -1, -1):
        spans[i] = box_span(text, found[i], known)
    out: list[str] = []
    for span in spans:
        if span is None:
            return out, False
        if span[1] is not None:
            out.append(span[1])
    return out, True


def box_span(
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


def top_boxes(text: str) -> list[tuple[int, int, str | None]]:
    """(start, end, content) of every box not inside another, in order (an unclosed one
    ends the text, with no content)."""
    out: list[tuple[int, int, str | None]] = []
    pos = 0
    for m in BOX_RE.finditer(text):
        if m.start() < pos:
            continue  # inside a box already taken
        span = box_span(text, m)
        pos = len(text) if span is None else span[0]
        out.append((m.start(), pos, None if span is None else span[1]))
    return out


def outside_boxes(text: str) -> str:
    """``text`` without its boxes (each whole, nested ones with it)."""
    out, pos = [], 0
    for start, end, _ in top_boxes(text):
        out.append(text[pos:start])
        pos = end
    out.append(text[pos:])
    return "".join(out)


def find_boxed(text: str) -> list[str]:
    r"""Contents of every closed ``\boxed{...}`` / ``\fbox{...}``, in order."""
    return boxes(text)[0]


def wraps_box(outer: str, inner: str) -> bool:
    """Whether box content ``outer`` is one box around exactly ``inner``."""
    o = outer.strip()
    m = BOX_RE.match(o)
    if m is None:
        return False
    rest = o[m.end() :].lstrip(" \t")
    return rest[:1] == "{" and rest[-1:] == "}" and rest[1:-1] == inner
