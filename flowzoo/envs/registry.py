"""Env ids -> (workflow, task family, defaults); ``make_env`` and ``list_envs``.

Ids are ``{eval-opt,voting,orch-workers}-{math,code}``; each is also registered with
PettingZoo's registry as ``flowzoo/<id>-v0`` so ``pettingzoo.make`` finds it. The version
suffix is bumped whenever reward or observation semantics change.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

ENV_VERSION = 0
WORKFLOWS = ("eval-opt", "voting", "orch-workers", "single")
FAMILIES = ("math", "code")

#: options of the engine itself (see WorkflowEnv)
ENGINE_OPTIONS = (
    "reward_mode",
    "role_weight",
    "max_cycles",
    "max_prompt_chars",
    "max_action_chars",
    "render_mode",
)
#: options choosing the problems
TASK_OPTIONS = ("dataset", "split", "n_tasks", "task_seed")
#: options passed to the task family
FAMILY_OPTIONS: dict[str, tuple[str, ...]] = {
    "math": (),
    "code": ("sandbox", "sandbox_options", "partial_credit", "test_timeout_s"),
}
DEFAULT_DATASET = {"math": "arith", "code": "funcs"}
#: default number of generated problems per (family, split)
DEFAULT_N_TASKS = {
    ("math", "train"): 500,
    ("math", "test"): 200,
    ("code", "train"): 200,
    ("code", "test"): 100,
}


@dataclass(frozen=True)
class EnvSpec:
    """What an env id stands for."""

    id: str
    workflow: str
    family: str
    defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def pettingzoo_id(self) -> str:
        return f"flowzoo/{self.id}-v{ENV_VERSION}"


def _workflow_cls(name: str):
    from flowzoo.envs.workflows import WORKFLOW_CLASSES

    return WORKFLOW_CLASSES[name]


SPECS: dict[str, EnvSpec] = {}
for _wf in WORKFLOWS:
    for _fam in FAMILIES:
        _defaults: dict[str, Any] = {}
        if _wf == "eval-opt":
            _defaults["max_rounds"] = 3 if _fam == "math" else 2
        SPECS[f"{_wf}-{_fam}"] = EnvSpec(f"{_wf}-{_fam}", _wf, _fam, _defaults)


def list_envs() -> list[str]:
    """All env ids accepted by :func:`make_env`."""
    return list(SPECS)


def _resolve_id(env_id: str) -> EnvSpec:
    key = env_id.removeprefix("flowzoo/")
    if key not in SPECS:
        base, _, ver = key.rpartition("-v")
        if base in SPECS and ver.isdigit():
            if int(ver) != ENV_VERSION:
                raise ValueError(f"{env_id!r}: only version v{ENV_VERSION} exists")
            key = base
    if key not in SPECS:
        raise ValueError(f"unknown env id {env_id!r}; valid: {', '.join(SPECS)}")
    return SPECS[key]


def valid_options(env_id: str) -> list[str]:
    """Every keyword ``make_env(env_id, ...)`` accepts."""
    spec = _resolve_id(env_id)
    wf_opts = [f.name for f in dataclasses.fields(_workflow_cls(spec.workflow).Options)]
    return sorted(
        set(wf_opts) | set(ENGINE_OPTIONS) | set(TASK_OPTIONS) | set(FAMILY_OPTIONS[spec.family])
    )


@functools.lru_cache(maxsize=64)
def _load_tasks(family: str, dataset: str, split: str, n_tasks: int, task_seed: int):
    if family == "math":
        from flowzoo.tasks.math import load_math_dataset

        return load_math_dataset(dataset, split=split, n=n_tasks, seed=task_seed)
    from flowzoo.tasks.code import load_code_dataset

    return load_code_dataset(dataset, split=split, n=n_tasks, seed=task_seed)


def make_env(env_id: str, **overrides: Any):
    """A fresh :class:`~flowzoo.envs.core.WorkflowEnv` for ``env_id``.

    ``overrides`` are workflow options (``n_voters``, ``max_rounds``, ``prompt_templates``,
    ...), engine options (``reward_mode``, ``max_cycles``, ...), task options (``dataset``
    as a spec string or a ``TaskSet``, ``split``, ``n_tasks``, ``task_seed``) and family
    options (``sandbox`` for code). Unknown ones raise ``ValueError`` naming the valid ones."""
    from flowzoo.envs.core import WorkflowEnv
    from flowzoo.tasks import TaskSet, get_family

    spec = _resolve_id(env_id)
    valid = valid_options(spec.id)
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for {spec.id!r}; valid: {', '.join(valid)}")
    opts = {**spec.defaults, **overrides}
    wf_cls = _workflow_cls(spec.workflow)
    wf_fields = {f.name for f in dataclasses.fields(wf_cls.Options)}
    family = get_family(
        spec.family, **{k: opts[k] for k in FAMILY_OPTIONS[spec.family] if k in opts}
    )
    try:
        wf_options = wf_cls.Options(**{k: v for k, v in opts.items() if k in wf_fields})
    except TypeError as e:
        raise ValueError(f"bad workflow options for {spec.id!r}: {e}") from None
    workflow = wf_cls(wf_options, family)

    dataset = opts.get("dataset", DEFAULT_DATASET[spec.family])
    if isinstance(dataset, TaskSet):
        tasks = dataset
    elif isinstance(dataset, str):
        split = str(opts.get("split", "train"))
        tasks = _load_tasks(
            spec.family,
            dataset,
            split,
            int(opts.get("n_tasks", DEFAULT_N_TASKS.get((spec.family, split), 200))),
            int(opts.get("task_seed", 0)),
        )
    else:
        raise ValueError(
            f"dataset must be a spec string or a TaskSet, got {type(dataset).__name__}"
        )
    bad = [t.id for t in list(tasks)[:50] if t.family != spec.family]
    if bad:
        raise ValueError(f"{spec.id!r} needs {spec.family} tasks; {bad[0]!r} is not one")
    engine_kwargs = {k: opts[k] for k in ENGINE_OPTIONS if k in opts}
    return WorkflowEnv(workflow, tasks, env_id=spec.id, **engine_kwargs)


def _register_with_pettingzoo() -> None:
    try:
        from pettingzoo import aec_registry, register
    except ImportError:  # pettingzoo < 1.27 has no registry; make_env still works
        return
    for spec in SPECS.values():
        if spec.pettingzoo_id not in aec_registry:
            register("aec", spec.pettingzoo_id, entry_point=functools.partial(make_env, spec.id))


_register_with_pettingzoo()
