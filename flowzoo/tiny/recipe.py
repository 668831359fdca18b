"""What a tiny model is built from: the scales, their budgets, the recipe's levers
(:class:`PretrainConfig`, every field part of the cache key) and the seconds-scale recipe
for tests. Apart from the build (``build.py``) so that the corpus and the training loop can
read a config without importing the module that drives them (no import cycle)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flowzoo.envs.registry import study_envs

#: The cache key's format version: bumped when the corpus, prompts or tokenizer change, so an
#: old build is never loaded for a new recipe. Not the study's recipe number (the shipped
#: tiny-s is recipe 10 under key version 7): the registry below gives both, docs/models.md why.
RECIPE_VERSION = 7

SCALES: dict[str, dict] = {
    # head_dim 32 at every scale: vLLM's CPU attention kernels have no head_dim 16
    "tiny-s": dict(
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=192,
    ),
    "tiny-m": dict(
        hidden_size=128,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=384,
    ),
    "tiny-l": dict(
        hidden_size=256,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=768,
    ),
}
#: per-scale pretraining budget on 2 CPU cores, (steps, batch size): each base lands near the
#: 20-60% band on math and code, so RL has room to help and to hurt (docs/models.md)
BUDGETS: dict[str, tuple[int, int]] = {
    "tiny-s": (5000, 16),
    "tiny-m": (5000, 16),
    "tiny-l": (2000, 16),
}
#: the behaviour stage's per-role shortcut rates: each coordinating role leant back toward
#: the 40-60% band it reads at (docs/testbed.md, "Calibration")
MIDTRAIN_SHORTCUT_RATES: dict[str, float] = {
    "solver": 0.5,
    "optimizer": 0.53,
    "worker": 0.26,
    "aggregator": 0.27,
    "evaluator": 0.45,
    "orchestrator": 0.52,
    "synthesizer": 0.98,
}
#: drill episodes of a role's own contested turns (``PretrainConfig.role_drills``): the
#: synthesizer's are rare in its env (docs/testbed.md, "Calibration")
MIDTRAIN_ROLE_DRILLS: dict[str, int] = {"synthesizer": 14000}
#: per-scale changes to ``MIDTRAIN_SHORTCUT_RATES``, applied where a config keeps the default
#: rates: tiny-m follows its synthesizer drills far more closely than tiny-s (docs/testbed.md)
MIDTRAIN_SCALE_RATES: dict[str, dict[str, float]] = {"tiny-m": {"synthesizer": 0.52}}
#: forward-pass precision per scale (bf16 autocast uses the CPU's AMX/AVX512-BF16 units)
PRECISION: dict[str, str] = {"tiny-s": "fp32", "tiny-m": "fp32", "tiny-l": "bf16"}
MATH_ENVS = study_envs("math") + ("single-math",)
#: what a behaviour stage may continue from (``PretrainConfig.stage_parent``)
STAGE_PARENTS = ("base", "default")
#: what the code half of a corpus can be (``PretrainConfig.code_tasks``)
CODE_TASKS = ("guarded", "funcs+stdio")
CODE_ENVS = study_envs("code")


@dataclass(frozen=True)
class Recipe:
    """One named tiny build: what a model name's suffix stands for. Why one table: a user
    types a name, a run record stamps that name with the build's key, and the docs and
    results speak of recipe numbers; this row is where the three meet."""

    #: what follows a scale in the model name (``""``: the scale's default build)
    suffix: str
    #: the study's number for the recipe (docs and results use it; the key does not)
    number: str
    #: the :class:`PretrainConfig` fields this build sets (the rest: the defaults)
    levers: dict[str, Any]
    #: what the build is for
    what: str
    #: where its behaviour rates and calibration are measured
    docs: str
    #: ``current`` (today's results are read on it) or ``superseded by ...`` (older results
    #: name it, so its name keeps building it)
    status: str = "current"


_CODE_11: dict[str, Any] = {
    "code_tasks": "guarded",
    "midtrain_steps": 1500,
    "code_drills": 1200,
    "code_shortcut_rates": {
        "aggregator": 0.27,
        "evaluator": 0.35,
        "synthesizer": 0.6,
        "worker": 0.3,
    },
}
#: the envs whose final role answers briefly in the role-conflict testbed (their option)
CONFLICT_ENV_OPTIONS: dict[str, dict[str, Any]] = {
    "voting-math": {"conflict": True},
    "orch-workers-math": {"conflict": True},
}
#: every named build, by suffix: ``flowzoo models`` lists it, :func:`named_config` reads it.
#: Each lever's value and what it measured are in the build's docs page
RECIPES: dict[str, Recipe] = {
    r.suffix: r
    for r in (
        Recipe("", "10", {}, "the math testbed: every role's behaviour in band", "docs/testbed.md"),
        Recipe(
            "-code",
            "11",
            _CODE_11,
            "the code testbed on the guarded tasks (moves the math final roles out of band)",
            "docs/testbed-code.md",
            "superseded by -code12 (kept: recipe 11's results name it)",
        ),
        Recipe(
            "-code12",
            "12",
            {
                **_CODE_11,
                "code_shortcut_rates": {
                    **_CODE_11["code_shortcut_rates"],
                    "aggregator": 0.08,
                    "solver": 0.48,
                    "optimizer": 0.47,
                },
                "code_role_drills": {"aggregator": 2500},
            },
            "the code testbed with the aggregator's rule drilled",
            "docs/testbed-code.md",
        ),
        Recipe(
            "-conflict",
            "conflict",
            {
                "env_options": CONFLICT_ENV_OPTIONS,
                "stage_parent": "default",
                "midtrain_steps": 3600,
                "role_shortcut_rates": {
                    **MIDTRAIN_SHORTCUT_RATES,
                    "aggregator": 0.95,
                    "synthesizer": 0.95,
                },
                "role_drills": {"aggregator": 12000, "synthesizer": 12000},
                "copy_drills": 16000,
            },
            "the role-conflict testbed: final roles answer bare, solvers work the steps",
            "docs/testbed-conflict.md",
        ),
    )
}


@dataclass
class PretrainConfig:
    """How a tiny model is built. Every field is part of the cache key."""

    scale: str = "tiny-m"
    #: the workflows whose transcripts make the corpus: math and code (functions and
    #: stdin/stdout programs), every role
    envs: tuple[str, ...] = MATH_ENVS + CODE_ENVS
    #: episodes of each env in the corpus
    episodes_per_env: int = 800
    #: episodes of each code env (None: ``episodes_per_env``); fewer leave the capacity of
    #: a small model to the math testbed's step facts
    code_episodes_per_env: int | None = 400
    #: rows of step-fact drills (``fact_drills``: ten facts a row), the primitive of every
    #: worked math answer given dense supervision
    fact_drills: int = 5000
    #: size of the pool of distinct train problems the episodes are drawn from
    corpus_tasks: int = 6000
    #: per-turn mistake rate of the noisy experts that write the *code* transcripts (wrong
    #: programs, verdicts, plans, choices) where ``code_tasks`` is "funcs+stdio"
    error_rate: float = 0.25
    #: the code half of the corpus: "guarded" (the code testbed: guarded function tasks played
    #: by the testbed expert, every program right, every role's behaviour a mixture) or
    #: "funcs+stdio" (recipes up to 10: function and stdin/stdout tasks, noisy experts)
    code_tasks: str = "funcs+stdio"
    #: per-role shortcut rates of the code transcripts where ``code_tasks`` is "guarded"
    #: (None: the expert's defaults, ``SHORTCUT_RATES``; the math rates are math's own)
    code_shortcut_rates: dict[str, float] | None = None
    #: episodes of each code env where ``code_tasks`` is "guarded" (in place of
    #: ``code_episodes_per_env``): the stage teaches the guarded programs to a base that
    #: never saw them, and at recipe 10's 400 (600 stage steps) tiny-s copied the task's
    #: constants into 0.10 of its programs (docs/testbed.md)
    code_testbed_episodes: int = 2000
    #: extra episodes per code env (where ``code_tasks`` is "guarded") whose contested turns
    #: of ``drill_roles`` are kept: the code side of ``coordination_drills``
    code_drills: int = 0
    #: extra episodes per code env (where ``code_tasks`` is "guarded"), after ``code_drills``,
    #: each keeping only that role's contested turns: the code side of ``role_drills``, for a
    #: role the shared drills and rates leave outside the band (the aggregator)
    code_role_drills: dict[str, int] = field(default_factory=dict)
    #: the code half of the pretrained base (``base()``): recipe 7's "funcs+stdio", so every
    #: stage since continues one pretrained base per scale and teaches the guarded tasks
    #: itself (a config without a stage, the tests' model, may pretrain on "guarded")
    base_code_tasks: str = "funcs+stdio"
    #: how often each math role takes its shortcut behaviour in the corpus (answer directly,
    #: pick candidate 1, rubber-stamp, repeat one strategy): the base rate RL can move
    shortcut_rate: float = 0.5
    #: steps of a *behaviour mid-training* stage after pretraining (0: none; :func:`training_stage`
    #: says why a stage): the corpus re-written with ``role_shortcut_rates`` and
    #: ``coordination_drills``, at ``midtrain_lr``
    midtrain_steps: int = 600
    #: constant learning rate of the mid-training stage (after 20 warmup steps)
    midtrain_lr: float = 3e-4
    #: decay the stage's lr linearly to 0 after warmup (False: constant). Why: a role whose
    #: choice is one logit over near-identical prompts (the orchestrator, the aggregator) ends
    #: a constant-lr stage wherever the last steps' noise left it, 0.24 or 0.57 from the same
    #: corpus rate; an annealed stage ends near the corpus's own mixture
    midtrain_decay: bool = True
    #: what a behaviour stage continues from: "base" (the pretrained base, ``base()``: every
    #: recipe up to 12) or "default" (the scale's default build, the shipped tiny-s: a stage
    #: on the testbed itself, whose primitives and behaviour priors are measured; the
    #: role-conflict build, 900 steps instead of a 5,000-step base and a stage)
    stage_parent: str = "base"
    #: the stage's own seed: its behaviour draws and batch order, not the pools and not the
    #: base (0: the base's ``seed``, every build before it). Two builds of one recipe that
    #: differ only here measure how far a role's base rate moves from stage to stage
    midtrain_seed: int = 0
    #: per-role shortcut rates of the mid-training corpus over ``shortcut_rate`` (None: the
    #: expert's defaults, ``flowzoo.envs.scripted.SHORTCUT_RATES``; the default: the recipe's
    #: ``MIDTRAIN_SHORTCUT_RATES`` with the scale's ``MIDTRAIN_SCALE_RATES``)
    role_shortcut_rates: dict[str, float] | None = field(
        default_factory=lambda: dict(MIDTRAIN_SHORTCUT_RATES)
    )
    #: extra episodes per math env in the mid-training corpus whose *contested* turns of
    #: ``drill_roles`` (where the considered and the shortcut behaviour write different
    #: texts) are kept: a coordinating role learns its rule from the cases that decide it
    coordination_drills: int = 2400
    #: the roles whose contested turns ``coordination_drills`` keeps
    drill_roles: tuple[str, ...] = ("aggregator", "evaluator", "orchestrator", "synthesizer")
    #: extra drill episodes per role, after the coordination drills, each keeping only that
    #: role's contested turns: a role whose contested turns are rare in its env (the
    #: synthesizer's: solution 1 and the considered pick disagree in ~7% of episodes) gets
    #: rows of its own rule without adding rows of the other roles'
    role_drills: dict[str, int] = field(default_factory=lambda: dict(MIDTRAIN_ROLE_DRILLS))
    #: extra episodes per math env whose final role writes an answer from the candidates it
    #: is shown (Orch-Workers; Voting where its aggregator answers), keeping that turn only:
    #: the candidates make computing useless, so the role learns to copy (``copydrills.py``)
    copy_drills: int = 0
    #: None: the scale's budget from BUDGETS
    steps: int | None = None
    batch_size: int | None = None
    lr: float = 2e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    max_len: int = 768
    seed: int = 0
    #: extra env options per env id, e.g. {"voting-math": {"n_voters": 3}}
    env_options: dict[str, dict] = field(default_factory=dict)
    #: weight of the prompt tokens in the loss (0: completions only)
    prompt_loss_weight: float = 0.0
    #: fp32 | bf16 (autocast forward passes, fp32 weights); None: the scale's default
    precision: str | None = None

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"unknown tiny scale {self.scale!r}; valid: {', '.join(SCALES)}")
        self.envs = tuple(self.envs)
        if self.midtrain_seed and not self.midtrain_steps:  # it would re-seed pretraining
            raise ValueError("midtrain_seed seeds a mid-training stage; this config has none")
        for name in ("code_tasks", "base_code_tasks"):
            if getattr(self, name) not in CODE_TASKS:
                raise ValueError(
                    f"unknown {name} {getattr(self, name)!r}; valid: {', '.join(CODE_TASKS)}"
                )
        self.drill_roles = tuple(self.drill_roles)
        if self.stage_parent not in STAGE_PARENTS:
            raise ValueError(
                f"unknown stage_parent {self.stage_parent!r}; valid: {', '.join(STAGE_PARENTS)}"
            )
        if self.stage_parent != "base" and not self.midtrain_steps:
            raise ValueError("stage_parent names what a stage continues; this config has none")
        if self.role_shortcut_rates == MIDTRAIN_SHORTCUT_RATES:  # the default: the scale's own
            self.role_shortcut_rates = {
                **MIDTRAIN_SHORTCUT_RATES,
                **MIDTRAIN_SCALE_RATES.get(self.scale, {}),
            }
        steps, batch = BUDGETS[self.scale]
        self.precision = self.precision or PRECISION[self.scale]
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"unknown precision {self.precision!r}; valid: fp32, bf16")
        self.steps = steps if self.steps is None else int(self.steps)
        self.batch_size = batch if self.batch_size is None else int(self.batch_size)

    def base(self) -> PretrainConfig:
        """The pretraining stage alone (no mid-training, the even behaviour mix, recipe 7's
        code half): the model a mid-training stage continues from, cached under its own key.
        The guarded code tasks are taught in the stage, so every recipe since 7 shares one
        pretrained base per scale."""
        return dataclasses.replace(
            self,
            midtrain_steps=0,
            role_shortcut_rates=None,
            coordination_drills=0,
            role_drills={},
            code_tasks=self.base_code_tasks,
            code_shortcut_rates=None,
            code_drills=0,
            code_role_drills={},
            copy_drills=0,
            midtrain_seed=0,
            env_options={},  # a stage's env options re-write its corpus, not the base's
            stage_parent="base",
        )

    def parent(self) -> PretrainConfig:
        """The build a behaviour stage continues: :meth:`base`, or the scale's default
        build (``stage_parent="default"``)."""
        if self.stage_parent == "default":
            return PretrainConfig(scale=self.scale)
        return self.base()

    @property
    def stage_seed(self) -> int:
        """The seed of the corpus's behaviour draws and of the batch order: ``seed`` unless
        ``midtrain_seed`` asks for another stage of the same recipe."""
        return self.seed + 7919 * self.midtrain_seed

    def key(self) -> str:
        d = dataclasses.asdict(self)
        left_out = [f for f, at_old in OLD_KEY_FIELDS.items() if at_old(d)]
        for f in left_out:
            del d[f]
        # the architecture is part of the key: a changed scale must never load an old model
        blob = json.dumps(
            {"v": RECIPE_VERSION, "dims": SCALES[self.scale], **d}, sort_keys=True, default=str
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


#: Old-key compatibility, in one place: a field added after builds existed is left out of
#: :meth:`PretrainConfig.key` while it holds what every earlier build had (read on the whole
#: config), so those builds keep their keys, their cache folders and the shipped weights'
#: manifest.
OLD_KEY_FIELDS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "prompt_loss_weight": lambda d: d["prompt_loss_weight"] == 0.0,
    # recipe 8's levers (``base()`` of a mid-trained model is the recipe-7 model)
    "midtrain_decay": lambda d: not d["midtrain_steps"] or not d["midtrain_decay"],
    "midtrain_steps": lambda d: not d["midtrain_steps"],
    "midtrain_lr": lambda d: not d["midtrain_steps"],
    "role_shortcut_rates": lambda d: d["role_shortcut_rates"] is None,
    "role_drills": lambda d: not d["role_drills"],
    "coordination_drills": lambda d: not d["coordination_drills"],
    "drill_roles": lambda d: not d["coordination_drills"],
    # the code half of recipes up to 10
    "code_tasks": lambda d: d["code_tasks"] == "funcs+stdio",
    "code_shortcut_rates": lambda d: d["code_tasks"] == "funcs+stdio",
    "code_testbed_episodes": lambda d: d["code_tasks"] == "funcs+stdio",
    "code_drills": lambda d: not d["code_drills"],
    "code_role_drills": lambda d: not d["code_role_drills"],
    "midtrain_seed": lambda d: not d["midtrain_seed"],
    "stage_parent": lambda d: d["stage_parent"] == "base",
    "copy_drills": lambda d: not d["copy_drills"],
    "base_code_tasks": lambda d: d["base_code_tasks"] == "funcs+stdio",
}


def named_config(name: str) -> PretrainConfig | None:
    """The recipe a tiny model name stands for: a scale (``tiny-s``: the default recipe) or a
    scale with a suffix of :data:`RECIPES` (``tiny-s-code``: the code testbed, recipe 11;
    ``tiny-s-code12``: recipe 12; ``tiny-s-conflict``: the role-conflict testbed), either
    followed by ``-stageN``: another behaviour stage of
    the same recipe (``midtrain_seed=N``; ``-stage0`` is the bare name). None for any other
    name (a local path). Why a name: a sweep file that compares stages stays portable."""
    stem, stage = name, 0
    if (m := re.fullmatch(r"(.+)-stage(0|[1-9]\d*)", name)) is not None:
        stem, stage = m.group(1), int(m.group(2))
    cfg = None
    if stem in SCALES:
        cfg = PretrainConfig(scale=stem)
    for suffix, recipe in RECIPES.items():
        if suffix and stem.endswith(suffix) and stem.removesuffix(suffix) in SCALES:
            cfg = PretrainConfig(scale=stem.removesuffix(suffix), **recipe.levers)
    if cfg is None or not stage:
        return cfg
    if not cfg.midtrain_steps:
        raise ValueError(f"{name!r}: the recipe of {stem!r} has no behaviour stage to re-seed")
    return dataclasses.replace(cfg, midtrain_seed=stage)


def fast_config(scale: str = "tiny-s", **kw) -> PretrainConfig:
    """Seconds-scale pretraining for tests: still learns every role's output format, math and
    code (240 steps: at 120 the evaluator's verdict did not parse on 72% of math turns once
    the corpus held code too; the full context: code evaluator prompts run past 448
    characters, and positions never trained on gave garbage)."""
    base: dict[str, Any] = dict(
        scale=scale,
        episodes_per_env=100,
        code_episodes_per_env=None,
        code_testbed_episodes=100,
        # a seconds-scale model cannot learn the behaviour mixture: with half bare answers it
        # answered every prompt greedily with one number, so tests had no reward variance;
        # mostly worked answers keep it varied (the shipped models use the testbed's rates)
        shortcut_rate=0.2,
        midtrain_steps=0,
        role_shortcut_rates=None,
        coordination_drills=0,
        role_drills={},
        fact_drills=0,
        steps=240,
        batch_size=12,
        lr=4e-3,
        warmup_steps=10,
        max_len=768,
    )
    base.update(kw)
    return PretrainConfig(**base)
