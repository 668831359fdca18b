# ruff: noqa: E402
"""The estimators on the real tiny model: the centralised critic's input (by hand, then
from a real rollout) and one PPO update with it; the per-role baseline trained and resumed
exactly from its checkpoint; Dr. MAS through a training step."""

import copy
import json
import random

import pytest

torch = pytest.importorskip("torch")

from flowzoo.agents.train.algorithms import central_critic
from flowzoo.agents.train.algorithms.base import turn_outputs
from flowzoo.agents.train.batch import Batch
from flowzoo.agents.train.losses import Advantages
from flowzoo.agents.train.rollout import EpisodeRecord, TurnRecord
from flowzoo.agents.train.trainer import Trainer
from tests.agents.train.test_training import _cfg


class Varied(Trainer):
    """A trainer whose team rewards vary by episode, step and role (the tiny model rarely
    solves at 40 tokens, and all-zero rewards would leave every estimator at 0)."""

    def _rollout(self, step):
        records = super()._rollout(step)
        for r in records:
            for t in r.turns:
                t.reward = float((r.index + step + (t.role == "aggregator")) % 2)
        return records


def _episode(pol, texts: list[tuple[str, str]], last_prompt: str) -> tuple[Batch, list]:
    """One hand-made Voting episode: each (agent, text) a turn, then the aggregator's turn
    on ``last_prompt``; prompts and completions tokenised by the real tiny tokenizer."""
    from flowzoo.config import TrainConfig

    rec = EpisodeRecord(0, "voting-math", "p", "p")
    for k, (agent, text) in enumerate([*texts, ("aggregator", "2")]):
        prompt = pol.encode_prompt(last_prompt if agent == "aggregator" else "Problem: 5+7")
        comp = pol.tokenizer(text, add_special_tokens=False)["input_ids"]
        role = agent.rpartition("_")[0] or agent
        rec.turns.append(
            TurnRecord(0, agent, role, 0, k, "shared", prompt, comp, [-1.0] * len(comp), text, True)
        )
    return Batch.of(TrainConfig(), [rec]), rec.turns


def test_the_central_critic_reads_every_earlier_turn_then_the_agents_prompt(tiny_policy):
    """By hand: solver_0 said "12", solver_1 "7 + 5 = 12", then the aggregator. The first
    turn's critic reads its own prompt alone; the aggregator's reads BOS, then
    "[solver_0] 12\\n[solver_1] 7 + 5 = 12\\n", then its own prompt (the policy's log-probs
    stay those of the prompt alone)."""
    pol = tiny_policy
    batch, (s0, s1, agg) = _episode(pol, [("solver_0", "12"), ("solver_1", "7 + 5 = 12")], "Pick")
    # one input per generated segment of a turn: a turn without tool calls has one
    ins = {i: one for i, (one,) in central_critic.critic_prompts(pol, batch, [s0, s1, agg]).items()}
    assert ins[s0.index] == s0.prompt_ids
    want = "[solver_0] 12\n[solver_1] 7 + 5 = 12\n"
    assert central_critic.transcript(central_critic.earlier_turns(batch, agg)) == want
    tok = pol.tokenizer(want, add_special_tokens=False)["input_ids"]
    assert agg.prompt_ids[0] == pol.bos_id
    assert ins[agg.index] == [pol.bos_id, *tok, *agg.prompt_ids[1:]]
    assert pol.decode(ins[agg.index]).startswith(want)
    assert pol.decode(ins[s1.index]).startswith("[solver_0] 12\n")
    # a short context keeps the transcript's newest tokens; no room, none of it
    small = copy.copy(pol)
    small.max_context = len(agg.prompt_ids) + len(agg.completion_ids) + 3
    assert central_critic.critic_prompt(small, agg, want) == [
        pol.bos_id,
        *tok[-3:],
        *agg.prompt_ids[1:],
    ]
    small.max_context = len(agg.prompt_ids) + len(agg.completion_ids)
    assert central_critic.critic_prompt(small, agg, want) == agg.prompt_ids
    # a turn that is not in its episode's record is an error, never another episode's text
    stray = copy.copy(agg)
    with pytest.raises(ValueError, match="not in its episode"):
        central_critic.earlier_turns(batch, stray)


