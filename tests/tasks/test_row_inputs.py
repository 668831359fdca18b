"""A user's rows, checked where they enter: a statement of the wrong type is refused naming
the row, rows are counted from 1 as editors count lines, Windows files load, a row's time
limits are capped, and a saved dataset's own splits are called what they are."""

from __future__ import annotations

import json

import pytest

from flowzoo.tasks.code.data import load_code_dataset, load_code_file
from flowzoo.tasks.code.family import ROW_LIMITS_S, CodeFamily, check_row_limits
from flowzoo.tasks.files import WHOLE, read_located, text_field
from flowzoo.tasks.math.data import load_math_dataset

MATH = {"question": "What is 2 + 3?", "answer": "5"}
MBPP = {
    "text": "Add one.",
    "code": "def f(x):\n    return x + 1\n",
    "test_list": ["assert f(1) == 2"],
}


def write(path, rows, end="\n", raw: list[str] | None = None):
    lines = raw if raw is not None else [json.dumps(r) for r in rows]
    path.write_bytes(end.join(lines).encode("utf-8") + end.encode())
    return path


# ------------------------------------------------------------------ wrong types


@pytest.mark.parametrize(
    "field,value,kind",
    [
        ("problem", 5, "a JSON number"),
        ("question", 3.25, "a JSON number"),
        ("prompt", True, "true/false"),
        ("question", ["What is 1 + 1?"], "list"),
        ("problem", {"text": "What is 1 + 1?"}, "dict"),
    ],
)
def test_a_math_statement_that_is_not_text_is_refused_naming_the_line(tmp_path, field, value, kind):
    path = write(tmp_path / "m.jsonl", [MATH, {field: value, "answer": "2"}, MATH])
    with pytest.raises(ValueError, match=rf"m\.jsonl:2: field '{field}' must be text .*got {kind}"):
        load_math_dataset(f"jsonl:{path}", WHOLE)


def test_a_wrong_typed_statement_is_refused_even_beside_a_good_one(tmp_path):
    path = write(
        tmp_path / "m.jsonl", [{"question": "What is 1 + 1?", "problem": 7, "answer": "2"}]
    )
    with pytest.raises(ValueError, match=r"m\.jsonl:1: field 'problem'"):
        load_math_dataset(f"jsonl:{path}", WHOLE)


@pytest.mark.parametrize(
    "row,field",
    [
        ({"problem": 12, "tests": "[]"}, "problem"),  # DeepCoder
        ({"question": 4, "input_output": "{}"}, "question"),  # APPS
        ({"description": ["x"], "public_tests": {"input": ["1"], "output": ["1"]}}, "description"),
        ({"question_content": 1.5, "public_test_cases": "[]"}, "question_content"),
    ],
)
def test_a_code_statement_that_is_not_text_is_refused_naming_the_line(tmp_path, row, field):
    path = write(tmp_path / "c.jsonl", [MBPP, row])
    with pytest.raises(ValueError, match=rf"c\.jsonl:2: field '{field}' must be text"):
        load_code_file(path)


def test_text_field_reads_the_first_text_and_skips_missing_or_empty():
    assert text_field({"question": "", "problem": "P"}, ("question", "problem"), "x") == "P"
    assert text_field({"question": None, "prompt": "Q"}, ("question", "prompt"), "x") == "Q"
    assert text_field({}, ("question",), "x") is None


# ------------------------------------------------------------------ rows counted from 1


def test_line_numbers_count_from_one_with_blank_lines_counted(tmp_path):
    raw = [json.dumps(MATH), "", json.dumps(MATH), "   ", json.dumps({"answer": "1"})]
    path = write(tmp_path / "m.jsonl", [], raw=raw)
    with pytest.raises(ValueError, match=r"m\.jsonl:5: field 'question'"):
        load_math_dataset(f"jsonl:{path}", WHOLE)
    bad = write(tmp_path / "b.jsonl", [], raw=[json.dumps(MATH), "{not json"])
    with pytest.raises(ValueError, match=r"b\.jsonl:2: not valid JSON"):
        load_math_dataset(f"jsonl:{bad}", WHOLE)


def test_a_json_lists_rows_count_from_one(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([MATH, MATH, {"question": 9, "answer": "9"}]))
    with pytest.raises(ValueError, match=r"m\.json row 3: field 'question' must be text"):
        load_math_dataset(f"jsonl:{path}", WHOLE)
    code = tmp_path / "c.json"
    code.write_text(json.dumps([MBPP, 7]))
    with pytest.raises(ValueError, match=r"c\.json row 2: expected a JSON object"):
        load_code_file(code)


def test_parquet_rows_count_from_one(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    path = tmp_path / "m.parquet"
    pq.write_table(pa.Table.from_pylist([MATH, {"question": "Q?", "answer": ""}]), path)
    with pytest.raises(ValueError, match=r"m\.parquet row 2: field 'answer' holds no gold"):
        load_math_dataset(f"hf:{path}", WHOLE)


# ------------------------------------------------------------------ line endings


@pytest.mark.parametrize("end", ["\r\n", "\n"])
@pytest.mark.parametrize("bom", [False, True])
def test_windows_line_endings_and_a_byte_order_mark_load_every_row(tmp_path, end, bom):
    rows = [{"question": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)} for i in range(40)]
    path = write(tmp_path / "w.jsonl", rows, end=end)
    if bom:
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    for spec in (f"jsonl:{path}", f"hf:{path}"):
        whole = load_math_dataset(spec, WHOLE)
        assert len(whole) == 40 and whole[0].question == "What is 0 + 1?"
        train, test = load_math_dataset(spec, "train"), load_math_dataset(spec, "test")
        assert len(train) + len(test) == 40 and len(test) > 0
    code = write(tmp_path / "c.jsonl", [{**MBPP, "text": f"Add {i}."} for i in range(3)], end=end)
    assert len(load_code_dataset(f"file:{code}", WHOLE)) == 3


