"""``flowzoo eval`` never calls a training problem held out: a run is scored on its own
held-out set on every env of its family (another family refused), ``--dataset`` scores a
user's file for any model, and a run's training rows in that file are left out, counted and
recorded; a run's held-out file is checked when it starts even with ``eval_every=0``."""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")
from flowzoo.agents.train.evaldata import EvalData, dataset_spec  # noqa: E402
from flowzoo.agents.train.heldout import train_pool  # noqa: E402
from flowzoo.cli import main  # noqa: E402
from flowzoo.config import TrainConfig  # noqa: E402
from flowzoo.tasks.math.data import load_math_dataset  # noqa: E402

PENS = "{n} has {a} pens and buys {b} more. How many pens does {n} have?"
REWORDED = "After buying {b} more pens, how many pens does {n} have if {n} had {a}?"


def _write(path, rows, end="\n"):
    path.write_bytes("".join(json.dumps(r) + end for r in rows).encode())
    return path


def _train_rows(n=40):
    return [{"question": PENS.format(n="Ana", a=i, b=i + 3), "answer": str(2 * i + 3)} for i in range(n)]  # fmt: skip


def _held_rows():
    return [{"question": f"What is {i} times {i + 1}?", "answer": str(i * (i + 1))} for i in range(50, 57)]  # fmt: skip


def _fake_run(tmp_path, name="run", **cfg):
    """A run directory as ``flowzoo train`` leaves one (config and summary): what decides
    what it is scored on; no weights needed to read that."""
    d = tmp_path / name
    d.mkdir()
    c = TrainConfig(env="voting-math", **cfg)
    (d / "config.json").write_text(json.dumps(dataclasses.asdict(c)))
    (d / "summary.json").write_text(json.dumps({"status": "completed"}))
    return d


@pytest.fixture
def files(tmp_path):
    return (
        _write(tmp_path / "train.jsonl", _train_rows()),
        _write(tmp_path / "held.jsonl", _held_rows(), end="\r\n"),  # a Windows file
    )


# ------------------------------------------------------------------ what a run is scored on


@pytest.mark.parametrize("env", ["voting-math", "eval-opt-math", "orch-workers-math"])
def test_a_run_with_a_held_out_file_is_scored_on_it_on_any_env_of_its_family(tmp_path, files, env):
    """The bug: ``eval --env ENV`` played the training file's test side, which a run beside a
    held-out file trains on (it uses its training file whole)."""
    train, held = files
    run = _fake_run(
        tmp_path, env_options={"dataset": f"jsonl:{train}"}, eval_dataset=f"jsonl:{held}"
    )
    scored = EvalData(str(run)).for_env(env)
    assert sorted(t.answer for t in scored.tasks) == sorted(r["answer"] for r in _held_rows())
    pool = {
        t.id
        for t in train_pool(TrainConfig.from_dict(json.loads((run / "config.json").read_text())))
    }
    assert len(pool) == 40 and not pool & set(scored.tasks.ids())
    assert "eval_dataset" in scored.source and "whole file" in scored.source
    assert scored.record["files"] == {str(held): scored.record["files"][str(held)]}


def test_a_run_on_one_file_is_scored_on_its_test_side_only(tmp_path, files):
    train, _ = files
    run = _fake_run(tmp_path, env_options={"dataset": f"jsonl:{train}"})
    scored = EvalData(str(run)).for_env("eval-opt-math")
    test_side = load_math_dataset(f"jsonl:{train}", "test")
    assert scored.tasks.ids() == test_side.ids() and "split from the training file" in scored.source
    assert scored.record["overlap"]["any"] == 0 and scored.record["problems"] == len(test_side)


def test_a_run_on_an_env_of_another_family_is_refused(tmp_path, files):
    run = _fake_run(tmp_path, env_options={"dataset": f"jsonl:{files[0]}"})
    with pytest.raises(ValueError, match=r"trained on math problems .*voting-code plays code"):
        EvalData(str(run)).for_env("voting-code")
    assert main(["eval", "--model", str(run), "--env", "voting-code"]) == 2


def test_roles_a_run_never_trained(tmp_path, files):
    shared = _fake_run(tmp_path, "shared", env_options={"dataset": f"jsonl:{files[0]}"})
    assert "play its one policy" in EvalData(str(shared)).check_roles("eval-opt-math", {})
    iso = _fake_run(
        tmp_path, "iso", policy="isolated", env_options={"dataset": f"jsonl:{files[0]}"}
    )
    with pytest.raises(ValueError, match=r"\['optimizer', 'evaluator'\] have none"):
        EvalData(str(iso)).check_roles("eval-opt-math", {})
    played = {"optimizer": "scripted", "evaluator": "scripted"}
    assert EvalData(str(iso)).check_roles("eval-opt-math", played) is None
    assert EvalData(str(iso)).check_roles("voting-math", {}) is None


