"""The env under misuse: copies and pickles after judged programs, inputs refused before any
state changes, and the end paths that used to crash (human rendering of a lone surrogate)."""

from __future__ import annotations

import copy
import pickle
import random

import pytest

import flowzoo
from flowzoo.envs.scripted import expert_policy, oracle_policy
from flowzoo.envs.wrappers import AggregatorChoiceEnv, EvaluatorChoiceEnv, scripted, single_agent


def _play(env, pol, seed=0, options=None):
    env.reset(seed=seed, options=options)
    for agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else pol(env, agent))
    return env


# ------------------------------------------------------------------ 1. copies and pickles
@pytest.mark.parametrize("env_id", ["single-code", "voting-code", "eval-opt-math"])
def test_copies_share_family_sandbox_tasks_and_copy_the_episode(env_id):
    env = flowzoo.make_env(env_id, n_tasks=3)
    for seed in range(3):  # programs judged: the code family now holds a live sandbox
        _play(env, oracle_policy, seed=seed)
    env.reset(seed=5)
    agent = env.agent_selection
    env.step(oracle_policy(env, agent))
    for c in (copy.deepcopy(env), copy.copy(env)):
        assert c.family is env.family and c.workflow is env.workflow and c.tasks is env.tasks
        assert c.episode is not env.episode and c.episode.family is env.family
        assert c.episode.task is env.episode.task
        if env_id.endswith("code"):
            assert c.family.sandbox is env.family.sandbox
        before, finals = env.turn_log(), []
        for a in c.agent_iter():  # playing the copy to the end leaves the original as it was
            _, _, term, trunc, info = c.last()
            finals += [info] if term or trunc else []
            c.step(None if term or trunc else oracle_policy(c, a))
        assert env.turn_log() == before and env.agents == list(env.possible_agents)
        assert finals and all(i["correct"] for i in finals)


@pytest.mark.parametrize("env_id", ["single-code", "voting-code", "orch-workers-math"])
def test_pickled_env_resumes_where_it_was(env_id):
    env = flowzoo.make_env(env_id, n_tasks=3)
    _play(env, oracle_policy, seed=0)
    env.reset(seed=1)
    env.step(oracle_policy(env, env.agent_selection))
    back = pickle.loads(pickle.dumps(env))
    assert back.turn_log() == env.turn_log() and back.agent_selection == env.agent_selection
    if env_id.endswith("code"):  # in this process the shared sandbox is the same object
        assert back.family.sandbox is env.family.sandbox
    finals = []
    for e in (env, back):
        got = {}
        for a in e.agent_iter():
            _, _, term, trunc, info = e.last()
            got[a] = dict(info)
            e.step(None if term or trunc else oracle_policy(e, a))
        finals.append(got)
    assert finals[0] == finals[1] and all(i["correct"] for i in finals[0].values())


def test_a_sandbox_instance_env_refuses_pickling_with_the_reason():
    from flowzoo.sandbox import get_sandbox

    sb = get_sandbox("process")
    try:
        env = flowzoo.make_env("single-code", n_tasks=2, sandbox=sb)
        _play(env, oracle_policy)
        assert copy.deepcopy(env).family.sandbox is sb
        with pytest.raises(TypeError, match="sandbox=<backend name>"):
            pickle.dumps(env)
    finally:
        sb.close()


def test_trl_adapter_resumes_copies_of_a_code_env():
    from flowzoo.integrations.trl_adapter import RoleEpisodes

    ep = RoleEpisodes(
        lambda: flowzoo.make_env("voting-code", n_tasks=2, n_voters=2),
        "aggregator",
        scripted(expert_policy(0.0)),
        n_prompts=2,
    )
    rows = ep.rows()
    key = rows[0]["flowzoo_key"]
    comps = ["\\boxed{1}", "\\boxed{2}", "no idea"]
    first = ep.reward(completions=comps, flowzoo_key=[key] * 3)
    assert first == [1.0, 1.0, 0.0]
    assert ep.reward(completions=comps, flowzoo_key=[key] * 3) == first  # after judged programs


