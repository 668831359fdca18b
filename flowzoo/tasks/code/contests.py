"""Competitive-programming tasks from local files, in the formats users have: LiveCodeBench
(and DeepCoder, which reuses it), APPS/TACO and CodeContests, as JSON/JSONL(.gz), parquet
or a saved Hugging Face dataset. Nothing is downloaded.

Tests come out in two shapes: stdin/stdout pairs (``meta["format"] = "stdio"``, judged by
``stdio.py``) and function-call tests with a ``fn_name`` (turned into test statements for
the call judge, with a JSON-style comparison: tuples equal lists, and a one-element list of
expected values also accepts the bare value, as APPS grades).

Compressed test fields (LiveCodeBench's private tests: base64 of zlib of a pickle) are
decoded *without unpickling*: the pickle stream is walked opcode by opcode and only a
single string (or bytes) value is accepted, so a crafted row cannot run code. What a row's
test fields decode into is capped before it is built: bytes inflated and JSON text read, for
all of a row's fields together (:data:`MAX_INFLATED`), and the JSON values they hold
(:data:`MAX_TEST_VALUES`); a function-call row's test statements are code, capped in tokens
before anything parses them (:func:`~flowzoo.tasks.code.names.check_row_size`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import pickletools
import re
import zlib
from collections.abc import Iterable
from typing import Any

from flowzoo.tasks.base import Task, stable_hash
from flowzoo.tasks.code.names import check_name, check_row_size

#: the most bytes a row's test fields may decode into, all of them together (compressed ones
#: once inflated, JSON text as it is): twice :data:`MAX_TEST_CHARS`, room for JSON's quoting
#: of the most test text a row may keep. Each field could once inflate to 256 MiB, three of
#: them per CodeContests row, and be parsed whole
MAX_INFLATED = 64 << 20
#: the most JSON values a row's decoded test fields may build (counted on the text first):
#: one costs up to ~64 bytes built, so this bounds them to ~256 MB; an honest stdio case is
#: ~7 values (5,000 cases: 35,000), and a call row past ~10^6 values is past the code caps
MAX_TEST_VALUES = 4 << 20
#: per row: the most test cases, and the most characters of test data once decoded (a
#: 106 KiB compressed row once decoded into 1.34 M cases and 434 MiB)
MAX_CASES = 5_000
MAX_TEST_CHARS = 32 << 20
#: a row's time limit must be a finite number of seconds in (0, MAX_TIME_LIMIT_S]
MAX_TIME_LIMIT_S = 60.0
#: and the judge waits at most this per case, whatever the row asks (the code family's
#: ``ROW_LIMITS_S["case_timeout_s"]``: a data file never holds a verdict for long)
ROW_MAX_CASE_S = 10.0
#: pickle opcodes a test field may use: framing, memo and one string/bytes value
_SAFE_OPS = {
    "PROTO",
    "FRAME",
    "STOP",
    "MEMOIZE",
    "PUT",
    "BINPUT",
    "LONG_BINPUT",
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "SHORT_BINBYTES",
    "BINBYTES",
    "BINBYTES8",
}


def safe_unpickle_text(data: bytes) -> str:
    """The one string a pickle holds, read without executing the pickle (ValueError for any
    other content: objects, globals, calls, several values)."""
    value: Any = None
    count = 0
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name not in _SAFE_OPS:
                raise ValueError(f"pickle opcode {op.name} is not allowed in a test field")
            if op.name.endswith(("UNICODE", "BYTES", "BYTES8")):
                value, count = arg, count + 1
    except (ValueError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"not a plain pickled string: {e}") from None
    if count != 1:
        raise ValueError("a pickled test field must hold exactly one string")
    return value.decode("utf-8") if isinstance(value, bytes) else value


class TestBudget:
    """What one row's test fields may still decode into: :data:`MAX_INFLATED` bytes and
    :data:`MAX_TEST_VALUES` JSON values, shared by all of its fields."""

    def __init__(self) -> None:
        self.bytes_left = MAX_INFLATED
        self.values_left = MAX_TEST_VALUES

    def take(self, n_bytes: int, name: str) -> None:
        """Spend ``n_bytes``, or a ValueError naming the field ``name`` and the limit."""
        self.bytes_left -= n_bytes
        if self.bytes_left < 0:
            raise ValueError(
                f"{name} inflates past {MAX_INFLATED:,} bytes (all of the row's test fields "
                "together; flowzoo.tasks.code.contests.MAX_INFLATED)"
            )

    def count(self, data: str | bytes, name: str) -> None:
        """Spend the JSON values ``data`` would build, counted before it is: with strings
        blanked, every value is the first or follows ``[``, ``{``, ``,`` or ``:``."""
        if isinstance(data, bytes):
            flat_b = _JSON_STR_B.sub(b"", data)
            n = sum(flat_b.count(c) for c in (b"[", b"{", b",", b":"))
        else:
            flat = _JSON_STR.sub("", data)
            n = sum(flat.count(c) for c in ("[", "{", ",", ":"))
        self.values_left -= 1 + n
        if self.values_left < 0:
            raise ValueError(
                f"{name} holds over {MAX_TEST_VALUES:,} JSON values (all of the row's test "
                "fields together; flowzoo.tasks.code.contests.MAX_TEST_VALUES)"
            )


#: a JSON string, escapes included (blanked before values are counted)
_JSON_STR = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_JSON_STR_B = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def decode_test_field(
    field: Any, budget: TestBudget | None = None, name: str = "test field"
) -> Any:
    """A test field as JSON data: a list/dict as is, a JSON string, or LiveCodeBench's
    compressed form (base64 -> zlib -> pickled JSON string). Text is read and inflated no
    further than ``budget`` (one row's, shared by its fields; a fresh one when None)."""
    if isinstance(field, (list, dict)):
        return field
    if not isinstance(field, str):
        raise ValueError(f"{name} must be text or JSON data, got {type(field).__name__}")
    budget = TestBudget() if budget is None else budget
    text = field.strip()
    if not text:
        return []
    if text[0] in "[{":
        budget.take(len(text), name)
        budget.count(text, name)
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{name} is not valid JSON ({e.msg})") from None
    try:
        raw = base64.b64decode(text, validate=True)
        inflater = zlib.decompressobj()
        data = inflater.decompress(raw, max(budget.bytes_left, 0) + 1)
    except (binascii.Error, zlib.error) as e:
        raise ValueError(f"{name} is neither JSON nor base64+zlib ({e})") from None
    budget.take(len(data), name)  # past the budget: one byte more than it was inflated
    if data[:1] == b"\x80":
        data = safe_unpickle_text(data).encode("utf-8")
    budget.count(data, name)
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"decompressed {name} is not JSON ({e})") from None


def _text(v: Any) -> str:
    """An input or output as text (APPS sometimes stores a list of lines)."""
    if isinstance(v, list):
        return "\n".join(str(x) for x in v)
    return v if isinstance(v, str) else json.dumps(v)


def _finite(v: Any) -> bool:
    """No infinite or NaN float anywhere in a JSON value (Python's JSON reader accepts
    ``Infinity``/``NaN``, whose repr would not compile back)."""
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, list):
        return all(_finite(x) for x in v)
    if isinstance(v, dict):
        return all(_finite(x) for x in v.values())
    return True


def _literal(v: Any) -> str:
    """A JSON value as Python source the judge can compile."""
    try:
        ok = _finite(v)
    except RecursionError:
        ok = False
    if not ok:
        raise ValueError(f"test value {repr(v)[:60]} is not plain JSON data")
    return repr(v)


def call_tests(fn_name: str, cases: Iterable[tuple[list, Any]], method: bool) -> dict:
    """Function-call cases -> the meta of an assert-style task (entry point, statements,
    the harness that reaches a ``Solution`` method)."""
    fn_name = check_name(fn_name, "function name")
    entry = "_flowzoo_call" if method else fn_name
    tests = [f"assert _fz_json_eq({entry}(*{_literal(a)}), {_literal(e)})" for a, e in cases]
    harness = (
        f"\n\ndef _flowzoo_call(*args):\n    return Solution().{fn_name}(*args)\n" if method else ""
    )
    return {"entry_point": fn_name, "tests": tests, "setup": "", "harness": harness}


def _make(
    tid: str,
    question: str,
    starter: str,
    stdio: list[tuple[str, str]],
    calls: dict | None,
    src: str,
) -> Task:
    if calls is not None:
        meta = {**calls, "prompt_code": "", "starter_code": starter, "source": src}
    else:
        meta = {"format": "stdio", "tests": tuple(stdio), "entry_point": "", "source": src}
    if not meta["tests"]:
        raise ValueError(f"{src}: task {tid} has no test cases")
    if len(meta["tests"]) > MAX_CASES:
        raise ValueError(
            f"{src}: task {tid} has {len(meta['tests']):,} cases (at most {MAX_CASES:,})"
        )
    if calls is not None:  # test statements are code: capped before anything parses them
        check_row_size({"tests": list(meta["tests"]), "harness": [meta.get("harness", "")]})
    size = sum(len(a) + len(b) for a, b in stdio) + sum(
        len(t) for t in (calls or {}).get("tests", ())
    )
    if size > MAX_TEST_CHARS:
        raise ValueError(
            f"{src}: task {tid} has {size:,} characters of tests (at most {MAX_TEST_CHARS:,})"
        )
    if starter.strip():
        question += f"\nStarter code:\n{starter.strip()}"
    return Task(id=tid, question=question, answer="", family="code", meta=meta)


def _split_cases(cases: list[dict], fn_name: str | None, starter: str) -> tuple[list, dict | None]:
    """LiveCodeBench/DeepCoder/PrimeIntellect case lists -> (stdio pairs, call meta)."""
    stdio, calls = [], []
    for c in cases:
        if not isinstance(c, dict) or "input" not in c or "output" not in c:
            raise ValueError(f"a test case needs 'input' and 'output', got {str(c)[:80]}")
        kind = c.get("testtype") or c.get("type") or "stdin"
        if kind in ("stdin", "stdin_stdout"):
            stdio.append((_text(c["input"]), _text(c["output"])))
            continue
        if kind not in ("functional", "function_call"):
            raise ValueError(f"unknown test type {kind!r}; valid: stdin, functional")
        fn_name = fn_name or c.get("fn_name") or (c.get("metadata") or {}).get("func_name")
        inp, out = c["input"], c["output"]
        args = (
            [json.loads(x) for x in inp.split("\n") if x.strip()] if isinstance(inp, str) else inp
        )
        exp = json.loads(out) if isinstance(out, str) else out
        calls.append((args if isinstance(args, list) else [args], exp))
    if calls and stdio:
        raise ValueError("a task mixes stdin and functional tests")
    if calls:
        if not fn_name:
            raise ValueError("functional tests need a function name (metadata func_name / fn_name)")
        return [], call_tests(fn_name, calls, "class Solution" in starter)
    return stdio, None


def _func_name(row: dict) -> str | None:
    """The ``func_name`` of a row's ``metadata`` (a JSON object, or its text), if any."""
    meta = row.get("metadata") or {}
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip() else {}
    if not isinstance(meta, dict):
        raise ValueError(f"metadata must be a JSON object, got {str(meta)[:60]}")
    return meta.get("func_name")


def livecodebench_task(row: dict, source: str = "livecodebench") -> Task:
    """A LiveCodeBench (code_generation_lite) row: ``question_content``, ``starter_code``,
    ``public_test_cases`` + ``private_test_cases`` (JSON or compressed), ``metadata``."""
    if "question_content" not in row:
        raise ValueError(f"{source}: LiveCodeBench row lacks 'question_content'")
    budget = TestBudget()
    cases = list(decode_test_field(row.get("public_test_cases") or [], budget, "public_test_cases"))
    cases += list(
        decode_test_field(row.get("private_test_cases") or [], budget, "private_test_cases")
    )
    starter = row.get("starter_code") or ""
    stdio, calls = _split_cases(cases, _func_name(row), starter)
    tid = str(row.get("question_id") or f"lcb-{stable_hash(row['question_content']) % 10**10}")
    return _make(tid, row["question_content"].strip(), starter, stdio, calls, source)


def deepcoder_task(row: dict, source: str = "deepcoder") -> Task:
    """A DeepCoder row: ``problem`` and ``tests`` (a LiveCodeBench/PrimeIntellect case list
    or a TACO ``inputs``/``outputs`` dict)."""
    if "problem" not in row or "tests" not in row:
        raise ValueError(f"{source}: DeepCoder row needs 'problem' and 'tests'")
    tests = decode_test_field(row["tests"], name="tests")
    starter = row.get("starter_code") or ""
    tid = str(row.get("id") or f"dc-{stable_hash(row['problem']) % 10**10}")
    if isinstance(tests, dict):
        return _taco(tid, row["problem"], starter, tests, source)
    stdio, calls = _split_cases(list(tests), _func_name(row), starter)
    return _make(tid, row["problem"].strip(), starter, stdio, calls, source)


def _taco(tid: str, question: str, starter: str, io: dict, source: str) -> Task:
    inputs, outputs = io.get("inputs"), io.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise ValueError(f"{source}: input_output needs 'inputs' and 'outputs' of equal length")
    fn = io.get("fn_name")
    if fn:
        cases = [
            (a if isinstance(a, list) else [a], e) for a, e in zip(inputs, outputs, strict=True)
        ]
        calls = call_tests(fn, cases, "class Solution" in starter)
        return _make(tid, question.strip(), starter, [], calls, source)
    stdio = [(_text(a), _text(e)) for a, e in zip(inputs, outputs, strict=True)]
    return _make(tid, question.strip(), starter, stdio, None, source)


def apps_task(row: dict, source: str = "apps") -> Task:
    """An APPS/TACO row: ``question``, ``input_output`` (JSON: ``inputs``, ``outputs``,
    optional ``fn_name``), optional ``starter_code``."""
    if "question" not in row or "input_output" not in row:
        raise ValueError(f"{source}: APPS/TACO row needs 'question' and 'input_output'")
    io = decode_test_field(row["input_output"], name="input_output")
    if not isinstance(io, dict):
        raise ValueError(f"{source}: input_output must be a JSON object")
    tid = str(
        row.get("problem_id") or row.get("id") or f"apps-{stable_hash(row['question']) % 10**10}"
    )
    return _taco(tid, row["question"], row.get("starter_code") or "", io, source)


def codecontests_task(row: dict, source: str = "codecontests", generated: bool = False) -> Task:
    """A CodeContests row: ``description``, ``public_tests`` + ``private_tests`` (and
    ``generated_tests`` when asked), each ``{"input": [...], "output": [...]}``."""
    if "description" not in row:
        raise ValueError(f"{source}: CodeContests row lacks 'description'")
    stdio: list[tuple[str, str]] = []
    budget = TestBudget()
    for key in ("public_tests", "private_tests") + (("generated_tests",) if generated else ()):
        t = decode_test_field(row.get(key) or {"input": [], "output": []}, budget, key)
        if not isinstance(t, dict):
            raise ValueError(f"{source}: {key} must be an object with 'input' and 'output' lists")
        if len(t.get("input", [])) != len(t.get("output", [])):
            raise ValueError(f"{source}: {key} has unequal input and output lists")
        stdio += [(_text(a), _text(e)) for a, e in zip(t["input"], t["output"], strict=True)]
    tid = str(row.get("name") or f"cc-{stable_hash(row['description']) % 10**10}")
    task = _make(tid, row["description"].strip(), "", stdio, None, source)
    limit = row.get("time_limit")
    if isinstance(limit, dict) and limit.get("seconds"):
        try:
            secs = float(limit["seconds"]) + float(limit.get("nanos", 0)) / 1e9
        except (TypeError, ValueError):
            secs = math.nan
        secs = time_limit(secs, source)
        task.meta["time_limit"] = min(secs, ROW_MAX_CASE_S)
        if secs > ROW_MAX_CASE_S:  # what the row asked, kept to be seen
            task.meta["time_limit_asked"] = secs
    return task


def time_limit(secs: float, source: str) -> float:
    """A row's time limit, or ValueError: negative, zero, NaN or huge limits would make a task
    unsolvable (or a verdict unbounded). The judge waits at most :data:`ROW_MAX_CASE_S`."""
    if not (math.isfinite(secs) and 0 < secs <= MAX_TIME_LIMIT_S):
        raise ValueError(f"{source}: time limit must be in (0, {MAX_TIME_LIMIT_S:g}] s, got {secs}")
    return secs


CONVERTERS = {
    "livecodebench": livecodebench_task,
    "deepcoder": deepcoder_task,
    "apps": apps_task,
    "taco": apps_task,
    "codecontests": codecontests_task,
}


def detect_style(row: dict) -> str:
    """Which format a row is in, from its fields."""
    if "question_content" in row:
        return "livecodebench"
    if "problem" in row and "tests" in row:
        return "deepcoder"
    if "input_output" in row:
        return "apps"
    if "public_tests" in row or "private_tests" in row:
        return "codecontests"
    if "prompt" in row and "test" in row:
        return "humaneval"
    if "test_list" in row:
        return "mbpp"
    raise ValueError(
        f"cannot tell the format of a row with fields {sorted(row)[:12]}; valid styles: "
        f"{', '.join(CONVERTERS)}, humaneval, mbpp"
    )
