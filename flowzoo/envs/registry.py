"""Env ids -> (workflow, task family, defaults); ``make_env``, ``list_envs``, ``register``.

Ids are ``{workflow}-{family}`` (``voting-math``, ``eval-opt-code`` ...); each is also
registered with PettingZoo's registry as ``flowzoo/<id>-v0`` so ``pettingzoo.make`` finds it.
The version suffix is bumped whenever reward or observation semantics change. A workflow
brings its own per-family defaults (``Workflow.family_defaults``); :func:`register` adds a
new one in the PettingZoo/Gymnasium style. :func:`make_env` is the raw env, :func:`env` the
same wrapped as PettingZoo's envs are.

Version history (every id):

- v0: the initial semantics. Team reward (the final answer's 0/1 score) to every agent at the
  end, ``reward_mode="role"`` mixing in per-role signals; code programs judged where the
  program cannot reach (tampering scores 0 and is flagged ``reward_tamper``).
- v0, unchanged: ``tools=`` (docs/tools.md) is opt-in; without it every observation, reward
  and info is what it was.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowzoo.envs import options as _opt
from flowzoo.envs.tools import TOOLS_BY_FAMILY
from flowzoo.tasks.families import family_spec

if TYPE_CHECKING:  # the annotations only: importing these here would load the engine eagerly
    from pettingzoo import AECEnv

    from flowzoo.envs.core import WorkflowEnv
    from flowzoo.envs.workflows.base import Workflow, WorkflowOptions
    from flowzoo.tasks.base import TaskSet

ENV_VERSION = 0
#: a version number as ids spell it: ASCII digits, no sign, no leading zero ("0", "12")
_VERSION_RE = re.compile(r"0|[1-9][0-9]*", re.ASCII)
#: the multi-agent workflows of the study (``single`` is its single-agent control)
STUDY_WORKFLOWS = ("eval-opt", "voting", "orch-workers")

#: options of the engine itself (see WorkflowEnv; declared in flowzoo.envs.options)
ENGINE_OPTIONS = tuple(o.name for o in _opt.ENGINE)
#: options choosing the problems
TASK_OPTIONS = ("dataset", *(o.name for o in _opt.TASKS))
#: options of the tools roles may call inside their turns (``flowzoo.envs.tools``)
TOOL_OPTIONS = tuple(o.name for o in _opt.TOOLS)
#: the most problems an env may ask a task source for (more fails here, not in a generator)
MAX_TASKS = _opt.MAX_TASKS


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


#: workflow name -> class, for every registered workflow
WORKFLOW_CLASSES: dict[str, type[Workflow]] = {}
SPECS: dict[str, EnvSpec] = {}


def _workflow_cls(name: str) -> type[Workflow]:
    return WORKFLOW_CLASSES[name]


def register(workflow_cls: type[Workflow], families: tuple[str, ...] | None = None) -> list[str]:
    """Make ``workflow_cls`` (a :class:`~flowzoo.envs.workflows.Workflow` subclass with a
    ``name``) available as ``make_env("<name>-<family>")`` and ``pettingzoo.make(
    "flowzoo/<name>-<family>-v0")`` for each task family (default: every registered one,
    :mod:`flowzoo.tasks.families`); returns the new env ids."""
    from flowzoo.envs.workflows.base import Workflow
    from flowzoo.tasks.families import FAMILIES

    known_families = tuple(FAMILIES)
    families = known_families if families is None else tuple(families)

    if not (isinstance(workflow_cls, type) and issubclass(workflow_cls, Workflow)):
        raise ValueError(f"register() takes a Workflow subclass, got {workflow_cls!r}")
    name = workflow_cls.name
    if not name or not isinstance(name, str) or "/" in name or name.endswith(known_families):
        raise ValueError(f"workflow {workflow_cls.__name__} needs a plain `name`, got {name!r}")
    bad = sorted(set(families) - set(known_families))
    if bad or not families:
        raise ValueError(f"unknown task families {bad}; valid: {', '.join(known_families)}")
    known = WORKFLOW_CLASSES.get(name)
    if known is not None and known is not workflow_cls:
        raise ValueError(f"a different workflow is already registered as {name!r}")
    WORKFLOW_CLASSES[name] = workflow_cls
    ids = []
    for fam in families:
        spec = EnvSpec(f"{name}-{fam}", name, fam, dict(workflow_cls.family_defaults.get(fam, {})))
        SPECS[spec.id] = spec
        _register_with_pettingzoo(spec)
        ids.append(spec.id)
    return ids


def workflow_readings(name: str) -> dict[str, Any]:
    """What the study reads from workflow ``name``'s runs (its declared
    :class:`~flowzoo.envs.workflows.base.Readings`, as runs record them); an unknown name
    reads nothing rather than guessing."""
    from flowzoo.envs.workflows.base import Readings

    cls = WORKFLOW_CLASSES.get(name)
    if cls is None:
        return Readings().record(frozenset())
    return cls.readings.record(cls.parallel_roles)


def study_envs(family: str) -> tuple[str, ...]:
    """The study's workflow envs on one task family (``voting-math``, ...)."""
    return tuple(f"{w}-{family}" for w in STUDY_WORKFLOWS)


