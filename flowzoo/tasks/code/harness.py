"""Turn a completion into a program, and a program plus a task's tests into one sandbox run.

The test program runs every case on its own (with a per-case alarm), records pass/fail and
the value the call produced (for ``assert f(x) == y`` cases) and prints one JSON line after
a per-run random marker. The candidate runs in the same interpreter as the harness: it is
contained by the sandbox, but a program written to forge results could in principle find
the marker; outputs without a well-formed results line score 0.
"""

from __future__ import annotations

import ast
import json
import re
import secrets
from dataclasses import dataclass

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


def _value_expr(case: str) -> str | None:
    """For ``assert LHS == RHS``: the source of LHS (the value the candidate produced)."""
    try:
        node = ast.parse(case).body[0]
    except (SyntaxError, IndexError):
        return None
    if (
        isinstance(node, ast.Assert)
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
    ):
        if isinstance(node.test.ops[0], ast.Eq):
            return ast.unparse(node.test.left)
    return None


_TEMPLATE = """\
import json as _json, signal as _signal, sys as _sys
_MARK = {marker!r}
_out = _sys.stdout
_cases = {cases!r}
_values = {values!r}
_res = []
class _CaseTimeout(BaseException):
    pass
def _alarm(*_a):
    raise _CaseTimeout()
_signal.signal(_signal.SIGALRM, _alarm)
_g = {{"__name__": "solution"}}
_load_err = None
try:
    _signal.setitimer(_signal.ITIMER_REAL, {load_timeout})
    exec(compile({program!r}, "solution.py", "exec"), _g)
    exec(compile({setup!r}, "setup.py", "exec"), _g)
except BaseException as _e:
    _load_err = type(_e).__name__
finally:
    _signal.setitimer(_signal.ITIMER_REAL, 0)
for _c, _v in zip(_cases, _values):
    if _load_err is not None:
        _res.append([False, None, "load:" + _load_err])
        continue
    _val = None
    try:
        _signal.setitimer(_signal.ITIMER_REAL, {case_timeout})
        if _v is not None:
            _val = repr(eval(_v, _g))[:200]
        exec(_c, _g)
        _res.append([True, _val, None])
    except BaseException as _e:
        _res.append([False, _val, type(_e).__name__])
    finally:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
_out.write("\\n" + _MARK + _json.dumps(_res) + "\\n")
_out.flush()
"""


@dataclass(frozen=True)
class CaseResult:
    passed: bool
    value: str | None
    error: str | None


def build_test_program(
    program: str,
    setup: str,
    cases: list[str],
    case_timeout_s: float = 2.0,
    load_timeout_s: float = 5.0,
) -> tuple[str, str]:
    """(source to run in the sandbox, the marker its results line starts with)."""
    marker = "@@flowzoo-results-" + secrets.token_hex(8) + "@@"
    src = _TEMPLATE.format(
        marker=marker,
        cases=list(cases),
        values=[_value_expr(c) for c in cases],
        program=program,
        setup=setup or "",
        case_timeout=float(case_timeout_s),
        load_timeout=float(load_timeout_s),
    )
    return src, marker


def parse_results(stdout: str, marker: str, n_cases: int) -> list[CaseResult] | None:
    """The per-case results printed by a test program, or None if absent or malformed."""
    idx = stdout.rfind(marker)
    if idx < 0:
        return None
    line = stdout[idx + len(marker) :].split("\n", 1)[0]
    try:
        raw = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(raw, list) or len(raw) != n_cases:
        return None
    out = []
    for r in raw:
        if not (isinstance(r, list) and len(r) == 3 and isinstance(r[0], bool)):
            return None
        out.append(CaseResult(r[0], r[1], r[2]))
    return out
