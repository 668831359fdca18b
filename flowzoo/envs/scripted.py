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


def _candidates(env: WorkflowEnv, role: str) -> list[str]:
    ep = env.episode
    return [t.action for t in ep.turns if t.role == role]


def _plan(k: int, mode: str) -> str:
    word = "Strategy" if mode == "strategies" else "Step"
    ideas = [
        "work step by step",
        "check each operation",
        "rewrite then compute",
        "estimate then refine",
    ]
    return "\n".join(f"{word} {i + 1}: {ideas[i % len(ideas)]}" for i in range(k))


def oracle_policy(env: WorkflowEnv, agent: str) -> str:
    """Always right: the reference answer, correct verdicts, correct candidate choices."""
    return expert_policy(0.0)(env, agent)


def wrong_policy(env: WorkflowEnv, agent: str) -> str:
    """Always wrong but well formed: wrong answers, wrong choices, rejects everything."""
    fam, task = env.family, env.episode.task
    role = env.role_of(agent)
    if role == "evaluator":
        return "Verdict: REVISE\nFeedback: recheck the computation."
    if role == "orchestrator":
        return _plan(env.workflow.k, env.workflow.options.mode)
    if role == "aggregator" and getattr(env.workflow.options, "aggregator_mode", "") == "select":
        return "\\boxed{1}"
    return fam.wrong_completion(task)


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
        rng = self.rng
        fam, task, wf = env.family, env.episode.task, env.workflow
        role = env.role_of(agent)
        err = rng.random() < self.error_rate
        if role == "evaluator":
            draft = env.episode.last_of_role("optimizer").action
            ok = fam.score(task, draft).correct
            if err:
                ok = not ok
            if ok:
                return "Verdict: ACCEPT\nFeedback: the draft is correct."
            return "Verdict: REVISE\nFeedback: the result is wrong; recompute it."
        if role == "orchestrator":
            if err:
                return "I will just think about it."
            return _plan(wf.k, wf.options.mode)
        if role == "aggregator" and wf.options.aggregator_mode == "select":
            cands = _candidates(env, "solver")
            good = [i for i, c in enumerate(cands) if fam.score(task, c).correct]
            bad = [i for i in range(len(cands)) if i not in good]
            pool = bad if (err and bad) else (good or bad)
            return f"Best is candidate {pool[0] + 1}. \\boxed{{{pool[0] + 1}}}"
        if role in ("aggregator", "synthesizer"):
            # combine what the others said: take a correct answer among theirs (or, on a
            # slip, a wrong one), rather than solving from scratch
            src = "solver" if role == "aggregator" else "worker"
            return _combine(env, _candidates(env, src), err, rng)
        return fam.noisy_completion(task, rng) if err else fam.reference_completion(task)


def expert_policy(error_rate: float, seed: int = 0) -> ExpertPolicy:
    """A noisy role-aware expert (see :class:`ExpertPolicy`)."""
    return ExpertPolicy(error_rate, seed)


def _combine(env: WorkflowEnv, cands: list[str], err: bool, rng: random.Random) -> str:
    fam, task = env.family, env.episode.task
    verdicts = fam.score_many(task, cands)
    good = [c for c, v in zip(cands, verdicts, strict=True) if v.correct]
    bad = [
        c for c, v in zip(cands, verdicts, strict=True) if not v.correct and v.extracted is not None
    ]
    if err or not good:
        return bad[0] if bad else fam.noisy_completion(task, rng)
    return good[0]


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