def list_envs() -> list[str]:
    """All env ids accepted by :func:`make_env`."""
    return list(SPECS)


def _resolve_id(env_id: str) -> EnvSpec:
    if not isinstance(env_id, str):
        raise TypeError(f"env id must be a str, got {env_id!r}; valid: {', '.join(SPECS)}")
    key = env_id.removeprefix("flowzoo/")
    if key not in SPECS:
        base, sep, ver = key.rpartition("-v")
        if sep and base in SPECS:  # a versioned id: exactly "-v<N>", N in plain ASCII digits
            if _VERSION_RE.fullmatch(ver) is None:
                raise ValueError(
                    f"{env_id!r}: malformed version {'v' + ver!r}; a versioned id ends in "
                    f"-v<N> with no leading zeros: {base}-v{ENV_VERSION}"
                )
            if int(ver) != ENV_VERSION:
                raise ValueError(f"{env_id!r}: only version v{ENV_VERSION} exists")
            key = base
    if key not in SPECS:
        raise ValueError(f"unknown env id {env_id!r}; valid: {', '.join(SPECS)}")
    return SPECS[key]


def env_spec(env_id: str) -> EnvSpec:
    """What ``env_id`` (``voting-math``, ``flowzoo/voting-math-v0``) stands for, checked as
    ``make_env`` checks it, without building anything."""
    return _resolve_id(env_id)


def has_ood(env_id: str, **options: Any) -> bool:
    """Whether ``make_env(env_id, split="ood", **options)`` has problems: the generated
    datasets hold structure out whole; a loaded file or a TaskSet has no such split."""
    spec = _resolve_id(env_id)
    fam = family_spec(spec.family)
    dataset = {**spec.defaults, **options}.get("dataset", fam.default_dataset)
    return isinstance(dataset, str) and dataset.partition(":")[0] in fam.ood_datasets


def env_agents(env_id: str, **options: Any) -> dict[str, str]:
    """Each agent of ``make_env(env_id, **options)`` and its role, in first-turn order, with
    the options checked as ``make_env`` checks them but no problems loaded: a config asks
    whether an estimator applies (a per-role one needs two roles) before any model loads."""
    spec = _resolve_id(env_id)
    checked, wf_options = _checked(spec, options, f"make_env({spec.id!r}): ")
    opts = {**spec.defaults, **checked}
    fam = family_spec(spec.family)
    wf = _workflow_cls(spec.workflow)(
        wf_options, fam.make(**{k: opts[k] for k in fam.options if k in opts})
    )
    return {a: wf.role_of(a) for a in wf.agents()}


