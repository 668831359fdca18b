"""Recipe 8's corpus levers (docs/testbed.md): contested turns, coordination drills and
per-role shortcut rates. Builds small corpora only, never a model."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import pytest

import flowzoo
from flowzoo.envs.scripted import BehaviourPolicy, play_episode
from flowzoo.tiny.corpus import make_corpus
from flowzoo.tiny.recipe import RECIPES, PretrainConfig, Recipe, named_config


def _small(**kw) -> PretrainConfig:
    base = dict(
        scale="tiny-s",
        role_shortcut_rates={"aggregator": 0.4, "evaluator": 0.4},
        envs=("voting-math", "eval-opt-math", "orch-workers-math", "single-math"),
        episodes_per_env=40,
        fact_drills=0,
        corpus_tasks=400,
        role_drills={},
    )
    return dataclasses.replace(PretrainConfig(scale="tiny-s"), **{**base, **kw})


def test_contested_turns_are_where_the_menu_decides():
    """A turn is contested exactly where its two behaviours write different texts: every
    solver turn; an aggregator turn only when the considered pick is not candidate 1 (its
    reading is then decidable), never when they coincide."""
    env = flowzoo.make_env("voting-math")
    pol = BehaviourPolicy(0.5, seed=3)
    agg = Counter()
    for i, task in enumerate(list(env.tasks)[:60]):
        pol.reseed(i)
        play_episode(env, pol, seed=i, options={"task_id": task.id})
        for j, (t, b) in enumerate(zip(env.turn_log(), env.behaviour_log(), strict=True)):
            if t.role == "solver":
                assert j in pol.contested
            elif t.role == "aggregator":
                agg[j in pol.contested] += 1
                assert (b is not None) == (j in pol.contested), (t.action, b)
    assert agg[True] and agg[False], agg  # both cases met: the check can fail either way


def test_coordination_drills_add_only_contested_drill_role_turns():
    """The drill episodes add the drill roles' turns (aggregator, evaluator, orchestrator,
    synthesizer) where the behaviour decides what is written, both sides of the menu, and
    nothing of any other role or env."""
    plain = Counter(make_corpus(_small(coordination_drills=0)))
    drilled = Counter(make_corpus(_small(coordination_drills=60)))
    extra = drilled - plain
    assert not plain - drilled  # the env's own episodes are unchanged
    assert {env for env, _, _ in extra.elements()} == {
        "voting-math",
        "eval-opt-math",
        "orch-workers-math",
    }
    orch = [c for e, _, c in extra.elements() if e == "orch-workers-math"]
    plans = [c for c in orch if c.startswith(("Strategy 1:", "Step 1:"))]
    synth = [c for c in orch if re.fullmatch(r"\\boxed\{-?\d+\}", c)]
    assert plans and synth and len(plans) + len(synth) == len(orch), orch[:5]
    direct = sum("direct" in c.lower() for c in plans) / len(plans)  # both sides of the menu
    assert 0.15 < direct < 0.85, direct
    # only the drill roles: a drill adds no solver, worker or optimizer turn
    drilled_only = _small(coordination_drills=60, drill_roles=("aggregator", "evaluator"))
    extra2 = Counter(make_corpus(drilled_only)) - plain
    assert {env for env, _, _ in extra2.elements()} == {"voting-math", "eval-opt-math"}
    picks = [c for e, _, c in extra.elements() if e == "voting-math"]
    verdicts = [c.split("\n")[0] for e, _, c in extra.elements() if e == "eval-opt-math"]
    assert picks and all(re.fullmatch(r"\\boxed\{\d\}", c) for c in picks), picks[:5]
    assert verdicts and all(v.startswith("Verdict: ") for v in verdicts), verdicts[:5]
    # contested: the shortcut (candidate 1, ACCEPT) and the considered side both appear
    share1 = picks.count("\\boxed{1}") / len(picks)
    accept = verdicts.count("Verdict: ACCEPT") / len(verdicts)
    assert 0.15 < share1 < 0.7 and 0.15 < accept < 0.7, (share1, accept)


def test_role_drills_add_only_that_roles_contested_turns():
    """A role's own drills add its contested turns and nothing else (no orchestrator plan
    beside the synthesizer's answers, no other env), after the coordination drills, which
    stay as they were; an empty ``role_drills`` leaves the key of every earlier build."""
    base = _small(coordination_drills=30)
    plain = Counter(make_corpus(base))
    more = Counter(make_corpus(dataclasses.replace(base, role_drills={"synthesizer": 200})))
    assert not plain - more
    extra = list((more - plain).elements())
    assert extra and {e for e, _, _ in extra} == {"orch-workers-math"}
    assert all(re.fullmatch(r"\\boxed\{-?\d+\}", c) for _, _, c in extra), extra[:5]
    assert all("Role: synthesizer" in p for _, p, _ in extra)
    # a role absent from an env adds nothing there; one no env has is refused (it would
    # change the key and nothing else)
    with pytest.raises(ValueError, match="role_drills names 'critic'"):
        make_corpus(dataclasses.replace(base, role_drills={"critic": 50}))
    recipe9 = dict(role_drills={}, code_tasks="funcs+stdio", midtrain_steps=600)
    assert PretrainConfig(scale="tiny-s", **recipe9).key() == "60eca4a422f1"  # recipe 9's
    assert base.key() != dataclasses.replace(base, role_drills={"synthesizer": 1}).key()


def test_a_scale_gets_its_own_stage_rates_unless_a_config_sets_them():
    """tiny-m's synthesizer rate is its own (it follows its drills more closely than tiny-s);
    tiny-s keeps recipe 10's key; rates a config sets are never replaced."""
    from flowzoo.tiny.recipe import MIDTRAIN_SCALE_RATES, MIDTRAIN_SHORTCUT_RATES

    m = PretrainConfig(scale="tiny-m")
    assert m.role_shortcut_rates == {**MIDTRAIN_SHORTCUT_RATES, **MIDTRAIN_SCALE_RATES["tiny-m"]}
    assert m.role_shortcut_rates != MIDTRAIN_SHORTCUT_RATES
    recipe10 = PretrainConfig(scale="tiny-s", code_tasks="funcs+stdio", midtrain_steps=600)
    assert recipe10.key() == "ca9ead3f2d06"  # recipe 10's key, unchanged by later levers
    assert PretrainConfig(scale="tiny-s").key() == "ca9ead3f2d06"  # and the default (shipped)
    own = {"synthesizer": 0.9}
    assert PretrainConfig(scale="tiny-m", role_shortcut_rates=own).role_shortcut_rates == own
    assert dataclasses.replace(m, seed=1).role_shortcut_rates == m.role_shortcut_rates


