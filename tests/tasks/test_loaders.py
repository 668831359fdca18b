"""User files: held out means held out, answers kept as written, and every bad file named.

A single file is split by what is solved (train and test disjoint by every criterion the
library measures), a number is the text the file holds, and a broken file is a ValueError
naming the file, the row and the fix (never a raw gzip/json/unicode exception)."""

import gzip
import json
from pathlib import Path

import pytest

from flowzoo.tasks.code import load_code_dataset
from flowzoo.tasks.files import WHOLE, read_rows
from flowzoo.tasks.math import load_math_dataset
from flowzoo.tasks.overlap import overlap


def jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def math_rows(n: int = 60) -> list[dict]:
    return [{"question": f"What is {i} + {i + 3}?", "answer": str(2 * i + 3)} for i in range(n)]


def mbpp_rows(n: int = 40) -> list[dict]:
    return [
        {
            "task_id": i,
            "text": f"Write a function that adds {i} to x.",
            "code": f"def add_{i}(x):\n    return x + {i}\n",
            "test_list": [f"assert add_{i}(1) == {i + 1}", f"assert add_{i}(5) == {i + 5}"],
        }
        for i in range(n)
    ]


def _sides(load, spec):
    train, test, whole = (load(spec, split=s) for s in ("train", "test", WHOLE))
    return train, test, whole


@pytest.mark.parametrize("style", ["jsonl", "gsm8k", "math", "hf"])
def test_a_math_file_splits_disjointly_by_what_is_solved(tmp_path, style):
    rows = math_rows()
    if style == "gsm8k":
        rows = [{"question": r["question"], "answer": f"work\n#### {r['answer']}"} for r in rows]
    if style == "math":
        rows = [{"problem": r["question"], "solution": f"$\\boxed{{{r['answer']}}}$"} for r in rows]
    # a paraphrase of a row (same question, new id) and an exact repeat in other spacing
    rows.append({**rows[0], "id": "again"})
    p = jsonl(tmp_path / "m.jsonl", rows)
    train, test, whole = _sides(load_math_dataset, f"{style}:{p}")
    assert len(train) + len(test) == len(whole) == len(rows)
    assert len(test) >= 5 and len(train) >= 40
    o = overlap(train, test)
    assert o.any == 0 and o.by_key == 0 and o.by_statement == 0
    assert not {t.id for t in train} & {t.id for t in test}
    again = load_math_dataset(f"{style}:{p}", split="test")  # deterministic
    assert [t.id for t in again] == [t.id for t in test]


@pytest.mark.parametrize("kind", ["file", "mbpp"])
def test_a_code_file_splits_disjointly_by_its_tests(tmp_path, kind):
    rows = mbpp_rows()
    rows.append({**rows[3], "task_id": 999, "text": "Same tests, other words: add 3."})
    p = jsonl(tmp_path / "c.jsonl", rows)
    train, test, whole = _sides(load_code_dataset, f"{kind}:{p}")
    assert len(train) + len(test) == len(whole) == len(rows) and len(test) >= 3
    o = overlap(train, test)
    assert o.any == 0 and o.by_tests == 0
    twins = [t for t in whole if t.meta["entry_point"] == "add_3"]
    assert len({t.id in {x.id for x in test} for t in twins}) == 1  # one side for both


def test_a_file_has_no_pretrain_or_ood_split(tmp_path):
    p = jsonl(tmp_path / "m.jsonl", math_rows())
    with pytest.raises(ValueError, match="no 'pretrain' split"):
        load_math_dataset(f"jsonl:{p}", split="pretrain")
    with pytest.raises(ValueError, match="out-of-distribution"):
        load_code_dataset(f"file:{jsonl(tmp_path / 'c.jsonl', mbpp_rows())}", split="ood")


def test_a_tiny_file_with_an_empty_test_side_says_so(tmp_path):
    rows = math_rows(200)
    whole = load_math_dataset(f"jsonl:{jsonl(tmp_path / 'all.jsonl', rows)}", split=WHOLE)
    train_only = [
        r
        for r, t in zip(rows, whole, strict=True)
        if t.id not in {x.id for x in load_math_dataset(f"jsonl:{tmp_path / 'all.jsonl'}", "test")}
    ][:3]
    p = jsonl(tmp_path / "few.jsonl", train_only)
    with pytest.raises(ValueError, match="test side is empty.*eval_dataset"):
        load_math_dataset(f"jsonl:{p}", split="test")


