"""A prompt longer than the model's context: refused where it can be known (a token budget
that leaves no room, at config time), else cut in its middle so that the problem statement
(its head) and the role's instruction (its tail) are kept, and always flagged (per turn, per
step, per evaluation, a warning once). A prompt that fits is untouched (the main job is
bit-identical). A problem statement too large for any context is refused where it loads."""

from __future__ import annotations

import json
import warnings

import pytest

from flowzoo.tasks import base as task_base

torch = pytest.importorskip("torch")

from flowzoo.agents.models.policy import (  # noqa: E402
    MIN_PROMPT_TOKENS,
    PromptCutWarning,
    check_room,
    cut_middle,
    model_context,
    prompt_room,
)

HEAD = "Problem: What is 2 + 3?"
TAIL = "Role: solver. End with the final answer."


def _long_prompt(filler: int) -> str:
    return f"{HEAD}\n{'candidate text ' * filler}\n{TAIL}"


@pytest.mark.parametrize(
    "n, room", [(10, 10), (10, 11), (11, 10), (100, 9), (100, 3), (5, 2), (5, 1)]
)
def test_a_cut_keeps_the_head_and_the_tail_and_a_fitting_prompt_is_the_same_list(n, room):
    ids = list(range(n))
    got = cut_middle(ids, room)
    if n <= room:
        assert got is ids  # untouched: not even copied
        return
    tail = room // 3
    assert len(got) == room and got[: room - tail] == ids[: room - tail]
    assert got[room - tail :] == (ids[n - tail :] if tail else [])


@pytest.mark.parametrize("budget", [768, 769, 10_000])
def test_a_budget_that_leaves_no_prompt_is_a_value_error_naming_both(budget):
    with pytest.raises(ValueError, match=rf"max_new_tokens={budget} leaves no room.*768"):
        prompt_room(768, budget, "tiny-s")
    assert prompt_room(768, 767) == 1


def test_check_room_names_each_role_whose_budget_leaves_too_little():
    ok = 768 - MIN_PROMPT_TOKENS
    check_room({"solver": ok, "aggregator": 64}, 768, "tiny-s")
    for limits in ({"solver": ok + 1}, {"solver": 768}, {"solver": 2000, "aggregator": 10}):
        with pytest.raises(ValueError) as e:
            check_room(limits, 768, "tiny-s")
        assert "solver" in str(e.value) and "768-token context" in str(e.value)
        assert "aggregator: 10" not in str(e.value) and f"at most {ok}" in str(e.value)


def test_model_context_reads_a_local_models_config(tiny_model, tmp_path):
    assert model_context(tiny_model) == 768
    assert model_context(tmp_path) is None  # no config.json: a served model, say
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    assert model_context(tmp_path) == 2048  # what Policy reads without the field
    for bad in ("[1]", '{"max_position_embeddings": "x"}', '{"max_position_embeddings": 0}', "{"):
        (tmp_path / "config.json").write_text(bad)
        assert model_context(tmp_path) is None


