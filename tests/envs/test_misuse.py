"""The env under misuse: copies and pickles after judged programs, inputs refused before any
state changes, and the end paths that used to crash (human rendering of a lone surrogate)."""

from __future__ import annotations

import copy
import pickle
import random
import re

import numpy as np
import pytest

import flowzoo
from flowzoo.envs.scripted import expert_policy, oracle_policy
from flowzoo.envs.wrappers import (
    AggregatorChoiceEnv,
    EvaluatorChoiceEnv,
    SingleAgentEnv,
    TokenizedView,
    scripted,
    single_agent,
)


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


SEEDS = [0, 7, 2**64, 2**70, -1, -(2**70), np.int64(-3), np.uint64(2**63), True, np.bool_(False),
         1.0, 2.5, "3", [1], float("inf")]  # fmt: skip


def _refusal(call) -> type | None:
    try:
        call()
    except (TypeError, ValueError) as e:
        return type(e)
    return None


@pytest.mark.parametrize("seed", SEEDS, ids=repr)
def test_task_seed_takes_exactly_what_reset_takes_as_a_seed(seed):
    """One seed domain (an int >= 0, unbounded): ``make_env(task_seed=...)`` accepts or
    refuses each value as ``reset(seed=...)`` does, with the same exception type."""
    env = flowzoo.make_env("voting-math", n_tasks=2)
    by_reset = _refusal(lambda: env.reset(seed=seed))
    by_option = _refusal(lambda: flowzoo.make_env("voting-math", n_tasks=2, task_seed=seed))
    assert by_option == by_reset
    if by_reset is not None:
        with pytest.raises(by_reset, match="task_seed"):
            flowzoo.make_env("voting-math", n_tasks=2, task_seed=seed)


@pytest.mark.parametrize("family", ["math", "code"])
def test_a_large_or_numpy_task_seed_draws_the_same_problems_as_its_int(family):
    """A seed past 64 bits draws problems (as ``reset`` takes it); a NumPy int is its value."""

    def ids(**kw) -> list[str]:
        return [t.id for t in flowzoo.make_env(f"single-{family}", n_tasks=3, **kw).tasks]

    assert ids(task_seed=np.int64(5)) == ids(task_seed=5)
    big = flowzoo.make_env(f"single-{family}", n_tasks=3, task_seed=2**70)
    big.reset(seed=2**70)
    assert len(big.tasks) == 3
    assert [t.id for t in big.tasks] == ids(task_seed=2**70)


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
    with pytest.raises(RuntimeError, match="ended"):  # docs/envs.md: RuntimeError
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
    out = capsys.readouterr().out  # repaired in the engine, flagged; printed as it encodes
    assert "answer \ufffd" in out or "answer \\ufffd" in out
    assert env.turn_log()[0].action == "answer \ufffd \\boxed{1}"
    assert "surrogate_replaced" in env.infos["solver_0"]["flags"]


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


# ------------------------------------------------------------------ 4. a red team's second pass
def _strict_utf8_view(env_id="voting-math", role="aggregator", others=None, **kw):
    """A TokenizedView whose encoder is Python's strict UTF-8 codec (raises on surrogates)."""
    return TokenizedView(
        single_agent(flowzoo.make_env(env_id, n_tasks=2, **kw), role, others),
        encode=lambda s: list(s.encode("utf-8")),
        decode=lambda ids: bytes(ids).decode("utf-8", "replace"),
        vocab_size=256,
        max_len=4096,
        max_action_len=8,
    )


SURROGATE_TEXTS = [
    ("\ud800", "\ufffd"),
    ("x \udfff y", "x \ufffd y"),
    ("\ud83d\ude00 \\boxed{1}", "\U0001f600 \\boxed{1}"),  # a pair is the emoji it encodes
    ("\ude00\ud83d", "\ufffd\ufffd"),  # a reversed pair is two lone ones
    ("a\x00\udbff", "a\ufffd"),  # with a NUL: both fallbacks, both flagged
    ("\\boxed{1}" + "\ud800" * 9000, "\\boxed{1}" + "\ufffd" * 8183),  # then cut
]