def test_hf_datasets_use_their_own_split_or_are_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = math_rows()
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(rows[:50]),
            "test": datasets.Dataset.from_list(rows[50:]),
        }
    ).save_to_disk(str(tmp_path / "dd"))
    assert len(load_math_dataset(f"hf:{tmp_path / 'dd'}", split="test")) == 10
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "one"))
    train = load_math_dataset(f"hf:{tmp_path / 'one'}", split="train")
    test = load_math_dataset(f"hf:{tmp_path / 'one'}", split="test")
    assert overlap(train, test).any == 0 and len(train) + len(test) == len(rows)


# ------------------------------------------------------------------ answers as written


@pytest.mark.parametrize(
    "raw, gold",
    [
        ("0.1000000000000000055511151231257827", "0.1000000000000000055511151231257827"),
        ("123456789012345678901234567890", "123456789012345678901234567890"),
        ("1e999", "1e999"),
        ("-0.50", "-0.50"),
        ("7", "7"),
    ],
)
def test_a_numeric_answer_is_kept_digit_for_digit(tmp_path, raw, gold):
    p = jsonl(tmp_path / "n.jsonl", ['{"question": "Which number?", "answer": ' + raw + "}"])
    (t,) = load_math_dataset(f"jsonl:{p}", split=WHOLE)
    assert t.answer == gold


@pytest.mark.parametrize("const", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_naming_the_row(tmp_path, const):
    p = jsonl(tmp_path / "n.jsonl", [math_rows(1)[0], '{"question": "q", "answer": ' + const + "}"])
    with pytest.raises(ValueError, match=rf"n.jsonl:2: {const}.*JSON string"):
        load_math_dataset(f"jsonl:{p}", split=WHOLE)
    with pytest.raises(ValueError, match="n.jsonl:2"):
        read_rows(p, numbers="value")


def test_an_overflowing_number_in_a_code_file_is_refused(tmp_path):
    row = mbpp_rows(1)[0] | {"extra": 1e308}
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps(row).replace("1e+308", "1e999") + "\n")
    with pytest.raises(ValueError, match="c.jsonl:1: the number 1e999 overflows"):
        load_code_dataset(f"file:{p}", split=WHOLE)


@pytest.mark.parametrize("explicit", [False, True])
def test_hf_math_data_reads_gsm8k_and_math_styles(tmp_path, explicit):
    g = jsonl(tmp_path / "g.jsonl", [{"question": "How many?", "answer": "3 + 4 = 7\n#### 1,007"}])
    m = jsonl(tmp_path / "m.jsonl", [{"problem": "Half?", "solution": "So $\\boxed{\\frac12}$."}])
    gs = f"hf:gsm8k:{g}" if explicit else f"hf:{g}"
    ms = f"hf:math:{m}" if explicit else f"hf:{m}"
    assert load_math_dataset(gs, split=WHOLE)[0].answer == "1007"
    assert load_math_dataset(ms, split=WHOLE)[0].answer == "\\frac12"


