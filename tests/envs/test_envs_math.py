import warnings

import numpy as np
import pettingzoo
import pytest
from pettingzoo.test import api_test, seed_test

import flowzoo
from flowzoo.envs.scripted import (
    expert_policy,
    garbage_policy,
    oracle_policy,
    play_episode,
    wrong_policy,
)

#: every registered math env (a new workflow is tested here without touching this file)
MATH_ENVS = [e for e in flowzoo.list_envs() if e.endswith("-math")]


def test_list_envs():
    assert set(flowzoo.list_envs()) == {
        f"{w}-{t}"
        for w in ("eval-opt", "voting", "orch-workers", "single")
        for t in ("math", "code")
    }


@pytest.mark.parametrize("env_id", MATH_ENVS)
def test_pettingzoo_api_test(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(flowzoo.make_env(env_id), num_cycles=300)


@pytest.mark.parametrize("env_id", MATH_ENVS)
def test_pettingzoo_seed_test(env_id):
    seed_test(lambda: flowzoo.make_env(env_id), num_cycles=50)


@pytest.mark.parametrize("env_id", MATH_ENVS)
def test_max_cycles_truncates(env_id):
    env = flowzoo.make_env(env_id, max_cycles=2)
    env.reset(seed=0)
    counts = dict.fromkeys(env.possible_agents, 0)
    steps = 0
    for agent in env.agent_iter(100):
        obs, rew, term, trunc, info = env.last()
        counts[agent] += 1
        if term or trunc:
            if env.workflow.max_turns() > 2:
                assert trunc and not term
                assert rew == 0.0
                assert "max_cycles" in info["flags"]
            env.step(None)
            continue
        steps += 1
        env.step(wrong_policy(env, agent))
    assert steps == min(2, env.workflow.max_turns())
    assert env.agents == []


def test_registered_with_pettingzoo():
    env = pettingzoo.make("aec", "flowzoo/voting-math-v0", n_voters=2)
    env.reset(seed=0)
    assert env.possible_agents == ["solver_0", "solver_1", "aggregator"]
    assert flowzoo.make_env("flowzoo/voting-math-v0").possible_agents[-1] == "aggregator"


def test_unknown_id_and_option_name_valid_choices():
    with pytest.raises(ValueError, match="voting-math"):
        flowzoo.make_env("voting-chess")
    with pytest.raises(ValueError, match="n_voters"):
        flowzoo.make_env("voting-math", n_voter=3)
    with pytest.raises(ValueError, match="select"):
        flowzoo.make_env("voting-math", aggregator_mode="pick")
    with pytest.raises(ValueError, match="strategies"):
        flowzoo.make_env("orch-workers-math", mode="plan")
    with pytest.raises(ValueError, match="team"):
        flowzoo.make_env("eval-opt-math", reward_mode="dense")
    with pytest.raises(ValueError, match="unknown roles"):
        flowzoo.make_env("voting-math", prompt_templates={"judge": "x"})
    with pytest.raises(ValueError, match="unknown fields"):
        flowzoo.make_env("voting-math", prompt_templates={"solver": "{question} {draft}"})


@pytest.mark.parametrize("env_id", MATH_ENVS)
def test_oracle_wrong_and_garbage_rewards(env_id):
    env = flowzoo.make_env(env_id)
    for seed in range(5):
        res = play_episode(env, oracle_policy, seed=seed)
        assert res["correct"] and set(res["rewards"].values()) == {1.0}
        res = play_episode(env, wrong_policy, seed=seed)
        assert not res["correct"] and set(res["rewards"].values()) == {0.0}
    for seed in range(20):
        res = play_episode(env, garbage_policy(seed), seed=seed)
        assert set(res["rewards"].values()) == {0.0}
        assert res["correct"] is False


@pytest.mark.parametrize("env_id", MATH_ENVS)
def test_garbage_outputs_are_flagged_never_raise(env_id):
    env = flowzoo.make_env(env_id)
    flags = set()
    for seed in range(30):
        res = play_episode(env, garbage_policy(seed), seed=seed)
        for fl in res["flags_by_agent"].values():
            flags |= set(fl)
    assert "empty_action" in flags and "action_truncated" in flags
    if env_id.startswith("voting"):
        assert "choice_unparsed" in flags
    if env_id.startswith("eval-opt"):
        assert "verdict_unparsed" in flags
    if env_id.startswith("orch"):
        assert "plan_unparsed" in flags


def test_non_text_actions():
    env = flowzoo.make_env("voting-math")
    env.reset(seed=0)
    env.step(b"\\boxed{3}\xff")
    assert "bytes_action" in env.episode.turns[-1].flags
    with pytest.raises(TypeError, match="must be a str"):
        env.step(12)


def _turn_order(env_id, policy, **kw):
    env = flowzoo.make_env(env_id, **kw)
    play_episode(env, policy, seed=1)
    return [t.agent for t in env.episode.turns]


def test_turn_orders():
    assert _turn_order("voting-math", oracle_policy) == [
        "solver_0",
        "solver_1",
        "solver_2",
        "aggregator",
    ]
    assert _turn_order("voting-math", oracle_policy, n_voters=5)[-2:] == ["solver_4", "aggregator"]
    assert _turn_order("orch-workers-math", oracle_policy) == [
        "orchestrator",
        "worker_0",
        "worker_1",
        "worker_2",
        "synthesizer",
    ]
    # Eval-Opt stops at ACCEPT ...
    assert _turn_order("eval-opt-math", oracle_policy) == ["optimizer", "evaluator"]
    # ... and otherwise after max_rounds evaluator turns
    assert _turn_order("eval-opt-math", wrong_policy) == ["optimizer", "evaluator"] * 3
    assert _turn_order("eval-opt-math", wrong_policy, max_rounds=1) == ["optimizer", "evaluator"]


def test_eval_opt_revision_sees_feedback_and_draft():
    env = flowzoo.make_env("eval-opt-math")
    env.reset(seed=3)
    env.step("my draft \\boxed{1}")
    assert "my draft" in env.observe("evaluator")["prompt"]
    env.step("Verdict: REVISE\nFeedback: carry the one")
    p = env.observe("optimizer")["prompt"]
    assert "carry the one" in p and "my draft" in p


def test_eval_opt_recovers_from_wrong_first_draft():
    env = flowzoo.make_env("eval-opt-math")
    fam = env.family
    env.reset(seed=5)
    task = env.episode.task
    env.step(fam.wrong_completion(task))
    env.step("verdict: **incorrect** - redo")
    env.step(fam.reference_completion(task))
    env.step("Verdict: CORRECT")
    assert all(env.terminations.values())
    info = env.infos["optimizer"]
    assert info["correct"] and info["rounds"] == 2 and info["draft_correct"] == [False, True]
    assert info["evaluator_accuracy"] == 1.0


def _voting_policy(answers, choice):
    def pol(env, agent):
        if agent == "aggregator":
            return f"\\boxed{{{choice}}}"
        return f"\\boxed{{{answers[int(agent[-1])]}}}"

    return pol


def test_majority_vote_bookkeeping():
    env = flowzoo.make_env("voting-math")
    env.reset(seed=2)
    gold = env.episode.task.answer
    wrong = gold + "1"
    # solvers 1 and 2 are right, the aggregator picks the wrong solver 0
    res = play_episode(env, _voting_policy([wrong, gold, gold], 1), seed=2)
    assert res["solver_correct"] == {"solver_0": False, "solver_1": True, "solver_2": True}
    assert res["majority_correct"] and res["any_correct"] and not res["correct"]
    assert res["selected_index"] == 0 and res["majority_index"] == 1
    # majority wrong, aggregator picks the lone right answer
    res = play_episode(env, _voting_policy([wrong, wrong, gold], 3), seed=2)
    assert not res["majority_correct"] and res["correct"]
    assert res["n_distinct_answers"] == 2


def test_voting_fallbacks_and_answer_mode():
    def pol(env, agent):
        return (
            "no idea"
            if agent == "aggregator"
            else env.family.reference_completion(env.episode.task)
        )

    assert play_episode(flowzoo.make_env("voting-math"), pol, seed=0)["correct"] is False
    res = play_episode(flowzoo.make_env("voting-math", aggregator_fallback="majority"), pol, seed=0)
    assert res["correct"] and res["choice_parsed"] is False
    env = flowzoo.make_env("voting-math", aggregator_mode="answer")
    assert play_episode(env, oracle_policy, seed=0)["correct"]
    assert "give the final answer" in env.episode.turns[-1].prompt


def test_orch_plan_fallbacks_and_decompose():
    env = flowzoo.make_env("orch-workers-math")
    env.reset(seed=0)
    env.step("I refuse to plan")
    assert "Solve the problem directly." in env.observe("worker_0")["prompt"]
    env.reset(seed=0)
    env.step("1. add first\n1. add first")
    assert "plan_short" in env.episode.turns[0].flags
    assert "add first" in env.observe("worker_0")["prompt"]
    env = flowzoo.make_env("orch-workers-math", mode="decompose", n_workers=2)
    res = play_episode(env, oracle_policy, seed=0)
    assert res["correct"] and "Sub-question" in env.episode.turns[1].prompt


def test_role_reward_mode():
    env = flowzoo.make_env("voting-math", reward_mode="role", role_weight=0.5)
    env.reset(seed=2)
    gold = env.episode.task.answer
    res = play_episode(env, _voting_policy([gold + "1", gold, gold], 2), seed=2)
    assert res["rewards"]["solver_0"] == 0.5  # team 1, own answer wrong
    assert res["rewards"]["solver_1"] == 1.0
    assert res["by_agent"]["solver_0"]["team_reward"] == 1.0


def test_reset_options_pick_the_task_and_seed_is_reproducible():
    env = flowzoo.make_env("voting-math", split="test", n_tasks=50)
    tid = env.tasks[7].id
    env.reset(options={"task_id": tid})
    assert env.episode.task.id == tid and env.infos["solver_0"]["task_id"] == tid
    env.reset(seed=11)
    a = env.episode.task.id
    env.reset(seed=11)
    assert env.episode.task.id == a
    with pytest.raises(KeyError):
        env.reset(options={"task_id": "nope"})


def test_observations_are_in_space_and_unicode_ok():
    env = flowzoo.make_env("voting-math")
    env.reset(seed=0)
    env.step("Lösung: ∑ 🙂 \\boxed{3}")
    obs = env.observe("solver_1")
    assert env.observation_space("solver_1").contains(obs)
    assert isinstance(obs["turn"], np.integer) and obs["turn"] == 1
    assert env.observe("solver_0")["prompt"] == ""  # not its turn


def test_render_transcript(capsys):
    env = flowzoo.make_env("eval-opt-math", render_mode="ansi")
    play_episode(env, expert_policy(0.0), seed=0)
    text = env.render()
    assert "optimizer" in text and "final answer" in text
    env = flowzoo.make_env("eval-opt-math", render_mode="human")
    play_episode(env, expert_policy(0.0), seed=0)
    assert "evaluator" in capsys.readouterr().out


def test_noisy_experts_are_imperfect():
    env = flowzoo.make_env("voting-math")
    acc = np.mean(
        [play_episode(env, expert_policy(0.4, seed=s), seed=s)["correct"] for s in range(60)]
    )
    assert 0.3 < acc < 1.0
