"""Held-out means held out: splits decided by what is solved, measured by the library."""

from __future__ import annotations

import json

import pytest

import flowzoo
from flowzoo.envs.registry import has_ood
from flowzoo.tasks.base import Task, TaskSet, split_of
from flowzoo.tasks.code.data import OOD_TEMPLATES, function_tasks
from flowzoo.tasks.code.guarded import GUARDED_OOD_TEMPLATES, guarded_tasks
from flowzoo.tasks.code.stdio_data import STDIO_OOD_TEMPLATES, stdio_tasks
from flowzoo.tasks.math.data import (
    OOD_LEVELS,
    arithmetic_tasks,
    computation_key,
    load_math_dataset,
)
from flowzoo.tasks.overlap import overlap

GENERATORS = {
    "arith": arithmetic_tasks,
    "funcs": function_tasks,
    "guarded": guarded_tasks,
    "stdio": stdio_tasks,
}


@pytest.fixture(scope="module")
def spaces():
    """Every generated family's whole train, test and ood spaces (ood capped)."""
    return {
        name: {
            sp: gen(20_000 if sp != "ood" else 2_000, split=sp, seed=0, exhaust=True)
            for sp in ("pretrain", "train", "test", "ood")
        }
        for name, gen in GENERATORS.items()
    }


@pytest.mark.parametrize("name", list(GENERATORS))
def test_no_split_shares_what_it_solves(spaces, name):
    pre, train, test, ood = (spaces[name][s] for s in ("pretrain", "train", "test", "ood"))
    pairs = ((pre, train), (pre, test), (pre, ood), (train, test), (train, ood), (test, ood))
    for a, b in pairs:
        o = overlap(a, b)
        assert (o.by_key, o.by_statement, o.by_tests, o.any) == (0, 0, 0, 0), o.examples
    # held-out sides keep one wording per computation: no repeats inside them
    assert overlap(test, test).duplicates_b == 0


def test_held_out_spaces_are_large_enough(spaces):
    """The whole space, sampled from the level generators (the exhaustive pools stop early
    near exhaustion and undercount): >= 1,000 held-out computations, ~4x as many trained."""
    import random

    from flowzoo.tasks.math.data import LEVELS

    r = random.Random(0)
    keys = {computation_key(LEVELS[lv](r)[1]) for lv in (1, 2, 3, 4) for _ in range(100_000)}
    held = {k for k in keys if split_of(k) == "test"}
    assert len(held) >= 1000 and len(keys) - len(held) >= 3.5 * len(held)
    assert len(spaces["funcs"]["test"]) >= 300
    assert len(spaces["stdio"]["test"]) >= 300
    assert len(spaces["guarded"]["test"]) >= 300


def test_a_guarded_task_never_protects_a_computation_the_base_pretrained_on(spaces):
    """The guarded tasks' bodies are ``funcs`` computations where ``funcs`` has them, and
    the pretrained base saw ``funcs``' pretraining split: no guarded RL, test or ood task's
    unguarded body is a ``funcs`` pretraining task, by key or by program (the same
    computation keyed alike), while pretraining pools do share bodies (the check can fail)."""
    funcs_pre = spaces["funcs"]["pretrain"]
    keys, programs = {t.meta["key"] for t in funcs_pre}, {t.answer for t in funcs_pre}
    for sp in ("train", "test", "ood"):
        for t in spaces["guarded"][sp]:
            assert t.meta["key"] not in keys and t.meta["shortcut"] not in programs, t.question
    assert any(t.meta["shortcut"] in programs for t in spaces["guarded"]["pretrain"])


def test_paraphrases_of_one_computation_share_a_key_and_a_side():
    assert computation_key([(3, "*", 4), (None, "-", 2)]) == computation_key(
        [(4, "*", 3), (None, "-", 2)]
    )
    assert computation_key([(7, "-", 2)]) != computation_key([(2, "-", 7)])
    assert computation_key([(5, "+", None)]) == computation_key([(None, "+", 5)])
    # a word problem and an expression with the same steps are one computation
    pool = arithmetic_tasks(20_000, split="train", exhaust=True)
    by_key: dict[str, set[int]] = {}
    for t in pool:
        by_key.setdefault(t.meta["key"], set()).add(t.meta["level"])
    assert any({2, 3} <= levels for levels in by_key.values())
    for t in list(pool)[:500]:
        assert split_of(t.meta["key"]) == "train"


def test_ood_holds_structure_never_trained(spaces):
    ood = spaces["arith"]["ood"]
    assert {t.meta["level"] for t in ood} == set(OOD_LEVELS)
    longest_trained = max(len(t.meta["steps"]) for t in spaces["arith"]["train"])
    assert min(len(t.meta["steps"]) for t in ood) > longest_trained
    for name, held in (
        ("funcs", OOD_TEMPLATES),
        ("guarded", GUARDED_OOD_TEMPLATES),
        ("stdio", STDIO_OOD_TEMPLATES),
    ):
        assert {t.meta["template"] for t in spaces[name]["ood"]} == held
        trained = {t.meta["template"] for t in spaces[name]["train"]}
        assert trained and not trained & held


