"""Drive many env instances at once: at every tick gather the agents whose turn it is, group
their prompts by policy, generate one batch per policy, step the envs, record every turn.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from flowzoo.agents.models.policy import Policy
from flowzoo.agents.train.segments import Segment
from flowzoo.agents.train.toolturns import ToolTurns, toolbox_of
from flowzoo.envs.core import Cut


@dataclass
class TurnRecord:
    """One agent turn, with what the update needs (ids, old log-probs) and the reward."""

    episode: int
    agent: str
    role: str
    #: this agent's turn index within the episode (0 for its first turn)
    turn: int
    #: the global turn index within the episode
    step: int
    policy: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    finished: bool
    #: what training uses: the env's reward for this turn (mixed by the env, the one place)
    reward: float = 0.0
    #: the env's two parts of it, for metrics only
    team_reward: float = 0.0
    role_reward: float = 0.0
    #: position in the step's flat list of turns (advantages are arrays aligned with it)
    index: int = -1
    #: the env's flags on this turn (fallbacks, ``cut_at_budget``, ``reward_tamper``), read
    #: when its episode ends: the step's flag and tamper rates count the turns it trains on
    flags: tuple[str, ...] = ()
    #: prompt tokens cut from the prompt's middle to fit the model's context (0: it fit)
    prompt_cut: int = 0
    #: the turn's tool calls as generated, in order (the fields above are its message's);
    #: () without tools (:mod:`flowzoo.agents.train.segments`)
    calls: tuple[Segment, ...] = ()

    @property
    def segments(self) -> tuple[Any, ...]:
        """Every generated piece of the turn in order: its calls, then its message (this
        record, which has a segment's fields)."""
        return (*self.calls, self)

    @property
    def n_tokens(self) -> int:
        """The tokens the turn generated, its calls' included (what the loss trains on)."""
        return len(self.completion_ids) + sum(len(s.completion_ids) for s in self.calls)

    @property
    def all_logprobs(self) -> list[float]:
        """The sampled log-probs of every generated token, in order (the update's old ones)."""
        if not self.calls:
            return self.logprobs
        return [x for s in self.segments for x in s.logprobs]

    @property
    def cut(self) -> bool:
        """A segment of the turn was cut at the token budget (its end is not the model's);
        a failed served call (no tokens) is not a cut."""
        return any(not s.finished and bool(s.completion_ids) for s in self.segments)

    @classmethod
    def of(
        cls,
        g,
        episode: int,
        agent: str,
        role: str,
        turn: int,
        step: int,
        policy: str,
        calls: tuple[Segment, ...] = (),
    ) -> TurnRecord:
        """The record of one sampled completion ``g`` (a :class:`Generation`), its turn's
        message, after its ``calls``."""
        return cls(
            episode,
            agent,
            role,
            turn,
            step,
            policy,
            g.prompt_ids,
            g.completion_ids,
            g.logprobs,
            g.text,
            g.finished,
            prompt_cut=int(getattr(g, "prompt_cut", 0) or 0),  # a served player's has none
            calls=calls,
        )


@dataclass
class EpisodeRecord:
    """One finished episode: its turns and the final bookkeeping."""

    index: int
    env_id: str
    task_id: str
    group: Any
    turns: list[TurnRecord] = field(default_factory=list)
    rewards: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    #: every agent's final info
    agent_infos: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return bool(self.info.get("correct", False))


@runtime_checkable
class RolloutEnv(Protocol):
    """What the rollout relies on: PettingZoo's AEC surface plus three of flowzoo's
    (:class:`~flowzoo.envs.core.WorkflowEnv` has all of it). ``pending()`` is optional: an env
    without it offers its current agent only (no batched parallel turns)."""

    env_id: str
    agents: list[str]
    possible_agents: list[str]
    agent_selection: str
    infos: dict[str, dict]
    rewards: dict[str, float]
    terminations: dict[str, bool]
    truncations: dict[str, bool]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None: ...

    def step(self, action: str | None) -> None: ...

    def observe(self, agent: str) -> dict: ...

    def role_of(self, agent: str) -> str:
        """The role an agent plays (the policy is chosen by role)."""
        ...

    def turn_log(self) -> tuple:
        """The episode's turns so far (each with ``agent``, ``role``, ``flags``)."""
        ...

    def episode_over(self) -> bool: ...


def _advance_dead(env) -> None:
    """Step through terminated agents (reward bookkeeping) until a live one or the end."""
    while env.agents:
        a = env.agent_selection
        if env.terminations[a] or env.truncations[a]:
            env.step(None)
        else:
            return


#: a turn's token budget: one for every role, or one per role
TokenLimit = int | Mapping[str, int]
#: a turn's sampling temperature: one for every role, or one per role
Temperature = float | Mapping[str, float]


def limit_for(max_new_tokens: TokenLimit, role: str) -> int:
    """The token budget of a ``role`` turn."""
    return int(_for_role(max_new_tokens, role, "max_new_tokens"))


def temperature_for(temperature: Temperature, role: str) -> float:
    """The sampling temperature of a ``role`` turn."""
    return float(_for_role(temperature, role, "temperature"))


def _for_role(value, role: str, what: str):
    if not isinstance(value, Mapping):
        return value
    if role not in value:
        raise ValueError(f"no {what} for role {role!r}; given for {sorted(value)}")
    return value[role]


def play(pol, items: list[tuple[Any, str, str]], limit: int, temperature: float, generator):
    """One batch of turns ``(env, agent, prompt)`` played by ``pol``: sampled from the prompts,
    or, for a player that acts on the env's state (the scripted expert), from the envs."""
    if getattr(pol, "acts_on_env", False):
        return pol.act([(env, agent) for env, agent, _ in items])
    return pol.generate(
        [p for _, _, p in items],
        max_new_tokens=limit,
        temperature=temperature,
        generator=generator,
    )


def rollout(
    envs: Sequence[RolloutEnv],
    policy_for: Callable[[str], tuple[str, Policy]],
    reset_options: Sequence[dict[str, Any] | None] | None = None,
    seeds: Sequence[int | None] | None = None,
    groups: Sequence[Any] | None = None,
    max_new_tokens: TokenLimit = 96,
    temperature: Temperature = 0.7,
    generator: torch.Generator | None = None,
    reset: bool = True,
) -> list[EpisodeRecord]:
    """Play one episode in every env. ``policy_for(role) -> (policy name, Policy)``;
    ``max_new_tokens`` and ``temperature`` one value or one per role. ``reset=False`` continues each env from
    its current state (only new turns recorded; an env left inside a tool turn: the calls
    made before are not). An env with tools: a call and its message are one turn, its calls
    in :attr:`TurnRecord.calls` (:mod:`.toolturns`)."""
    n = len(envs)
    reset_options = list(reset_options) if reset_options is not None else [None] * n
    seeds = list(seeds) if seeds is not None else [None] * n
    groups = list(groups) if groups is not None else list(range(n))
    records: list[EpisodeRecord] = []
    turn_counts: list[dict[str, int]] = []
    tools = ToolTurns(envs)
    for i, env in enumerate(envs):
        if reset:
            env.reset(seed=seeds[i], options=reset_options[i])
        records.append(EpisodeRecord(i, env.env_id, _task_id(env), groups[i]))
        counts: dict[str, int] = defaultdict(int)
        for t in env.turn_log():
            counts[t.agent] += 1
        turn_counts.append(counts)
    live = set(range(n))
    while live:
        # one batch per policy, token budget and temperature; an env offers its current agent
        # and the agents after it whose turns do not depend on it (Voting's solvers)
        by_policy: dict[tuple[str, int, float], list[tuple[int, str, str]]] = defaultdict(list)
        pol_obj: dict[str, Policy] = {}
        queued: dict[int, list[str]] = {}
        for i in sorted(live):
            env = envs[i]
            turns = _pending(env)
            pols = [policy_for(env.role_of(a)) for a, _ in turns]
            if any(getattr(p, "acts_on_env", False) for _, p in pols):
                turns, pols = turns[:1], pols[:1]  # it reads the env's state: its turn only
            queued[i] = [a for a, _ in turns]
            for (agent, prompt), (name, pol) in zip(turns, pols, strict=True):
                if tools.on[i] and tools.waits(i, agent, prompt):
                    continue  # sampled before an earlier agent's call, on this prompt
                role = env.role_of(agent)
                pol_obj[name] = pol
                key = (name, limit_for(max_new_tokens, role), temperature_for(temperature, role))
                by_policy[key].append((i, agent, prompt))
        made: dict[tuple[int, str], tuple[str, Any, str]] = {}
        for (name, limit, temp), items in by_policy.items():
            gens = play(
                pol_obj[name], [(envs[i], a, p) for i, a, p in items], limit, temp, generator
            )
            for (i, agent, prompt), g in zip(items, gens, strict=True):
                if tools.on[i]:  # a sample that may be a call ends with it
                    g = tools.cut(envs[i], agent, pol_obj[name], g)
                made[(i, agent)] = (prompt, g, name)
        for i, agents in queued.items():
            env = envs[i]
            if tools.on[i]:
                tools.take(i, agents, made)
                _step_tools(env, i, agents, made, records[i], turn_counts[i], tools, live)
                continue
            for agent in agents:
                prompt, g, name = made[(i, agent)]
                if env.episode_over() or env.agent_selection != agent:
                    break  # the env went elsewhere: the rest is sampled again next round
                if env.observe(agent)["prompt"] != prompt:
                    break
                role = env.role_of(agent)
                records[i].turns.append(
                    TurnRecord.of(
                        g, i, agent, role, turn_counts[i][agent], len(records[i].turns), name
                    )
                )
                turn_counts[i][agent] += 1
                env.step(as_action(g))
                if env.episode_over():
                    _close(records[i], env)
                    live.discard(i)
    return records


def _step_tools(
    env, i: int, agents: list[str], made: dict, rec: EpisodeRecord, counts, tools, live: set
) -> None:
    """Step env ``i`` (one with tools) on this round's samples, in order: a call keeps its
    agent's turn open (its segment kept) and ends the round for this env, whose later
    samples wait for their turn; a message closes the turn with its calls. An episode cut by
    ``max_cycles`` after a call records that unfinished turn too (reward 0, flagged)."""
    for k, agent in enumerate(agents):
        prompt, g, name = made.pop((i, agent))
        if env.episode_over() or env.agent_selection != agent:
            break
        if env.observe(agent)["prompt"] != prompt:
            break
        role = env.role_of(agent)
        before = len(env.turn_log())
        env.step(as_action(g))
        called = len(env.turn_log()) == before  # no turn was closed: a call, the turn goes on
        if called and not env.episode_over():
            tools.open[(i, agent)].append(Segment.of(g))
            tools.keep(i, agents[k + 1 :], made)
            return
        calls = tuple(tools.open.pop((i, agent), ()))
        t = TurnRecord.of(g, i, agent, role, counts[agent], len(rec.turns), name, calls)
        counts[agent] += 1
        if not called:
            rec.turns.append(t)
        if env.episode_over():
            _close(rec, env, unfinished=t if called else None)
            live.discard(i)
            return
    tools.keep(i, agents, made)


def tools_refused_in_tree(envs: Sequence[RolloutEnv]) -> None:
    """Refuse envs with tools in a tree rollout: its siblings branch at a turn and keep only
    that turn, and a turn with calls spans several samples, so which states the siblings
    share (the turn's start or each call) is not decided yet; independent rollouts play
    tool turns (``rollout``)."""
    for env in envs:
        tb = toolbox_of(env)
        if tb is not None:
            raise NotImplementedError(
                f"{getattr(env, 'env_id', env)} has tools={list(tb.names)}: tree rollouts "
                "through tool turns are not built (a sibling would branch inside a turn that "
                "spans several samples); use rollout='independent' with tools"
            )


def _pending(env) -> list[tuple[str, str]]:
    """The turns an env offers for this batch: ``env.pending()`` where it has one (flowzoo's
    workflow envs), else its current agent."""
    if hasattr(env, "pending"):
        return env.pending()
    agent = env.agent_selection
    return [(agent, env.observe(agent)["prompt"])]


def as_action(g) -> str:
    """A generation as the env's action: a completion cut at the token budget is marked
    (:class:`~flowzoo.envs.core.Cut`), so the env flags it and applies its overlong penalty."""
    cut = not g.finished and getattr(g, "error", None) is None  # a failed call is not a cut
    return Cut(g.text) if cut else g.text


def turn_reward(info: dict, turn: int, agent_reward: float) -> float:
    """What one turn trains on: the env's reward for that turn of its agent
    (``infos["turn_rewards"]``), else the agent's reward (an env that gives one per agent)."""
    per_turn = info.get("turn_rewards")
    if isinstance(per_turn, list) and 0 <= turn < len(per_turn):
        return float(per_turn[turn])
    return float(agent_reward)


def _close(rec: EpisodeRecord, env, unfinished: TurnRecord | None = None) -> None:
    """Copy a finished episode's rewards and infos onto its record and turns; ``unfinished``:
    a turn with calls that ``max_cycles`` cut before its message (not in the env's turn log:
    flagged ``max_cycles``, its reward the agent's, 0 for a truncated episode)."""
    rec.rewards = {a: float(env.rewards[a]) for a in env.agents}
    rec.info = dict(env.infos[env.possible_agents[0]])
    by_agent = {a: dict(env.infos[a]) for a in env.agents}
    rec.agent_infos = by_agent
    for t in rec.turns:
        t.reward = turn_reward(by_agent[t.agent], t.turn, rec.rewards.get(t.agent, 0.0))
        t.team_reward = float(by_agent[t.agent].get("team_reward", 0.0))
        t.role_reward = float(by_agent[t.agent].get("role_reward", 0.0))
    _read_flags(rec.turns, env.turn_log())
    if unfinished is not None:
        t, info = unfinished, by_agent[unfinished.agent]
        t.reward = turn_reward(info, t.turn, rec.rewards.get(t.agent, 0.0))
        t.team_reward = float(info.get("team_reward", 0.0))
        t.role_reward = float(info.get("role_reward", 0.0))
        t.flags = ("max_cycles",)
        rec.turns.append(t)
    _advance_dead(env)


def _read_flags(turns: list[TurnRecord], log: tuple) -> None:
    """Copy each turn's flags from the env's turn log; ``turns`` are the log's last entries
    (a continued episode's earlier turns were recorded elsewhere)."""
    for t, view in zip(turns, log[len(log) - len(turns) :], strict=False):
        if view.agent == t.agent:
            t.flags = tuple(view.flags)


def _task_id(env) -> str:
    """The problem an env is playing, as its ``infos`` report it (read while agents act)."""
    return str(next(iter(env.infos.values()))["task_id"])


def tree_rollout(
    envs: Sequence[RolloutEnv],
    policy_for: Callable[[str], tuple[str, Policy]],
    reset_options: Sequence[dict[str, Any] | None],
    branch: int,
    rng,
    seeds: Sequence[int | None] | None = None,
    max_new_tokens: TokenLimit = 96,
    temperature: Temperature = 0.7,
    generator: torch.Generator | None = None,
) -> list[EpisodeRecord]:
    """Tree rollouts: at every turn of each problem's trunk episode, ``branch`` completions
    are sampled from the same state; each sibling is played to the end with one sampled
    continuation to get its reward; the trunk then continues along one sibling chosen
    **uniformly at random** (``rng``). One record per sibling holds only its branching turn,
    so role-and-turn GRPO groups share one prompt. Continuation turns are not returned."""
    import copy

    tools_refused_in_tree(envs)
    n = len(envs)
    seeds = list(seeds) if seeds is not None else [None] * n
    for i, env in enumerate(envs):
        env.reset(seed=seeds[i], options=reset_options[i])
    trunks = list(envs)
    out: list[EpisodeRecord] = []
    live = [i for i in range(n) if trunks[i].agents]
    while live:
        siblings, after, meta = [], [], []
        for i in live:
            env = trunks[i]
            agent = env.agent_selection
            name, pol = policy_for(env.role_of(agent))
            prompt = env.observe(agent)["prompt"]
            role = env.role_of(agent)
            gens = play(
                pol,
                [(env, agent, prompt)] * branch,
                limit_for(max_new_tokens, role),
                temperature_for(temperature, role),
                generator,
            )
            turn_idx = int(env.infos[agent]["turn"])
            tid = _task_id(env)
            for g in gens:
                c = copy.deepcopy(env)
                c.step(as_action(g))
                after.append(copy.deepcopy(c))
                siblings.append(c)
                meta.append(
                    (i, agent, env.role_of(agent), turn_idx, len(env.turn_log()), name, g, tid)
                )
        unfinished = [k for k, c in enumerate(siblings) if not c.episode_over()]
        finals: dict[int, dict[str, dict]] = {}
        final_rewards: dict[int, dict[str, float]] = {}
        if unfinished:
            cont = rollout(
                [siblings[k] for k in unfinished],
                policy_for,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                generator=generator,
                reset=False,
            )
            finals = {k: r.agent_infos for k, r in zip(unfinished, cont, strict=True)}
            final_rewards = {k: r.rewards for k, r in zip(unfinished, cont, strict=True)}
        for k, c in enumerate(siblings):
            i, agent, role, turn_idx, step, name, g, tid = meta[k]
            infos = finals.get(k) or {a: dict(c.infos[a]) for a in c.agents}
            info = dict(infos.get(agent, {}))
            rec = EpisodeRecord(len(out), c.env_id, tid, tid, info=info)
            # the env's own reward for this agent (the env is the one place rewards are mixed)
            got = final_rewards[k] if k in finals else {a: c.rewards[a] for a in c.agents}
            reward = float(got.get(agent, 0.0))
            rec.rewards = {agent: reward}
            t = TurnRecord.of(g, rec.index, agent, role, turn_idx, step, name)
            t.reward = turn_reward(info, turn_idx, reward)
            t.team_reward = float(info.get("team_reward", 0.0))
            t.role_reward = float(info.get("role_reward", 0.0))
            log = c.turn_log()  # the sibling played to its end: its branching turn's flags
            if step < len(log) and log[step].agent == agent:
                t.flags = tuple(log[step].flags)
            rec.turns.append(t)
            out.append(rec)
        nxt = []
        for j, i in enumerate(live):
            b = rng.randrange(branch)
            trunk = after[j * branch + b]
            _advance_dead(trunk)
            trunks[i] = trunk
            if not trunk.episode_over():
                nxt.append(i)
        live = nxt
    return out