@pytest.mark.parametrize("text,expected", SURROGATE_TEXTS)
def test_surrogates_in_a_completion_are_repaired_and_flagged(text, expected):
    env = flowzoo.make_env("voting-math", n_tasks=2)
    env.reset(seed=0)
    env.step(text)
    (turn,) = env.turn_log()
    assert turn.action == expected and "surrogate_replaced" in turn.flags
    turn.action.encode("utf-8")  # what a tokenizer or a log writer needs
    assert "surrogate_replaced" in env.infos["solver_0"]["flags"]
    later = env.observe(env.agent_selection)["prompt"]
    later.encode("utf-8")


@pytest.mark.parametrize("text,_", SURROGATE_TEXTS)
def test_a_tokenized_view_survives_surrogates_from_partners(text, _):
    view = _strict_utf8_view(others=lambda prompt: text)  # solvers write surrogates
    obs, info = view.reset(seed=0)
    assert view.observation_space.contains(obs) and info["obs_length"] > 0
    obs, r, term, trunc, info = view.step(np.array([ord("1")] + [0] * 7))
    assert term and view.observation_space.contains(obs)
    assert all("surrogate_replaced" in info["flags_by_agent"][f"solver_{i}"] for i in range(3))


@pytest.mark.parametrize("question", ["What is 1 + \ud800 1?", "\udc80\udc81 2 + 2 = ?"])
def test_a_task_holding_surrogates_is_refused_where_it_is_made(question):
    """A statement with a lone UTF-16 surrogate cannot be encoded into any prompt: refused
    when the task is made (in memory as from a file), naming it, never a prompt patched
    later (a model's own surrogates in actions are replaced and flagged, above)."""
    from flowzoo.tasks.base import Task

    with pytest.raises(ValueError, match="sur/0.*lone UTF-16 surrogate"):
        Task(id="sur/0", family="math", question=question, answer="2")


@pytest.mark.parametrize(
    "kw,exc,name",
    [
        ({"max_len": 0}, ValueError, "max_len=0"),
        ({"max_len": -3}, ValueError, "max_len=-3"),
        ({"max_len": True}, TypeError, "max_len=True"),
        ({"max_len": 8.0}, TypeError, "max_len=8.0"),
        ({"max_len": 10**12}, ValueError, "max_len"),
        ({"max_action_len": 0}, ValueError, "max_action_len=0"),
        ({"max_action_len": "4"}, TypeError, "max_action_len='4'"),
        ({"max_action_len": False}, TypeError, "max_action_len=False"),
        ({"pad_id": -5}, ValueError, "pad_id=-5"),
        ({"pad_id": 256}, ValueError, "pad_id=256"),
        ({"pad_id": True}, TypeError, "pad_id=True"),
        ({"pad_id": 1.0}, TypeError, "pad_id=1.0"),
        ({"vocab_size": 0}, ValueError, "vocab_size=0"),
        ({"vocab_size": True}, TypeError, "vocab_size=True"),
        ({"vocab_size": "256"}, TypeError, "vocab_size='256'"),
        ({"vocab_size": None}, ValueError, "vocab_size"),
        ({"encode": 3}, TypeError, "encode=3"),
        ({"decode": "utf-8"}, TypeError, "decode='utf-8'"),
        ({"encode": None}, ValueError, "encode"),
        ({"tokenizer": "gpt2"}, TypeError, "tokenizer='gpt2'"),
    ],
)
def test_tokenized_view_refuses_bad_constructor_args_by_name(kw, exc, name):
    args = {
        "encode": lambda s: list(s.encode("utf-8")),
        "decode": lambda ids: bytes(ids).decode("utf-8", "replace"),
        "vocab_size": 256,
        **kw,
    }
    inner = single_agent(flowzoo.make_env("single-math", n_tasks=2), "solver")
    with pytest.raises(exc, match=re.escape(name)):
        TokenizedView(inner, **args)


