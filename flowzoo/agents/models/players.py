"""Who plays a role besides a trained policy: a served model (:mod:`endpoint`), the
workflow's scripted expert, or a frozen local model. The spec strings here are the ones
``role_models`` and ``flowzoo eval --model`` take.

- ``tiny-s`` | ``tiny-m`` | ``tiny-l`` | a local checkpoint dir: a local model;
- ``openai:<base url>#<model>`` | ``openai-completions:<base url>#<model>``: a served model;
- ``scripted`` | ``scripted:<error rate>``: the workflow's role-aware expert (a baseline
  partner that never learns; it acts on the env's state, not on the prompt).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from flowzoo.agents.models.endpoint import EndpointPolicy, is_endpoint_spec
from flowzoo.agents.models.policy import Generation

if TYPE_CHECKING:
    from flowzoo.envs.core import WorkflowEnv


class ScriptedRole:
    """The workflow's scripted expert as a frozen player (mistakes at ``error_rate``)."""

    frozen = True
    #: the rollout hands it ``(env, agent)`` pairs instead of prompts
    acts_on_env = True

    def __init__(self, error_rate: float = 0.0, seed: int = 0) -> None:
        from flowzoo.envs.scripted import ExpertPolicy

        if not 0 <= error_rate <= 1:
            raise ValueError(f"scripted error rate must be in [0, 1], got {error_rate}")
        self.error_rate = error_rate
        self.expert = ExpertPolicy(error_rate, seed)

    def __repr__(self) -> str:
        return f"ScriptedRole(error_rate={self.error_rate})"

    def act(self, pairs: list[tuple[WorkflowEnv, str]]) -> list[Generation]:
        """One expert action per ``(env, agent)``."""
        return [Generation([], [], [], self.expert(env, agent), True) for env, agent in pairs]

    def sync_backend(self) -> None:
        """Nothing to push: never trained."""


def is_scripted_spec(spec: str) -> bool:
    return spec == "scripted" or spec.startswith("scripted:")


def is_local_spec(spec: str) -> bool:
    """A tiny scale or a local path (not a served model, not the scripted expert)."""
    return not (is_endpoint_spec(spec) or is_scripted_spec(spec))


def frozen_player(spec: str, seed: int = 0, **endpoint_options):
    """A never-trained player from a spec: an :class:`EndpointPolicy`, a
    :class:`ScriptedRole`, or a local :class:`~flowzoo.agents.models.policy.Policy`."""
    if is_endpoint_spec(spec):
        return EndpointPolicy(spec, **endpoint_options)
    if is_scripted_spec(spec):
        rate = spec.partition(":")[2]
        try:
            return ScriptedRole(float(rate) if rate else 0.0, seed)
        except ValueError:
            raise ValueError(
                f"bad scripted spec {spec!r}; expected 'scripted' or 'scripted:<error rate>'"
            ) from None
    from flowzoo.tiny.build import resolve_model

    return _frozen_local(resolve_model(spec))


@functools.lru_cache(maxsize=4)
def _frozen_local(path: str):
    """A local model as a fixed player, loaded once per path: adapters build partners per
    episode (verifiers) or per trajectory (SkyRL), and a frozen model is never changed."""
    from flowzoo.agents.models.policy import Policy

    pol = Policy(path)
    pol.model.requires_grad_(False)
    pol.frozen = True
    return pol


def partner(player, max_new_tokens: int = 96, temperature: float = 0.0):
    """A player as the partner form of :func:`flowzoo.envs.wrappers.single_agent` (and the
    engine adapters built on it): ``fn(prompt) -> str``, or ``scripted(fn(env, agent))`` for a
    player that acts on the env's state. Greedy by default: a fixed partner."""
    from flowzoo.envs.wrappers.single_agent import scripted

    if getattr(player, "acts_on_env", False):
        return scripted(lambda env, agent: player.act([(env, agent)])[0].text)
    return lambda prompt: player.generate([prompt], max_new_tokens, temperature)[0].text


def partners(specs: dict[str, str], budgets: dict[str, int], **endpoint_options) -> dict:
    """role -> partner callable for role -> player spec (a served model's failures become
    flagged empty turns unless ``on_error`` says otherwise); each role's token budget."""
    endpoint_options.setdefault("on_error", "empty")
    return {
        role: partner(frozen_player(spec, **endpoint_options), budgets.get(role, 96))
        for role, spec in specs.items()
    }


__all__ = [
    "ScriptedRole",
    "frozen_player",
    "is_local_spec",
    "is_scripted_spec",
    "partner",
    "partners",
]
