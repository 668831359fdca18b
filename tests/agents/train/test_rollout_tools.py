# ruff: noqa: E402
"""Training through tool turns (issue 63 item 3, docs/tools.md), on the real tiny model.

The tiny test model was never taught the call syntax, so a policy that calls is made from it:
:class:`CallsFirst` plays the tiny model, except that a tool role's first sample of a turn is
a fixed call followed by a guessed result. Its ids are the call's tokens and its log-probs
the model's own (scored at the sampling temperature), so the rollout, the batch and the
update treat it exactly as a sample; the guessed result is what the rollout must cut."""

import random

import pytest

torch = pytest.importorskip("torch")

import flowzoo
from flowzoo.agents.models.backends import vllm_unavailable_reason
from flowzoo.agents.models.policy import Generation, Policy
from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.rollout import rollout, tree_rollout
from flowzoo.agents.train.segments import per_turn, pieces
from flowzoo.agents.train.toolturns import stop_at_call
from flowzoo.agents.train.trainer import Trainer
from flowzoo.envs.tools import call_end, calls_left
from tests.agents.train.test_training import _cfg as training_cfg

FENCE = "`" * 3
CALL = f"{FENCE}tool python\nprint(3 * 3 - 2)\n{FENCE}\n"
GUESS = f"{FENCE}output\nguess 99\n{FENCE}\n"