@pytest.mark.parametrize("env", [None, 3, "voting-math", "aec"])
def test_tokenized_view_needs_a_text_env(env):
    if env == "aec":
        env = flowzoo.make_env("single-math")  # the AEC env itself is not a Gymnasium env
    with pytest.raises(TypeError, match="env="):
        TokenizedView(env, encode=list, decode=str, vocab_size=256)


def test_tokenized_view_normalises_numpy_args_and_checks_its_encoder():
    inner = single_agent(flowzoo.make_env("single-math", n_tasks=2), "solver")
    view = TokenizedView(
        inner, encode=lambda s: [1, 2], decode=str, vocab_size=np.int64(8), max_len=np.int32(4)
    )
    assert type(view.max_len) is int and type(view.vocab_size) is int
    obs, _ = view.reset(seed=0)
    assert obs.tolist() == [1, 2, 0, 0]
    for bad in ([8], [-1], [True], [1.5], [[1, 2]]):
        view = TokenizedView(inner, encode=lambda s, b=bad: b, decode=str, vocab_size=8)
        with pytest.raises(ValueError, match="encode returned"):
            view.reset(seed=0)


def test_tokenized_view_with_a_real_tokenizer_takes_its_pad_unless_told():
    from flowzoo.tiny.build import build_tokenizer

    tok = build_tokenizer()
    inner = single_agent(flowzoo.make_env("single-math", n_tasks=2), "solver")
    view = TokenizedView(inner, tok, max_len=32, max_action_len=4)
    assert view.vocab_size == len(tok) and view.pad_id == (tok.pad_token_id or 0)
    assert TokenizedView(inner, tok, pad_id=1).pad_id == 1  # an explicit pad is never overridden
    with pytest.raises(ValueError, match="vocab_size"):
        TokenizedView(inner, tok, vocab_size=len(tok) - 1)
    view.reset(seed=0)
    view.step(np.zeros(4, dtype=np.int64))


@pytest.mark.parametrize(
    "args,exc,match",
    [
        (("solver", 5), TypeError, "others=5"),
        (("solver", "oracle"), TypeError, "others='oracle'"),
        (("solver", [oracle_policy]), TypeError, "others="),
        (("aggregator", {"solver": 5}), TypeError, "others\\['solver'\\]=5"),
        (("aggregator", {"judge": print}), ValueError, "'judge'"),
        (("aggregator", {3: print}), ValueError, "key 3"),
        (("aggregator", {"aggregator": print, "solver": print}), ValueError, "'aggregator'"),
        (("aggregator", {"solver_0": print}), ValueError, "solver_1"),  # two solvers unplayed
        ((5, print), TypeError, "controlled=5"),
        ((["aggregator"], print), TypeError, "controlled="),
        (("judge", print), ValueError, "'judge'"),
    ],
)
def test_single_agent_checks_every_argument_at_construction(args, exc, match):
    env = flowzoo.make_env("voting-math", n_tasks=2)
    with pytest.raises(exc, match=match):
        single_agent(env, *args)
    with pytest.raises(exc, match=match):
        SingleAgentEnv(env, *args)


@pytest.mark.parametrize("env", [None, "voting-math", 3])
def test_single_agent_needs_a_workflow_env(env):
    with pytest.raises(TypeError, match="env="):
        single_agent(env, "aggregator", print)
    wrapped = flowzoo.env("voting-math")  # PettingZoo's wrapper: the message says what to pass
    with pytest.raises(TypeError, match="unwrapped"):
        single_agent(wrapped, "aggregator", print)


@pytest.mark.parametrize("mode", ["answer", "Select", 1, None, True])
def test_aggregator_choice_view_refuses_another_aggregator_mode(mode):
    with pytest.raises(ValueError, match=f"aggregator_mode={mode!r}"):
        AggregatorChoiceEnv(scripted(oracle_policy), aggregator_mode=mode)


