"""Other RL libraries on flowzoo envs: Gymnasium and SB3 checkers, SuperSuit/PettingZoo
wrappers, and a real Stable-Baselines3 PPO run on the Voting aggregator's choice."""

import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import flowzoo
from flowzoo.envs.scripted import expert_policy, oracle_policy
from flowzoo.envs.wrappers import (
    AggregatorChoiceEnv,
    EvaluatorChoiceEnv,
    TokenizedView,
    scripted,
    single_agent,
    step_consistency,
    transcript,
)


@pytest.mark.parametrize(
    "env_id,controlled",
    [
        ("voting-math", "aggregator"),
        ("voting-math", "solver"),
        ("eval-opt-math", "optimizer"),
        ("orch-workers-math", "worker_1"),
        ("voting-code", "aggregator"),
    ],
)
def test_single_agent_view_passes_gymnasium_check(env_id, controlled):
    env = single_agent(flowzoo.make_env(env_id), controlled, scripted(expert_policy(0.3)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)


def test_single_agent_view_plays_a_whole_episode_with_rewards():
    env = single_agent(
        flowzoo.make_env("voting-math"), "solver", {"aggregator": transcript(["\\boxed{2}"])}
    )
    obs, info = env.reset(seed=3)
    gold = env.env.episode.task.answer
    steps, reward, done = 0, 0.0, False
    while not done:
        obs, reward, term, trunc, info = env.step(f"\\boxed{{{gold}}}")
        done = term or trunc
        steps += 1
    assert steps == 3 and reward == 1.0 and info["correct"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("x")
    with pytest.raises(ValueError, match="no policy"):
        single_agent(flowzoo.make_env("voting-math"), "aggregator")
    with pytest.raises(ValueError, match="neither"):
        single_agent(flowzoo.make_env("voting-math"), "judge", oracle_policy)


def test_tokenized_view():
    from flowzoo.tiny.build import build_tokenizer

    tok = build_tokenizer()
    env = TokenizedView(
        single_agent(flowzoo.make_env("voting-math"), "solver", scripted(oracle_policy)),
        tok,
        max_len=64,
        max_action_len=16,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert obs.shape == (64,) and obs.dtype == np.int64 and info["obs_truncated"]
    ids = tok("\\boxed{3}", add_special_tokens=False)["input_ids"]
    env.step(np.array(ids + [tok.pad_token_id] * (16 - len(ids))))
    assert env.unwrapped.env.episode.turns[0].action == "\\boxed{3}"


def test_choice_views_pass_sb3_checker():
    from stable_baselines3.common.env_checker import check_env as sb3_check

    agg = AggregatorChoiceEnv(
        {f"solver_{i}": scripted(expert_policy(0.4, seed=i)) for i in range(3)}
    )
    sb3_check(agg)
    ev = EvaluatorChoiceEnv(scripted(expert_policy(0.4)))
    sb3_check(ev)
    assert step_consistency("2 + 2 = 4. 4 * 3 = 13.") == (0.5, 2)


def test_supersuit_and_pettingzoo_wrappers_that_apply():
    import supersuit as ss
    from pettingzoo.utils import wrappers

    for wrap in (
        wrappers.OrderEnforcingWrapper,
        wrappers.AssertOutOfBoundsWrapper,
        lambda e: ss.clip_reward_v0(e, lower_bound=0, upper_bound=0.5),
        lambda e: ss.reward_lambda_v0(e, lambda r: 2 * r),
        lambda e: ss.sticky_actions_v0(e, 0.25),
    ):
        env = wrap(flowzoo.make_env("voting-math"))
        env.reset(seed=1)
        for agent in env.agent_iter():
            obs, rew, term, trunc, _ = env.last()
            env.step(None if term or trunc else oracle_policy(env.unwrapped, agent))
        assert rew in (0.5, 1.0, 2.0)


def test_sb3_ppo_beats_random_choice():
    from baselines.sb3_aggregator import run

    res = run(timesteps=3000, episodes=400, seed=0)
    # random choice's accuracy is the mean solver accuracy; 400 episodes give a std error < 0.03
    assert res["ppo"] > res["random"] + 0.15, res
