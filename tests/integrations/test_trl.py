"""TRL's GRPOTrainer on one role of a workflow, the other roles played by given policies."""

import pytest

import flowzoo
from flowzoo.envs.scripted import expert_policy, oracle_policy
from flowzoo.envs.wrappers import scripted

# ------------------------------------------------------------------------------ TRL


def _aggregator_episodes(n=6, error=0.5):
    from flowzoo.integrations.trl_adapter import RoleEpisodes

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
    from flowzoo.integrations.trl_adapter import RoleEpisodes

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


def test_trl_tool_env_offers_the_roles_tools_as_methods():
    """An env made with tools gives the TRL tool env a method per tool of the controlled
    role, with the schema TRL reads from it (transformers' get_json_schema); each call runs
    in the env's sandbox as the env's own call text and returns its result; a call past the
    turn's budget is the turn's message, as in the env; a role without tools gets none."""
    from transformers.utils import get_json_schema

    from flowzoo.integrations.trl_adapter import FlowzooToolEnv, RoleEpisodes, tool_env_class

    ep = RoleEpisodes(
        lambda: flowzoo.make_env("eval-opt-math", tools=["python"], max_tool_calls=2),
        "optimizer",
        scripted(oracle_policy),
        n_prompts=1,
    )
    env = ep.environment_factory()
    assert ep.tools == ("python",) and type(env) is tool_env_class(("python",))
    schema = get_json_schema(type(env).python)["function"]
    assert schema["name"] == "python" and schema["parameters"]["required"] == ["program"]
    env.reset()
    assert env.python("print(6 * 7)").splitlines()[0] == "status: ok"
    assert "42" in env.python("print(6 * 7)") and not env.done and not env.submitted
    # the third call of a two-call budget is the turn's message: the evaluator answers next
    assert "status:" not in env.python("print(1)") and not env.done
    assert env.get_reward() == 0.0
    code = RoleEpisodes(
        lambda: flowzoo.make_env("single-code", dataset="stdio", tools=["run"]),
        "solver",
        None,
        n_prompts=1,
    )
    cenv = code.environment_factory()
    cenv.reset()
    out = cenv.run("import sys\nprint(sum(map(int, sys.stdin.read().split())))")
    assert out.startswith("status: ok") and "exit: 0" in out
    assert cenv.run("print(1)", examples=[99]).startswith("status: refused")
    none = RoleEpisodes(
        lambda: flowzoo.make_env("eval-opt-math", tools=["python"], tool_roles=["evaluator"]),
        "optimizer",
        scripted(oracle_policy),
        n_prompts=1,
    )
    assert none.tools == () and type(none.environment_factory()) is FlowzooToolEnv


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
