"""A step's metrics line, read from the step's :class:`~flowzoo.agents.train.batch.Batch`
(every turn it trained on) and the update's statistics.

Why here and not with the run's records (:mod:`flowzoo.agents.runs.runlog`, which writes
the line): what a step measured is a reading of the learning's own data, the turns and
their rewards; where and how the line is kept safe knows nothing of it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from flowzoo.agents.train.batch import Batch


def _tokens(turn) -> int:
    """A turn's length in tokens (its tool calls' included): its ids where the policy is
    ours, the server's log-probs for a served role."""
    return turn.n_tokens or len(turn.all_logprobs)


def _cut(turn) -> bool:
    """A segment of the turn was cut at its budget: it produced tokens (ids, or a served
    model's log-probs) and no EOS; a failed served call (none) is not a cut."""
    return any(not s.finished and bool(s.completion_ids or s.logprobs) for s in turn.segments)


def step_metrics(step: int, batch: Batch, per_policy: dict, adv_stats: dict) -> dict:
    """The metrics line of one step, read from its batch (every turn it trained on, whichever
    round or rollout shape played it): reward and accuracy; per role the reward, response
    length, truncation, entropy estimate, the update's statistics and gradient-mass share,
    parse-flag and tamper rates; cosines between role gradients; group statistics."""
    records, turns, rewards = batch.records, batch.turns, batch.rewards
    tools = any("tool_calls" in i for r in records for i in r.agent_infos.values())
    role_rows: dict[str, dict[str, float]] = {}
    by_role: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(turns):
        by_role[t.role].append(i)
    norms = {}
    for role, idx in by_role.items():
        ts = [turns[i] for i in idx]
        row = {
            "reward": float(np.mean([rewards[i] for i in idx])),
            "role_signal": float(np.mean([t.role_reward for t in ts])),
            "resp_len": float(np.mean([_tokens(t) for t in ts])),
            "entropy_est": float(np.mean([-np.mean(t.all_logprobs) for t in ts if t.all_logprobs]))
            if any(t.all_logprobs for t in ts)
            else 0.0,
            # cut at the budget: a turn that produced tokens and no EOS (a failed call has none)
            "truncated_frac": float(np.mean([_cut(t) for t in ts])),
        }
        if tools:  # an env with tools: a role's calls per turn (a turn is one, its calls apart)
            row["tool_calls"] = float(np.mean([len(t.calls) for t in ts]))
        role_rows[role] = row
        if ts[0].policy.startswith("frozen:"):  # played by a fixed player: no gradient at all
            row["frozen"] = True
            continue
        upd = per_policy.get(ts[0].policy, {}).get("roles", {}).get(role, {})
        row.update({k: float(v) for k, v in upd.items()})
        norms[role] = row.get("grad_norm", 0.0)
    tot = sum(norms.values())
    for role in norms:
        role_rows[role]["grad_share"] = norms[role] / tot if tot > 0 else 0.0
    n = batch.role_turns
    return {
        "step": step,
        "reward": float(
            np.mean([r.rewards.get(r.turns[0].agent, 0.0) for r in records if r.turns])
        ),
        "train_acc": float(np.mean([r.correct for r in records])),
        "roles": role_rows,
        "cosine": {k: v for p in per_policy.values() for k, v in p.get("cosine", {}).items()},
        "policies": {n: p.get("policy", {}) for n, p in per_policy.items()},
        "adv": adv_stats,
        # what the step sampled (a compute-matched control is matched on these)
        "sampled": {
            "turns": len(turns),
            "tokens": int(sum(_tokens(t) for t in turns)),
            **({"tool_calls": sum(len(t.calls) for t in turns)} if tools else {}),
        },
        "flag_rate": {r: batch.flagged[r] / max(1, n[r]) for r in n},
        # programs caught writing to their judge's channel or faking an exit, per role
        "tamper_rate": {r: batch.tampered[r] / max(1, n[r]) for r in n},
        # per role, the turns whose prompt was cut in its middle to fit the context (roles
        # with none left out: a run whose prompts all fit says {})
        "prompts_cut": prompts_cut(turns),
    }


def prompts_cut(turns) -> dict[str, int]:
    """Per role, how many of ``turns`` had their prompt cut to fit the model's context
    (only roles with at least one)."""
    out: dict[str, int] = defaultdict(int)
    for t in turns:
        if any(getattr(s, "prompt_cut", 0) for s in getattr(t, "segments", (t,))):
            out[t.role] += 1
    return dict(out)
