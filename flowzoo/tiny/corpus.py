"""The tiny models' pretraining corpus: transcripts of the workflows played on the *pretrain*
split (disjoint by computation from the RL pool and every held-out split).

Math transcripts, and code transcripts of the guarded tasks (``code_tasks="guarded"``), come
from the testbed expert (:class:`~flowzoo.envs.scripted.BehaviourPolicy`): every fact right,
each role's behaviour a mixture RL can move (docs/testbed.md). Recipes up to 10 wrote code
transcripts with the noisy experts (a mistake in ``error_rate`` of the turns).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from flowzoo.tiny.recipe import PretrainConfig


def corpus_tasks(family: str, n: int, seed: int = 0, code_tasks: str = "funcs+stdio"):
    """Up to ``n`` distinct *pretrain* problems (disjoint by computation from the RL pool and
    every held-out split) of the family's built-in generator, every level
    represented (small levels used up). Why a pool this large: with the envs' default 500
    train problems the models memorised question -> answer and did not generalise to the test
    split; thousands of distinct problems force them to read the operands."""
    if family == "math":
        from flowzoo.tasks.math.data import arithmetic_tasks

        return arithmetic_tasks(n, split="pretrain", seed=seed, exhaust=True)
    if code_tasks == "guarded":  # the code testbed (docs/testbed.md)
        from flowzoo.tasks.code.guarded import guarded_tasks

        return guarded_tasks(n, split="pretrain", seed=seed, exhaust=True)
    from flowzoo.tasks.base import TaskSet
    from flowzoo.tasks.code.data import function_tasks
    from flowzoo.tasks.code.stdio_data import stdio_tasks

    # both code formats, interleaved: functions (assert tests) and stdin/stdout programs
    funcs = function_tasks(n - n // 2, split="pretrain", seed=seed, exhaust=True)
    progs = stdio_tasks(n // 2, split="pretrain", seed=seed, exhaust=True)
    mixed = [t for pair in zip(funcs, progs, strict=False) for t in pair]
    k = min(len(funcs), len(progs))
    return TaskSet(mixed + list(funcs[k:]) + list(progs[k:]), name="code-corpus", split="pretrain")


def make_corpus(cfg: PretrainConfig, progress: bool = False) -> list[tuple[str, str, str]]:
    """(env id, prompt, completion) for every turn of noisy-expert episodes on train tasks;
    episode ``i`` of every env plays a different problem of the pool (offset per env)."""
    from tqdm import tqdm

    from flowzoo.envs import make_env
    from flowzoo.envs.scripted import BehaviourPolicy, expert_policy, play_episode
    from flowzoo.tiny.copydrills import copy_drill_rows

    pools = {}
    rows: list[tuple[str, str, str]] = []
    per_env = {e: episodes_of(cfg, e) for e in cfg.envs}
    bar = tqdm(
        total=sum(per_env.values()),  # each env's drill episodes join it as the env starts
        desc=f"corpus {cfg.scale}",
        unit="episode",
        disable=not progress,
        file=sys.stderr,
    )
    envs = {}
    for env_id in cfg.envs:
        family = env_id.rsplit("-", 1)[1]
        if family not in pools:
            pools[family] = corpus_tasks(family, cfg.corpus_tasks, cfg.seed, cfg.code_tasks)
        envs[env_id] = make_env(env_id, dataset=pools[family], **cfg.env_options.get(env_id, {}))
    check_role_names(cfg, envs)
    for k, env_id in enumerate(cfg.envs):
        family = env_id.rsplit("-", 1)[1]
        pool, env = pools[family], envs[env_id]
        pseed = cfg.stage_seed * 1000 + k
        testbed = family == "math" or cfg.code_tasks == "guarded"
        rates = cfg.role_shortcut_rates if family == "math" else cfg.code_shortcut_rates
        pol = (
            BehaviourPolicy(cfg.shortcut_rate, seed=pseed, rates=rates)
            if testbed
            else expert_policy(cfg.error_rate, seed=pseed)
        )
        offset = k * cfg.episodes_per_env
        # episode i past the env's own episodes is a drill: it keeps only the contested turns
        # of the roles its phase names (the coordination drills, then each role's own)
        phases = [(per_env[env_id], None), *drill_phases(cfg, env, family)]
        ends = list(itertools.accumulate(n for n, _ in phases))
        bar.total += ends[-1] - per_env[env_id]
        for i in range(ends[-1]):
            kept_roles = phases[bisect.bisect_right(ends, i)][1]
            task = pool[(offset + i) % len(pool)]
            targets = getattr(pol, "targets", {})
            targets.clear()
            getattr(pol, "contested", set()).clear()
            play_episode(
                env, pol, seed=cfg.stage_seed * 1_000_003 + i, options={"task_id": task.id}
            )
            log = env.turn_log()
            keep = (
                range(len(log))
                if kept_roles is None
                else [
                    j
                    for j in sorted(cast(BehaviourPolicy, pol).contested)  # testbed drills only
                    if log[j].role in kept_roles
                ]
            )
            rows.extend((env_id, log[j].prompt, targets.get(j, log[j].action)) for j in keep)
            bar.update()
        if family == "math" and cfg.copy_drills:
            rows += copy_drill_rows(env_id, env, pool, cfg.copy_drills, pseed, offset)
    bar.close()
    return rows + fact_drills(cfg.fact_drills, seed=cfg.seed)


def check_role_names(cfg: PretrainConfig, envs: dict) -> None:
    """Refuse a rate or drill that names a role no env of the corpus plays (of its family:
    math rates for math envs, code rates for code envs), unless that field's default names
    it (the default math rates name all seven roles, which a narrowed corpus need not play).
    Why: a misspelt or misplaced role changes the build's key and nothing else, and the
    build that comes out is silently the recipe without the lever."""
    from flowzoo.tiny.recipe import (
        MIDTRAIN_ROLE_DRILLS,
        MIDTRAIN_SCALE_RATES,
        MIDTRAIN_SHORTCUT_RATES,
    )

    roles: dict[str, set[str]] = {"math": set(), "code": set()}
    for env_id, env in envs.items():
        played = {env.role_of(a) for a in env.possible_agents}
        roles.setdefault(env_id.rsplit("-", 1)[1], set()).update(played)
    scale_rates = {r for rates in MIDTRAIN_SCALE_RATES.values() for r in rates}
    # field: (the roles its envs play, the roles its default names, the roles it names)
    named: dict[str, tuple[set[str], set[str], Iterable[str]]] = {
        "role_shortcut_rates": (
            roles["math"],
            {*MIDTRAIN_SHORTCUT_RATES, *scale_rates},
            cfg.role_shortcut_rates or {},
        ),
        "role_drills": (roles["math"], set(MIDTRAIN_ROLE_DRILLS), cfg.role_drills),
        "code_shortcut_rates": (roles["code"], set(), cfg.code_shortcut_rates or {}),
        "code_role_drills": (roles["code"], set(), cfg.code_role_drills),
        "drill_roles": (
            set().union(*roles.values()),
            set(type(cfg)().drill_roles),
            cfg.drill_roles,
        ),
    }
    for field_name, (played, default, names) in named.items():
        if unknown := sorted(set(names) - played - default):
            raise ValueError(
                f"PretrainConfig.{field_name} names {', '.join(map(repr, unknown))}: no env of "
                f"this corpus plays it (roles played: {', '.join(sorted(played)) or 'none'})"
            )


def drill_phases(cfg: PretrainConfig, env, family: str) -> list[tuple[int, frozenset[str]]]:
    """The drill episodes of ``env`` after its own, as (episodes, roles whose contested turns
    are kept): ``cfg.coordination_drills`` for the drill roles, then ``cfg.role_drills[r]``
    for each role ``r`` of this env alone; a code env (guarded tasks only) gets
    ``cfg.code_drills`` and ``cfg.code_role_drills`` in their place."""
    roles = {env.role_of(a) for a in env.possible_agents}
    shared, own = cfg.coordination_drills, cfg.role_drills
    if family != "math":  # the code testbed's drills, where it has any
        guarded = cfg.code_tasks == "guarded"
        shared, own = (cfg.code_drills, cfg.code_role_drills) if guarded else (0, {})
    phases = []
    if set(cfg.drill_roles) & roles and shared:
        phases.append((shared, frozenset(cfg.drill_roles)))
    phases += [(n, frozenset({r})) for r, n in sorted(own.items()) if r in roles and n]
    return phases


def episodes_of(cfg: PretrainConfig, env_id: str) -> int:
    """Episodes of ``env_id`` in the corpus (code envs may have fewer: the math testbed is
    where the step facts must be reliable, and code rows are the longest of the corpus)."""
    if not env_id.endswith("-code"):
        return cfg.episodes_per_env
    if cfg.code_tasks == "guarded":
        return cfg.code_testbed_episodes
    code = cfg.code_episodes_per_env
    return code if code is not None else cfg.episodes_per_env


#: operands of the step facts a math chain can meet: a running value from -9 (2 * 2 - 9 - 4
#: is the lowest a trained chain reaches) up to 45 (5 * 5 + 9 + 9), a one-digit operand, a
#: factor of the products 2..5
_RUNNING, _DIGITS, _FACTORS = range(-9, 46), range(1, 10), range(2, 6)


def step_facts() -> list[tuple[int, str, int]]:
    """Every step fact ``x op y`` a generated math chain uses, except the one-step problems of
    the RL pool and the held-out splits: a fact whose computation is a one-digit ``a +- b``
    outside the pretrain split is left to the worked steps of pretraining chains, so the
    corpus holds no RL or held-out computation (the split machinery's rule)."""
    from flowzoo.tasks.base import split_of
    from flowzoo.tasks.math.data import computation_key

    facts = [(x, "+", y) for x in _RUNNING for y in _DIGITS]
    facts += [(y, "+", x) for x in range(10, 46) for y in _DIGITS]  # "4 + 12" (word chains)
    facts += [(x, "-", y) for x in _RUNNING for y in _DIGITS]
    facts += [(a, "*", b) for a in _FACTORS for b in _FACTORS]
    facts += [(k, "*", x) for k in (2, 3) for x in range(6, 10)]  # "3 * 8" (word chains)
    one_step = [f for f in facts if f[1] in "+-" and 0 <= f[0] < 10 and f[2] < 10]
    held = {f for f in one_step if split_of(computation_key([f])) != "pretrain"}
    return [f for f in facts if f not in held]


def fact_drills(n: int, seed: int = 0, per_row: int = 10) -> list[tuple[str, str, str]]:
    """``n`` drill rows of ``per_row`` step facts each, in the worked steps' own format
    (``14 - 2 = 12. 3 * 4 = 12.``): the primitive every worked answer is built from, given
    dense supervision so it is learned reliably rather than as often as chains happen to
    use it (docs/testbed.md)."""
    import random

    rng = random.Random(f"drills:{seed}")
    facts = step_facts()
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
    rows = []
    for _ in range(n):
        picked = rng.choices(facts, k=per_row)
        text = " ".join(f"{a} {op} {b} = {ops[op](a, b)}." for a, op, b in picked)
        rows.append(("drill", "", text))
    return rows


def corpus_fingerprint(cfg: PretrainConfig, episodes: int = 2, pool: int = 200) -> str:
    """A hash of a small corpus made by ``cfg``'s recipe (its envs, generators, prompts and
    experts, ``episodes`` per env over a ``pool``-problem train pool): it changes when the
    code that makes the corpus changes, which a config key cannot see."""
    small = dataclasses.replace(
        cfg,
        episodes_per_env=episodes,
        code_episodes_per_env=episodes,
        code_testbed_episodes=episodes,
        corpus_tasks=pool,
        fact_drills=min(cfg.fact_drills, episodes),
        coordination_drills=min(cfg.coordination_drills, episodes),
        role_drills={r: min(n, episodes) for r, n in cfg.role_drills.items()},
        code_drills=min(cfg.code_drills, episodes),
        code_role_drills={r: min(n, episodes) for r, n in cfg.code_role_drills.items()},
    )
    return corpus_digest(make_corpus(small))[:16]


def corpus_digest(rows: list[tuple[str, str, str]]) -> str:
    """The sha256 of a corpus's rows, in order (what a build records, and what the shipped
    manifest's fingerprint is the prefix of, for a small corpus)."""
    return hashlib.sha256(json.dumps(rows, ensure_ascii=True).encode()).hexdigest()
