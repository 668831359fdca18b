"""Scripted policies for every role: oracle, always-wrong, garbage and noisy experts.

They drive the envs in tests, demos and benchmarks, and (noisy experts) write the corpus the
tiny models pretrain on. A policy is ``policy(env, agent) -> str``; oracles read the gold
answer from ``env.episode.task``, which no learning agent can see.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from flowzoo.envs.core import WorkflowEnv

Policy = Callable[[WorkflowEnv, str], str]


def oracle_policy(env: WorkflowEnv, agent: str) -> str:
    """Always right: the reference answer, correct verdicts, correct candidate choices."""
    return expert_policy(0.0)(env, agent)


def wrong_policy(env: WorkflowEnv, agent: str) -> str:
    """Always wrong but well formed: wrong answers, wrong choices, rejects everything."""
    return env.workflow.wrong_action(env.episode, agent, env.role_of(agent))


def garbage_policy(seed: int = 0) -> Policy:
    """Random junk: empty, whitespace, huge, non-UTF-8-looking, unbalanced LaTeX, numbers."""
    rng = random.Random(seed)
    samples = [
        "",
        "   \n\t ",
        "x" * 50_000,
        "\\boxed{",
        "}}}{{{\\frac{",
        "Verdict: MAYBE",
        "日本語のテキスト 🙂 \u202e\u0000",
        "Strategy : \n1.\n-",
        "\\boxed{99999999999999999999999999}",
        "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(300)),
        "```python\nwhile True: pass\n```",
        "Candidate 17",
    ]

    def policy(env: WorkflowEnv, agent: str) -> str:
        return rng.choice(samples)

    return policy


class ExpertPolicy:
    """A role-aware expert that makes a mistake with probability ``error_rate`` per turn:
    a wrong arithmetic step (or a buggy program), a wrong verdict, a bad plan, or a wrong
    candidate. ``reseed(seed)`` restarts its random stream (wrappers call it on reset)."""

    def __init__(self, error_rate: float, seed: int = 0) -> None:
        self.error_rate = error_rate
        self.reseed(seed)

    def reseed(self, seed: int | None) -> None:
        self.rng = random.Random(seed)

    def __call__(self, env: WorkflowEnv, agent: str) -> str:
        err = self.rng.random() < self.error_rate
        return env.workflow.expert_action(env.episode, agent, env.role_of(agent), err, self.rng)


#: per role, how often the testbed expert takes its shortcut (docs/testbed.md). A worker
#: does the opposite of its strategy on its shortcut, so 0.3 leaves it working the steps
#: about half the time over good and poor plans alike.
SHORTCUT_RATES: dict[str, float] = {"worker": 0.3}


class BehaviourPolicy:
    """The testbed expert (:meth:`Workflow.behaviour_action`): every fact it states is right,
    and each role takes its shortcut behaviour with probability ``rate`` (per-role
    ``SHORTCUT_RATES`` where set). ``targets`` maps the episode's turn index to the text a
    corpus should train on where it differs from what the env received; ``contested`` holds
    the episode's turn indices where the considered and the shortcut behaviour write
    different texts (a corpus can oversample them: ``coordination_drills``)."""

    def __init__(self, rate: float = 0.5, seed: int = 0, rates: dict[str, float] | None = None):
        self.rate = rate
        self.rates = dict(SHORTCUT_RATES if rates is None else rates)
        self.targets: dict[int, str] = {}
        self.contested: set[int] = set()
        self.reseed(seed)

    def reseed(self, seed: int | None) -> None:
        self.rng = random.Random(seed)
        self.targets = {}
        self.contested = set()

    def __call__(self, env: WorkflowEnv, agent: str) -> str:
        role = env.role_of(agent)
        shortcut = self.rng.random() < self.rates.get(role, self.rate)
        turn = len(env.episode.turns)
        # the other side of the menu, played on a copy of the RNG: where the two texts differ
        # the turn is *contested* (the behaviour decides what is written)
        other_rng = random.Random()
        other_rng.setstate(self.rng.getstate())
        wf, ep = env.workflow, env.episode
        act = wf.behaviour_action(ep, agent, role, shortcut, self.rng)
        other = wf.behaviour_action(ep, agent, role, not shortcut, other_rng)
        if act.text != other.text:
            self.contested.add(turn)
        if act.target is not None:
            self.targets[turn] = act.target
        return act.text


def expert_policy(error_rate: float, seed: int = 0) -> ExpertPolicy:
    """A noisy role-aware expert (see :class:`ExpertPolicy`)."""
    return ExpertPolicy(error_rate, seed)


def play_episode(
    env: WorkflowEnv,
    policies: Policy | dict[str, Policy],
    seed: int | None = None,
    options: dict | None = None,
) -> dict:
    """Run one episode with scripted policies (one for all agents, or per role) and return
    the final info of the first agent plus the rewards everyone received."""
    env.reset(seed=seed, options=options)
    total = dict.fromkeys(env.possible_agents, 0.0)
    final_info: dict = {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        total[agent] += reward
        if term or trunc:
            final_info.setdefault("by_agent", {})[agent] = info
            env.step(None)
            continue
        pol = policies if callable(policies) else policies[env.role_of(agent)]
        env.step(pol(env, agent))
    first = env.possible_agents[0]
    return {**final_info["by_agent"][first], "rewards": total, "by_agent": final_info["by_agent"]}
