"""What a rollout does differently for an env whose roles call tools (``make_env(id,
tools=[...])``, docs/tools.md): a sample that may be a call is cut where the call ends, a call
keeps its agent's turn open, and samples drawn for the agents after it wait for their turn.

Why a sample is cut after it is drawn, not stopped while it is drawn: every backend returns
whole samples (flowzoo's batched sampler, vLLM, a served endpoint), and the tokens a sample
drew after its call's closing fence do not change the tokens before it; cut at the first
token where :func:`~flowzoo.envs.tools.call_end` finds a complete call, a sample is exactly
one that stopped there. The model's guess of the result after its call is never run, shown
or trained. The cost is the tokens drawn past the fence (a row of a batch decodes until its
EOS or its budget, as any row does).

Why samples wait: an env offers its acting agent and the agents after it whose turns do not
depend on it (Voting's solvers) in one batch; when the first one calls, the env stays with
it, and the others' samples (drawn on prompts that are still theirs) are kept and stepped
when their turn comes, instead of being drawn again at every call of the one before them.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from flowzoo.agents.train.segments import Segment
from flowzoo.envs.tools import call_end, calls_left, tool_roles, toolbox_of


def stop_at_call(policy: Any, g: Any) -> Any:
    """``g`` (a :class:`~flowzoo.agents.models.policy.Generation`) cut just past its first
    complete call (its closing fence line's newline), finished there; ``g`` itself when it
    holds none. With token ids: the fewest tokens whose text holds the call (log-probs cut
    with them). A served model's sample has text only: its text is cut, and its log-probs,
    which cannot be matched to the cut text, are dropped (it is never trained)."""
    end = call_end(g.text)
    if end is None:
        return g
    ids = list(g.completion_ids)
    decode = getattr(policy, "decode", None)
    if not ids or decode is None:
        return dataclasses.replace(g, text=g.text[:end], logprobs=[], finished=True)
    lo, hi = 1, len(ids)  # the first k whose text holds a whole call (it stays whole after)
    while lo < hi:
        mid = (lo + hi) // 2
        if call_end(decode(ids[:mid])) is None:
            lo = mid + 1
        else:
            hi = mid
    text = decode(ids[:lo])
    if call_end(text) is None:  # a tokenizer whose prefixes do not decode to prefixes
        return g
    return dataclasses.replace(
        g, completion_ids=ids[:lo], logprobs=list(g.logprobs[:lo]), text=text, finished=True
    )


class ToolTurns:
    """A rollout's tool bookkeeping: which envs have tools, each open turn's calls so far,
    and the samples waiting for their agent's turn (see the module doc)."""

    def __init__(self, envs: Sequence[Any]) -> None:
        self.on = [toolbox_of(e) is not None for e in envs]
        #: (env, agent) -> the segments of its running turn's calls
        self.open: dict[tuple[int, str], list[Segment]] = defaultdict(list)
        #: env -> agent -> (prompt, sample, policy name) drawn before its turn came
        self.waiting: dict[int, dict[str, tuple[str, Any, str]]] = defaultdict(dict)

    def waits(self, i: int, agent: str, prompt: str) -> bool:
        """Whether a sample drawn for ``agent`` on this very ``prompt`` waits (no new one)."""
        kept = self.waiting[i].get(agent)
        return kept is not None and kept[0] == prompt

    def cut(self, env: Any, agent: str, policy: Any, g: Any) -> Any:
        """``g`` cut at its call where ``agent`` may still call (else its message, whole)."""
        return stop_at_call(policy, g) if calls_left(env, agent) > 0 else g

    def take(self, i: int, agents: Sequence[str], made: dict) -> None:
        """Put the waiting samples of env ``i``'s queued ``agents`` into ``made``."""
        for a in agents:
            if (i, a) not in made and a in self.waiting[i]:
                made[(i, a)] = self.waiting[i].pop(a)

    def keep(self, i: int, agents: Sequence[str], made: dict) -> None:
        """Samples of env ``i`` not stepped this round wait for their agent's turn (one per
        agent; the prompt is checked when it is used)."""
        for a in agents:
            if (i, a) in made:
                self.waiting[i][a] = made[(i, a)]


__all__ = ["ToolTurns", "stop_at_call", "tool_roles", "toolbox_of"]
