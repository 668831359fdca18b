"""Copy drills: the copying primitive of a role that writes the final answer from others'.

Orch-Workers' synthesizer and, where it answers, Voting's aggregator adopt an answer they
were shown. In the behaviour corpus that answer is nearly always the gold one (a worked
candidate is right), so a model can learn to *compute* the answer from the problem instead
of copying it, and the shipped tiny-s did: its synthesizer wrote an answer none of the
workers gave in 76% of episodes (100 held-out problems x 2). A copy drill plays the
workflow with candidates that make computing useless: bare guesses of which two agree (the
considered pick is the shared guess, not the gold), all different (the first), or one
worked answer among guesses (the worked one); only the final role's turn joins the corpus,
its target the considered pick's answer, bare. No row states a false fact: a guess is what
a later role sees, never what a row teaches as a step.
"""

from __future__ import annotations

import random
from typing import Any

from flowzoo.envs.workflows.base import considered_pick

#: candidate patterns and their shares: two guesses agree / all differ / one to all worked
#: answers among guesses (a worked candidate is long, its answer at its end: the copy the
#: final role meets in a real episode; the first build, 1,000 drills a 0.3 share of one
#: worked candidate, copied 0.56-0.61)
PATTERNS = (("shared", 0.35), ("distinct", 0.15), ("worked", 0.5))


def answers_from_candidates(env: Any) -> str | None:
    """The role of ``env``'s workflow that writes the final answer from the candidates it
    is shown, or None (Voting's aggregator picks an index unless it answers; a decompose
    synthesizer combines sub-answers)."""
    wf = env.workflow
    role = wf.final_role()
    if role is None or not getattr(wf, "answer_mode", True):
        return None
    if getattr(wf.options, "mode", "strategies") != "strategies":
        return None
    return role


def _guesses(family: Any, task: Any, k: int, rng: random.Random) -> list[str]:
    """``k`` distinct bare guesses (none the gold answer)."""
    out: list[str] = []
    while len(out) < k:
        g = family.guess_completion(task, rng)
        if g not in out:
            out.append(g)
    return out


def candidates(family: Any, task: Any, k: int, rng: random.Random) -> list[str]:
    """``k`` candidate texts in one of :data:`PATTERNS` (shuffled)."""
    pattern = rng.choices([p for p, _ in PATTERNS], [w for _, w in PATTERNS])[0]
    if pattern == "shared" and k >= 2:
        g = _guesses(family, task, max(1, k - 1), rng)
        cands = [g[0], *g]  # the first guess twice, the rest once
    elif pattern == "worked":
        n_worked = rng.randint(1, k)
        cands = [family.reference_completion(task)] * n_worked
        cands += _guesses(family, task, k - n_worked, rng)
    else:
        cands = _guesses(family, task, k, rng)
    rng.shuffle(cands)
    return cands[:k]


def copy_drill_rows(
    env_id: str, env: Any, pool: Any, n: int, seed: int, offset: int = 0
) -> list[tuple[str, str, str]]:
    """(env id, prompt, completion) of ``n`` copy-drill turns of ``env``'s final role on
    problems of ``pool`` (none where no role answers from candidates)."""
    role = answers_from_candidates(env)
    if role is None or n <= 0:
        return []
    wf, fam = env.workflow, env.family
    parallel = next(iter(wf.parallel_roles))
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        task = pool[(offset + i) % len(pool)]
        env.reset(seed=seed * 1_000_003 + i, options={"task_id": task.id})
        k = sum(env.role_of(a) == parallel for a in env.possible_agents)
        cands = iter(candidates(fam, task, k, rng))
        shown: list[str] = []
        for agent in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            r = env.role_of(agent)
            if r == parallel:
                shown.append(next(cands))
                env.step(shown[-1])
            elif r == role:
                answer = fam.extract(shown[considered_pick(fam, task, shown)])
                target = f"\\boxed{{{answer}}}"
                rows.append((env_id, obs["prompt"], target))
                env.step(target)
            else:  # the orchestrator plans as the testbed expert's considered behaviour
                env.step(wf.behaviour_action(env.episode, agent, r, False, rng).text)
    return rows