# ------------------------------------------------------------------ errors that name the file


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = (json.dumps(math_rows(1)[0]) + "\n").encode()
    full = gzip.compress(good * 50)
    (tmp_path / "trunc.jsonl.gz").write_bytes(full[: len(full) // 2])
    (tmp_path / "plain.jsonl.gz").write_bytes(good)
    (tmp_path / "bad.json").write_text('[{"question": "x", "answer": "1"},')
    (tmp_path / "latin.jsonl").write_bytes(good + '{"question": "caf\xe9"}\n'.encode("latin-1"))
    (tmp_path / "deep.jsonl").write_text("[" * 50_000 + "\n")
    (tmp_path / "notobj.jsonl").write_text(good.decode() + "[1, 2]\n")
    (tmp_path / "adir.jsonl").mkdir()
    return {
        "truncated gz": (tmp_path / "trunc.jsonl.gz", r"trunc.jsonl.gz: not a complete gzip"),
        "not gzip": (tmp_path / "plain.jsonl.gz", r"plain.jsonl.gz: not a complete gzip"),
        "malformed json": (tmp_path / "bad.json", r"bad.json: not valid JSON .*fix"),
        "not utf-8": (tmp_path / "latin.jsonl", r"latin.jsonl:2: not UTF-8.*save the file"),
        "deep": (tmp_path / "deep.jsonl", r"deep.jsonl:1: JSON nested too deeply"),
        "not an object": (tmp_path / "notobj.jsonl", r"notobj.jsonl:2: expected a JSON object"),
        "directory": (tmp_path / "adir.jsonl", r"adir.jsonl is a directory"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "truncated gz",
        "not gzip",
        "malformed json",
        "not utf-8",
        "deep",
        "not an object",
        "directory",
    ],
)
@pytest.mark.parametrize("family", ["math", "code"])
def test_a_broken_file_is_a_valueerror_naming_file_and_row(tmp_path, case, family):
    path, msg = _bad_files(tmp_path)[case]
    load = load_math_dataset if family == "math" else load_code_dataset
    spec = f"{'jsonl' if family == 'math' else 'file'}:{path}"
    with pytest.raises(ValueError, match=msg):
        load(spec, split=WHOLE)


def test_a_row_with_a_bad_field_names_the_field(tmp_path):
    p = jsonl(tmp_path / "f.jsonl", [{"question": "q", "answer": ["a", "list"]}])
    with pytest.raises(ValueError, match=r"f.jsonl:1: field 'answer' must be text"):
        load_math_dataset(f"jsonl:{p}", split=WHOLE)
    p = jsonl(tmp_path / "q.jsonl", [{"answer": "1"}])
    with pytest.raises(ValueError, match=r":1: field 'question'"):
        load_math_dataset(f"jsonl:{p}", split=WHOLE)


@pytest.mark.parametrize(
    "line,msg",
    [
        ('{"question": "What is \\ud800 1+1?", "answer": "2"}', r"f.jsonl:2: field 'question' holds a lone UTF-16 surrogate"),
        ('{"question": "What is 1+1?", "answer": "2", "x": {"\\udc00": 1}}', r"f.jsonl:2: field \['x'\].* lone UTF-16 surrogate"),
        ('{"question": "What is 1+1?", "answer": "2", "answer": "3"}', r"f.jsonl:2: the key 'answer' appears twice"),
        ('{"question": "What is 1+1?", "problem": "What is 2+2?", "answer": "2"}', r"f.jsonl:2: fields 'question' and 'problem' both hold a statement"),
        ('{"question": "What is \\u0000 1+1?", "answer": "2"}', r"f.jsonl:2: its problem statement holds a NUL"),
    ],
)  # fmt: skip
def test_a_row_no_text_can_hold_is_refused_naming_its_line(tmp_path, line, msg):
    """A lone surrogate (no character: hashing the row would fail far from it), a key given
    twice (JSON keeps the last silently), two statements, a NUL in a statement: refused, never
    repaired, with the file and line."""
    p = tmp_path / "f.jsonl"
    p.write_text('{"question": "What is 2+2?", "answer": "4"}\n' + line + "\n")
    with pytest.raises(ValueError, match=msg):
        load_math_dataset(f"jsonl:{p}", split=WHOLE)


def test_a_key_given_twice_in_a_json_list_or_a_code_row_is_refused(tmp_path):
    p = tmp_path / "f.json"
    p.write_text('[{"question": "What is 1+1?", "answer": "2", "answer": "3"}]')
    with pytest.raises(ValueError, match=r"f.json: the key 'answer' appears twice"):
        load_math_dataset(f"jsonl:{p}", split=WHOLE)
    row = '{"text": "Add one.", "code": "def f(x): return x+1", "test_list": ["assert f(1) == 2"], "text": "x"}'
    c = tmp_path / "c.jsonl"
    c.write_text(row + "\n")
    with pytest.raises(ValueError, match=r"c.jsonl:1: the key 'text' appears twice"):
        load_code_dataset(f"file:{c}", split=WHOLE)


def test_one_statement_under_two_names_is_one_statement(tmp_path):
    p = jsonl(tmp_path / "f.jsonl", [{"question": "What is 1+1?", "problem": " What is 1+1?", "answer": "2"}])  # fmt: skip
    assert [t.question for t in load_math_dataset(f"jsonl:{p}", split=WHOLE)] == ["What is 1+1?"]