def test_tree_rollout_branches_a_code_env(tiny_policy):
    from flowzoo.agents.train.rollout import tree_rollout

    env = flowzoo.make_env("single-code", n_tasks=2)
    _play(env, oracle_policy)  # the sandbox has judged a program before the copies
    recs = tree_rollout(
        [env],
        lambda role: ("shared", tiny_policy),
        [{"task_index": 0}],
        branch=2,
        rng=random.Random(0),
        seeds=[0],
        max_new_tokens=8,
    )
    assert len(recs) == 2 and {r.task_id for r in recs} == {env.tasks[0].id}
    assert all(len(r.turns) == 1 and r.turns[0].agent == "solver" for r in recs)


# ------------------------------------------------------------------ 2. validation
def _state(env) -> bytes:
    return pickle.dumps(env)


BAD_RESETS = [
    ({"seed": 1.5}, TypeError, "seed=1.5"),
    ({"seed": True}, TypeError, "seed=True"),
    ({"seed": [1]}, TypeError, "seed"),
    ({"seed": "3"}, TypeError, "seed"),
    ({"seed": -1}, ValueError, "seed"),
    ({"options": ["task_id"]}, TypeError, "options"),
    ({"options": {"taskid": "x"}}, ValueError, "taskid"),
    ({"options": {"task_index": "1"}}, TypeError, "task_index='1'"),
    ({"options": {"task_index": True}}, TypeError, "task_index=True"),
    ({"options": {"task_index": 99}}, ValueError, "task_index=99"),
    ({"options": {"task_id": 3}}, TypeError, "task_id=3"),
    ({"options": {"task_id": "nope"}}, ValueError, "nope"),
    ({"options": {"task_id": "a", "task_index": 0}}, ValueError, "one of"),
    ({"options": {"task": "x"}}, TypeError, "Task"),
]


@pytest.mark.parametrize("kw,exc,match", BAD_RESETS)
def test_reset_refuses_bad_input_and_changes_nothing(kw, exc, match):
    env = flowzoo.make_env("voting-math", n_tasks=4)
    env.reset(seed=0)
    env.step(oracle_policy(env, env.agent_selection))
    before = _state(env)
    with pytest.raises(exc, match=match):
        env.reset(**{"seed": None, "options": None, **kw})
    assert _state(env) == before
    view = single_agent(
        flowzoo.make_env("voting-math", n_tasks=4), "aggregator", scripted(oracle_policy)
    )
    view.reset(seed=0)
    before = _state(view.env), str(view.np_random.bit_generator.state)
    with pytest.raises(exc, match=match):
        view.reset(**{"seed": None, "options": None, **kw})
    assert (_state(view.env), str(view.np_random.bit_generator.state)) == before


def test_a_task_of_another_family_is_refused():
    code = flowzoo.make_env("single-code", n_tasks=2)
    env = flowzoo.make_env("single-math", n_tasks=2)
    with pytest.raises(ValueError, match="'code' task"):
        env.reset(options={"task": code.tasks[0]})


@pytest.mark.parametrize(
    "kw,exc",
    [
        ({"n_voters": True}, TypeError),
        ({"n_voters": "3"}, TypeError),
        ({"max_cycles": 2.0}, TypeError),
        ({"max_cycles": "3"}, TypeError),
        ({"max_cycles": 0}, ValueError),
        ({"role_weight": 2}, ValueError),
        ({"overlong_penalty": float("nan")}, ValueError),
        ({"reward_mode": "teams"}, ValueError),
        ({"task_seed": 1.0}, TypeError),
        ({"split": 1}, TypeError),
        ({"dataset": 3}, TypeError),
    ],
)
def test_make_env_refuses_wrong_types_and_ranges_naming_the_option(kw, exc):
    ((name, value),) = kw.items()
    with pytest.raises(exc, match=name):
        flowzoo.make_env("voting-math", **kw)