def test_a_raw_line_separator_inside_a_string_does_not_end_the_row(tmp_path):
    path = tmp_path / "u.jsonl"
    path.write_text(
        '{"question": "Sum 2\u2028and 3\x85now.", "answer": "5"}\r\n'
        '{"question": "What is 4\u2029+ 4?", "answer": "8"}\n',
        encoding="utf-8",
    )
    got = read_located(path)
    assert [w for w, _ in got] == [":1", ":2"] and "\u2028" in got[0][1]["question"]


# ------------------------------------------------------------------ row time limits


def _cc_row(secs):
    return {
        "description": "Echo the number.",
        "public_tests": {"input": ["1\n"], "output": ["1\n"]},
        "time_limit": {"seconds": secs},
    }


@pytest.mark.parametrize("secs,kept", [(2, 2.0), (10, 10.0), (30, 10.0), (60, 10.0)])
def test_a_rows_time_limit_is_capped_and_what_it_asked_is_kept(tmp_path, secs, kept):
    (task,) = load_code_file(write(tmp_path / "cc.jsonl", [_cc_row(secs)]), "codecontests")
    assert task.meta["time_limit"] == kept
    assert task.meta.get("time_limit_asked") == (secs if secs > kept else None)
    assert CodeFamily()._case_limit(task) == kept


def test_the_judge_waits_no_longer_than_the_cap_whatever_a_task_says():
    from flowzoo.tasks.base import Task

    fam = CodeFamily(case_timeout_s=4.0)
    long = Task("t", "x", "", "code", {"format": "stdio", "tests": [], "time_limit": 3600.0})
    assert fam._case_limit(long) == ROW_LIMITS_S["case_timeout_s"] == 10.0
    plain = Task("p", "x", "", "code", {"format": "stdio", "tests": []})
    assert fam._case_limit(plain) == 4.0  # the user's own setting, untouched
    assert CodeFamily(case_timeout_s=3600.0)._case_limit(plain) == 3600.0


@pytest.mark.parametrize(
    "options,bad",
    [
        ({"test_timeout_s": 3600}, "test_timeout_s"),
        ({"case_timeout_s": 10.5}, "case_timeout_s"),
        ({"time_budget_s": 61.0}, "time_budget_s"),
        ({"time_budget_s": float("nan")}, "time_budget_s"),
        ({"test_timeout_s": float("inf")}, "test_timeout_s"),
    ],
)
def test_a_rows_options_may_not_raise_a_timeout_past_its_cap(options, bad):
    with pytest.raises(ValueError, match=rf"row 7: a data row may set {bad} to at most"):
        check_row_limits(options, "row 7")


def test_a_rows_options_within_the_caps_pass():
    check_row_limits({"test_timeout_s": 10, "case_timeout_s": 0.5, "time_budget_s": 60}, "r")
    check_row_limits({"n_voters": 5, "test_timeout_s": "soon"}, "r")  # types: make_env's check
    check_row_limits(None, "r")


def test_a_skyrl_row_asking_for_an_hour_is_refused():
    pytest.importorskip("skyrl_gym")
    from flowzoo.integrations.skyrl_env import FlowzooTextEnv

    row = {"env": "voting-code", "task_id": "x", "controlled": "solver_0"}
    with pytest.raises(ValueError, match="test_timeout_s to at most 10"):
        FlowzooTextEnv(extras={"flowzoo": {**row, "options": {"test_timeout_s": 3600}}})


# ------------------------------------------------------------------ a saved dataset's splits


@pytest.fixture
def saved(tmp_path):
    datasets = pytest.importorskip("datasets")
    train = [{"question": f"What is {i} + 7?", "answer": str(i + 7)} for i in range(20)]
    test = [{"question": f"What is {i} * 3?", "answer": str(i * 3)} for i in range(30, 36)]
    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(train), "test": datasets.Dataset.from_list(test)}
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    return tmp_path / "dd"


def test_a_saved_datasets_own_test_split_is_not_called_split_from_the_training_file(saved):
    from flowzoo.agents.train.heldout import has_own_splits, source_of

    test = load_math_dataset(f"hf:{saved}", "test")
    assert test.origin == "own split" and len(test) == 6
    assert source_of(f"hf:{saved}", test, "dataset") == f"dataset hf:{saved} (its own test split)"
    assert has_own_splits(f"hf:{saved}") and has_own_splits(f"hf:jsonl:{saved}")
    assert not has_own_splits("arith") and not has_own_splits(f"jsonl:{saved}")


def test_a_saved_dataset_beside_a_held_out_file_trains_on_its_own_train_split(saved, tmp_path):
    """Read "whole" (the training side beside eval_dataset), a DatasetDict used to give its
    test split: training would have run on test problems."""
    from flowzoo.agents.train.heldout import train_pool, train_split
    from flowzoo.config import TrainConfig

    held = write(tmp_path / "held.jsonl", [{"question": "What is 90 - 1?", "answer": "89"}])
    cfg = TrainConfig(env_options={"dataset": f"hf:{saved}"}, eval_dataset=f"jsonl:{held}")
    assert train_split(cfg) == "train"
    assert {t.answer for t in train_pool(cfg)} == {str(i + 7) for i in range(20)}
