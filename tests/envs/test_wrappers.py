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
    from flowzoo.agents.tiny import build_tokenizer

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


# ------------------------------------------------------------------------------ TRL


def _aggregator_episodes(n=6, error=0.5):
    from flowzoo.envs.wrappers.trl_adapter import RoleEpisodes

    return RoleEpisodes(
        lambda: flowzoo.make_env("voting-math"),
        "aggregator",
        scripted(expert_policy(error)),
        n_prompts=n,
    )


def test_trl_role_episodes_score_completions_with_the_verifier():
    ep = _aggregator_episodes()
    rows = ep.rows()
    assert len(rows) == 6 and all("Role: aggregator" in r["prompt"] for r in rows)
    key = rows[0]["flowzoo_key"]
    comps = ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}", "no idea"]
    rewards = ep.reward(prompts=[rows[0]["prompt"]] * 4, completions=comps, flowzoo_key=[key] * 4)
    solver_ok = ep.last_infos[0]["solver_correct"]
    expected = [float(solver_ok[f"solver_{i}"]) for i in range(3)] + [0.0]
    assert rewards == expected
    assert [i["selected_index"] for i in ep.last_infos] == [0, 1, 2, None]
    assert "choice_unparsed" in ep.last_infos[3]["flags"]
    # the stored state is not consumed: scoring again gives the same rewards
    assert ep.reward(completions=comps, flowzoo_key=[key] * 4) == expected
    # conversational completions are read too
    conv = [[{"role": "assistant", "content": c}] for c in comps]
    assert ep.reward(completions=conv, flowzoo_key=[key] * 4) == expected
    with pytest.raises(KeyError, match="unknown flowzoo_key"):
        ep.reward(completions=["x"], flowzoo_key=["nope"])
    with pytest.raises(ValueError, match="flowzoo_key"):
        ep.reward(completions=["x"])


def test_trl_multi_turn_role_and_tool_env():
    from flowzoo.envs.wrappers.trl_adapter import RoleEpisodes

    ep = RoleEpisodes(
        lambda: flowzoo.make_env("eval-opt-math"), "optimizer", scripted(oracle_policy), n_prompts=2
    )
    key = ep.rows()[0]["flowzoo_key"]
    gold = ep.tasks[0].answer
    rewards = ep.reward(
        completions=[f"\\boxed{{{gold}}}", "\\boxed{-99999}"], flowzoo_key=[key] * 2
    )
    assert rewards == [1.0, 0.0]
    # a wrong draft is resubmitted for every evaluator round (later_turns=None)
    assert [i["rounds"] for i in ep.last_infos] == [1, 3]
    seen = []
    ep2 = RoleEpisodes(
        lambda: flowzoo.make_env("eval-opt-math"),
        "optimizer",
        scripted(oracle_policy),
        n_prompts=1,
        later_turns=lambda p: seen.append(p) or f"\\boxed{{{gold}}}",
    )
    k2 = ep2.rows()[0]["flowzoo_key"]
    assert ep2.reward(completions=["\\boxed{-99999}"], flowzoo_key=[k2]) == [1.0]
    assert len(seen) == 1 and "Feedback" in seen[0]
    # the tool-calling environment: reset -> prompt, submit -> feedback, get_reward
    env = ep.environment_factory()
    prompt = env.reset(flowzoo_key=key)
    assert "Role: optimizer" in prompt and env.get_reward() == 0.0
    feedback = env.submit("\\boxed{-99999}")
    assert "Feedback" in feedback and not env.done
    env.submit(f"\\boxed{{{gold}}}")
    env.submit(f"\\boxed{{{gold}}}")
    assert env.done and env.get_reward() == 1.0
    assert "over" in env.submit("again")
    fresh = ep.environment_factory()
    fresh.reset()
    assert fresh.get_reward() == 0.0 and not fresh.submitted


def test_trl_grpo_trainer_trains_the_aggregator(tiny_model):
    """A real TRL GRPOTrainer run: the rewards it logs are the workflow verifier's."""
    pytest.importorskip("trl")
    import os

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ep = _aggregator_episodes(n=8)
    calls = []

    def reward(**kw):
        out = ep.reward(**kw)
        calls.append((list(kw["flowzoo_key"]), out, [i["correct"] for i in ep.last_infos]))
        return out

    cfg = GRPOConfig(
        output_dir=str(tiny_model.parent / "trl-out"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=32,
        max_steps=2,
        learning_rate=1e-3,
        temperature=1.0,
        report_to="none",
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=cfg, train_dataset=ep.dataset(), processing_class=tok
    )
    trainer.train()
    assert len(calls) == 2
    for keys, rewards, correct in calls:
        assert len(keys) == 8 and rewards == [float(c) for c in correct]
    logged = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert logged == pytest.approx([sum(r) / len(r) for _, r, _ in calls])
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
