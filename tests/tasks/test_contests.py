"""Loaders of competitive-programming formats on small fixture files (LiveCodeBench with a
compressed row, DeepCoder, APPS/TACO, CodeContests; JSONL, JSON, parquet, a saved HF
dataset), safe decoding of compressed tests, and function-call (``fn_name``) tests."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

from flowzoo import make_env
from flowzoo.tasks.code import CodeFamily, contests, load_code_dataset, load_code_file
from flowzoo.tasks.code.contests import decode_test_field, safe_unpickle_text

ADD_PROGRAM = "a, b = map(int, input().split())\nprint(a + b)"
ADD_CASES = [{"input": f"{i} {i * 2}\n", "output": f"{3 * i}\n"} for i in range(1, 6)]


def compress(obj) -> str:
    """LiveCodeBench's private-test encoding: base64(zlib(pickle(json string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(obj)))).decode()


def fence(src: str) -> str:
    return f"```python\n{src}\n```"


def lcb_stdio_row() -> dict:
    public = [dict(c, testtype="stdin") for c in ADD_CASES[:2]]
    private = [dict(c, testtype="stdin") for c in ADD_CASES[2:]]
    return {
        "question_title": "add",
        "question_content": "Read a and b, print a + b.",
        "question_id": "lcb-add",
        "starter_code": "",
        "public_test_cases": json.dumps(public),
        "private_test_cases": compress(private),
        "metadata": "{}",
    }


def lcb_functional_row() -> dict:
    cases = [
        {"input": "[1, 2, 3]\n2", "output": "[3, 4, 5]", "testtype": "functional"},
        {"input": "[]\n7", "output": "[]", "testtype": "functional"},
    ]
    return {
        "question_content": "Add k to every element.",
        "question_id": "lcb-fn",
        "starter_code": "class Solution:\n    def addAll(self, nums: List[int], k: int) -> List[int]:\n        ",
        "public_test_cases": json.dumps(cases[:1]),
        "private_test_cases": json.dumps(cases[1:]),
        "metadata": json.dumps({"func_name": "addAll"}),
    }


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def fam():
    return CodeFamily()


def test_livecodebench_stdio_with_compressed_private_tests(tmp_path, fam):
    tasks = load_code_dataset(f"lcb:{write_jsonl(tmp_path / 'lcb.jsonl', [lcb_stdio_row()])}")
    (t,) = tasks
    assert t.meta["format"] == "stdio" and len(t.meta["tests"]) == 5
    assert fam.score(t, fence(ADD_PROGRAM)).correct
    assert not fam.score(t, fence("a, b = map(int, input().split())\nprint(a - b)")).correct


def test_livecodebench_functional_tests_call_the_solution_method(tmp_path, fam):
    (t,) = load_code_file(write_jsonl(tmp_path / "fn.jsonl", [lcb_functional_row()]))
    assert t.meta["entry_point"] == "addAll" and "Starter code" in t.question
    good = "class Solution:\n    def addAll(self, nums, k):\n        return [x + k for x in nums]"
    as_tuple = (
        "class Solution:\n    def addAll(self, nums, k):\n        return tuple(x + k for x in nums)"
    )
    wrong = "class Solution:\n    def addAll(self, nums, k):\n        return nums"
    assert fam.score(t, fence(good)).correct
    assert fam.score(t, fence(as_tuple)).correct  # JSON has no tuples: a tuple reads as a list
    v = fam.score(t, fence(wrong))
    assert not v.correct and v.details["passed"] == 1  # [] + k == []


def test_a_malicious_pickle_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(ValueError, match="not allowed"):
        decode_test_field(evil)
    assert not marker.exists()
    row = dict(lcb_stdio_row(), private_test_cases=evil)
    with pytest.raises(ValueError, match=":1: "):
        load_code_file(write_jsonl(tmp_path / "evil.jsonl", [row]))
    assert not marker.exists()
    two = pickle.dumps(["a", "b"])
    with pytest.raises(ValueError):
        safe_unpickle_text(two)


def test_decompression_is_capped(monkeypatch):
    monkeypatch.setattr(contests, "MAX_INFLATED", 1000)
    bomb = base64.b64encode(zlib.compress(b"[" + b"0," * 5000 + b"0]")).decode()
    with pytest.raises(ValueError, match="inflates past"):
        decode_test_field(bomb)
    with pytest.raises(ValueError, match="neither JSON nor"):
        decode_test_field("not base64 at all!")


