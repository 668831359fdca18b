"""Caps on what loading a task file may build, checked before it is built: each past its cap
is a ValueError naming the file, the row, the field and the limit (or ``bad_tests`` for a
task made in code, at the judge), and honest rows load under the default caps.

1. Row code, in tokens before Python's parser sees it: per field (``MAX_CODE_TOKENS``) and
   for all of a row's code together (``MAX_ROW_CODE_TOKENS``); tokens, because the parser's
   peak memory follows them (4 MiB of names once took ~3 GB).
2. Contest test fields: bytes inflated or read and JSON values, for all of a row's fields
   together (``MAX_INFLATED``, ``MAX_TEST_VALUES``), and what a whole file's rows keep once
   decoded (``MAX_FILE_BYTES``).
3. Parquet (and JSON Lines) files: bytes as stored, rows, and bytes decoded, counted while
   the file is read (a footer is not trusted).

Real files in ``tmp_path`` and the real loaders; memory is checked in a subprocess.
"""

from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import flowzoo
from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily, contests, load_code_file, names
from flowzoo.tasks.code.data import load_code_dataset
from flowzoo.tasks.files import WHOLE
from flowzoo.tasks.math.data import load_hf_local
from tests.tasks.test_row_bombs import HUMANEVAL, MBPP, RIGHT, WRONG  # the same rows