@pytest.mark.parametrize(
    "kw", [{"sandbox": object()}, {"sandbox": 3}, {"sandbox": "chroot"}, {"early_stop": 1}]
)
def test_unusable_sandbox_and_code_options_fail_at_make_env(kw):
    with pytest.raises((TypeError, ValueError), match=next(iter(kw))):
        flowzoo.make_env("single-code", **kw)


def test_step_and_observe_misuse_give_clear_errors():
    env = flowzoo.make_env("single-math", n_tasks=2)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("x")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="unknown agent"):
        env.observe("nobody")
    before = _state(env)
    with pytest.raises(TypeError, match="must be a str"):
        env.step(3)
    assert _state(env) == before
    env.step("\\boxed{1}")
    with pytest.raises(ValueError, match="only valid action"):
        env.step("again")
    env.step(None)  # PettingZoo's dead step
    with pytest.raises(RuntimeError, match="ended"):
        env.step("x")
    env.close()
    with pytest.raises(RuntimeError, match="close"):
        env.step("x")
    env.reset(seed=0)  # reopens


@pytest.mark.parametrize("action", [True, 1.0, "0", 3, -1, [0, 1]])
def test_choice_views_refuse_actions_outside_their_space(action):
    for view in (
        AggregatorChoiceEnv(scripted(oracle_policy), n_tasks=2),
        EvaluatorChoiceEnv(scripted(oracle_policy), n_tasks=2),
    ):
        view.reset(seed=0)
        before = _state(view.wf)
        with pytest.raises((TypeError, ValueError), match="action"):
            view.step(action)
        assert _state(view.wf) == before


# ------------------------------------------------------------------ 3. end paths
def test_human_render_of_a_lone_surrogate_does_not_raise(capsys):
    env = flowzoo.make_env("voting-math", n_tasks=2, render_mode="human")
    env.reset(seed=0)
    env.step("answer \ud800 \\boxed{1}")
    assert "\\ud800" in capsys.readouterr().out
    assert env.turn_log()[0].action.startswith("answer")


def test_a_long_number_in_a_choice_is_unparsed_and_records_one_turn():
    """A red-team find: thousands of digits in the aggregator's choice raised inside the
    parser after the turn was recorded. Now: the defined fallback, one turn."""
    for text in ("9" * 5000, "\\boxed{" + "7" * 4400 + "}", "Candidate " + "3" * 4500):
        env = flowzoo.make_env("voting-math")
        env.reset(seed=0)
        for _ in range(3):
            env.step("1")
        env.step(text)
        assert "choice_unparsed" in env.infos["aggregator"]["flags"]
        assert len(env.turn_log()) == 4


@pytest.mark.parametrize(
    "kw,err",
    [
        ({"prompt_templates": {"solver": "{}"}}, ValueError),
        ({"prompt_templates": {"solver": "{0} {question}"}}, ValueError),
        ({"prompt_templates": {"solver": "{question.upper}"}}, ValueError),
        ({"prompt_templates": {1: "x", "solver": "y"}}, TypeError),
        ({"prompt_templates": {"solver": b"{question}"}}, TypeError),
        ({"overlong_penalty": 10**400}, ValueError),
        ({"max_cycles": 10**30}, ValueError),
    ],
)
def test_red_team_options_are_refused_at_make_env(kw, err):
    with pytest.raises(err):
        flowzoo.make_env("single-math", **kw)


def test_a_non_string_id_and_a_numpy_seed_through_a_view():
    import numpy as np

    for bad in (None, 3):
        with pytest.raises(TypeError, match="env id"):
            flowzoo.make_env(bad)
    view = single_agent(flowzoo.make_env("voting-math"), "aggregator", scripted(oracle_policy))
    a = view.reset(seed=np.int64(4))[0]
    b = view.reset(seed=4)[0]
    assert a["prompt"] == b["prompt"]


def test_a_removed_agent_sees_no_prompt():
    env = flowzoo.make_env("voting-math")
    env.reset(seed=0)
    for _agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else "1")
    assert not env.agents
    assert all(env.observe(a)["prompt"] == "" for a in env.possible_agents)
