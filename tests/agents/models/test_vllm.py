# ruff: noqa: E402
"""The vLLM generation backend, for real: a vLLM engine (in-process where ``vllm`` imports,
else a worker in the environment ``$FLOWZOO_VLLM_PYTHON`` names; `.ci/run` builds one) serves
the tiny model; after several updates its log-probs must match the trained model's (and not the initial
weights'), which proves the sync: full weights, a tied output head, Shared- and Isolated-LoRA. Skipped with the reason where no vLLM is available."""

import pytest

torch = pytest.importorskip("torch")  # these tests train: they skip cleanly without torch

from flowzoo.agents.models.backends import vllm_unavailable_reason
from flowzoo.agents.train.trainer import Trainer
from tests.agents.train.test_training import _cfg, _varied_rewards

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


@pytest.fixture(scope="module")
def tied_model(tmp_path_factory):
    """A random-initialised Qwen3-architecture model with tied embeddings (as Qwen3 0.6B-4B)."""
    from flowzoo.tiny.build import save_random_model

    return save_random_model(tmp_path_factory.mktemp("tied"), tie=True)


def _train_and_check(cfg, tmp_path, stale_logprobs):
    """Three updates with a varied reward, then every trained policy's engine samples must
    score the same under the trained policy (< 1e-3) and differently under ``stale_logprobs``
    (the initial weights)."""
    tr = Trainer(cfg, progress=False)
    pols = {n: tr.router.policies[n] for n in tr.router.names}
    try:
        for pol in pols.values():
            gens = pol.generate(PROMPTS * 4, max_new_tokens=32, temperature=0.7, seed=1)
            assert all(g.completion_ids for g in gens)
            assert max(_matches(pol, gens, 0.7)) < 1e-3
        before = {k: v.clone() for k, v in tr.router.state_dict().items() for k, v in v.items()}
        for _ in range(3):
            records = tr._rollout(tr.step)
            _varied_rewards(records)  # a reward with variance, so every update moves the weights
            tr.update(records)
            tr.step += 1
        after = {k: v for d in tr.router.state_dict().values() for k, v in d.items()}
        assert max(float((before[k] - after[k]).abs().max()) for k in after) > 1e-3
        figures = {}
        for name, pol in pols.items():
            gens = pol.generate(PROMPTS * 4, max_new_tokens=32, temperature=0.7, seed=2)
            served = max(_matches(pol, gens, 0.7))
            stale = stale_logprobs(tr, name, gens)
            figures[name] = (served, stale)
            assert served < 1e-3, figures  # the engine serves the trained weights
            assert stale > 1e-2, figures  # a stale engine would not
        print("log-prob gaps (served, initial):", figures)
    finally:
        for pol in pols.values():
            pol.backend.close()


def _initial_full(model):
    def stale(tr, name, gens):
        return max(_matches(type(tr.router.policies[name])(model), gens, 0.7))

    return stale


def _adapters_off(tr, name, gens):
    """The LoRA policies' initial weights: the base (PEFT initialises B = 0)."""
    lps = tr.router.reference_logprobs(
        name, [g.prompt_ids for g in gens], [g.completion_ids for g in gens], 0.7
    )
    return max(
        float((torch.tensor(g.logprobs) - lp).abs().max()) for g, lp in zip(gens, lps, strict=True)
    )


def test_vllm_rollouts_follow_the_trained_weights(tiny_model, tmp_path):
    cfg = _cfg(
        tiny_model,
        tmp_path,
        max_new_tokens=32,
        lr=5e-3,
        generation_backend="vllm",
        vllm_memory=0.15,
    )
    _train_and_check(cfg, tmp_path, _initial_full(tiny_model))


def test_vllm_syncs_a_tied_output_head(tied_model, tmp_path):
    """Qwen3 0.6B-4B tie lm_head to the embedding: the sync must update the head too."""
    cfg = _cfg(
        tied_model,
        tmp_path,
        max_new_tokens=32,
        lr=5e-3,
        generation_backend="vllm",
        vllm_memory=0.15,
        policy="isolated",
    )
    _train_and_check(cfg, tmp_path, _initial_full(tied_model))


@pytest.mark.parametrize("policy", ["shared", "isolated"])
def test_vllm_multi_lora_follows_the_trained_adapters(tied_model, tmp_path, policy):
    """Shared-LoRA (one adapter) and Isolated-LoRA (one per role, one engine, the base loaded
    once) on a tied base: each adapter re-synced after its update."""
    cfg = _cfg(
        tied_model,
        tmp_path,
        max_new_tokens=32,
        lr=2e-2,
        generation_backend="vllm",
        vllm_memory=0.15,
        param="lora",
        lora_r=8,
        lora_alpha=16,
        policy=policy,
    )
    _train_and_check(cfg, tmp_path, _adapters_off)


def test_vllm_lora_rank_is_one_vllm_accepts():
    from flowzoo.agents.models.backends import lora_rank_for

    assert [lora_rank_for(r) for r in (1, 2, 8, 9, 64, 100)] == [1, 8, 8, 16, 64, 128]
    with pytest.raises(ValueError, match="largest"):
        lora_rank_for(1000)


def test_vllm_takes_a_rollout_sized_batch_of_seeded_requests(tiny_model):
    """The map's batch (hundreds of seeded requests with long prompts) makes vLLM split
    prefills; on vLLM 0.32's CPU build a split seeded prefill killed the engine ("CPU Generator
    does not use offset") until chunked prefill was switched off there."""
    from flowzoo.agents.models.backends import attach
    from flowzoo.agents.models.policy import Policy

    pol = Policy(tiny_model)
    attach(pol, "vllm", memory=0.15)
    try:
        prompts = [PROMPTS[i % 2] * 3 + f"Case {i}.\n" for i in range(192)]
        gens = pol.generate(prompts, max_new_tokens=4, temperature=0.7, seed=0)
        assert len(gens) == 192 and all(g.completion_ids for g in gens)
    finally:
        attach(pol, "transformers")