REPO = str(Path(flowzoo.__file__).resolve().parents[1])


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _compress(obj: object) -> str:
    """LiveCodeBench's private-test encoding: base64(zlib(pickle(json string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(obj)), 9)).decode()


def _task(tests: list[str], tid: str, **meta: str) -> Task:
    m = {"entry_point": "f", "tests": tests, "setup": "", "prompt_code": "", **meta}
    return Task(id=tid, question="q", family="code", meta=m)


# ------------------------------------------------------------------ 1. row code, in tokens
#: code of ~2,000 tokens in shapes the parser pays for differently (names, calls, literal
#: numbers, nested lists), each well under the character cap
SHAPES = {
    "names": "x = [" + ",".join(["a"] * 1_000) + "]",
    "calls": "\n".join(["f(1)"] * 500),
    "numbers": "assert f(" + repr(list(range(10**8, 10**8 + 1_000))) + ") == 2",
    "nested lists": "y = " + repr([[0]] * 500),
}


def _row_with(style: str, field: str, code: str) -> dict:
    """An honest row with ``code`` added in ``field``."""
    if style == "mbpp":
        row = {**MBPP, "test_list": ["assert f(1) == 2"]}
        if field == "test_list":  # no code: no test added (a blank one is refused at load)
            return {**row, "test_list": ["assert f(1) == 2"] + ([code] if code else [])}
        if field == "test_setup_code":
            return {**row, "test_setup_code": code}
        return {**row, "code": row["code"] + code + "\n"}
    if field == "test":
        return {**HUMANEVAL, "test": HUMANEVAL["test"] + code + "\n"}
    if field == "prompt":
        return {**HUMANEVAL, "prompt": code + "\n" + HUMANEVAL["prompt"]}
    return {**HUMANEVAL, "canonical_solution": HUMANEVAL["canonical_solution"] + code + "\n"}


FIELDS = [
    ("mbpp", "test_list", "test_list"),
    ("mbpp", "test_setup_code", "test_setup_code"),
    ("mbpp", "code", "reference solution"),
    ("humaneval", "test", "test"),
    ("humaneval", "prompt", "canonical_solution"),
    ("humaneval", "canonical_solution", "canonical_solution"),
]


@pytest.mark.parametrize("style,field,named", FIELDS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_code_field_past_the_token_cap_is_refused_before_parsing(
    tmp_path, monkeypatch, style, field, named, shape
):
    """Each shape in each code field, past a lowered cap: refused naming the file, the row,
    the field and the knob; under it (the cap raised) the same row loads."""
    code = SHAPES[shape]
    good = _row_with(style, "test_list" if style == "mbpp" else "test", "")
    bad = {**_row_with(style, field, code), "task_id": 2 if style == "mbpp" else "h/1"}
    path = _write(tmp_path / "rows.jsonl", [good, bad])
    monkeypatch.setattr(names, "MAX_CODE_TOKENS", 1_500)
    msg = rf"rows.jsonl:2: .*{named}.* tokens of code, past the limit of 1,500 .*MAX_CODE_TOK"
    with pytest.raises(ValueError, match=msg):
        load_code_file(path, style)
    with pytest.raises(ValueError, match=r"rows.jsonl:2: .*past the limit of 1,500"):
        load_code_dataset(f"file:{path}", split=WHOLE)
    monkeypatch.setattr(names, "MAX_CODE_TOKENS", 4_000)
    assert len(load_code_file(path, style)) == 2


def test_a_row_whose_code_together_is_past_the_row_cap_is_refused(tmp_path, monkeypatch):
    """Many tests, each under the field cap, together past the row's: refused at load naming
    the fields; a task made in code with them scores ``bad_tests`` at the judge while an
    honest task in the same batch still scores 1 and 0."""
    monkeypatch.setattr(names, "MAX_ROW_CODE_TOKENS", 5_000)
    tests = [f"assert f({i}) == {i + 1}  # " + "pad " * 100 for i in range(60)]  # ~110 each
    assert all(names.code_tokens(t) < names.MAX_CODE_TOKENS for t in tests)
    rows = [{**MBPP, "test_list": ["assert f(1) == 2"]}, {**MBPP, "test_list": tests}]
    path = _write(tmp_path / "many.jsonl", rows)
    msg = r"many.jsonl:2: test_list, test_setup_code hold [\d,]+ tokens .* limit of 5,000"
    with pytest.raises(ValueError, match=msg):
        load_code_file(path, "mbpp")
    he = {**HUMANEVAL, "test": "def check(candidate):\n" + "".join(f"    {t}\n" for t in tests)}
    with pytest.raises(ValueError, match=r":1: .*limit of 5,000 .*MAX_ROW_CODE_TOKENS"):
        load_code_file(_write(tmp_path / "he.jsonl", [he]), "humaneval")
    fam = CodeFamily(sandbox_options={"timeout_s": 20, "memory_mb": 256})
    try:
        honest = _task(["assert f(1) == 2", "assert f(-1) == 0"], "honest")
        big = _task(tests, "big")
        got = fam.score_pairs([(honest, RIGHT), (big, RIGHT), (honest, WRONG)])
    finally:
        fam.sandbox.close()
    assert [got[0].score, got[2].score] == [1.0, 0.0], (got[0].reason, got[2].reason)
    assert got[1].score == 0.0 and got[1].reason.startswith("bad_tests:"), got[1].reason
    assert "past the limit of 5,000" in got[1].reason


def test_contest_call_tests_are_capped_as_code_and_honest_big_arguments_load(tmp_path):
    """A functional contest row's test statements are code: a row whose arguments hold 10^5
    numbers loads under the default caps; one past the field cap is refused naming it."""
    big = list(range(10**8, 10**8 + 100_000))
    ok = {
        "question_content": "Sum the list.",
        "question_id": "sum",
        "starter_code": "",
        "public_test_cases": json.dumps(
            [{"input": json.dumps(big), "output": str(sum(big)), "testtype": "functional"}]
        ),
        "private_test_cases": "[]",
        "metadata": json.dumps({"func_name": "total"}),
    }
    names_arg = json.dumps(["a"] * 300_000)  # 300k strings: ~1.2M tokens counted
    bad = {
        **ok,
        "question_id": "names",
        "public_test_cases": json.dumps(
            [{"input": names_arg, "output": "0", "testtype": "functional"}]
        ),
    }
    (t,) = load_code_file(_write(tmp_path / "ok.jsonl", [ok]), "livecodebench")
    assert len(t.meta["tests"][0]) > 1_000_000
    with pytest.raises(ValueError, match=r"bad.jsonl:1: tests holds [\d,]+ tokens .*524,288"):
        load_code_file(_write(tmp_path / "bad.jsonl", [bad]), "livecodebench")


PROBE = """
import resource, sys
sys.path.insert(0, {repo!r})
from flowzoo.tasks.code import load_code_file
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_code_file({path!r}, "mbpp")
    print("loaded", 0)
