"""Measuring a base model as a testbed, before any training: does it know the primitives
(each step fact, in the context where it is used), and what is left for RL (each role's
behaviour rate, and what each behaviour is worth at each difficulty)?

A testbed is judged by whether it can show an effect *and* its absence (docs/testbed.md):
these are the numbers that say which. ``python baselines/testbed.py`` writes them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import torch

from flowzoo.agents.models.policy import Policy
from flowzoo.agents.train.evaluate import evaluate_env, single_policy
from flowzoo.agents.train.rollout import rollout
from flowzoo.analysis.stats import bootstrap_ci, wilson
from flowzoo.tasks.math.data import solve_steps

_LEADING_INT = re.compile(r"\s*(-?\d+)")


def step_accuracy(policy: Policy, n_problems: int = 200, split: str = "test") -> dict[str, Any]:
    """Greedy accuracy on single steps in context: for every step of a problem's worked
    solution, the solver's prompt plus the steps before it and ``"x op y = "``, and the number
    the model writes next. Why in context: that is where a wrong fact costs a worked answer."""
    from flowzoo.envs import make_env

    env = make_env("single-math", split=split)  # one env: each problem's solver prompt
    tasks = list(env.tasks)[:n_problems]
    prompts, gold, ops, owner = [], [], [], []
    for j, t in enumerate(tasks):
        lines, _ = solve_steps(t.meta["steps"])
        env.reset(seed=0, options={"task_id": t.id})
        head = env.observe("solver")["prompt"]
        for i, line in enumerate(lines):
            lhs, _, rhs = line.partition(" = ")
            prefix = "".join(f"{done}. " for done in lines[:i])
            prompts.append(f"{head}{prefix}{lhs} = ")
            gold.append(int(rhs))
            ops.append(lhs.split()[1])
            owner.append(j)
    hits: list[int] = []
    for start in range(0, len(prompts), 64):
        gens = policy.generate(prompts[start : start + 64], max_new_tokens=4, temperature=0.0)
        for g, want in zip(gens, gold[start : start + 64], strict=True):
            m = _LEADING_INT.match(g.text)
            hits.append(int(m is not None and int(m.group(1)) == want))
    by_op: dict[str, list[int]] = defaultdict(list)
    for h, op in zip(hits, ops, strict=True):
        by_op[op].append(h)
    per_problem: dict[int, list[int]] = defaultdict(list)
    for h, j in zip(hits, owner, strict=True):
        per_problem[j].append(h)
    # the unit resampled is the problem (its steps share a context), as everywhere else
    _, lo, hi = bootstrap_ci([sum(v) / len(v) for v in per_problem.values()])
    acc = sum(hits) / len(hits)
    return {
        "problems": len(tasks),
        "steps": len(hits),
        "accuracy": acc,
        "ci": [lo, hi],
        "by_op": {op: sum(v) / len(v) for op, v in sorted(by_op.items())},
    }


def _code_pool(env_id: str, n_problems: int) -> dict[str, Any]:
    """A code env's options for a reading: the code testbed's tasks (``guarded``), as many
    held-out problems as the reading asks (the code family's default test split is 100, math's
    200); nothing for math (its defaults are the reading's)."""
    return {"dataset": "guarded", "n_tasks": n_problems} if env_id.endswith("-code") else {}


def code_primitives(
    policy: Policy, n_problems: int = 200, split: str = "test", env_id: str = "single-code"
) -> dict[str, Any]:
    """The code testbed's primitives, greedy and in context: the solver's prompt and the
    considered program begun up to its guard (`` if x < 0:``), and whether the program the
    model finishes passes every test. Why begun: that fixes the behaviour, so what is read
    is what it knows (the computation and the constants it copies off the prompt), as the
    step facts are read for math."""
    from flowzoo.envs import make_env

    env = make_env(env_id, split=split, **_code_pool(env_id, n_problems))
    family = env.workflow.family
    tasks = [t for t in list(env.tasks)[:n_problems] if "shortcut" in t.meta]
    heads, prompts = [], []
    for t in tasks:
        env.reset(seed=0, options={"task_id": t.id})
        guard = t.answer.split("\n", 2)[:2]  # the signature and the guard's ``if`` line
        heads.append("```python\n" + "\n".join(guard) + "\n")
        prompts.append(env.observe("solver")["prompt"] + heads[-1])
    hits: list[int] = []
    by_level: dict[int, list[int]] = defaultdict(list)
    for start in range(0, len(prompts), 32):
        gens = policy.generate(prompts[start : start + 32], max_new_tokens=160, temperature=0.0)
        for j, g in enumerate(gens, start):
            ok = int(family.score(tasks[j], heads[j] + g.text).correct)
            hits.append(ok)
            by_level[tasks[j].meta["level"]].append(ok)
    _, lo, hi = bootstrap_ci([float(h) for h in hits])
    return {
        "problems": len(tasks),
        "accuracy": sum(hits) / max(1, len(hits)),
        "ci": [lo, hi],
        "by_level": {str(lv): sum(v) / len(v) for lv, v in sorted(by_level.items())},
    }


def solver_by_level(
    policy: Policy,
    n_problems: int = 200,
    split: str = "test",
    samples: int = 4,
    seed: int = 0,
    env_id: str = "single-math",
) -> dict[str, Any]:
    """The single solver sampled at T=0.7: per difficulty level, how often it takes the
    considered behaviour ("worked": math's steps, code's edge-case guard) and how accurate
    each behaviour is. The gap between the two is what RL can gain by choosing the
    behaviour; the worked accuracy per level is the difficulty dial."""
    from flowzoo.envs import make_env
    from flowzoo.envs.workflows.base import shows_work

    opts = {"split": split, **_code_pool(env_id, n_problems)}
    probe = make_env(env_id, **opts)
    family = probe.workflow.family
    tasks = list(probe.tasks)[:n_problems]
    envs = [make_env(env_id, **opts) for _ in range(32)]
    cells: dict[int, dict[str, list[int]]] = defaultdict(lambda: {"worked": [], "direct": []})
    gen = torch.Generator().manual_seed(seed)
    jobs = [(t, s) for t in tasks for s in range(samples)]
    for start in range(0, len(jobs), len(envs)):
        chunk = jobs[start : start + len(envs)]
        recs = rollout(
            envs[: len(chunk)],
            single_policy(policy),
            reset_options=[{"task_id": t.id} for t, _ in chunk],
            seeds=[seed + i for i in range(len(chunk))],
            max_new_tokens=probe.turn_tokens(),
            temperature=0.7,
            generator=gen,
        )
        for (t, _), rec in zip(chunk, recs, strict=True):
            kind = "worked" if shows_work(family, t, rec.turns[0].text) else "direct"
            cells[t.meta["level"]][kind].append(int(rec.correct))
    out = {}
    for lv, c in sorted(cells.items()):
        n = len(c["worked"]) + len(c["direct"])
        out[str(lv)] = {
            "samples": n,
            "worked_rate": len(c["worked"]) / n,
            "acc_worked": sum(c["worked"]) / len(c["worked"]) if c["worked"] else None,
            "acc_direct": sum(c["direct"]) / len(c["direct"]) if c["direct"] else None,
        }
    return out


def behaviour_rates(
    policy: Policy,
    env_ids: tuple[str, ...] = ("single-math", "voting-math", "eval-opt-math", "orch-workers-math"),
    n_problems: int = 200,
    samples: int = 2,
    split: str = "test",
    env_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Per env: sampled accuracy (95% CI over problems) and each role's behaviour rate at
    T=0.7, what training starts from; ``env_options`` go to every env (the role-conflict
    testbed's ``{"conflict": True}``)."""
    out = {}
    for env_id in env_ids:
        r = evaluate_env(
            env_id,
            single_policy(policy),
            n_problems,
            temperature=0.7,
            samples=samples,
            split=split,
            env_options={**_code_pool(env_id, n_problems), **(env_options or {})} or None,
        )
        _, lo, hi = bootstrap_ci([c / r.samples for c in r.per_problem])
        out[env_id] = {
            "accuracy": r.accuracy,
            "ci": [lo, hi],
            "behaviour": r.behaviour,
            # decided turns per role, and a Wilson interval over them (turns of one episode
            # are not independent: read it as a lower bound on the uncertainty)
            "behaviour_n": r.behaviour_n,
            "behaviour_ci": {
                role: list(wilson(rate * r.behaviour_n[role], r.behaviour_n[role]))
                for role, rate in r.behaviour.items()
            },
            "parse_fail": r.parse_fail,
            **r.extra,
            # episodes each extra reading was defined for, and a Wilson interval over them
            "extra_n": r.extra_n,
            "extra_ci": {
                k: list(wilson(rate * r.extra_n[k], r.extra_n[k])) for k, rate in r.extra.items()
            },
        }
    return out


CODE_ENVS = ("single-code", "voting-code", "eval-opt-code", "orch-workers-code")


def measure_base(
    policy: Policy,
    n_problems: int = 200,
    family: str = "math",
    env_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything the testbed page reports about a base model (docs/testbed.md), for the
    math or the code half of the testbed (``env_options``: see :func:`behaviour_rates`)."""
    if family == "code":
        return {
            "code_primitives": code_primitives(policy, n_problems),
            "solver_by_level": solver_by_level(policy, n_problems, env_id="single-code"),
            "ood_solver": solver_by_level(
                policy, min(n_problems, 100), split="ood", env_id="single-code"
            ),
            "envs": behaviour_rates(policy, CODE_ENVS, n_problems=n_problems),
        }
    return {
        "step_accuracy": step_accuracy(policy, n_problems),
        "solver_by_level": solver_by_level(policy, n_problems),
        "ood_solver": solver_by_level(policy, min(n_problems, 100), split="ood"),
        "envs": behaviour_rates(policy, n_problems=n_problems, env_options=env_options),
    }
