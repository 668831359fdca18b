"""flowzoo's own Qwen3 forward (``flowzoo.agents.models.fastlm``) against transformers' on the same
weights: log-probs, gradients (full weights and LoRA), greedy samples (both decode caches,
rows finishing at different steps), the sampler's distribution, and where it steps aside."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import flowzoo  # noqa: E402
from flowzoo.agents.models.fastlm import fast_lm  # noqa: E402
from flowzoo.agents.models.policy import Policy  # noqa: E402
from flowzoo.agents.models.sampler import RowCache, SharedCache, draw  # noqa: E402
from flowzoo.tiny.build import save_random_model  # noqa: E402


@pytest.fixture(scope="module")
def gqa_policy(tmp_path_factory):
    """A random tiny-m-shaped Qwen3 (4 query heads over 2 key/value heads, tied head)."""
    path = save_random_model(tmp_path_factory.mktemp("gqa"), scale="tiny-m", tie=True, seed=3)
    return Policy(path)


def _prompts(pol: Policy, env_id: str, n: int, copies: int) -> list[list[int]]:
    env = flowzoo.make_env(env_id)
    out = []
    for s in range(n):
        env.reset(seed=s)
        out += [pol.encode_prompt(env.observe(env.agent_selection)["prompt"])] * copies
    return out


def _reference(pol: Policy):
    """The same policy object scoring and sampling through transformers' forward."""

    class Ref:
        def __enter__(self):
            pol.fast = False
            return pol

        def __exit__(self, *exc):
            pol.fast = True

    return Ref()


@pytest.mark.parametrize("which", ["tiny", "gqa"])
@pytest.mark.parametrize("shared", [True, False])  # prompts shared: prefix pass; else joint
def test_logprobs_and_gradients_match_transformers(which, shared, tiny_policy, gqa_policy):
    pol = tiny_policy if which == "tiny" else gqa_policy
    assert fast_lm(pol.model) is not None
    if shared:
        prompts = _prompts(pol, "voting-math", 3, 3) + _prompts(pol, "eval-opt-math", 2, 1)
    else:
        prompts = _prompts(pol, "voting-math", 6, 1) + _prompts(pol, "eval-opt-math", 5, 1)
    assert (len({tuple(p) for p in prompts}) < len(prompts)) == shared
    gen = torch.Generator().manual_seed(0)
    comps = [
        list(torch.randint(4, 90, (n,), generator=gen).tolist())
        for n in [1, 5, 17, 3, 9, 12, 2, 30, 7, 11, 4]
    ]
    params = [p for p in pol.model.parameters() if p.requires_grad]
    with _reference(pol):
        ref = pol.logprobs(prompts, comps, 0.7)
        g_ref = torch.autograd.grad(sum((x * (i + 1)).sum() for i, x in enumerate(ref)), params)
    got = pol.logprobs(prompts, comps, 0.7)
    g_got = torch.autograd.grad(sum((x * (i + 1)).sum() for i, x in enumerate(got)), params)
    assert [len(x) for x in got] == [len(c) for c in comps]
    for a, b in zip(ref, got, strict=True):
        assert torch.allclose(a, b, atol=2e-5), (a - b).abs().max()
    # the critic's hidden states come from the same scoring pass, on either forward
    with torch.no_grad(), _reference(pol):
        ref_lp, ref_h = pol.score(prompts, comps, 0.7, hidden=True)
    with torch.no_grad():
        got_lp, got_h = pol.score(prompts, comps, 0.7, hidden=True)
    for c, a, b, la, lb in zip(comps, ref_h, got_h, ref_lp, got_lp, strict=True):
        assert a.shape == b.shape == (len(c), pol.model.config.hidden_size)
        assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()
        assert torch.allclose(la, lb, atol=2e-5)
    for a, b in zip(g_ref, g_got, strict=True):  # float32 sums in another order
        assert (a - b).norm() <= 1e-4 * a.norm() + 1e-6, ((a - b).norm(), a.norm())


@pytest.mark.parametrize("copies", [1, 8])  # all prompts distinct: row cache; 8 each: cascade
def test_greedy_samples_match_transformers(copies, tiny_policy, gqa_policy, monkeypatch):
    used = []
    for kind in (RowCache, SharedCache):
        orig = kind.__init__

        def spy(self, *a, _orig=orig, _kind=kind, **k):
            used.append(_kind)
            _orig(self, *a, **k)

        monkeypatch.setattr(kind, "__init__", spy)
    for pol in (tiny_policy, gqa_policy):
        prompts = _prompts(pol, "voting-math", 16 // copies, copies)
        with _reference(pol):
            ref = pol._sample(prompts, 40, 0.0, None)
        got = pol._sample(prompts, 40, 0.0, None)
        assert [g.completion_ids for g in got] == [g.completion_ids for g in ref]
        for a, b in zip(got, ref, strict=True):
            assert (
                max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0)
                < 1e-4
            )
    assert set(used) == {RowCache if copies == 1 else SharedCache}
    # the trained tiny model ends its turns at different lengths on 16 different problems:
    # finished rows were dropped
    lengths = {
        len(g.completion_ids)
        for g in tiny_policy._sample(_prompts(tiny_policy, "voting-math", 16, 1), 40, 0.0, None)
    }
    assert len(lengths) > 1