def test_role_shortcut_rates_move_the_corpus_and_the_key():
    """A per-role rate changes that role's rows, and the recipe key with it."""
    a, b = _small(role_shortcut_rates={"evaluator": 0.0}), _small(role_shortcut_rates=None)
    assert a.key() != b.key()
    rev = [
        sum(c.startswith("Verdict: REVISE") for e, _, c in make_corpus(cfg) if e == "eval-opt-math")
        for cfg in (a, b)
    ]
    assert rev[0] > rev[1], rev


def test_the_code_testbed_writes_guarded_programs_and_keeps_the_base():
    """``code_tasks="guarded"`` writes the code half with the testbed expert on guarded
    tasks: every program well formed, both sides of the solver's menu present, every
    considered program right (scored in the sandbox); "funcs+stdio" writes recipe 10's noisy
    experts' rows on funcs and stdio tasks. Both continue one pretrained base."""
    from flowzoo.tasks.code import CodeFamily
    from flowzoo.tasks.code.guarded import guarded_tasks

    envs = ("voting-code", "eval-opt-code")
    n = dict(code_episodes_per_env=30, code_testbed_episodes=30)
    guarded = _small(envs=envs, code_tasks="guarded", **n)
    old = _small(envs=envs, code_tasks="funcs+stdio", **n)
    assert guarded.base().key() == old.base().key() and guarded.key() != old.key()
    rows, old_rows = make_corpus(guarded), make_corpus(old)
    assert len({e for e, _, _ in rows}) == 2
    solver = [c for _, p, c in rows if "Role: solver" in p]
    guards = ["if not " in c or "if x < 0" in c or "if n < 1" in c for c in solver]
    assert solver and any(guards) and not all(guards)
    assert all(c.startswith("```python\ndef ") for c in solver)
    by_question = {t.question: t for t in guarded_tasks(6000, split="pretrain", exhaust=True)}
    asked = {p.partition("\n")[0].removeprefix("Problem: ") for _, p, _ in rows + old_rows}
    assert asked & set(by_question)  # the guarded corpus asks guarded tasks ...
    old_asked = {p.partition("\n")[0].removeprefix("Problem: ") for _, p, _ in old_rows}
    assert not old_asked & set(by_question)  # ... and recipe 10's never does
    fam = CodeFamily()
    checked = 0
    for _, p, c in rows:
        q = p.partition("\n")[0].removeprefix("Problem: ").removeprefix("Question: ")
        task = by_question.get(q)
        if task is not None and "Role: solver" in p and fam.shows_work(task, c):
            assert fam.score(task, c).correct, (q, c)
            checked += 1
    assert checked >= 5, checked