def valid_options(env_id: str) -> list[str]:
    """Every keyword ``make_env(env_id, ...)`` accepts."""
    spec = _resolve_id(env_id)
    wf_opts = [f.name for f in dataclasses.fields(_workflow_cls(spec.workflow).Options)]
    return sorted(
        set(wf_opts)
        | set(ENGINE_OPTIONS)
        | set(TASK_OPTIONS)
        | set(TOOL_OPTIONS)
        | set(family_spec(spec.family).options)
    )


def check_options(env_id: str, options: dict[str, Any], where: str) -> dict[str, Any]:
    """``make_env(env_id, **options)``'s checks of names and values, without building
    anything: a config checks its ``env_options`` when it is made, not when an env is.
    Every error is a ValueError here (a bad value in a config); returns the options as plain
    Python values (NumPy scalars replaced), what ``make_env`` would use."""
    spec = _resolve_id(env_id)
    if "dataset" in options and not isinstance(options["dataset"], str):
        raise ValueError(f"{where}: dataset must be a dataset spec string")
    try:
        checked, _ = _checked(spec, options, f"{where}: ")
    except TypeError as e:  # the same error either way for a config: a bad value
        raise ValueError(str(e)) from None
    return checked


def _checked(
    spec: EnvSpec, overrides: dict[str, Any], where: str
) -> tuple[dict[str, Any], WorkflowOptions]:
    """Every check of ``overrides`` that needs nothing built, in one place and before
    anything is built (family, sandbox, problems): names; each declared value's type and
    range (returned as plain Python values); ``sandbox_options`` against the backend they
    configure; the workflow's options with its own range, choice and template checks.
    Returns the checked overrides and the workflow's ``Options``."""
    from flowzoo.tasks import TaskSet

    valid = valid_options(spec.id)
    unknown = sorted(set(overrides) - set(valid), key=repr)
    if unknown:
        raise ValueError(
            f"{where}unknown option(s) {unknown} for {spec.id!r}; valid: {', '.join(valid)}"
        )
    wf_cls = _workflow_cls(spec.workflow)
    declared = {**_opt.DECLARED, **_opt.workflow_opts(wf_cls.Options)}
    fam = family_spec(spec.family)
    checked = dict(overrides)
    for k, v in overrides.items():
        if k == "sandbox_options" and k in fam.options:
            continue  # below, with the backend it configures
        if k in declared:
            checked[k] = declared[k].validate(v, where)
    opts = {**spec.defaults, **checked}
    dataset = opts.get("dataset", fam.default_dataset)
    if not isinstance(dataset, (str, TaskSet)):
        raise TypeError(
            f"{where}dataset={dataset!r} has type {type(dataset).__name__}; "
            "dataset must be a spec string or a TaskSet"
        )
    tools = checked.get("tools") or ()
    valid_tools = TOOLS_BY_FAMILY.get(spec.family, ())
    if any(t not in valid_tools for t in tools):  # before the family or its sandbox is built
        bad = [t for t in tools if t not in valid_tools]
        raise ValueError(
            f"{where}tools={list(tools)} names unknown tool(s) {bad} for {spec.family} envs; "
            f"valid: {', '.join(valid_tools) or '(none)'}"
        )
    if "sandbox_options" in overrides and "sandbox_options" in fam.options:
        checked["sandbox_options"] = _opt.check_sandbox_options(
            opts.get("sandbox", _opt.default_backend()), overrides["sandbox_options"], where
        )
        opts["sandbox_options"] = checked["sandbox_options"]
    wf_fields = {f.name for f in dataclasses.fields(wf_cls.Options)}
    try:
        wf_options = wf_cls.Options(**{k: v for k, v in opts.items() if k in wf_fields})
        wf_cls.check_options(wf_options)  # ranges, choices, templates: no family needed
    except (TypeError, ValueError) as e:
        cls = TypeError if isinstance(e, TypeError) else ValueError  # never type(e)(msg)
        raise cls(f"{where}bad workflow option for {spec.id!r}: {e}") from e
    return checked, wf_options