except ValueError as e:
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
    print("refused" if "MAX_CODE_TOKENS" in str(e) else repr(e)[:200], grew)
"""


@pytest.mark.parametrize("shape", ["names", "calls"])
def test_a_huge_code_field_is_refused_with_memory_bounded(tmp_path, shape):
    """2 MiB of names or calls in one test (under the character cap): refused at the default
    caps with the loader's peak memory grown by tens of MB, where parsing it took ~1.4 GB."""
    code = "x = [" + ",".join(["a"] * (1 << 20)) + "]" if shape == "names" else "f(1)\n" * 420_000
    path = _write(tmp_path / "huge.jsonl", [{**MBPP, "test_list": ["assert f(1) == 2", code]}])
    r = subprocess.run(
        [sys.executable, "-c", PROBE.format(repo=REPO, path=str(path))],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    outcome, grew_mb = r.stdout.split()
    assert outcome == "refused", r.stdout
    assert int(grew_mb) < 200, f"peak memory grew by {grew_mb} MB"


# ------------------------------------------------------------------ 2. contest test fields
def _lcb(public: str, private: str, qid: str = "q") -> dict:
    return {
        "question_content": "Echo.",
        "question_id": qid,
        "starter_code": "",
        "public_test_cases": public,
        "private_test_cases": private,
        "metadata": "{}",
    }


def _cases(n: int, width: int) -> list[dict]:
    return [{"input": "7" * width, "output": "7" * width, "testtype": "stdin"} for _ in range(n)]


def test_a_rows_test_fields_share_one_inflation_cap(tmp_path, monkeypatch):
    """Two compressed fields each under the cap, together past it (and the same as plain JSON
    text, and CodeContests' three fields): refused naming the field that crossed it."""
    monkeypatch.setattr(contests, "MAX_INFLATED", 100_000)
    half = _cases(4, 8_000)  # ~64 KB of JSON each
    rows = {
        "compressed": [_lcb(json.dumps(_cases(1, 3)), _compress(half), "ok"),
                       _lcb(_compress(half), _compress(half))],
        "json text": [_lcb(json.dumps(_cases(1, 3)), json.dumps(half), "ok"),
                      _lcb(json.dumps(half), json.dumps(half))],
    }  # fmt: skip
    for kind, two in rows.items():
        path = _write(tmp_path / f"{kind}.jsonl", two)
        msg = rf"{kind}.jsonl:2: private_test_cases inflates past 100,000 bytes .*MAX_INFL"
        with pytest.raises(ValueError, match=msg):
            load_code_file(path, "livecodebench")
        with pytest.raises(ValueError, match=rf"{kind}.jsonl:2: "):
            load_code_dataset(f"file:{path}", split=WHOLE)
        assert len(load_code_file(_write(tmp_path / "one.jsonl", two[:1]))) == 1
    io = {"input": ["5" * 30_000] * 1, "output": ["5"]}
    cc = {"description": "Echo.", "name": "cc", "public_tests": json.dumps(io),
          "private_tests": json.dumps(io), "generated_tests": json.dumps(io)}  # fmt: skip
    assert len(load_code_file(_write(tmp_path / "cc.jsonl", [cc]), "codecontests")) == 1
    cc_path = _write(
        tmp_path / "cc.jsonl", [{**cc, "private_tests": json.dumps(io | {"input": ["5" * 80_000]})}]
    )
    with pytest.raises(ValueError, match=r"cc.jsonl:1: private_tests inflates past 100,000"):
        load_code_file(cc_path, "codecontests")


def test_a_compressed_field_past_the_default_cap_stops_inflating(tmp_path):
    """100 MiB of one character compressed to ~100 KB: refused at the default 64 MiB cap."""
    blob = zlib.compressobj(9)  # built a chunk at a time
    parts = [blob.compress(b'[{"input": "')]
    parts += [blob.compress(b"7" * (1 << 20)) for _ in range(100)]
    parts.append(blob.compress(b'", "output": "7", "testtype": "stdin"}]') + blob.flush())
    field = base64.b64encode(b"".join(parts)).decode()
    assert len(field) < 1 << 20
    path = _write(tmp_path / "bomb.jsonl", [_lcb(json.dumps(_cases(1, 3)), field)])
    msg = r"bomb.jsonl:1: private_test_cases inflates past 67,108,864 bytes"
    with pytest.raises(ValueError, match=msg):
        load_code_file(path, "livecodebench")


def test_json_values_are_counted_before_they_are_built(tmp_path, monkeypatch):
    """Few bytes, many values (empty lists, one-key objects), compressed or as text: refused
    naming the field and the knob; quoted brackets and escaped quotes inside strings are one
    value each, so an honest row full of them loads."""
    monkeypatch.setattr(contests, "MAX_TEST_VALUES", 10_000)
    quoted = [{"input": '[[{"\\"' * 2_000, "output": "1", "testtype": "stdin"}]
    ok = _lcb(json.dumps(quoted), _compress(quoted), "ok")
    assert len(load_code_file(_write(tmp_path / "ok.jsonl", [ok]), "livecodebench")) == 1
    for name, blob in {"lists": "[" + "[]," * 20_000 + "[]]", "objects": "[" + '{"a":1},' * 6_000 + "{}]"}.items():  # fmt: skip
        for field in (blob, base64.b64encode(zlib.compress(blob.encode())).decode()):
            path = _write(tmp_path / f"{name}.jsonl", [ok, _lcb("[]", field)])
            msg = rf"{name}.jsonl:2: private_test_cases holds over 10,000 JSON values .*MAX_TEST_VALUES"
            with pytest.raises(ValueError, match=msg):
                load_code_file(path, "livecodebench")


def test_what_a_files_rows_keep_once_inflated_is_capped_like_a_plain_file(tmp_path, monkeypatch):
    """Rows whose compressed tests each inflate to 30 KB, in a file of a few KB: the file's
    decoded tests are capped at ``MAX_FILE_BYTES``, naming the row that crossed it."""
    monkeypatch.setattr("flowzoo.tasks.files.MAX_FILE_BYTES", 100_000)
    rows = [_lcb("[]", _compress(_cases(1, 15_000)), f"q{i}") for i in range(6)]
    path = _write(tmp_path / "many.jsonl", rows)
    assert path.stat().st_size < 10_000
    msg = r"many.jsonl:4: the file's tests reach [\d,]+ characters once decoded, past the limit of 100,000"
    with pytest.raises(ValueError, match=msg):
        load_code_file(path, "livecodebench")
    assert len(load_code_file(_write(tmp_path / "three.jsonl", rows[:3]), "livecodebench")) == 3


# ------------------------------------------------------------------ 3. parquet and row counts
@pytest.fixture
def pq():
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet as pq
    except ImportError:
        pytest.skip("pyarrow is not installed (the `tasks` extra): parquet files are not read")
    return pq


def _parquet(pq, path: Path, rows: list[dict], **kw) -> Path:
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows), path, **kw)
    return path