def test_code_drills_add_only_contested_coordinating_code_turns():
    """The code testbed's drills add the aggregator's contested turns of Voting (both sides
    of its menu) and nothing else; the recipe without them keeps its key."""
    kw = dict(envs=("voting-code",), code_tasks="guarded", code_testbed_episodes=20)
    plain = Counter(make_corpus(_small(**kw)))
    drilled = Counter(make_corpus(_small(**kw, code_drills=40)))
    extra = drilled - plain
    assert not plain - drilled and extra
    assert all("Role: aggregator" in p for _, p, _ in extra.elements())
    assert {c for _, _, c in extra.elements()} >= {"\\boxed{1}", "\\boxed{2}"}
    assert _small(**kw).key() != _small(**kw, code_drills=40).key()
    assert _small(**kw).base().key() == _small(**kw, code_drills=40).base().key()


def test_code_role_drills_add_only_that_roles_contested_turns():
    """A per-role code drill adds the named role's contested turns after the shared code
    drills (Eval-Opt's evaluator here: a drill keeping every contested turn would add the
    optimizer's too), names a new stage on the same base, and an empty one keeps the key."""
    kw = dict(envs=("eval-opt-code",), code_tasks="guarded", code_testbed_episodes=20)
    plain = Counter(make_corpus(_small(**kw, code_drills=10)))
    drilled = Counter(make_corpus(_small(**kw, code_drills=10, code_role_drills={"evaluator": 40})))
    extra = drilled - plain
    assert not plain - drilled and extra
    assert all("Role: evaluator" in p for _, p, _ in extra.elements())
    assert len({c for _, _, c in extra.elements()}) >= 2  # both sides of its menu
    # a role the corpus's envs do not play is refused (it would change the key, nothing else)
    with pytest.raises(ValueError, match="code_role_drills names 'aggregator'"):
        make_corpus(_small(**kw, code_drills=10, code_role_drills={"aggregator": 40}))
    assert _small(**kw).key() == _small(**kw, code_role_drills={}).key()
    assert _small(**kw).key() != _small(**kw, code_role_drills={"evaluator": 40}).key()
    assert (
        _small(**kw).base().key() == _small(**kw, code_role_drills={"evaluator": 40}).base().key()
    )


def test_a_stage_lever_moves_the_stage_key_never_its_base():
    """The stage's own levers (its schedule here) name a new build of the stage and continue
    the same pretrained base: a lever must never send a build back to pretraining."""
    plain = PretrainConfig(scale="tiny-s", midtrain_decay=False)
    decayed = PretrainConfig(scale="tiny-s", midtrain_decay=True)
    assert plain.key() != decayed.key()
    assert plain.base().key() == decayed.base().key()
    assert PretrainConfig(scale="tiny-s", midtrain_steps=0, midtrain_decay=True).key() == (
        PretrainConfig(scale="tiny-s", midtrain_steps=0, midtrain_decay=False).key()
    )