def test_overlap_finds_paraphrases_copies_and_shared_tests():
    """The measure can come out the other way: contamination of each kind is counted."""
    plus3 = ["assert f(1) == 4"]
    a = TaskSet(
        [
            Task("a1", "Compute 6 + 6.", "12", meta={"key": "6+6"}),
            Task("a2", "Write f that returns x plus 3.", "", "code", meta={"tests": plus3}),
            Task("a3", "A loaded  problem?", "1"),
        ]
    )
    b = TaskSet(
        [
            Task("b1", "What is 6 + 6?", "12", meta={"key": "6+6"}),  # paraphrase
            Task("b2", "Return x + 3 as f.", "", "code", meta={"tests": ["assert  f(1) == 4"]}),
            Task("b3", "a loaded problem", "1"),  # the same statement up to case and spacing
            Task("b4", "Compute 6 - 6.", "0", meta={"key": "6-6"}),
            Task("b5", "Say: what is 6 - 6", "0", meta={"key": "6-6"}),  # a repeat within b
        ]
    )
    o = overlap(a, b)
    assert (o.by_key, o.by_tests, o.by_statement, o.any) == (1, 1, 1, 3)
    assert o.examples == ["b1", "b2", "b3"] and o.fraction == pytest.approx(0.6)
    assert (o.duplicates_a, o.duplicates_b) == (0, 1)


@pytest.mark.parametrize("family", ["math", "code", "code-guarded"])
def test_the_pretraining_corpus_holds_no_held_out_problem(family, spaces):
    from flowzoo.tiny.corpus import corpus_tasks
    from flowzoo.tiny.recipe import PretrainConfig

    cfg = PretrainConfig(scale="tiny-s")
    if family == "code-guarded":  # the code testbed's corpus (tiny-s-code's)
        from flowzoo.tiny.recipe import named_config

        tb = named_config("tiny-s-code")
        assert tb is not None and tb.code_tasks == "guarded"
        r12 = named_config("tiny-s-code12")  # recipe 12 draws the same pool
        assert r12 is not None
        assert (r12.corpus_tasks, r12.seed, r12.code_tasks) == (tb.corpus_tasks, 0, "guarded")
        pool = corpus_tasks("code", tb.corpus_tasks, tb.seed, tb.code_tasks)
        names: tuple[str, ...] = ("guarded", "funcs", "stdio")
        family = "code"
    else:  # the pretrained base's (recipe 7's code half)
        pool = corpus_tasks(family, cfg.corpus_tasks, cfg.seed, cfg.base().code_tasks)
        names = ("arith",) if family == "math" else ("funcs", "stdio")
    for name in names:
        # the RL pool too: RL trains on computations its base never saw
        for sp in ("train", "test", "ood"):
            assert overlap(pool, spaces[name][sp]).any == 0
    # and the envs' default RL pool is not a prefix of the pretraining pool
    env = flowzoo.make_env("voting-math" if family == "math" else "voting-code")
    assert overlap(pool, env.tasks).any == 0
    if "guarded" in names:  # the code testbed's RL pool
        assert overlap(pool, flowzoo.make_env("voting-code", dataset="guarded").tasks).any == 0


def test_ood_split_through_envs_and_its_absence_is_an_error(tmp_path):
    env = flowzoo.make_env("voting-math", split="ood", n_tasks=5)
    assert all(t.meta.get("ood") for t in env.tasks)
    assert has_ood("voting-math") and has_ood("eval-opt-code", dataset="stdio")
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    assert not has_ood("voting-math", dataset=f"jsonl:{f}")
    with pytest.raises(ValueError, match="out-of-distribution"):
        load_math_dataset(f"jsonl:{f}", split="ood")
    with pytest.raises(ValueError, match="valid: pretrain, train, test, ood"):
        arithmetic_tasks(5, split="dev")


@pytest.mark.parametrize("name", ["funcs", "stdio", "guarded"])
def test_generated_tests_tell_a_constant_program_apart(spaces, name):
    """Every generated code task expects two or more different outputs, and the templates'
    inputs make that the rule, not the redraw's work (at most 5% of draws are redrawn)."""
    import random

    from flowzoo.tasks.code import data, stdio_data
    from flowzoo.tasks.code.generated import expected_outputs

    for sp in ("train", "test", "ood"):
        assert all(len(set(expected_outputs(t))) >= 2 for t in spaces[name][sp])
    from flowzoo.tasks.code import guarded

    levels, make = {
        "funcs": (data.LEVELS, lambda tpl: data._make_task(1, *tpl(r))),
        "stdio": (stdio_data.STDIO_LEVELS, lambda tpl: stdio_data._make_task(1, *tpl(r))),
        "guarded": (guarded.GUARDED_LEVELS, lambda tpl: guarded._make_task(1, tpl(r))),
    }[name]
    r = random.Random(0)
    for templates in levels.values():
        for tpl in templates:
            weak = sum(len(set(expected_outputs(make(tpl)))) < 2 for _ in range(200))
            assert weak <= 10, (tpl.__name__, weak)
