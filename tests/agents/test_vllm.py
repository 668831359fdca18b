# ruff: noqa: E402
"""The vLLM generation backend, for real: a vLLM engine (in-process where ``vllm`` imports,
else a worker in the environment ``$FLOWZOO_VLLM_PYTHON`` names; `.ci/run` builds one) serves
the tiny model; after several updates its log-probs must match the trained model's, which
proves the weight sync. Skipped with the reason where no vLLM is available."""

import pytest

torch = pytest.importorskip("torch")  # these tests train: they skip cleanly without torch

from flowzoo.agents.backends import BackendUnavailable, vllm_unavailable_reason
from flowzoo.agents.trainer import TrainConfig, Trainer
from tests.agents.test_agents import _cfg, _varied_rewards

WHY = vllm_unavailable_reason()
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

PROMPTS = [
    "Problem: What is 4 + 3?\nRole: solver. Solve it. End with the final answer as \\boxed{ANSWER}.\n",
    "Problem: Compute 3 * 2 - 1.\nRole: solver. Solve it. End with the final answer as \\boxed{ANSWER}.\n",
]


def _matches(pol, gens, temperature):
    lps = pol.logprobs(
        [g.prompt_ids for g in gens], [g.completion_ids for g in gens], temperature=temperature
    )
    return [
        float((torch.tensor(g.logprobs) - lp.detach()).abs().max())
        for g, lp in zip(gens, lps, strict=True)
    ]


def test_vllm_rollouts_follow_the_trained_weights(tiny_model, tmp_path):
    cfg = _cfg(
        tiny_model,
        tmp_path,
        max_new_tokens=32,
        lr=5e-3,
        generation_backend="vllm",
        vllm_memory=0.15,
    )
    tr = Trainer(cfg, progress=False)
    pol = tr.router.policies["shared"]
    try:
        gens = pol.generate(PROMPTS * 4, max_new_tokens=32, temperature=0.7, seed=1)
        assert all(g.completion_ids for g in gens) and any(g.finished for g in gens)
        assert max(_matches(pol, gens, 0.7)) < 1e-3
        before = {k: v.clone() for k, v in pol.model.state_dict().items()}
        for _ in range(3):
            records = tr._rollout(tr.step)
            _varied_rewards(records)  # a reward with variance, so every update moves the weights
            tr.update(records)
            tr.step += 1
        moved = max(float((before[k] - v).abs().max()) for k, v in pol.model.state_dict().items())
        assert moved > 1e-3
        gens = pol.generate(PROMPTS * 4, max_new_tokens=32, temperature=0.7, seed=2)
        assert max(_matches(pol, gens, 0.7)) < 1e-3  # the engine serves the trained weights
        # a stale engine would not: the initial weights score these samples differently
        stale = type(pol)(tiny_model)
        assert max(_matches(stale, gens, 0.7)) > 1e-2
    finally:
        pol.backend.close()


def test_vllm_backend_refuses_what_it_cannot_serve(tiny_model):
    with pytest.raises(ValueError, match="full-parameter"):
        TrainConfig(generation_backend="vllm", param="lora")
    from flowzoo.agents.backends import VLLMBackend
    from flowzoo.agents.policy import Policy

    pol = Policy(tiny_model)
    pol.model.config.tie_word_embeddings = True
    with pytest.raises(BackendUnavailable, match="tied"):
        VLLMBackend(pol)