def test_apps_taco_stdio_and_call_based(tmp_path, fam):
    stdio_row = {
        "problem_id": 7,
        "question": "Sum two numbers.",
        "input_output": json.dumps(
            {
                "inputs": [c["input"] for c in ADD_CASES],
                "outputs": [[c["output"].strip()] for c in ADD_CASES],
            }
        ),
        "solutions": json.dumps([ADD_PROGRAM]),
    }
    call_row = {
        "id": "taco-1",
        "question": "Return x squared.",
        "starter_code": "def square(x):\n\t",
        "input_output": json.dumps(
            {"fn_name": "square", "inputs": [[2], [3], [-4]], "outputs": [[4], [9], [16]]}
        ),
    }
    a, b = load_code_file(write_jsonl(tmp_path / "apps.jsonl", [stdio_row, call_row]), "apps")
    assert a.meta["format"] == "stdio" and fam.score(a, fence(ADD_PROGRAM)).correct
    assert b.meta["entry_point"] == "square"
    assert fam.score(b, fence("def square(x):\n    return x * x")).correct
    assert not fam.score(b, fence("def square(x):\n    return x + x")).correct


def test_codecontests_public_private_and_time_limit(tmp_path, fam):
    row = {
        "name": "1000_A",
        "description": "Print a + b.",
        "public_tests": {"input": [ADD_CASES[0]["input"]], "output": [ADD_CASES[0]["output"]]},
        "private_tests": {
            "input": [c["input"] for c in ADD_CASES[1:]],
            "output": [c["output"] for c in ADD_CASES[1:]],
        },
        "generated_tests": {"input": ["100 1\n"], "output": ["101\n"]},
        "time_limit": {"seconds": 2, "nanos": 500000000},
    }
    path = tmp_path / "cc.json"
    path.write_text(json.dumps([row]))
    (t,) = load_code_dataset(f"codecontests:{path}")
    assert len(t.meta["tests"]) == 5 and t.meta["time_limit"] == 2.5
    assert fam.score(t, fence(ADD_PROGRAM)).correct


def test_deepcoder_primeintellect_and_taco_rows(tmp_path, fam):
    pi = {
        "problem": "Add two numbers from stdin.",
        "tests": json.dumps(
            [
                {"type": "stdin_stdout", "input": c["input"], "output": c["output"]}
                for c in ADD_CASES
            ]
        ),
    }
    fn = {
        "problem": "Double it.",
        "tests": json.dumps(
            [{"type": "function_call", "fn_name": "double", "input": [5], "output": [10]}]
        ),
    }
    taco = {
        "problem": "Triple it.",
        "tests": json.dumps({"fn_name": "triple", "inputs": [[2]], "outputs": [[6]]}),
    }
    a, b, c = load_code_dataset(f"deepcoder:{write_jsonl(tmp_path / 'dc.jsonl', [pi, fn, taco])}")
    assert fam.score(a, fence(ADD_PROGRAM)).correct
    assert fam.score(b, fence("def double(x):\n    return 2 * x")).correct
    assert fam.score(c, fence("def triple(x):\n    return 3 * x")).correct
    assert not fam.score(c, fence("def triple(x):\n    return 2 * x")).correct


