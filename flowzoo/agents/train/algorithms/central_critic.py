"""MAPPO-style centralised value for PPO (``algo="ppo"``, ``critic_input="central"``): the
critic reads the whole episode's transcript up to the turn it values, every agent's turns
of every role, not only the prompt the acting agent saw.

Source: MAPPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative
Multi-Agent Games", arXiv 2103.01955): decentralised actors, a centralised value function
over the global state, used only in training. For LLM agents the global state of a turn is
the transcript so far (issue 62 names CoMLRL's MAAC as the LLM-agent anchor of the same
idea). Why it matters here: Voting's second solver
never sees the first's answer and its local critic must guess what the team will do; the
central one reads it.

What the critic reads for turn ``t`` of an episode (:func:`critic_prompt`): the prompt's BOS
(where it has one), then ``"[<agent>] <text>\\n"`` for every earlier turn of the episode in
the order it was played (Voting's parallel solvers: the order of their records), then the
acting agent's own prompt, then its completion, whose positions the value head reads. The
policy's log-probs stay those of the agent's own prompt: only the critic is centralised.
Where the transcript does not fit the model's context beside the prompt and completion, its
oldest tokens are cut (the prompt is never cut here; it fit when it was sampled).

GAE, the value loss and the clipped surrogate are PPO's (:mod:`.ppo`); the one change to the
update is :func:`outputs`, which scores the values on these inputs (a second forward pass per
micro-batch, so the critic's gradient flows through the shared backbone from its own input).
Refused at the config for algorithms without a critic, one-agent envs and tree rollouts
(whose records hold only the branching turn).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from flowzoo.agents.train.algorithms.base import turn_outputs
from flowzoo.agents.train.losses import Advantages, model_outputs
from flowzoo.agents.train.segments import critic_pieces, per_turn, pieces

if TYPE_CHECKING:
    from flowzoo.agents.train.batch import Batch
    from flowzoo.agents.train.rollout import TurnRecord


@dataclass
class CentralAdvantages(Advantages):
    """PPO's advantages with, per turn (``turn.index``), the token ids its critic reads
    before each generated segment (one for a turn without tool calls; None for turns with no
    tokens)."""

    critic_prompts: list[list[list[int]] | None] = field(default_factory=list)


def earlier_turns(batch: Batch, t: TurnRecord) -> list[TurnRecord]:
    """The turns of ``t``'s episode played before it, every agent's, in order."""
    turns = batch.records[t.episode].turns
    for k, u in enumerate(turns):
        if u is t:
            return list(turns[:k])
    raise ValueError(f"turn {t.index} is not in its episode {t.episode}'s record")


def transcript(earlier: Sequence[TurnRecord]) -> str:
    """The text of earlier turns as the critic reads it: one ``[agent] text`` line each."""
    return "".join(f"[{u.agent}] {u.text}\n" for u in earlier)


def critic_prompt(policy: Any, t: Any, text: str) -> list[int]:
    """The ids ``policy``'s critic reads before ``t``'s completion (``t``: a turn, or one
    segment of a turn with tool calls): BOS (where the prompt starts with it), the
    transcript ``text`` (its oldest tokens cut to fit the context), then ``t``'s own prompt."""
    prompt = list(t.prompt_ids)
    ids = list(policy.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []
    room = int(policy.max_context) - len(prompt) - len(t.completion_ids)
    ids = ids[len(ids) - room :] if 0 < room < len(ids) else (ids if room > 0 else [])
    bos = getattr(policy, "bos_id", None)
    head = prompt[:1] if prompt and bos is not None and prompt[0] == bos else []
    return head + ids + prompt[len(head) :]


def critic_prompts(
    policy: Any, batch: Batch, turns: Sequence[TurnRecord]
) -> dict[int, list[list[int]]]:
    """Each turn's critic inputs (by ``turn.index``), one per generated segment (the earlier
    turns' messages, then the segment's own prompt), tokenised by the policy that plays it."""
    out = {}
    for t in turns:
        text = transcript(earlier_turns(batch, t))
        out[t.index] = [critic_prompt(policy, s, text) for s in t.segments]
    return out


def outputs(
    policy: Any,
    head: torch.nn.Module | None,
    turns: Sequence[TurnRecord],
    adv: Advantages,
    temperature: float,
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """A micro-batch's log-probs (after each turn's own prompt) and, where ``adv`` carries
    critic inputs, its values read after those; otherwise the one scoring pass of every
    algorithm (:func:`~.base.turn_outputs`), so a local critic's update is unchanged."""
    prompts = getattr(adv, "critic_prompts", None)
    if head is None or not prompts:
        return turn_outputs(policy, head, turns, adv, temperature)
    p_ids, completions = pieces(turns)
    lps, _ = model_outputs(policy, None, p_ids, completions, temperature)
    central = critic_pieces(turns, prompts)
    _, values = model_outputs(policy, head, central, completions, temperature)
    return per_turn(turns, lps), per_turn(turns, values)


__all__ = [
    "CentralAdvantages",
    "critic_prompt",
    "critic_prompts",
    "earlier_turns",
    "outputs",
    "transcript",
]