def test_a_local_critics_outputs_are_the_one_scoring_pass(tiny_policy):
    """Without critic inputs (``critic_input="local"``) PPO's outputs are exactly the shared
    scoring pass every algorithm uses: the default run's update is unchanged."""
    from flowzoo.agents.train.algorithms.ppo import ValueHead

    pol = tiny_policy
    _, turns = _episode(pol, [("solver_0", "12"), ("solver_1", "9")], "Pick")
    head = ValueHead(pol.model.config.hidden_size)
    torch.nn.init.normal_(head.proj.weight)
    plain = Advantages()
    with torch.no_grad():
        a = central_critic.outputs(pol, head, turns, plain, 1.0)
        b = turn_outputs(pol, head, turns, plain, 1.0)
    assert a[1] is not None and b[1] is not None
    assert all(torch.equal(x, y) for x, y in zip(a[0] + a[1], b[0] + b[1], strict=True))
    # ... which is the call the learner made before the hook, for every critic-free algorithm
    from flowzoo.agents.train.algorithms import ALGORITHMS
    from flowzoo.agents.train.losses import model_outputs

    assert all(alg.outputs is turn_outputs for n, alg in ALGORITHMS.items() if n != "ppo")
    with torch.no_grad():
        c = model_outputs(
            pol, head, [t.prompt_ids for t in turns], [t.completion_ids for t in turns], 1.0
        )
    assert c[1] is not None
    assert all(torch.equal(x, y) for x, y in zip(b[0] + b[1], c[0] + c[1], strict=True))


def test_ppo_with_a_central_critic_makes_one_update_on_a_real_rollout(tiny_model, tmp_path):
    """Voting on the tiny model, ``critic_input="central"``: every turn's critic input holds
    the episode's earlier turns (the aggregator's: all three solvers' text), the value
    targets are per completion token (with a fresh, zero critic and gamma = lambda = 1 each
    return is the turn's reward), one update's losses are finite and moves the value
    head; after it, the values the update reads are the head on the central input, not on
    the local prompt."""
    cfg = _cfg(tiny_model, tmp_path, algo="ppo", critic_input="central", gae_lambda=1.0)
    tr = Trainer(cfg, progress=False)
    records = tr._rollout(0)
    for r in records:  # a team reward that varies (the tiny model rarely solves at 40 tokens)
        for t in r.turns:
            t.reward = float(r.index % 2)
    batch = Batch.of(cfg, records)
    adv = tr.learner.algorithm.advantages(cfg, batch, tr.learner.critic)
    assert isinstance(adv, central_critic.CentralAdvantages)
    pol = tr.router.policies[tr.router.names[0]]
    aggs = [t for t in batch.turns if t.role == "aggregator" and t.completion_ids]
    assert aggs
    for t in batch.turns:
        if not t.completion_ids:
            continue
        n = len(t.completion_ids)
        assert adv.returns[t.index].shape == (n,) and adv.old_values[t.index].shape == (n,)
        assert adv.token[t.index].shape == (n,)
        assert torch.allclose(adv.returns[t.index], torch.full((n,), t.reward))
        (critic_in,) = adv.critic_prompts[t.index]  # one segment: a turn without tool calls
        seen = pol.decode(critic_in)
        before = [u for u in batch.records[t.episode].turns if u.step < t.step]
        assert all(f"[{u.agent}] {u.text}" in seen for u in before)
        assert critic_in[-len(t.prompt_ids) + 1 :] == t.prompt_ids[1:]
    for t in aggs:
        solvers = [u for u in batch.records[t.episode].turns if u.role == "solver"]
        assert len(solvers) == 3
        assert all(
            f"[{u.agent}] {u.text}" in pol.decode(adv.critic_prompts[t.index][0]) for u in solvers
        )
    head = tr.learner.heads[tr.router.names[0]]
    before = [p.detach().clone() for p in head.parameters()]
    per_policy, _ = tr.learner.update(batch, 0, random.Random(0))
    for stats in per_policy.values():
        for row in stats["roles"].values():
            assert torch.isfinite(torch.tensor(row["loss"])) and torch.isfinite(
                torch.tensor(row["grad_norm"])
            )
    assert any(not torch.equal(a, b) for a, b in zip(before, head.parameters(), strict=True))
    # the update read its values on the central input: a local critic's update of the same
    # batch from the same start (values 0 both: a fresh head) moves the head elsewhere
    local_cfg = _cfg(tiny_model, tmp_path, algo="ppo", gae_lambda=1.0, out_dir=str(tmp_path / "l"))
    loc = Trainer(local_cfg, progress=False)
    loc.learner.update(batch, 0, random.Random(0))
    other = loc.learner.heads[loc.router.names[0]]
    assert not torch.allclose(head.proj.weight, other.proj.weight)
    mb = aggs[:2]
    with torch.no_grad():
        _, central = central_critic.outputs(pol, head, mb, adv, cfg.temperature)
        _, local = turn_outputs(pol, head, mb, adv, cfg.temperature)
        _, direct = pol.score(
            [adv.critic_prompts[t.index][0] for t in mb],
            [t.completion_ids for t in mb],
            cfg.temperature,
            hidden=True,
        )
    assert central is not None and local is not None and direct is not None
    for c, loc, d in zip(central, local, direct, strict=True):
        assert torch.allclose(c, head(d)) and not torch.allclose(c, loc)