def test_parquet_and_saved_hf_dataset_tell_the_format_apart(tmp_path, fam):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    datasets = pytest.importorskip("datasets")
    rows = [lcb_stdio_row(), lcb_stdio_row() | {"question_id": "lcb-add-2"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "lcb.parquet")
    tasks = load_code_dataset(f"file:{tmp_path / 'lcb.parquet'}")
    assert [t.id for t in tasks] == ["lcb-add", "lcb-add-2"]
    dd = datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
    dd.save_to_disk(str(tmp_path / "hf"))
    hf = load_code_dataset(f"hf:{tmp_path / 'hf'}", split="test")
    assert len(hf) == 2 and fam.score(hf[0], fence(ADD_PROGRAM)).correct
    with pytest.raises(ValueError, match="no split 'train'"):
        load_code_dataset(f"hf:{tmp_path / 'hf'}", split="train")


def test_text_values_are_not_mistaken_for_non_finite_floats(tmp_path, fam):
    row = {
        "problem": "Echo the word.",
        "tests": json.dumps(
            [
                {
                    "type": "function_call",
                    "fn_name": "echo",
                    "input": ["information"],
                    "output": ["nan"],
                }
            ]
        ),
    }
    (t,) = load_code_file(write_jsonl(tmp_path / "words.jsonl", [row]))
    assert fam.score(t, fence("def echo(w):\n    return 'nan'")).correct
    inf = dict(
        row, tests='[{"type": "function_call", "fn_name": "f", "input": [Infinity], "output": [1]}]'
    )
    with pytest.raises(ValueError, match="not plain JSON data"):
        load_code_file(write_jsonl(tmp_path / "inf.jsonl", [inf]))


def test_bad_rows_get_clear_errors(tmp_path):
    cases = [
        (
            {"question_content": "x", "public_test_cases": '[{"input": "1"}]'},
            "needs 'input' and 'output'",
        ),
        ({"question_content": "x", "public_test_cases": "[]"}, "no test cases"),
        (
            {
                "question_content": "x",
                "public_test_cases": json.dumps(
                    [{"input": "1", "output": "1", "testtype": "functional"}]
                ),
            },
            "function name",
        ),
        ({"question": "x", "input_output": '{"inputs": [1], "outputs": []}'}, "equal length"),
        ({"foo": 1}, "cannot tell the format"),
        ({"description": "x", "public_tests": "[1, 2]"}, "must be an object"),
        (
            {"question_content": "x", "public_test_cases": "[]", "metadata": "[1]"},
            "metadata must be",
        ),
    ]
    for i, (row, msg) in enumerate(cases):
        with pytest.raises(ValueError, match=msg):
            load_code_file(write_jsonl(tmp_path / f"bad{i}.jsonl", [row]))
    with pytest.raises(ValueError, match="unknown code dataset"):
        load_code_dataset("leetcode:/x")
    with pytest.raises(FileNotFoundError):
        load_code_dataset("lcb:/no/such/file.jsonl")


def test_a_row_is_data_a_name_with_code_in_it_is_refused(tmp_path):
    """A row's function name is written into the trusted test source: anything but an
    identifier is a clear error naming the row, and nothing of it runs."""
    marker = tmp_path / "ran"
    payloads = [
        f"addAll(*[]) or open({str(marker)!r}, 'w') or addAll",
        "__import__('os').system('touch /tmp/x')#",
        "class",
        "",
        7,
    ]
    for i, name in enumerate(payloads):
        row = {**lcb_functional_row(), "metadata": json.dumps({"func_name": name})}
        with pytest.raises(ValueError, match=r":1: .*(identifier|needs? a function name)"):
            load_code_file(write_jsonl(tmp_path / f"inj{i}.jsonl", [row]), "livecodebench")
    he = {
        "task_id": "he/x",
        "prompt": "def f(x):\n",
        "entry_point": "f); open('/tmp/pwn', 'w'",
        "test": "def check(candidate):\n    assert candidate(1) == 1\n",
    }
    with pytest.raises(ValueError, match="entry_point must be a Python identifier"):
        load_code_file(write_jsonl(tmp_path / "he.jsonl", [he]), "humaneval")
    assert not marker.exists()


def test_an_env_runs_on_a_loaded_file(tmp_path):
    from flowzoo.envs.scripted import play_episode

    path = write_jsonl(tmp_path / "lcb.jsonl", [lcb_stdio_row()])
    env = make_env("voting-code", dataset=f"lcb:{path}")
    out = play_episode(
        env, lambda env, agent: fence(ADD_PROGRAM) if "solver" in agent else "Candidate 1"
    )
    assert out["correct"] is True


def test_rows_are_bounded_and_malformed_rows_are_named(tmp_path):
    from flowzoo.tasks.code import CodeFamily
    from flowzoo.tasks.code.contests import MAX_CASES

    many = [{"input": "1", "output": "1"} for _ in range(MAX_CASES + 1)]
    big = {"question_content": "x", "public_test_cases": json.dumps(many)}
    with pytest.raises(ValueError, match=r":1: .*cases \(at most"):
        load_code_file(write_jsonl(tmp_path / "many.jsonl", [big]), "livecodebench")
    for secs in (-1, 0.0, "nan", 1e9):
        row = {
            "description": "x",
            "public_tests": {"input": ["1"], "output": ["1"]},
            "time_limit": {"seconds": secs},
        }
        if secs == 0.0:
            continue  # no seconds: the family's own limit applies
        with pytest.raises(ValueError, match="time limit"):
            load_code_file(write_jsonl(tmp_path / "t.jsonl", [row]), "codecontests")
    # wrongly shaped fields deep in a row: the row's ValueError, not a raw TypeError
    for row in (
        {"question_content": "x", "public_test_cases": [["a"]]},
        {"question": "x", "input_output": {"inputs": 5, "outputs": 5}},
        {"description": "x", "public_tests": {"input": [1], "output": [{"a": [[]]}]}},
    ):
        try:
            load_code_file(write_jsonl(tmp_path / "m.jsonl", [row]))
        except ValueError as e:
            assert ":1: " in str(e)
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="time_budget_s"):
            CodeFamily(time_budget_s=bad)
    with pytest.raises(ValueError, match="case_timeout_s"):
        CodeFamily(case_timeout_s=0)