def test_a_stage_seed_redraws_the_stage_on_the_same_pools_and_base():
    """``midtrain_seed`` names another stage of the same recipe: its behaviour draws differ
    on the same problems (the pools are the base's, so the split stays disjoint), the base
    is unchanged, and 0 keeps every key built before it."""
    one, two = _small(), _small(midtrain_seed=1)
    assert one.key() == _small(midtrain_seed=0).key()
    assert one.key() != two.key() and one.base().key() == two.base().key()
    a, b = make_corpus(one), make_corpus(two)
    assert a != b
    problems = [
        {m.group(1) for _, p, _ in c if (m := re.search(r"Problem: (.*)", p))} for c in (a, b)
    ]
    assert problems[0] == problems[1]  # the same problems, their behaviour drawn again


def test_a_stage_seed_reorders_the_stage_batches(tmp_path):
    """The stage's batch order follows ``stage_seed``: one step of the same initial model on
    the same examples sees another first batch under another stage seed, the same one under
    the same seed (a real tiny-s network, a handful of rows; no build)."""
    import random

    import torch

    from flowzoo.tiny.build import build_model
    from flowzoo.tiny.pretrain import train_loop

    rows = random.Random(0)
    examples = [([rows.randrange(1, 40) for _ in range(12)], 4) for _ in range(32)]

    def first_loss(midtrain_seed: int) -> float:
        cfg = PretrainConfig(scale="tiny-s", batch_size=4, midtrain_seed=midtrain_seed)
        model = build_model("tiny-s", 40, 16, seed=0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        return train_loop(
            model, opt, examples, 0, cfg, 1, lambda _: 1e-3, tmp_path / "c.pt", False, ""
        )[0]

    assert first_loss(0) == first_loss(0)
    assert first_loss(1) != first_loss(0)
    with pytest.raises(ValueError, match="midtrain_seed"):  # no stage: it would re-seed pretraining
        PretrainConfig(scale="tiny-s", midtrain_steps=0, midtrain_seed=1)


def test_each_code_recipe_has_its_own_name_on_one_base():
    """``tiny-s-code`` keeps building recipe 11 (every code result before recipe 12 names
    it), ``tiny-s-code12`` builds recipe 12; both continue the same pretrained base, and a
    name of neither form is a path."""
    r11, r12 = named_config("tiny-s-code"), named_config("tiny-s-code12")
    assert r11 is not None and r12 is not None
    # the keys the committed calibration records name their builds by
    assert (r11.key(), r12.key()) == ("ea95c21dfc63", "04dd371918a9")
    assert dataclasses.replace(r12, midtrain_seed=1).key() == "122bf57e1f8d"
    assert r12.base().key() == r11.base().key() == named_config("tiny-s").base().key()
    assert r12.code_role_drills == {"aggregator": 2500} and not r11.code_role_drills
    assert named_config("tiny-s-code13") is None and named_config("tiny-x-code12") is None


def test_a_stage_name_is_another_stage_of_the_same_recipe():
    """``tiny-s-code12-stage2`` is recipe 12 with ``midtrain_seed=2`` (the build the committed
    stage records name), ``-stage0`` the bare name; a name's stem must be a recipe, and a
    recipe with no behaviour stage has nothing to re-seed."""
    r12 = named_config("tiny-s-code12")
    assert named_config("tiny-s-code12-stage0") == r12
    s2 = named_config("tiny-s-code12-stage2")
    assert s2 == dataclasses.replace(r12, midtrain_seed=2) and s2.key() == "469116f8a307"
    assert named_config("tiny-s-code-stage1").midtrain_seed == 1
    assert named_config("tiny-s-code-stage1").key() != named_config("tiny-s-code").key()
    assert named_config("tiny-x-code12-stage1") is None and named_config("my-stage1") is None
    assert named_config("tiny-s-code12-stage02") is None  # one name per stage, not two
    with pytest.raises(ValueError, match="no behaviour stage"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(RECIPES, "-flat", Recipe("-flat", "x", {"midtrain_steps": 0}, "", ""))
            named_config("tiny-s-flat-stage1")


# builds models inside the test: no per-test timeout (a busy machine took over 300 s)
@pytest.mark.timeout(0)
def test_the_mid_training_stage_continues_its_base_and_resumes(tiny_model, tmp_path):
    """Mid-training starts from ``cfg.base()`` (here the fast test model, from the cache),
    writes a loadable model under its own key, and a killed stage resumes from its
    checkpoint to the same weights."""
    import torch
    from transformers import AutoModelForCausalLM

    from flowzoo.tiny import pretrain as pretrain_loop
    from flowzoo.tiny.build import ensure_tiny, fast_config

    cfg = fast_config("tiny-s", midtrain_steps=6, coordination_drills=20)
    assert ensure_tiny(cfg.base(), progress=False) == tiny_model  # the base: no new build
    assert cfg.key() != cfg.base().key()
    whole = ensure_tiny(cfg, cache_dir=tmp_path / "a", progress=False)
    meta = __import__("json").loads((whole / "flowzoo_tiny.json").read_text())
    assert meta["base_key"] == cfg.base().key() and meta["config"]["midtrain_steps"] == 6
    base_bytes = (tiny_model / "model.safetensors").read_bytes()  # the weights it continued
    assert meta["base_sha256"] == __import__("hashlib").sha256(base_bytes).hexdigest()
    base_w = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    mid_w = AutoModelForCausalLM.from_pretrained(whole).state_dict()
    assert any(not torch.equal(base_w[k], mid_w[k]) for k in base_w)  # it trained

    # a stage killed after its step-200-style checkpoint: checkpoint every 2 steps here
    real_save, calls = torch.save, []

    def save_then_die(obj, path):
        real_save(obj, path)
        calls.append(obj["step"])
        if obj["step"] == 4:
            raise KeyboardInterrupt

    orig = pretrain_loop.CHECKPOINT_EVERY
    pretrain_loop.CHECKPOINT_EVERY = 2
    pretrain_loop.torch.save = save_then_die
    try:
        try:
            ensure_tiny(cfg, cache_dir=tmp_path / "b", progress=False)
        except KeyboardInterrupt:
            pass
        pretrain_loop.torch.save = real_save
        resumed = ensure_tiny(cfg, cache_dir=tmp_path / "b", progress=False)
    finally:
        pretrain_loop.torch.save = real_save
        pretrain_loop.CHECKPOINT_EVERY = orig
    assert calls[:2] == [2, 4]
    again = AutoModelForCausalLM.from_pretrained(resumed).state_dict()
    assert all(torch.equal(again[k], mid_w[k]) for k in mid_w)  # exactly where it would be


def test_a_rate_or_drill_for_a_role_no_env_plays_is_refused():
    """A misspelt role in a drill or rate dict would change the build's key and nothing else;
    it is refused before a corpus row is written, naming the roles the corpus's envs play. The
    shipped recipes pass (their default names cover roles a narrowed corpus may not play)."""
    from flowzoo.envs import make_env
    from flowzoo.tiny.corpus import check_role_names
    from flowzoo.tiny.recipe import fast_config

    narrow = dict(envs=("voting-math",), corpus_tasks=40)
    with pytest.raises(ValueError, match=r"role_drills names 'agregator'.*played: aggregator, so"):
        make_corpus(fast_config("tiny-s", role_drills={"agregator": 5}, **narrow))
    with pytest.raises(ValueError, match=r"code_shortcut_rates names 'tester': .*played: none"):
        make_corpus(fast_config("tiny-s", code_shortcut_rates={"tester": 0.4}, **narrow))
    with pytest.raises(ValueError, match=r"drill_roles names 'critic'"):
        make_corpus(fast_config("tiny-s", drill_roles=("aggregator", "critic"), **narrow))
    # a real role placed where the corpus does not play it: the worker has no Voting turn
    with pytest.raises(ValueError, match=r"role_drills names 'worker'"):
        make_corpus(fast_config("tiny-s", role_drills={"worker": 50}, **narrow))
    code = dict(envs=("voting-code",), corpus_tasks=40, code_tasks="guarded")
    with pytest.raises(ValueError, match=r"code_role_drills names 'synthesizer'.*aggregator"):
        make_corpus(fast_config("tiny-s", code_role_drills={"synthesizer": 5}, **code))
    assert make_corpus(fast_config("tiny-s", episodes_per_env=2, **narrow))  # defaults pass
    for name in ("tiny-s", "tiny-s-code", "tiny-s-code12"):
        cfg = named_config(name)
        check_role_names(cfg, {e: make_env(e, n_tasks=4) for e in cfg.envs})
