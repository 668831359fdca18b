"""Copy drills: rows that teach the final role to copy an answer it was shown, where
computing the answer from the problem cannot stand in for copying it."""

import random

import flowzoo
from flowzoo.tiny.copydrills import answers_from_candidates, candidates, copy_drill_rows
from flowzoo.tiny.corpus import corpus_tasks
from flowzoo.tiny.recipe import PretrainConfig, named_config

POOL = corpus_tasks("math", 200)


def _answer(text: str) -> str:
    return text.removeprefix("\\boxed{").removesuffix("}")


def test_every_copy_drill_target_is_an_answer_shown_and_often_not_the_gold():
    for env_id, kw in (("orch-workers-math", {}), ("voting-math", {"conflict": True})):
        env = flowzoo.make_env(env_id, dataset=POOL, **kw)
        rows = copy_drill_rows(env_id, env, POOL, 60, seed=3)
        assert len(rows) == 60 and all(r[0] == env_id for r in rows)
        for _, prompt, target in rows:
            assert target.startswith("\\boxed{") and f"\\boxed{{{_answer(target)}}}" in prompt
        gold = {t.question: str(t.answer) for t in POOL}
        not_gold = [
            r for r in rows if _answer(r[2]) != gold[r[1].split("\n")[0].removeprefix("Problem: ")]
        ]
        assert len(not_gold) > 20  # computing the answer would get these wrong
        assert "final answer" in rows[0][1]


def test_copy_drills_skip_roles_that_do_not_answer_from_candidates():
    for env_id, kw in (
        ("voting-math", {}),  # the aggregator names an index
        ("orch-workers-math", {"mode": "decompose"}),
        ("eval-opt-math", {}),
        ("single-math", {}),
    ):
        env = flowzoo.make_env(env_id, dataset=POOL, **kw)
        assert answers_from_candidates(env) is None
        assert copy_drill_rows(env_id, env, POOL, 10, seed=0) == []


def test_candidate_patterns_are_all_drawn():
    fam = flowzoo.make_env("voting-math").family
    rng = random.Random(0)
    task = next(t for t in POOL if len(t.meta.get("steps") or ()) > 1)
    seen = set()
    for _ in range(60):
        c = candidates(fam, task, 3, rng)
        assert len(c) == 3
        shows = sum(" = " in x for x in c)
        distinct = len(set(c))
        seen.add("worked" if shows else ("shared" if distinct == 2 else "distinct"))
    assert seen == {"worked", "shared", "distinct"}


def test_copy_drills_leave_every_other_key_and_change_the_conflict_build():
    base = PretrainConfig(scale="tiny-s")
    assert base.key() == named_config("tiny-s").key() == "ca9ead3f2d06"
    drilled = PretrainConfig(scale="tiny-s", copy_drills=10)
    assert drilled.key() != base.key() and drilled.base().key() == base.base().key()
    assert named_config("tiny-s-conflict").copy_drills > 0