def test_a_long_prompt_keeps_its_problem_and_its_instruction_and_is_flagged(tiny_policy):
    """Cut from the front, the problem statement was lost; now the head with the problem and
    the tail with the instruction are kept, the cut counted on the Generation, and the
    policy warns once. A prompt that fits is the template's ids exactly."""
    pol = tiny_policy
    pol._cut_said = False
    fits = pol.encode_prompt(_long_prompt(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a prompt that fits says nothing
        (g,) = pol.generate([_long_prompt(2)], max_new_tokens=8, temperature=0.0)
    assert g.prompt_ids == fits and g.prompt_cut == 0
    for budget, filler in ((8, 80), (600, 20), (700, 10)):
        full = pol.encode_prompt(_long_prompt(filler))
        room = 768 - budget
        assert len(full) > room
        with (
            pytest.warns(PromptCutWarning, match="cut in its middle")
            if budget == 8
            else warnings.catch_warnings()
        ):
            gens = pol.generate([_long_prompt(filler)] * 2, max_new_tokens=budget, temperature=0.0)
        for g in gens:
            text = pol.tokenizer.decode(g.prompt_ids)
            assert len(g.prompt_ids) == room and g.prompt_cut == len(full) - room
            assert HEAD in text  # the problem statement, whole
            assert text.endswith(TAIL if room // 3 > len(TAIL) else TAIL[-(room // 3) :])
    with pytest.raises(ValueError, match="leaves no room"):
        pol.generate([HEAD], max_new_tokens=768, temperature=0.0)


def _long_math_file(path, n=24, filler=60):
    rows = [
        {
            "question": f"What is {i} + {i + 2}? " + "Think about it. " * filler,
            "answer": str(2 * i + 2),
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_run_on_prompts_longer_than_the_context_counts_them_and_warns_once(tiny_model, tmp_path):
    """Every step's metrics and every evaluation count the turns whose prompt was cut, per
    role; the run warns once per role and keeps the warnings in its summary."""
    from flowzoo.agents.train.trainer import Trainer
    from tests.agents.runs.test_run_records import _cfg

    data = _long_math_file(tmp_path / "long.jsonl")
    cfg = _cfg(
        tiny_model,
        tmp_path / "r",
        steps=2,
        eval_every=1,
        eval_episodes=2,
        eval_ood_episodes=0,
        save_every=0,
        env_options={"dataset": f"jsonl:{data}"},
    )
    with pytest.warns(PromptCutWarning):  # the policy's own, once
        s = Trainer(cfg, progress=False).train()
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] >= 0]
    assert steps and all(r["prompts_cut"].get("solver", 0) > 0 for r in steps)
    assert all(r["eval"]["prompts_cut"].get("solver", 0) > 0 for r in rows if "eval" in r)
    cuts = [w for w in s["warnings"] if w.startswith("prompt cut")]
    assert len(cuts) == len({w.split("role ")[1].split("'")[1] for w in cuts}) >= 1
    assert any("'solver'" in w for w in cuts)


def test_the_default_math_prompts_fit_so_nothing_is_cut(tiny_model, tmp_path):
    """The main job's prompts fit the tiny model's context: no turn is cut (so a run on
    defaults samples and trains on exactly the ids it did before)."""
    from flowzoo.agents.train.trainer import Trainer
    from tests.agents.runs.test_run_records import _cfg

    s = Trainer(
        _cfg(tiny_model, tmp_path / "r", steps=1, eval_every=1, eval_episodes=4, max_new_tokens=0),
        progress=False,
    ).train()
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert all(r.get("prompts_cut", {}) == {} for r in rows)
    assert all(r["eval"]["prompts_cut"] == {} for r in rows if "eval" in r)
    assert not any(w.startswith("prompt cut") for w in s.get("warnings", []))


@pytest.mark.parametrize(
    "settings",
    [
        {"max_new_tokens": 768},
        {"max_new_tokens": 5000},
        {"max_new_tokens": 768 - MIN_PROMPT_TOKENS + 1},
        {"role_settings": {"aggregator": {"max_new_tokens": 767}}},
    ],
)
def test_a_budget_that_leaves_no_prompt_is_refused_before_the_model_is_built(
    tiny_model, tmp_path, settings, monkeypatch
):
    from flowzoo.agents.train import trainer as trainer_mod
    from flowzoo.agents.train.trainer import Trainer
    from tests.agents.runs.test_run_records import _cfg

    def no_build(*a, **k):
        raise AssertionError("the model was built before the budget was checked")

    monkeypatch.setattr(trainer_mod.Trainer, "_build_policies", no_build)
    with pytest.raises(ValueError, match="768-token context") as e:
        Trainer(_cfg(tiny_model, tmp_path / "r", **settings), progress=False)
    assert "aggregator: " in str(e.value)
    assert ("solver: " in str(e.value)) == ("role_settings" not in settings)


# ------------------------------------------------------------------ statements too large


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _huge(n: int = task_base.MAX_STATEMENT_CHARS + 1) -> str:
    return "Compute 1 + 1. " + "x" * (n - 15)


BOXED = "\\boxed"
#: (family, spec kind, a good row, the row holding ``q`` as its statement)
STATEMENT_ROWS = {
    "jsonl": ("math", "jsonl", lambda q, i: {"question": q, "answer": str(i)}),
    "gsm8k": ("math", "gsm8k", lambda q, i: {"question": q, "answer": f"#### {i}"}),
    "math": ("math", "math", lambda q, i: {"problem": q, "solution": f"so {BOXED}{{{i}}}"}),
    "hf-file": ("math", "hf", lambda q, i: {"prompt": q, "answer": str(i)}),
    "mbpp": ("code", "mbpp", lambda q, i: _mbpp(i, q)),
    "file-auto": ("code", "file", lambda q, i: _mbpp(i, q)),
    "apps": ("code", "apps", lambda q, i: _apps(i, q)),
}


@pytest.mark.parametrize("style", sorted(STATEMENT_ROWS))
def test_a_huge_problem_statement_is_refused_where_it_loads_naming_the_row(tmp_path, style):
    from flowzoo.tasks.families import family_spec

    family, kind, row = STATEMENT_ROWS[style]
    path = tmp_path / "rows.jsonl"
    load = family_spec(family).load
    _write(path, [row("What is 1 + 1? Echo it.", 0), row(_huge(), 1)])
    with pytest.raises(ValueError) as e:
        load(f"{kind}:{path}", "all", 0, 0)
    msg = str(e.value)
    assert f"{path}:2: " in msg and "problem statement holds" in msg
    assert f"{task_base.MAX_STATEMENT_CHARS:,}" in msg
    under = _huge(task_base.MAX_STATEMENT_CHARS - 4096)
    _write(path, [row("What is 1 + 1? Echo it.", 0), row(under, 1)])
    assert len(load(f"{kind}:{path}", "all", 0, 0)) == 2  # under the bound: loads


def test_a_30_mb_problem_field_is_refused_and_a_task_says_its_id():
    with pytest.raises(ValueError, match=r"task 'big': its problem statement holds 30,000,000"):
        task_base.Task("big", "x" * 30_000_000, "1")
    task_base.Task("ok", "x" * task_base.MAX_STATEMENT_CHARS, "1")


def _mbpp(i: int, text: str) -> dict:
    return {"task_id": i, "text": text, "code": f"def f{i}(x):\n    return x + 1\n",
            "test_list": [f"assert f{i}(1) == 2"]}  # fmt: skip


def _apps(i: int, text: str) -> dict:
    io = json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]})
    return {"problem_id": i, "question": text, "input_output": io, "solutions": "[]"}