def test_aggregator_choice_view_accepts_select_and_checks_its_arguments():
    view = AggregatorChoiceEnv(scripted(oracle_policy), aggregator_mode="select", n_tasks=2)
    view.reset(seed=0)
    assert view.step(0)[2]
    for bad, exc in ((5, TypeError), ("oracle", TypeError), ({"judge": print}, ValueError)):
        with pytest.raises(exc, match="solvers|judge"):
            AggregatorChoiceEnv(bad, n_tasks=2)
    for bad, exc in ((5, TypeError), ({"optimizer": print}, TypeError)):
        with pytest.raises(exc, match="optimizer="):
            EvaluatorChoiceEnv(bad, n_tasks=2)
    with pytest.raises(ValueError, match="voting-math"):
        AggregatorChoiceEnv(print, "eval-opt-math")
    with pytest.raises(ValueError, match="eval-opt-math"):
        EvaluatorChoiceEnv(print, "voting-math")
    with pytest.raises(ValueError, match="unknown env id"):
        EvaluatorChoiceEnv(print, "eval-opt-mth")


@pytest.mark.parametrize("env_id", ["single-math", "voting-math", "eval-opt-math"])
@pytest.mark.parametrize("end", ["terminated", "truncated"])
@pytest.mark.parametrize("action", ["x", "", b"x", 3, [1]])
def test_step_after_the_end_is_a_runtime_error_and_changes_nothing(env_id, end, action):
    if end == "truncated" and env_id == "single-math":
        pytest.skip("one turn always finishes")
    env = flowzoo.make_env(env_id, n_tasks=2, **({"max_cycles": 1} if end == "truncated" else {}))
    env.reset(seed=0)
    while not env.episode_over():
        env.step(oracle_policy(env, env.agent_selection))
    agent = env.agent_selection
    assert (env.terminations if end == "terminated" else env.truncations)[agent]
    before = _state(env)
    with pytest.raises(RuntimeError, match="ended"):
        env.step(action)
    assert _state(env) == before
    while env.agents:
        env.step(None)
    with pytest.raises(RuntimeError, match="ended"):
        env.step(action)


@pytest.mark.parametrize("when", ["before_reset", "after_close"])
def test_last_and_agent_iter_give_the_documented_errors(when):
    env = flowzoo.make_env("voting-math", n_tasks=2)
    if when == "after_close":
        env.reset(seed=0)
        env.close()
    match = "before reset" if when == "before_reset" else "close"
    for call in (env.last, lambda: env.last(observe=False), env.agent_iter):
        with pytest.raises(RuntimeError, match=match):
            call()


@pytest.mark.parametrize("agent", ["nobody", "solver", "", 3, None, ("solver_0",)])
def test_every_per_agent_entry_names_the_valid_agents(agent):
    env = flowzoo.make_env("voting-math", n_tasks=2)
    env.reset(seed=0)
    for call in (env.action_space, env.observation_space, env.observe, env.role_of):
        with pytest.raises(ValueError, match="valid: solver_0, solver_1, solver_2, aggregator"):
            call(agent)


@pytest.mark.parametrize("bad", [np.array([[1]]), np.array([[[0]]]), np.zeros((1, 1), dtype=int)])
def test_a_choice_view_refuses_an_array_of_another_shape(bad):
    """Only a scalar, a 0-d or a (1,)-shaped integer array is a choice; (1, 1) is not
    flattened into one."""
    from gymnasium import spaces

    from flowzoo.envs.wrappers.choice import check_choice

    assert check_choice(spaces.Discrete(3), np.array([2]), "view") == 2
    assert check_choice(spaces.Discrete(3), np.array(1), "view") == 1
    with pytest.raises(TypeError, match="must be an int"):
        check_choice(spaces.Discrete(3), bad, "view")