# ------------------------------------------------------------------ a user's file


def test_a_runs_training_rows_in_a_users_file_are_left_out_and_recorded(tmp_path, files):
    train, _ = files
    run = _fake_run(tmp_path, env_options={"dataset": f"jsonl:{train}"})
    pool = train_pool(TrainConfig.from_dict(json.loads((run / "config.json").read_text())))
    trained = list(pool)[:3]
    mine = []  # three training problems reworded (the same numbers and answer), four new ones
    for t in trained:
        a = int(t.question.split()[2])
        mine.append({"question": REWORDED.format(n="Ana", a=a, b=a + 3), "answer": t.answer})
    mine += _held_rows()[:4]
    path = _write(tmp_path / "mine.jsonl", mine)
    scored = EvalData(str(run), str(path)).for_env("voting-math")
    assert len(scored.tasks) == 4 and not scored.ood
    rec = scored.record
    assert rec["rows"] == 7 and rec["problems"] == 4 and rec["left_out_as_training"] == 3
    assert rec["overlap"]["by_solved"] == 3 and rec["overlap"]["by_statement"] == 0
    assert scored.lines[0].startswith("WARNING: 3 of the 7 rows") and "solved" in scored.lines[0]
    assert str(path) in rec["files"]


def test_a_users_file_that_is_all_training_rows_is_refused(tmp_path, files):
    train, _ = files
    run = _fake_run(tmp_path, env_options={"dataset": f"jsonl:{train}"})
    pool_rows = [{"question": t.question, "answer": t.answer} for t in train_pool(
        TrainConfig.from_dict(json.loads((run / "config.json").read_text())))]  # fmt: skip
    path = _write(tmp_path / "trained.jsonl", pool_rows)
    with pytest.raises(ValueError, match=r"every row of --dataset .* is a training problem"):
        EvalData(str(run), str(path)).for_env("voting-math")


def test_a_users_file_for_a_model_that_is_no_run_is_scored_whole(tmp_path, files):
    _, held = files
    scored = EvalData("tiny-s", str(held)).for_env("voting-math")
    assert (
        len(scored.tasks) == 7 and scored.record["problems"] == 7 and "overlap" not in scored.record
    )
    assert scored.lines == [f"scoring --dataset hf:{held} (every row): 7 problems"]


@pytest.mark.parametrize(
    "given,family,spec",
    [
        ("{p}", "math", "hf:{p}"),
        ("{p}", "code", "file:{p}"),
        ("gsm8k:{p}", "math", "gsm8k:{p}"),
        ("arith:1-2", "math", "arith:1-2"),
    ],
)
def test_dataset_specs(tmp_path, files, given, family, spec):
    p = files[1]
    assert dataset_spec(given.format(p=p), family) == spec.format(p=p)