@functools.lru_cache(maxsize=64)
def _load_tasks(family: str, dataset: str, split: str, n_tasks: int, task_seed: int) -> TaskSet:
    return family_spec(family).load(dataset, split, n_tasks, task_seed)


def make_env(env_id: str, **overrides: Any) -> WorkflowEnv:
    """A fresh :class:`~flowzoo.envs.core.WorkflowEnv` for ``env_id``.

    ``overrides`` are workflow options (``n_voters``, ``max_rounds``, ``prompt_templates``,
    ...), engine options (``reward_mode``, ``max_cycles``, ...), task options (``dataset``
    as a spec string or a ``TaskSet``, ``split``, ``n_tasks``, ``task_seed``) and family
    options (``sandbox`` and ``sandbox_options`` for code), and tool options (``tools``,
    ``max_tool_calls``, ...: docs/tools.md). Every name and value is checked
    before anything is built: an unknown name is a ``ValueError`` naming the valid ones, a
    wrong type a ``TypeError``, a value out of range a ``ValueError``, each naming the option,
    the value and what is allowed. NumPy scalars become Python values; nothing else is
    converted."""
    from flowzoo.envs.core import WorkflowEnv
    from flowzoo.tasks import TaskSet

    spec = _resolve_id(env_id)
    checked, wf_options = _checked(spec, overrides, f"make_env({spec.id!r}): ")
    opts = {**spec.defaults, **checked}
    wf_cls = _workflow_cls(spec.workflow)
    fam = family_spec(spec.family)
    family = fam.make(**{k: opts[k] for k in fam.options if k in opts})
    workflow = wf_cls(wf_options, family)  # the checks that need the family

    dataset = opts.get("dataset", fam.default_dataset)
    if isinstance(dataset, TaskSet):
        tasks = dataset
    else:
        split = opts.get("split", "train")
        tasks = _load_tasks(
            spec.family,
            dataset,
            split,
            opts.get("n_tasks", fam.n_tasks.get(split, 200)),
            opts.get("task_seed", 0),
        )
    bad = [t.id for t in list(tasks)[:50] if t.family != spec.family]
    if bad:
        raise ValueError(f"{spec.id!r} needs {spec.family} tasks; {bad[0]!r} is not one")
    engine_kwargs = {k: opts[k] for k in (*ENGINE_OPTIONS, *TOOL_OPTIONS) if k in opts}
    return WorkflowEnv(workflow, tasks, env_id=spec.id, **engine_kwargs)


def env(env_id: str, **overrides: Any) -> AECEnv:
    """``make_env`` wrapped as PettingZoo's own envs are (``env()`` over ``raw_env()``): the
    order-enforcing wrapper refuses ``step`` before ``reset`` and the like with a clear error.
    What ``pettingzoo.make("aec", "flowzoo/<id>-v0")`` returns."""
    from pettingzoo.utils.wrappers import OrderEnforcingWrapper

    return OrderEnforcingWrapper(make_env(env_id, **overrides))


#: PettingZoo's name for the unwrapped env
raw_env = make_env


def _register_with_pettingzoo(spec: EnvSpec) -> None:
    try:
        from pettingzoo import aec_registry
        from pettingzoo import register as pz_register
    except ImportError:  # pettingzoo < 1.27 has no registry; make_env still works
        return
    if spec.pettingzoo_id not in aec_registry:
        pz_register("aec", spec.pettingzoo_id, entry_point=functools.partial(env, spec.id))


def _register_builtins() -> None:
    from flowzoo.envs.workflows import BUILTIN_WORKFLOWS

    for cls in BUILTIN_WORKFLOWS:
        register(cls)


_register_builtins()