def test_the_role_baseline_trains_and_resumes_exactly(tiny_model, tmp_path):
    """``--algo role-baseline`` trains (weights move) and logs each role's running baseline;
    a run stopped after step 1 and resumed makes step 2 exactly as the unbroken run does:
    same baseline state, same advantages (so losses), same weights."""

    def run(out, steps, resume=False):
        cfg = _cfg(tiny_model, tmp_path, algo="role-baseline", baseline_decay=0.5, steps=steps,
                   save_every=1, out_dir=str(tmp_path / out), resume=resume, group_size=2)  # fmt: skip
        tr = Varied(cfg, progress=False)
        tr.train()
        rows = [json.loads(x) for x in (tmp_path / out / "metrics.jsonl").read_text().splitlines()]
        return tr, rows

    a, rows_a = run("a", 2)
    b1, _ = run("b", 1)
    # it trained: the step's advantages were not all 0 and the weights moved
    pa1 = b1.router.policies[b1.router.names[0]].model.parameters()
    pa2 = a.router.policies[a.router.names[0]].model.parameters()
    assert any(not torch.equal(x, y) for x, y in zip(pa1, pa2, strict=True))
    assert rows_a[1]["adv"]["baseline"]["solver"]["std"] > 0
    state = torch.load(tmp_path / "b" / "checkpoint" / "state.pt", weights_only=True)
    assert set(state["estimator"]["moments"]) == {"solver", "aggregator"}
    b, rows_b = run("b", 2, resume=True)
    assert a.learner.estimator_state.state_dict() == b.learner.estimator_state.state_dict()
    assert rows_a[1]["adv"]["baseline"] == rows_b[1]["adv"]["baseline"]
    assert set(rows_a[0]["adv"]["baseline"]) == {"solver", "aggregator"}
    for role, row in rows_a[1]["roles"].items():
        assert row["loss"] == pytest.approx(rows_b[1]["roles"][role]["loss"], rel=1e-5, abs=1e-9)
    pa, pb = a.router.policies[a.router.names[0]], b.router.policies[b.router.names[0]]
    for x, y in zip(pa.model.parameters(), pb.model.parameters(), strict=True):
        assert torch.allclose(x, y, atol=1e-6)
    # a checkpoint whose estimator state is missing does not fit this run: refused, named
    state["estimator"] = None
    torch.save(state, tmp_path / "b" / "checkpoint" / "state.pt")
    from flowzoo.agents.runs import weights
    from flowzoo.agents.train import checkpoint

    sha = weights.stream_sha256(open(tmp_path / "b" / "checkpoint" / "state.pt", "rb"))
    checkpoint.digest_path(tmp_path / "b" / "checkpoint" / "state.pt").write_text(
        json.dumps({"sha256": [sha]})
    )
    with pytest.raises(ValueError, match="does not fit"):
        run("b", 3, resume=True)


def test_dr_mas_runs_a_training_step(tiny_model, tmp_path):
    """``--algo dr-mas --group-by task`` trains: the step's advantages come from each role's
    own group on each problem (counted as such), and the weights move."""
    cfg = _cfg(tiny_model, tmp_path, algo="dr-mas", group_by="task")
    tr = Varied(cfg, progress=False)
    params = list(tr.router.policies[tr.router.names[0]].model.parameters())
    before = [p.detach().clone() for p in params]
    m = tr.train_step()
    assert m["adv"]["groups"] == 2 * cfg.problems_per_step  # (problem, role) groups
    assert m["adv"]["zero_std_groups"] == 0
    assert any(not torch.equal(x, p) for x, p in zip(before, params, strict=True))


@pytest.mark.slow  # two torchrun processes load the model: about 75 s on 2 busy cores
def test_two_processes_hold_one_role_baseline(tiny_model, tmp_path):
    """Under torchrun each process sees half the problems; the baseline's sums are taken
    over both, so the 2-process update equals the single-process one (a baseline from each
    process's own half would centre, and so step, differently)."""
    from tests.agents.train.test_distributed import _same_adam_step, _single_and_two_process

    cfg = _cfg(tiny_model, tmp_path, algo="role-baseline", std_norm=False, problems_per_step=4)
    single, _, got = _single_and_two_process(cfg, tmp_path)
    _same_adam_step(single, got)