class CallsFirst:
    """The tiny policy; a tool role's first sample of a turn (a prompt with tool lines and
    no result yet) is ``CALL + GUESS``, scored by the model (see the module doc)."""

    def __init__(self, pol: Policy) -> None:
        self.pol = pol
        self.asked: list[str] = []

    def decode(self, ids):
        return self.pol.decode(ids)

    def generate(self, prompts, max_new_tokens=64, temperature=0.7, seed=None, generator=None):
        self.asked += prompts
        first = [("Tools:" in p and "```output" not in p) for p in prompts]
        real = self.pol.generate(
            [p for p, f in zip(prompts, first, strict=True) if not f],
            max_new_tokens,
            temperature,
            generator=generator,
        )
        real.reverse()
        out = []
        for p, f in zip(prompts, first, strict=True):
            if not f:
                out.append(real.pop())
                continue
            pids = self.pol.fit_prompt(self.pol.encode_prompt(p), max_new_tokens)
            ids = self.pol.tokenizer(CALL + GUESS, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                lps = self.pol.logprobs([pids], [ids], temperature)[0].tolist()
            out.append(Generation(pids, ids, lps, self.pol.decode(ids), False))
        return out


def _cfg(tiny_model, tmp_path, **kw):
    """The training tests' tiny config on a tools env (solvers may call ``python``)."""
    tools = {"tools": ["python"], "tool_roles": ["solver"], "max_tool_calls": 2}
    base = dict(env_options=tools, group_size=2, max_new_tokens=24)
    return training_cfg(tiny_model, tmp_path, **{**base, **kw})


def _calling(tr: Trainer) -> CallsFirst:
    """Route every role of ``tr`` to :class:`CallsFirst` over its one shared policy."""
    (name,) = tr.router.names
    player = CallsFirst(tr.router.policies[name])
    tr.router.policy_for = lambda role: (name, player)
    return player


def _scored(monkeypatch, pol: Policy) -> list[tuple[list[int], list[int]]]:
    """Every (prompt, completion) pair the update scores with ``pol``."""
    seen: list[tuple[list[int], list[int]]] = []
    real = pol.score

    def score(prompt_ids, completion_ids, *a, **kw):
        seen.extend(zip(map(list, prompt_ids), map(list, completion_ids), strict=True))
        return real(prompt_ids, completion_ids, *a, **kw)

    monkeypatch.setattr(pol, "score", score)
    return seen


def test_a_training_step_through_tool_turns(tiny_model, tmp_path, monkeypatch):
    """Voting with a calculator for the solvers: each solver turn is a call, its result, then
    the message, one turn; the update scores every generated segment once after the prompt
    it was sampled on, tool output only ever as prompt; one advantage per turn; the role
    diagnostics count turns."""
    tr = Trainer(_cfg(tiny_model, tmp_path), progress=False)
    player = _calling(tr)
    records = tr._rollout(0)
    batch = Batch.of(tr.cfg, records)
    assert len(records) == 4 and all(len(r.turns) == 4 for r in records)  # 3 solvers + aggregator
    solvers = [t for t in batch.turns if t.role == "solver"]
    aggs = [t for t in batch.turns if t.role == "aggregator"]
    assert len(solvers) == 12 and all(len(t.calls) == 1 for t in solvers)
    assert all(not t.calls for t in aggs)  # a role without tools: never cut, never a call
    for rec in records:
        log = tr.envs[rec.index].turn_log()
        assert [v.agent for v in log] == [t.agent for t in rec.turns]
        for t, view in zip(rec.turns, log, strict=True):
            assert len(view.calls) == len(t.calls) and t.flags == view.flags
            for seg, call in zip(t.calls, view.calls, strict=True):
                # cut at the closing fence: the guessed result never reached the env
                assert seg.text == CALL and seg.finished and call.action == CALL
                assert call.status == "ok" and "stdout:\n7" in call.result
        assert rec.agent_infos["solver_0"]["tool_calls"] == 1
    assert not any("guess 99" in s.text for t in batch.turns for s in t.segments)
    # the message was sampled on the observation holding the call and its result
    pol = player.pol
    for t in solvers:
        seen = pol.decode(t.prompt_ids)
        assert CALL.rstrip("\n") in seen and "```output\nexit: 0 (ok)\nstdout:\n7" in seen
    # Voting's other solvers were sampled once per turn: their samples waited through the
    # first solver's call instead of being drawn again
    first_prompts = [p for p in player.asked if "Tools:" in p and "```output" not in p]
    assert len(first_prompts) == len(solvers)

    for t in batch.turns:  # a synthetic reward with variance in every group: a real gradient
        t.reward = float(len(t.completion_ids) % 2 == 0)
    batch = Batch.of(tr.cfg, records)
    scored = _scored(monkeypatch, pol)
    adv = tr.learner.algorithm.advantages(tr.cfg, batch, tr.learner.critic)
    assert any(a != 0 for a in adv.scalar)
    assert len(adv.scalar) == len(batch.turns)  # one advantage per turn, not per call
    per_policy, _ = tr.learner.update(batch, 0, random.Random(0))
    segments = [s for t in batch.turns for s in t.segments if s.completion_ids]
    assert sorted(scored) == sorted((s.prompt_ids, s.completion_ids) for s in segments)
    for _, c in scored:  # tool output: context only, never a token of the loss
        assert "exit: 0" not in pol.decode(c) and "```output" not in pol.decode(c)
    assert sum("exit: 0 (ok)" in pol.decode(p) for p, _ in scored) == len(solvers)
    roles = per_policy["shared"]["roles"]
    assert roles["solver"]["turns"] == 12 and roles["aggregator"]["turns"] == 4
    assert roles["solver"]["tokens"] == sum(t.n_tokens for t in solvers)
    assert roles["solver"]["grad_norm"] > 0
    # each segment scored after the prompt it was sampled on: the ratio starts at 1
    assert roles["solver"]["ratio_dev"] < 1e-3


@pytest.mark.parametrize("critic_input", ["local", "central"])
def test_advantages_per_turn_span_its_segments(tiny_model, tmp_path, critic_input):
    """GRPO: a tool turn's advantage covers every token of its segments, one value; PPO: the
    critic's per-token advantages run over the turn's segments, one trajectory step (the
    central critic reads the earlier turns, then each segment's own prompt)."""
    cfg = _cfg(tiny_model, tmp_path, algo="ppo", critic_input=critic_input)
    tr = Trainer(cfg, progress=False)
    _calling(tr)
    records = tr._rollout(0)
    batch = Batch.of(tr.cfg, records)
    adv = tr.learner.algorithm.advantages(tr.cfg, batch, tr.learner.critic)
    for t in batch.turns:
        assert adv.token[t.index].shape == (t.n_tokens,)
        assert adv.returns[t.index].shape == (t.n_tokens,)
        if critic_input == "central":  # one critic input per generated segment
            ins = adv.critic_prompts[t.index]
            assert len(ins) == len(t.segments)
            assert all(
                i[-len(s.prompt_ids) + 1 :] == s.prompt_ids[1:]
                for i, s in zip(ins, t.segments, strict=True)
            )
    per_policy, _ = tr.learner.update(batch, 0, random.Random(0))
    roles = per_policy["shared"]["roles"]
    assert roles["solver"]["turns"] == 12 and all(
        torch.isfinite(torch.tensor(r["loss"])) for r in roles.values()
    )
    from flowzoo.agents.train.algorithms.grpo import advantages

    gadv = advantages(tr.cfg, batch)
    t = next(t for t in batch.turns if t.calls)
    like = torch.zeros(t.n_tokens)
    assert torch.equal(gadv.tokens(t, like), torch.full_like(like, gadv.scalar[t.index]))


def test_a_train_step_with_tools_writes_its_metrics(tiny_model, tmp_path):
    """The whole step (rollout, batch, update, metrics line) on a tools env: calls counted
    per role beside the turns."""
    tr = Trainer(_cfg(tiny_model, tmp_path), progress=False)
    _calling(tr)
    m = tr.train_step()
    assert m["sampled"]["turns"] == 16 and m["sampled"]["tool_calls"] == 12
    assert m["roles"]["solver"]["tool_calls"] == 1.0
    assert m["roles"]["aggregator"]["tool_calls"] == 0.0


def test_an_evaluation_plays_tool_turns(tiny_policy):
    """Evaluation goes through the same rollout: episodes with calls score, and the tokens
    it reports include every call's."""
    from flowzoo.agents.train.evaluate import evaluate_env

    player = CallsFirst(tiny_policy)
    opts = {"tools": ["python"], "tool_roles": ["solver"], "n_tasks": 2}
    res = evaluate_env(
        "voting-math", lambda r: ("p", player), n_episodes=2, max_new_tokens=8, env_options=opts
    )
    call = len(tiny_policy.tokenizer(CALL, add_special_tokens=False)["input_ids"])
    assert res.cost["episodes"] == 2 and res.cost["tokens"] > 2 * 3 * call


@pytest.mark.skipif(vllm_unavailable_reason() is not None, reason=vllm_unavailable_reason() or "")
def test_tool_turns_sampled_by_vllm_train_on_their_own_log_probs(tiny_model, tmp_path):
    """The vLLM backend samples the messages after a call, on the exchange as the env shows
    it; every segment rescored by the trained model after its own prompt gives vLLM's
    log-probs back (< 1e-3); the update trains through those turns."""
    tr = Trainer(
        _cfg(tiny_model, tmp_path, generation_backend="vllm", vllm_memory=0.15), progress=False
    )
    player = _calling(tr)
    pol = player.pol
    assert pol.backend is not None
    try:
        records = tr._rollout(0)
        turns = [t for r in records for t in r.turns]
        tool_turns = [t for t in turns if t.calls]
        assert len(tool_turns) == 12
        p_ids, c_ids = pieces(turns)
        with torch.no_grad():
            lps = per_turn(turns, pol.logprobs(p_ids, c_ids, tr.cfg.temperature))
        for t, lp in zip(turns, lps, strict=True):
            assert float((torch.tensor(t.all_logprobs) - lp).abs().max()) < 1e-3
        for t in turns:
            t.reward = float(len(t.completion_ids) % 2 == 0)
        per_policy, _ = tr.update(records)
        assert per_policy["shared"]["roles"]["solver"]["turns"] == 12
    finally:
        pol.backend.close()


def test_without_tools_a_turn_is_one_piece_scored_as_before(tiny_policy):
    """No tools: the turn's own ids are the scoring pass's inputs, its tensors come back as
    they are (the path without tools runs the same passes; the records are pinned by the
    training tests)."""
    env = flowzoo.make_env("voting-math", n_tasks=2)
    (rec,) = rollout([env], lambda r: ("p", tiny_policy), seeds=[0], max_new_tokens=8)
    assert "tool_calls" not in rec.agent_infos["solver_0"]
    turns = rec.turns
    assert all(t.calls == () and t.segments == (t,) for t in turns)
    p, c = pieces(turns)
    assert p == [t.prompt_ids for t in turns] and c == [t.completion_ids for t in turns]
    outs = [torch.zeros(len(x)) for x in c]
    assert all(a is b for a, b in zip(per_turn(turns, outs), outs, strict=True))


def test_a_call_is_cut_at_its_closing_fence(tiny_policy):
    """A sample holding a call and a guessed result ends just past the call's closing fence
    (ids and log-probs cut with it, finished there); a served model's text is cut and its
    unalignable log-probs dropped; no complete call, no cut."""
    tok = tiny_policy.tokenizer
    ids = tok("Let me check.\n" + CALL + GUESS, add_special_tokens=False)["input_ids"]
    g = Generation([1], ids, [-0.5] * len(ids), tiny_policy.decode(ids), False)
    cut = stop_at_call(tiny_policy, g)
    assert cut.text == "Let me check.\n" + CALL and cut.finished
    assert cut.completion_ids == ids[: len(cut.completion_ids)]
    assert len(cut.logprobs) == len(cut.completion_ids) < len(ids)
    served = Generation([], [], [-0.1] * 9, "x\n" + CALL + GUESS, False)
    s = stop_at_call(None, served)
    assert s.text == "x\n" + CALL and s.logprobs == [] and s.finished
    for text in ("no call", CALL.rstrip("\n"), f"{FENCE}python\nx = 1\n{FENCE}\n"):
        assert call_end(text) is None
        plain = Generation([], [], [], text, False)
        assert stop_at_call(None, plain) is plain


def test_calls_left_and_a_turn_cut_by_max_cycles(tiny_policy):
    """A spent budget: the next sample is the message, whole; an episode that ``max_cycles``
    ends after a call keeps that unfinished turn (reward 0, flagged) with its call."""
    env = flowzoo.make_env("voting-math", n_tasks=2, tools=["python"], max_tool_calls=1)
    env.reset(seed=0)
    agent = env.agent_selection
    assert calls_left(env, agent) == 1
    env.step(CALL)
    assert env.agent_selection == agent and calls_left(env, agent) == 0
    assert calls_left(env, "aggregator") == 1  # its turn has not started
    assert calls_left(flowzoo.make_env("voting-math", n_tasks=2), agent) == 0

    env = flowzoo.make_env("voting-math", n_tasks=2, tools=["python"], max_cycles=1)
    (rec,) = rollout([env], lambda r: ("p", CallsFirst(tiny_policy)), seeds=[0], max_new_tokens=8)
    (t,) = rec.turns
    assert len(t.calls) == 0 and t.text == CALL and t.flags == ("max_cycles",)
    assert t.reward == 0.0 and rec.info["truncated"]


def test_tree_rollouts_through_tool_turns_are_refused():
    from flowzoo.config import TrainConfig as Cfg

    env = flowzoo.make_env("voting-math", n_tasks=2, tools=["python"])
    with pytest.raises(NotImplementedError, match="tree rollouts through tool turns"):
        tree_rollout([env], lambda r: None, [None], branch=2, rng=random.Random(0))
    with pytest.raises(ValueError, match="rollout='tree'.*not built"):
        Cfg(env="voting-math", env_options={"tools": ["python"]}, rollout="tree")
    Cfg(env="voting-math", env_options={"tools": ["python"]})  # independent rollouts: fine
    with pytest.raises(ValueError, match="valid: python"):  # a bad name: the env's own error
        Cfg(env="voting-math", env_options={"tools": ["run"]})
