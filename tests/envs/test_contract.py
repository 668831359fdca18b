"""The environment contract on every env id x every view the docs list x every end path, and
under the ecosystem's own checkers (PettingZoo api_test/seed_test, Gymnasium and SB3
check_env). Math envs run with scripted experts; code envs with few episodes on the real
process sandbox."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import flowzoo
from flowzoo.envs.core import FINAL_INFO_KEYS
from flowzoo.envs.scripted import expert_policy
from flowzoo.envs.wrappers import (
    AggregatorChoiceEnv,
    EvaluatorChoiceEnv,
    TokenizedView,
    scripted,
    single_agent,
)

IDS = flowzoo.list_envs()
BUILTIN = [
    i for i in IDS if i.rsplit("-", 1)[0] in ("eval-opt", "voting", "orch-workers", "single")
]
#: the role that acts first and the one that acts last in each built-in workflow
FIRST = {"eval-opt": "optimizer", "voting": "solver", "orch-workers": "orchestrator"}
LAST = {"eval-opt": "evaluator", "voting": "aggregator", "orch-workers": "synthesizer"}


def _opts(env_id: str, **kw):
    """Small envs: few problems, and for code the real process sandbox."""
    return {"n_tasks": 3, **kw}


def _workflow(env_id: str) -> str:
    return env_id.rsplit("-", 1)[0]


def _others():
    return scripted(expert_policy(0.2, seed=1))


def _tok_view(env):
    return TokenizedView(
        env,
        encode=lambda s: [min(ord(c), 255) for c in s],
        decode=lambda ids: "".join(chr(i) for i in ids),
        vocab_size=256,
        max_len=64,
        max_action_len=8,
    )


def _play_aec(env, seed=0):
    pol = expert_policy(0.2, seed=seed)
    env.reset(seed=seed)
    for agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else pol(env, agent))


def _final_ok(info: dict, role: str):
    missing = [k for k in FINAL_INFO_KEYS if k not in info]
    assert not missing, f"final info of {role} lacks {missing}"
    assert info["role"] == role
    assert isinstance(info["turn_rewards"], list)
    assert all(isinstance(v, list) for v in info["flags_by_agent"].values())


# ------------------------------------------------------------------------- the raw AEC env
@pytest.mark.parametrize("env_id", BUILTIN)
@pytest.mark.parametrize("path", ["terminated", "truncated"])
def test_aec_end_paths_give_every_agent_its_final_keys(env_id, path):
    if path == "truncated" and _workflow(env_id) == "single":
        pytest.skip("one turn: single-* always finishes before max_cycles")
    kw = {"max_cycles": 1} if path == "truncated" else {}
    env = flowzoo.make_env(env_id, **_opts(env_id, **kw))
    _play_aec(env)
    last_infos = {}
    env.reset(seed=0)
    pol = expert_policy(0.2)
    for agent in env.agent_iter():
        _, _, term, trunc, info = env.last()
        if term or trunc:
            last_infos[agent] = dict(info)
            assert (path == "truncated") == bool(trunc) and (path == "terminated") == bool(term)
        env.step(None if term or trunc else pol(env, agent))
    assert set(last_infos) == set(env.possible_agents)
    for agent, info in last_infos.items():
        _final_ok(info, env.role_of(agent))
        assert len(info["turn_rewards"]) == info["turn"]
        if path == "truncated":
            assert info["team_reward"] == 0.0 and "max_cycles" in info["flags"]


@pytest.mark.parametrize("env_id", IDS)
def test_pettingzoo_api_and_seed_tests(env_id):
    from pettingzoo.test import api_test, seed_test

    n = 20 if env_id.endswith("-math") else 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(flowzoo.make_env(env_id, **_opts(env_id)), num_cycles=n)
        seed_test(lambda: flowzoo.make_env(env_id, **_opts(env_id)), num_cycles=n)


# ------------------------------------------------------------------------- Gymnasium views
def _views(env_id: str, controlled: str, **kw):
    """Every view the docs list that applies to ``env_id``: (name, env, controlled role)."""
    out = [
        ("single_agent", single_agent(flowzoo.make_env(env_id, **kw), controlled, _others())),
        (
            "tokenized",
            _tok_view(single_agent(flowzoo.make_env(env_id, **kw), controlled, _others())),
        ),
    ]
    wf, fam = env_id.rsplit("-", 1)
    if fam == "math" and wf == "voting" and controlled == "aggregator":
        out.append(("aggregator_choice", AggregatorChoiceEnv(_others(), env_id, **kw)))
    if fam == "math" and wf == "eval-opt" and controlled == "evaluator":
        out.append(("evaluator_choice", EvaluatorChoiceEnv(_others(), env_id, **kw)))
    return out


def _sample(view, rng):
    space = view.action_space
    if isinstance(space, flowzoo.envs.spaces.UnicodeText):
        return "\\boxed{1}"
    return space.sample()


def _run_to_end(view, seed=0):
    obs, info = view.reset(seed=seed)
    assert view.observation_space.contains(obs)
    rng = np.random.default_rng(seed)
    for _ in range(50):
        obs, r, term, trunc, info = view.step(_sample(view, rng))
        assert view.observation_space.contains(obs)
        if term or trunc:
            return r, term, trunc, info
    raise AssertionError("the episode never ended")


def _last_role(env_id):
    return LAST.get(_workflow(env_id), "solver")


@pytest.mark.parametrize("env_id", BUILTIN)
@pytest.mark.parametrize("path", ["terminated", "truncated", "never_acts"])
def test_views_end_with_the_controlled_agents_final_info(env_id, path):
    wf = _workflow(env_id)
    if wf == "single" and path != "terminated":
        pytest.skip("the single solver acts first and its one turn ends the episode")
    if path == "terminated":
        role, kw = _last_role(env_id), {}
    elif path == "truncated":  # the first role acts, then max_cycles ends the episode
        role, kw = FIRST[wf], {"max_cycles": 1}
    else:  # max_cycles ends it before the last role ever acts
        role, kw = LAST[wf], {"max_cycles": 1}
    for name, view in _views(env_id, role, **_opts(env_id, **kw)):
        obs, info = view.reset(seed=0)
        if path == "never_acts":
            assert info["ended_before_acting"] and info["role"] == role, name
            _final_ok(info, role)
        r, term, trunc, info = _run_to_end(view)
        assert (term, trunc) == (path == "terminated", path != "terminated"), name
        _final_ok(info, role)
        with pytest.raises(RuntimeError, match="ended"):
            view.step(_sample(view, None))


@pytest.mark.parametrize("env_id", BUILTIN)
def test_gymnasium_and_sb3_checkers_pass_on_every_view(env_id):
    from gymnasium.utils.env_checker import check_env as gym_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    for name, view in _views(env_id, _last_role(env_id), **_opts(env_id)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gym_check(view, skip_render_check=True)
            if name != "single_agent":  # docs/integrations.md: text observations are not arrays
                sb3_check(view, warn=False)


def test_sb3_refuses_the_text_view_as_the_docs_say():
    from stable_baselines3.common.env_checker import check_env as sb3_check

    view = single_agent(flowzoo.make_env("voting-math", n_tasks=3), "aggregator", _others())
    with pytest.raises(AssertionError, match="numpy array"):
        sb3_check(view, warn=False)


def test_docs_integrations_table_matches_the_matrix():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "integrations.md").read_text()
    row = next(line for line in text.splitlines() if "SB3 `check_env`" in line)
    assert "choice views" in row and "TokenizedView" in row
    assert "single_agent" not in row.split("|")[2]  # SB3 is not claimed on the text view


# ------------------------------------------------------------------------- misuse, every id
@pytest.mark.parametrize("env_id", IDS)
def test_every_id_gives_the_documented_errors_and_repairs_surrogates(env_id):
    env = flowzoo.make_env(env_id, **_opts(env_id, max_cycles=1))
    with pytest.raises(RuntimeError, match="before reset"):
        env.last()
    for call in (env.action_space, env.observation_space, env.observe):
        with pytest.raises(ValueError, match="unknown agent"):
            call("nobody")
    env.reset(seed=0)
    first = env.agent_selection
    env.step("lone \ud800 and paired \ud83d\ude00")
    (turn,) = env.turn_log()
    assert turn.action == "lone \ufffd and paired \U0001f600"
    assert "surrogate_replaced" in env.infos[first]["flags"]
    if _workflow(env_id) != "single":  # max_cycles=1 truncated it: no program was judged
        assert env.truncations[env.agent_selection]
        with pytest.raises(RuntimeError, match="ended"):
            env.step("x")
        assert len(env.turn_log()) == 1