def test_parquet_rows_past_the_row_cap_are_refused(tmp_path, monkeypatch, pq):
    monkeypatch.setattr("flowzoo.tasks.files.MAX_FILE_ROWS", 10)
    rows = [{**MBPP, "task_id": i, "test_list": [f"assert f({i}) == {i + 1}"]} for i in range(11)]
    path = _parquet(pq, tmp_path / "rows.parquet", rows)
    with pytest.raises(
        ValueError, match=r"rows.parquet: holds 11 rows, past the limit of 10 rows.*MAX_FILE_ROWS"
    ):
        load_code_dataset(f"file:{path}", split=WHOLE)
    assert len(load_code_file(_parquet(pq, tmp_path / "ten.parquet", rows[:10]), "mbpp")) == 10
    math_rows = [{"question": f"1 + {i}?", "answer": str(i + 1)} for i in range(11)]
    with pytest.raises(ValueError, match=r"math.parquet: holds 11 rows, past the limit of 10"):
        load_hf_local(_parquet(pq, tmp_path / "math.parquet", math_rows), split=WHOLE)
    jsonl = _write(tmp_path / "empty.jsonl", [{}] * 11)
    with pytest.raises(ValueError, match=r"empty.jsonl: holds 1[12] rows, past the limit of 10"):
        load_code_file(jsonl)


