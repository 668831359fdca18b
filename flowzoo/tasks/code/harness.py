"""Turn a completion into a program (the judge in ``judge.py`` decides whether it passes)."""

from __future__ import annotations

import re

_FENCE_RE = re.compile(
    r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE
)
_CODE_START_RE = re.compile(r"^(?:def |class |import |from |@)", re.MULTILINE)
MAX_PROGRAM_CHARS = 20_000


def extract_program(text: str, entry_point: str = "", prompt_code: str = "") -> str | None:
    """The program in a completion: the last fenced block that defines the entry point (else
    the last fenced block), else bare code from the first ``def``/``import`` line. A body-only
    completion is appended to ``prompt_code``. None when there is no code."""
    if not isinstance(text, str) or not text.strip():
        return None
    text = text[: MAX_PROGRAM_CHARS * 2]
    blocks = [b for b in _FENCE_RE.findall(text) if b.strip()]
    code: str | None = None
    if blocks:
        defining = [
            b
            for b in blocks
            if entry_point and re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", b)
        ]
        code = (defining or blocks)[-1]
    else:
        m = _CODE_START_RE.search(text)
        if m:
            code = text[m.start() :]
        elif prompt_code and text.startswith((" ", "\t")):
            code = text
    if code is None:
        return None
    if (
        entry_point
        and prompt_code
        and not re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", code)
    ):
        code = prompt_code + code  # a HumanEval-style body continuation
    return code[:MAX_PROGRAM_CHARS]