def test_sampled_logprobs_are_the_scored_ones(tiny_policy):
    """What the sampler records is the log-prob the update recomputes (ratio 1 on-policy)."""
    pol = tiny_policy
    prompts = _prompts(pol, "voting-math", 4, 6)
    gens = pol._sample(prompts, 32, 0.7, torch.Generator().manual_seed(1))
    with torch.no_grad():
        lps = pol.logprobs(prompts, [g.completion_ids for g in gens], 0.7)
    for g, lp in zip(gens, lps, strict=True):
        assert torch.allclose(torch.tensor(g.logprobs), lp, atol=1e-4)


def test_draw_follows_the_distribution():
    gen = torch.Generator().manual_seed(0)
    probs = torch.tensor([[0.5, 0.0, 0.2, 0.3], [0.0, 0.0, 0.0, 1.0], [0.25, 0.25, 0.25, 0.25]])
    n = 20000
    counts = torch.zeros_like(probs)
    for _ in range(n // 100):
        draws = draw(probs.repeat(100, 1), gen).view(100, 3)
        for r in range(3):
            counts[r] += torch.bincount(draws[:, r], minlength=4)
    freq = counts / n
    assert counts[0, 1] == 0 and counts[1, :3].sum() == 0  # zero-probability tokens never
    assert (freq - probs).abs().max() < 0.015  # ~4 standard errors at n=20000


def test_lora_effective_weights(tiny_model):
    peft = pytest.importorskip("peft")
    pol = Policy(tiny_model)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    pol.model = peft.get_peft_model(pol.model, cfg)
    torch.manual_seed(0)
    for n, p in pol.model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.05)  # a trained adapter, not the zero init
    assert fast_lm(pol.model) is not None
    prompts = _prompts(pol, "voting-math", 2, 2)
    comps = [[5, 6, 7], [8, 9], [10], [11, 12, 13, 14]]
    params = [p for p in pol.model.parameters() if p.requires_grad]
    with _reference(pol):
        ref = pol.logprobs(prompts, comps, 1.0)
        g_ref = torch.autograd.grad(sum(x.sum() for x in ref), params)
        with pol.model.disable_adapter():
            base_ref = pol.logprobs(prompts, comps, 1.0)
    got = pol.logprobs(prompts, comps, 1.0)
    g_got = torch.autograd.grad(sum(x.sum() for x in got), params)
    with pol.model.disable_adapter():
        base_got = pol.logprobs(prompts, comps, 1.0)
    for a, b in zip(ref + base_ref, got + base_got, strict=True):
        assert torch.allclose(a, b, atol=2e-5)
    assert not torch.allclose(torch.cat(ref), torch.cat(base_ref), atol=1e-3)  # LoRA mattered
    for a, b in zip(g_ref, g_got, strict=True):
        assert (a - b).norm() <= 1e-4 * a.norm() + 1e-6


def test_steps_aside_where_it_does_not_apply(tiny_model):
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
        )
    )
    assert fast_lm(llama) is None
    pol = Policy(tiny_model, grad_checkpointing=True)
    with torch.enable_grad():
        assert fast_lm(pol.model) is None  # checkpointed training: transformers' forward
    with torch.no_grad():
        assert fast_lm(pol.model) is not None  # sampling has no backward to checkpoint
    assert Policy(tiny_model, fast=False)._fast_lm() is None


def test_independent_turns_are_offered_together():
    """Voting's solvers and Orch-Workers' workers do not see each other: an env offers them
    in one batch, with the prompts they will observe; Eval-Opt's turns depend on each other."""
    env = flowzoo.make_env("voting-math")
    env.reset(seed=0)
    offered = env.pending()
    assert [a for a, _ in offered] == ["solver_0", "solver_1", "solver_2"]
    for agent, prompt in offered:
        assert env.agent_selection == agent and env.observe(agent)["prompt"] == prompt
        env.step("\\boxed{1}")
    assert [a for a, _ in env.pending()] == ["aggregator"]
    env = flowzoo.make_env("orch-workers-math")
    env.reset(seed=0)
    assert [a for a, _ in env.pending()] == ["orchestrator"]
    env.step("1. add\n2. check")
    assert [a for a, _ in env.pending()] == ["worker_0", "worker_1", "worker_2"]
    env = flowzoo.make_env("eval-opt-math")
    env.reset(seed=0)
    assert len(env.pending()) == 1
    # a cycle cap cuts the offer where the episode would be cut
    env = flowzoo.make_env("voting-math", max_cycles=2)
    env.reset(seed=0)
    assert [a for a, _ in env.pending()] == ["solver_0", "solver_1"]


@pytest.mark.parametrize("env_id", ["voting-math", "orch-workers-math"])
def test_batched_rollout_plays_the_same_greedy_episodes(env_id, tiny_policy):
    """Greedy: one env at a time (each turn its own batch) and all envs with independent
    turns batched together give the same transcripts and rewards."""
    from flowzoo.agents.train.evaluate import single_policy
    from flowzoo.agents.train.rollout import rollout

    n = 6
    envs = [flowzoo.make_env(env_id) for _ in range(n)]
    together = rollout(envs, single_policy(tiny_policy), seeds=list(range(n)), temperature=0.0)
    alone = []
    for i in range(n):
        alone += rollout(
            [flowzoo.make_env(env_id)], single_policy(tiny_policy), seeds=[i], temperature=0.0
        )
    for a, b in zip(together, alone, strict=True):
        assert [(t.agent, t.completion_ids) for t in a.turns] == [
            (t.agent, t.completion_ids) for t in b.turns
        ]
        assert a.rewards == b.rewards