def test_parquet_decoded_past_the_cap_is_refused_whatever_its_footer_says(
    tmp_path, monkeypatch, pq
):
    """One value of 8 MB compressed to a few KB (the footer says 8 MB: refused before it is
    read), and 40 rows sharing one 512 KB dictionary value (the footer says ~0.5 MB: refused
    while it is decoded); the same for a math file, and a file past the stored-size cap."""
    monkeypatch.setattr("flowzoo.tasks.files.MAX_FILE_BYTES", 4 << 20)
    one = [{**MBPP, "text": "x" * (8 << 20), "test_list": ["assert f(1) == 2"]}]
    path = _parquet(pq, tmp_path / "one.parquet", one, compression="zstd")
    assert path.stat().st_size < 1 << 20
    with pytest.raises(
        ValueError, match=r"one.parquet: decodes to [\d,]+ bytes .*past the limit of 4,194,304"
    ):
        load_code_file(path, "mbpp")
    many = [{**MBPP, "task_id": i, "text": "y" * (1 << 19), "test_list": [f"assert f({i}) == {i + 1}"]} for i in range(40)]  # fmt: skip
    path = _parquet(pq, tmp_path / "many.parquet", many, compression="zstd", row_group_size=40)
    assert pq.ParquetFile(path).metadata.row_group(0).total_byte_size < 4 << 20
    with pytest.raises(
        ValueError, match=r"many.parquet: decodes to over [\d,]+ bytes, past the limit of 4,194,304"
    ):
        load_code_file(path, "mbpp")
    math_rows = [{"question": "z" * (1 << 19), "answer": str(i)} for i in range(40)]
    path = _parquet(pq, tmp_path / "math.parquet", math_rows, compression="zstd")
    with pytest.raises(ValueError, match=r"math.parquet: decodes to .*past the limit of 4,194,304"):
        load_hf_local(path, split=WHOLE)
    monkeypatch.setattr("flowzoo.tasks.files.MAX_FILE_BYTES", 2_000)
    small = _parquet(pq, tmp_path / "small.parquet", many[:3], compression="none")
    with pytest.raises(
        ValueError, match=r"small.parquet: holds [\d,]+ bytes, past the limit of 2,000"
    ):
        load_code_file(small, "mbpp")


def test_parquet_rows_get_the_same_row_checks(tmp_path, monkeypatch, pq):
    """A parquet row with a code field past the token cap is refused naming its row and
    field; honest rows load, and garbage is a ValueError naming the file."""
    monkeypatch.setattr(names, "MAX_CODE_TOKENS", 1_500)
    rows = [{**MBPP, "test_list": ["assert f(1) == 2"]},
            {**MBPP, "test_list": ["assert f(1) == 2", SHAPES["names"]]}]  # fmt: skip
    path = _parquet(pq, tmp_path / "code.parquet", rows)
    with pytest.raises(
        ValueError, match=r"code.parquet row 2: test_list .* holds [\d,]+ tokens .*1,500"
    ):
        load_code_file(path)
    assert len(load_code_file(_parquet(pq, tmp_path / "ok.parquet", rows[:1]))) == 1
    (tmp_path / "junk.parquet").write_bytes(b"PAR1" + b"\0" * 100)
    with pytest.raises(ValueError, match=r"junk.parquet: not a readable parquet file"):
        load_code_file(tmp_path / "junk.parquet")
