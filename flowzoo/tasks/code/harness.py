"""Turn a completion into a program (the judge in ``judge.py`` decides whether it passes)."""

from __future__ import annotations

import re

#: a fence: three or more backticks (or tildes), its info string the rest of its line
_FENCE_RE = re.compile(r"`{3,}|~{3,}")
#: a fence's label: the info string's first word ("python", "py3", "python:sol.py" -> "python")
_LABEL_RE = re.compile(r"[{.\s]*([a-z0-9_+-]*)")
#: the labels of a Python block (an unlabelled block counts as one too)
PYTHON_LABELS = frozenset({"", "python", "python3", "py", "py3", "ipython"})
_CODE_START_RE = re.compile(r"^(?:def |class |import |from |@)", re.MULTILINE)
MAX_PROGRAM_CHARS = 20_000


def fenced_blocks(text: str) -> tuple[list[tuple[str, str]], str]:
    """The fenced blocks of ``text``, parsed as blocks: ``(label, body)`` in order, and the text
    outside them. A block opens at a fence (its label the first word of the info string after
    it) and closes at the next fence of the same character at least as long; an unclosed last
    block runs to the end. A block's body never spans another block's fences."""
    blocks: list[tuple[str, str]] = []
    outside: list[str] = []
    pos = 0
    while True:
        m = _FENCE_RE.search(text, pos)
        if m is None:
            outside.append(text[pos:])
            break
        outside.append(text[pos : m.start()])
        eol = text.find("\n", m.end())
        if eol < 0:  # a fence on the last line: no body
            break
        label = _LABEL_RE.match(text[m.end() : eol].lower())
        fence = m.group()
        close = re.compile(re.escape(fence[0]) + "{" + str(len(fence)) + ",}")
        c = close.search(text, eol + 1)
        end = c.start() if c else len(text)
        blocks.append((label[1] if label else "", text[eol + 1 : end]))
        if c is None:
            break
        nl = text.find("\n", c.end())  # what follows a closing fence on its line is no text
        pos = len(text) if nl < 0 else nl + 1
    return blocks, "".join(outside)


def _defines(code: str, entry_point: str) -> bool:
    return bool(entry_point) and bool(re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", code))


def extract_program(text: str, entry_point: str = "", prompt_code: str = "") -> str | None:
    """The program in a completion. Fenced blocks are read as blocks (:func:`fenced_blocks`):
    the program is the last Python block (labelled ``python``/``py``/..., or unlabelled) that
    defines the entry point, else the last Python block; with no Python block, the last block
    of another label that defines the entry point (```` ```code ````). Blocks of other labels
    (```` ```text ````, ```` ```bash ````, ```` ```output ````) are never read as the
    program, and no program spans two blocks. With no such block, bare code from the first
    ``def``/``import`` line of the text outside blocks. A body-only completion is appended to
    ``prompt_code``. None when there is no code."""
    if not isinstance(text, str) or not text.strip():
        return None
    text = text[: MAX_PROGRAM_CHARS * 2]
    blocks, outside = fenced_blocks(text)
    blocks = [(lab, b) for lab, b in blocks if b.strip()]
    python = [b for lab, b in blocks if lab in PYTHON_LABELS]
    other = [b for lab, b in blocks if lab not in PYTHON_LABELS and _defines(b, entry_point)]
    code: str | None = None
    if python:
        code = ([b for b in python if _defines(b, entry_point)] or python)[-1]
    elif other:
        code = other[-1]
    else:
        m = _CODE_START_RE.search(outside)
        if m:
            code = outside[m.start() :]
        elif prompt_code and not blocks and text.startswith((" ", "\t")):
            code = text
    if code is None:
        return None
    if entry_point and prompt_code and not _defines(code, entry_point):
        code = prompt_code + code  # a HumanEval-style body continuation
    return code[:MAX_PROGRAM_CHARS]