def test_a_missing_dataset_is_refused_before_any_model_loads(tmp_path, capsys):
    assert main(["eval", "--model", "tiny-l", "--dataset", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["eval", "--dataset", "arith", "--split", "ood"]) == 2
    assert "a file has no out-of-distribution split" in capsys.readouterr().err


def test_a_code_file_read_for_math_envs_says_to_name_the_env(tmp_path):
    mbpp = {"text": "Add one.", "code": "def f(x):\n    return x + 1\n", "test_list": ["assert f(1) == 2"]}  # fmt: skip
    path = _write(tmp_path / "code.jsonl", [mbpp])
    with pytest.raises(
        ValueError, match=r"as math problems for voting-math: .*name its env: --env"
    ):
        EvalData("tiny-s", str(path)).for_env("voting-math")
    assert len(EvalData("tiny-s", str(path)).for_env("voting-code").tasks) == 1


def test_a_row_with_a_lone_surrogate_is_refused_with_its_line_not_rebuilt(tmp_path, capsys):
    """The loader's error reaches ``flowzoo eval`` as a ValueError with the file and line
    (an error is never rebuilt as ``type(e)(msg)``: a UnicodeError takes five arguments)."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"question": "What is 1+2?", "answer": "3"}\n{"question": "What is \\ud800 1+1?", "answer": "2"}\n')  # fmt: skip
    with pytest.raises(ValueError, match=r"p.jsonl:2: field 'question' holds a lone UTF-16"):
        EvalData("tiny-s", str(path)).for_env("voting-math")
    assert main(["eval", "--model", "tiny-s", "--dataset", str(path)]) == 2
    err = capsys.readouterr().err
    assert "p.jsonl:2" in err and "TypeError" not in err


# ------------------------------------------------------------------ end to end, on the tiny model


def test_eval_of_a_trained_run_and_of_a_base_model_on_a_users_file(
    tiny_model, tmp_path, files, capsys
):
    train, held = files
    out = tmp_path / "run"
    rc = main(
        [
            "train", "--env", "voting-math", "--env-options", json.dumps({"dataset": f"jsonl:{train}"}),
            "--eval-dataset", f"jsonl:{held}", "--model", str(tiny_model), "--steps", "1",
            "--problems-per-step", "2", "--group-size", "2", "--eval-every", "0",
            "--max-new-tokens", "16", "--save-every", "0", "--out-dir", str(out), "--resume", "false",
        ]
    )  # fmt: skip
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["held_out"]["problems"] == 7  # checked and recorded with --eval-every 0
    capsys.readouterr()
    res = tmp_path / "e.json"
    argv = ["eval", "--model", str(out), "--env", "eval-opt-math", "--samples", "1",
            "--temperature", "0", "--json", str(res)]  # fmt: skip
    assert main(argv) == 0
    row = json.loads(res.read_text())[0]
    assert row["episodes"] == 7 and "eval_dataset" in row["data"]["source"]
    assert "roles ['optimizer', 'evaluator'] were never trained" in capsys.readouterr().out
    mine = _write(tmp_path / "mine.jsonl", _held_rows()[:3] + _train_rows()[:2])
    res2 = tmp_path / "e2.json"
    argv = ["eval", "--model", str(tiny_model), "--dataset", str(mine), "--env", "voting-math",
            "--samples", "1", "--temperature", "0", "--json", str(res2)]  # fmt: skip
    assert main(argv) == 0
    row = json.loads(res2.read_text())[0]
    assert row["episodes"] == 5 and row["data"]["rows"] == 5 and "ood" not in row
    assert row["provenance"]["settings"]["dataset"] == str(mine)
    res3 = tmp_path / "e3.json"
    argv = ["eval", "--model", str(out), "--dataset", str(mine), "--samples", "1",
            "--temperature", "0", "--json", str(res3)]  # fmt: skip
    assert main(argv) == 0
    row = json.loads(res3.read_text())[0]
    assert row["episodes"] == 3 and row["data"]["left_out_as_training"] == 2
    assert "WARNING: 2 of the 5 rows" in capsys.readouterr().out


def test_a_broken_held_out_file_is_refused_when_the_run_starts_with_eval_every_0(
    tiny_model, tmp_path, files
):
    from flowzoo.agents.train.trainer import Trainer

    bad = _write(tmp_path / "bad.jsonl", [*_held_rows()[:2], {"problem": 12, "answer": "12"}])
    cfg = TrainConfig(
        env="voting-math", model=str(tiny_model), steps=1, eval_every=0, max_new_tokens=16,
        env_options={"dataset": f"jsonl:{files[0]}"}, eval_dataset=f"jsonl:{bad}",
        out_dir=str(tmp_path / "r"), resume=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"bad\.jsonl:3: field 'problem' must be text"):
        Trainer(cfg, progress=False)


def test_a_runs_record_counts_what_its_files_split_moved(tmp_path):
    """The run's held-out record (summary.json, and every eval of the run) says how many
    reworded copies the file's split moved to train, by criterion, and prints it."""
    from flowzoo.agents.train.heldout import for_run

    rows = _train_rows(60)
    rows += [{"question": REWORDED.format(n="Ana", a=i, b=i + 3), "answer": str(2 * i + 3)} for i in range(60)]  # fmt: skip
    path = _write(tmp_path / "mine.jsonl", rows)
    held = for_run(TrainConfig(env="voting-math", env_options={"dataset": f"jsonl:{path}"}))
    moved = held.record()["split_decontamination"]
    assert moved["moved_to_train"] > 0 and moved["by_solved"] == moved["moved_to_train"]
    assert held.record()["overlap"]["any"] == 0 and held.record()["overlap"]["by_solved"] == 0
    assert f"moved {moved['moved_to_train']} copies of train rows to train" in held.line()
    assert "solved (quantities + gold) 0, n-gram 0" in held.line()
