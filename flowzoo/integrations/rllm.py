"""rLLM / verl-style workflows: ``WorkflowRunner(env_id, base_url, model).run(task_id)`` plays
one flowzoo episode and returns one trajectory per role (or per agent), every step holding the
prompt, the response and the server's log-probs, and each trajectory the team reward.

Why this shape: rLLM's workflow engine and verl's agent loop drive a workflow through an
OpenAI-compatible base URL that their gateway serves, capturing token ids and log-probs for
the trainer; a workflow only needs to turn a task into named trajectories with rewards. This
runner is that, over flowzoo's AEC env and :class:`~flowzoo.agents.models.endpoint.EndpointPolicy`
(no rLLM code: it is not on the package index, and its API moves). Plugging it in: subclass
rLLM's ``Workflow`` and call :meth:`WorkflowRunner.arun` from its ``run(task, uid)``, mapping
each :class:`Trajectory` to one of rLLM's (``docs/scale-out.md`` shows the glue).

Bad output is scored by the env (reward 0, flags on the step); a model call that fails for
good becomes an empty step flagged ``model_error`` (``on_error="empty"``, the default here).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from flowzoo.agents.models.endpoint import EndpointPolicy, EndpointSpec
from flowzoo.agents.models.players import partners
from flowzoo.envs.registry import make_env
from flowzoo.envs.wrappers.single_agent import live_agent, partner_action, turn_flags

NAME_BY = ("role", "agent")


@dataclass
class Step:
    """One turn: what the model saw and said, and what the env made of it."""

    agent: str
    role: str
    prompt: str
    response: str
    #: the server's per-token log-probs ([] where it returns none)
    logprobs: list[float] = field(default_factory=list)
    finished: bool = True
    #: the env's flags on this turn (parse failures, ...) and ``model_error``
    flags: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class Trajectory:
    """The steps one trajectory name played, in order, and the reward they share."""

    name: str
    steps: list[Step] = field(default_factory=list)
    reward: float = 0.0


@dataclass
class WorkflowEpisode:
    env_id: str
    task_id: str
    seed: int
    correct: bool
    trajectories: dict[str, Trajectory]
    #: the env's final info (the workflow's own readings: majority, verdicts, ...)
    info: dict[str, Any]


class WorkflowRunner:
    """Plays flowzoo episodes through an OpenAI-compatible endpoint (see the module doc).
    ``role_models`` plays single roles with other players (a served model, ``scripted``, a
    local checkpoint); their turns are not in the trajectories."""

    def __init__(
        self,
        env_id: str,
        base_url: str,
        model: str,
        api: str = "chat",
        name_by: str = "role",
        temperature: float = 0.7,
        role_models: dict[str, str] | None = None,
        split: str = "train",
        env_options: dict[str, Any] | None = None,
        **endpoint_options: Any,
    ) -> None:
        if name_by not in NAME_BY:
            raise ValueError(f"unknown name_by {name_by!r}; valid: {', '.join(NAME_BY)}")
        endpoint_options.setdefault("on_error", "empty")
        self.policy = EndpointPolicy(EndpointSpec(base_url.rstrip("/"), model, api),
                                     **endpoint_options)  # fmt: skip
        self.env_id, self.name_by, self.temperature = env_id, name_by, temperature
        self.env_options = {"split": split, **(env_options or {})}
        probe = make_env(env_id, **self.env_options)
        bad = sorted(set(role_models or {}) - set(probe.roles))
        if bad:
            raise ValueError(f"role_models names unknown roles {bad}; roles: {probe.roles}")
        self.budgets = probe.turn_tokens()
        self.others = partners(dict(role_models or {}), self.budgets)

    def run(self, task_id: str, seed: int = 0) -> WorkflowEpisode:
        """One episode of problem ``task_id`` (reset with ``seed``)."""
        env = make_env(self.env_id, **self.env_options)
        env.reset(seed=seed, options={"task_id": task_id})
        steps: list[Step] = []
        gen_seed = seed
        while (agent := live_agent(env)) is not None:
            role = env.role_of(agent)
            if role in self.others:
                env.step(partner_action(env, agent, self.others[role]))
                continue
            prompt = env.observe(agent)["prompt"]
            gen_seed += 1
            (g,) = self.policy.generate([prompt], self.budgets[role], self.temperature, gen_seed)
            steps.append(Step(agent, role, prompt, g.text, list(g.logprobs), g.finished,
                              ["model_error"] if g.error else [], g.error))  # fmt: skip
            env.step(g.text)
        rewards = {a: float(env.rewards[a]) for a in env.agents}
        info = dict(env.infos[env.possible_agents[0]])
        flags = turn_flags(env)
        seen: dict[str, int] = {}
        trajectories: dict[str, Trajectory] = {}
        for s in steps:
            seen[s.agent] = seen.get(s.agent, -1) + 1
            s.flags = sorted(set(s.flags) | set(flags.get((s.agent, seen[s.agent]), [])))
            name = s.role if self.name_by == "role" else s.agent
            traj = trajectories.setdefault(name, Trajectory(name, reward=rewards.get(s.agent, 0.0)))
            traj.steps.append(s)
        return WorkflowEpisode(self.env_id, task_id, seed, bool(info.get("correct", False)),
                               trajectories, info)  # fmt: skip

    async def arun(self, task_id: str, seed: int = 0) -> WorkflowEpisode:
        """:meth:`run` off the event loop (rLLM's workflows are coroutines)."""
        return await asyncio.to_thread(self.run, task_id, seed)


__all__ = ["Step", "Trajectory", "WorkflowEpisode", "WorkflowRunner"]
