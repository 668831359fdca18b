"""The generated pieces of a turn with tool calls, and how the update reads them.

A turn with calls is several generations: each call (the action the env ran) and the final
message, each sampled from its own observation (the turn's prompt, then every earlier call and
its result). :class:`~flowzoo.agents.train.rollout.TurnRecord` keeps its message as its own
ids and its calls in ``calls``, as :class:`Segment` s.

Why one sample per generated segment, with the observation it was sampled from as its prompt,
and not one sequence with a loss mask over the tool output: the env's observation after a
call is not the earlier prompt plus the tokens generated since (the chat template closes the
user message before the reply; the exchange ends with "[N tool calls left]"; a long exchange
is cut), so one concatenated sequence would score each segment after a context the model
never saw, and its log-probs would differ from the sampled ones without any update having
happened. Scored after its own prompt, each segment's recomputed log-probs are the sampled
ones, on every backend (a served model's prompt is text too). What the loss sees: each
generated token exactly once (as its own segment's completion; later segments see it as
prompt), tool output never (it is only ever prompt).

The turn is still one unit everywhere else: one reward, one advantage (GRPO's group member,
PPO's step, whose per-token advantages run over the segments' tokens in order), one turn in
the per-role counts, one sequence for ``seq-mean-token-mean``. :func:`pieces` and
:func:`per_turn` are the two halves of that: every segment of a micro-batch's turns into one
scoring pass, then each turn's per-token tensors concatenated back. A turn without calls is
one piece, returned as it is: the path without tools runs the same passes on the same inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Segment:
    """One generated piece of a turn: a tool call as the policy sampled it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    finished: bool
    #: prompt tokens cut from the prompt's middle to fit the context (0: it fit)
    prompt_cut: int = 0

    @classmethod
    def of(cls, g: Any) -> Segment:
        """The segment of one sampled generation (a :class:`Generation`)."""
        return cls(
            list(g.prompt_ids),
            list(g.completion_ids),
            list(g.logprobs),
            g.text,
            bool(g.finished),
            int(getattr(g, "prompt_cut", 0) or 0),
        )


def pieces(turns: Sequence[Any]) -> tuple[list[list[int]], list[list[int]]]:
    """(prompt ids, completion ids) of every generated segment of ``turns``, turn by turn,
    each turn's calls first and its message last: one scoring pass's inputs."""
    prompts, completions = [], []
    for t in turns:
        for s in t.segments:
            prompts.append(s.prompt_ids)
            completions.append(s.completion_ids)
    return prompts, completions


def per_turn(turns: Sequence[Any], outs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The per-token tensors of :func:`pieces`' segments joined back per turn (its tokens in
    the order they were generated); a turn of one segment gets its tensor itself."""
    got, k = [], 0
    for t in turns:
        n = len(t.calls) + 1
        got.append(outs[k] if n == 1 else torch.cat(list(outs[k : k + n])))
        k += n
    if k != len(outs):
        raise ValueError(f"{len(outs)} scored segments for turns holding {k}")
    return got


def critic_pieces(turns: Sequence[Any], prompts: Sequence[Any]) -> list[list[int]]:
    """What a critic reads before each segment of ``turns`` (:func:`pieces`' order), from
    ``prompts[t.index]``: one list of ids per segment of the turn."""
    out = []
    for t in turns:
        p = prompts[t.index]
        if p is None:
            raise ValueError(f"no critic input was built for turn {t.index}")
        out.extend(p)
    return out


__all__ = ["Segment", "critic_pieces", "per_turn", "pieces"]
