"""Single-agent Gymnasium views of a workflow env, for libraries that speak Gymnasium.

``single_agent(env, "aggregator", others=...)``: one agent (or every agent of one role) is
the controlled agent; the others are played by callables. A callable is either
``fn(prompt) -> str`` (an LLM, a fixed transcript) or a scripted policy ``fn(env, agent)``
wrapped with :func:`scripted`. Rewards are the controlled agent's rewards from the AEC env.
Every argument is checked when the view is made, not at the first ``reset``: ``env`` a
``WorkflowEnv``, the controlled name one of its agents or roles, ``others`` a callable or a
dict whose keys are the *other* agents or roles (a key naming the controlled one, whose
turns are the view's actions, is refused) and whose values are callables.

Ends: the final ``info`` is the controlled agent's (for a role, its first agent's, whose
reward the view returns), with the engine's final keys whether the workflow finished or
``max_cycles`` truncated it. When ``max_cycles`` ends the episode before the controlled agent
acts, ``reset`` returns the blank final observation with that final info
(``info["ended_before_acting"]``), and the next ``step`` ignores its action and returns the
end (reward 0, ``truncated=True``): Gymnasium has no way to end an episode inside ``reset``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium.spaces import Dict as DictSpace
from gymnasium.spaces import Discrete

from flowzoo.envs.core import WorkflowEnv
from flowzoo.envs.options import short_repr as _short

TextPolicy = Callable[[str], str]


class scripted:  # noqa: N801 - reads like a function at the call site
    """Mark an ``fn(env, agent) -> str`` policy (e.g. from flowzoo.envs.scripted)."""

    def __init__(self, fn: Callable[[WorkflowEnv, str], str]) -> None:
        self.fn = fn

    def __call__(self, env: WorkflowEnv, agent: str) -> str:
        return self.fn(env, agent)

    def reseed(self, seed: int | None) -> None:
        if hasattr(self.fn, "reseed"):
            self.fn.reseed(seed)


def transcript(texts: list[str]) -> TextPolicy:
    """A fixed transcript: returns the given completions in turn (cycling)."""
    state = {"i": 0}

    def fn(prompt: str) -> str:
        t = texts[state["i"] % len(texts)]
        state["i"] += 1
        return t

    return fn


def partner_action(env: WorkflowEnv, agent: str, pol) -> str:
    """What a partner (``fn(prompt)`` or :class:`scripted`) plays as ``agent`` now."""
    if isinstance(pol, scripted):
        return pol(env, agent)
    return pol(env.observe(agent)["prompt"])


def live_agent(env: WorkflowEnv) -> str | None:
    """The agent that acts now (the terminated agents' bookkeeping steps taken), or None
    once the episode is over: the loop of every driver that plays a workflow turn by turn."""
    while not env.episode_over():
        a = env.agent_selection
        if not (env.terminations[a] or env.truncations[a]):
            return a
        env.step(None)
    return None


def turn_flags(env: WorkflowEnv) -> dict[tuple[str, int], list[str]]:
    """(agent, its turn index) -> the env's flags on that turn, from the turn log."""
    out: dict[tuple[str, int], list[str]] = {}
    count: dict[str, int] = {}
    for t in env.turn_log():
        k = count[t.agent] = count.get(t.agent, -1) + 1
        out[(t.agent, k)] = list(t.flags)
    return out


def _check_view_args(env: Any, controlled: Any, others: Any) -> set[str]:
    """The controlled agents, once every constructor argument is checked (so a bad one fails
    here, not at the first ``reset``): ``env`` a WorkflowEnv, ``controlled`` one of its agents
    or roles, ``others`` a callable or a dict naming other agents or roles (each a callable),
    covering every agent the view does not control."""
    if not isinstance(env, WorkflowEnv):
        hint = (
            " (pass its .unwrapped)"
            if isinstance(getattr(env, "unwrapped", None), WorkflowEnv)
            else ""
        )
        raise TypeError(
            f"single_agent: env={_short(env)} has type {type(env).__name__}; env must be a "
            f"flowzoo WorkflowEnv (flowzoo.make_env(...)){hint}"
        )
    names = [*env.possible_agents, *(r for r in env.roles if r not in env.possible_agents)]
    if not isinstance(controlled, str):
        raise TypeError(
            f"single_agent: controlled={_short(controlled)} has type "
            f"{type(controlled).__name__}; it must be an agent or role name: {', '.join(names)}"
        )
    if controlled in env.possible_agents:
        agents = {controlled}
    elif controlled in env.roles:
        agents = {a for a in env.possible_agents if env.role_of(a) == controlled}
    else:
        raise ValueError(
            f"single_agent: controlled={controlled!r} is neither an agent nor a role of {env}; "
            f"valid: {', '.join(names)}"
        )
    rest = [a for a in env.possible_agents if a not in agents]
    allowed = "None, a callable (fn(prompt) -> str, or scripted(fn(env, agent))) or a dict"
    if isinstance(others, dict):
        valid = [n for n in names if n not in agents and n != controlled]
        for k, pol in others.items():
            if not isinstance(k, str) or k not in valid:
                raise ValueError(
                    f"single_agent: others has key {_short(k)}, which is not another agent or "
                    f"role of {env}; valid keys: {', '.join(valid) or '(none)'}"
                )
            if not callable(pol):
                raise TypeError(
                    f"single_agent: others[{k!r}]={_short(pol)} has type "
                    f"{type(pol).__name__}; each policy must be a callable"
                )
        missing = [a for a in rest if a not in others and env.role_of(a) not in others]
    elif others is None or callable(others):
        missing = rest if others is None else []
    else:
        raise TypeError(
            f"single_agent: others={_short(others)} has type {type(others).__name__}; others "
            f"must be {allowed} by agent or role"
        )
    if missing:
        raise ValueError(
            f"single_agent: no policy for the other agents {missing}: pass others= a callable "
            "or a dict by agent or role"
        )
    return agents


class SingleAgentEnv(gym.Env):
    """A gymnasium.Env in which ``controlled`` (an agent name or a role) acts."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, env: WorkflowEnv, controlled: str, others: Any = None) -> None:
        agents = _check_view_args(env, controlled, others)
        super().__init__()
        self.env = env
        self.agents = agents
        self.controlled = controlled
        self._others = others
        first = sorted(self.agents)[0]
        self.observation_space: DictSpace = env.observation_space(first)
        self.action_space = env.action_space(first)
        self._reward_agent = first
        self._last_info: dict = {}
        self._ended_by_trunc = False
        #: the end ``reset`` already reached (the controlled agent never acted): step returns it
        self._pending_end: tuple[float, bool, bool] | None = None

    def _other_for(self, agent: str):
        o = self._others
        if o is None:
            return None
        if isinstance(o, dict):
            return o.get(agent, o.get(self.env.role_of(agent)))
        return o

    def _advance(self) -> tuple[float, bool, bool]:
        """Play the others (and dead steps) until a controlled agent must act or the end;
        at the end the controlled agent's final info is kept (not the last removed one's)."""
        env = self.env
        reward = 0.0
        while env.agents:
            a = env.agent_selection
            if a == self._reward_agent:
                reward += float(env._cumulative_rewards.get(a, 0.0))
            if env.terminations[a] or env.truncations[a]:
                if a == self._reward_agent:
                    self._last_info = dict(env.infos[a])
                    self._ended_by_trunc = bool(env.truncations[a])
                env.step(None)
                continue
            if a in self.agents:
                return reward, False, False
            env.step(partner_action(env, a, self._other_for(a)))
        return reward, not self._ended_by_trunc, self._ended_by_trunc

    def _final_obs(self) -> dict[str, Any]:
        turns = self.observation_space["turn"]
        assert isinstance(turns, Discrete)  # the engine's observation space says so
        return {"prompt": "", "turn": turns.n - 1}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        seed = self.env.check_reset(seed, options)  # before any state (the others' RNGs)
        super().reset(seed=seed)
        if seed is not None:  # stateful others (noisy experts) restart too: same seed, same episode
            pols = self._others.values() if isinstance(self._others, dict) else [self._others]
            for k, pol in enumerate(pols):
                if hasattr(pol, "reseed"):
                    pol.reseed(seed * 7919 + k)
        self.env.reset(seed=seed, options=options)
        self._last_info = {}
        self._ended_by_trunc = False
        self._pending_end = None
        reward, term, trunc = self._advance()
        if not self.env.agents:  # max_cycles ended it before the controlled agent acted
            self._pending_end = (reward, term, trunc)
            return self._final_obs(), {**self._last_info, "ended_before_acting": True}
        a = self.env.agent_selection
        return self.env.observe(a), dict(self.env.infos[a])

    def step(self, action: str):
        env = self.env
        if env.episode is None:
            raise RuntimeError(f"step() on {self.controlled!r}'s view before reset(); reset first")
        if not (action is None or isinstance(action, (str, bytes, bytearray))):
            raise TypeError(
                f"action has type {type(action).__name__}; the {self.controlled!r} view's action "
                f"is a str (the completion, {self.action_space})"
            )
        if self._pending_end is not None:
            reward, term, trunc = self._pending_end
            self._pending_end = None
            return self._final_obs(), reward, term, trunc, dict(self._last_info)
        if not env.agents or env.agent_selection not in self.agents:
            raise RuntimeError("step() called after the episode ended; call reset()")
        env.step(action)
        reward, term, trunc = self._advance()
        if env.agents:
            nxt = env.agent_selection
            return env.observe(nxt), reward, False, False, dict(env.infos[nxt])
        return self._final_obs(), reward, term, trunc, dict(self._last_info)

    def render(self) -> str:
        return self.env.transcript()


def single_agent(env: WorkflowEnv, agent_or_role: str, others: Any = None) -> SingleAgentEnv:
    """A single-agent Gymnasium view (see :class:`SingleAgentEnv`)."""
    return SingleAgentEnv(env, agent_or_role, others)
