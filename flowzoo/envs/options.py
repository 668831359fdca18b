"""Every option an env takes, declared once: its type, its range or choices, and its help.

``make_env``, ``WorkflowEnv`` and ``reset`` check values against these declarations before
anything is built or any state is touched, so a bad value fails where it was given, naming
the option, the value and what is allowed. Nothing is coerced: a bool where an int is meant,
a string for a number or a float seed is an error, not a silent conversion. Workflow options
are declared by their ``Options`` dataclass (type from the annotation; the workflow's
``check_options`` checks ranges, choices and templates); ``sandbox_options`` key by key
(:data:`SANDBOX`, against the keys the chosen backend takes); a family registered by others
checks its own options. A NumPy scalar is taken as its Python value (:func:`native`).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flowzoo.domain import Domain, fault, native
from flowzoo.tasks.base import Task, TaskSet

#: an option's kind -> the type its domain holds (other kinds: a custom check, or any value)
_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str, "dict": dict}


@dataclass(frozen=True)
class Opt:
    """One option: its name, its one-line help and the values it takes. Those are a
    :class:`~flowzoo.domain.Domain`, the description (and the type, choice and range
    check, :func:`~flowzoo.domain.fault`) the config's settings use too: one
    mechanism for both. An option adds whether None is allowed (``nullable``) and, for kinds
    a domain cannot express (a sandbox, a list of names), a custom ``check``."""

    name: str
    kind: str
    help: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[str, ...] | None = None
    nullable: bool = False
    #: a custom check for kinds the table cannot express: None when the value is allowed,
    #: else (its fault, "type" or "choice", as :func:`~flowzoo.domain.fault` names them, and
    #: what is allowed), so a value of the wrong type is a TypeError here as everywhere
    check: Callable[[Any], tuple[str, str] | None] | None = None

    @property
    def domain(self) -> Domain | None:
        """The values the option takes (None: a custom check, or any value)."""
        t = _TYPES.get(self.kind)
        if t is None or self.check is not None:
            return None
        return Domain(t, lo=self.lo, hi=self.hi, lo_open=self.lo_open, choices=self.choices)

    def allowed(self) -> str:
        """What the option accepts, as an error message says it."""
        d = self.domain
        text = d.described if d is not None else f"a {self.kind}"
        return text + (" or None" if self.nullable else "")

    def validate(self, value: Any, where: str = "") -> Any:
        """``value`` as a plain Python value (a NumPy scalar becomes its Python twin, so no
        option carries a NumPy type into records or JSON), or TypeError (wrong type) /
        ValueError (out of range, not a choice) naming the option, the value and what is
        allowed. Nothing else is converted: a bool is never an int, a str never a number."""
        value = native(value)
        if value is None and self.nullable:
            return None
        bad = f"{where}{self.name}={short_repr(value)}"
        if self.check is not None:
            found = self.check(value)
            if found is None:
                return value
            fault_of_check, allowed = found
            if fault_of_check == "type":
                raise TypeError(
                    f"{bad} has type {type(value).__name__}; {self.name} must be {allowed}"
                )
            raise ValueError(f"{bad} is not allowed; {self.name} must be {allowed}")
        d = self.domain
        if d is None:
            return value
        if d.type is dict and isinstance(value, Mapping):
            value = dict(value)  # any mapping (a MappingProxy, an OmegaConf table) as a dict
        why = fault(value, d)
        if why == "type":
            raise TypeError(
                f"{bad} has type {type(value).__name__}; {self.name} must be {self.allowed()}"
            )
        if why == "choice":
            raise ValueError(f"{bad} is not allowed; {self.name} must be {self.allowed()}")
        if why == "range":
            raise ValueError(f"{bad} is out of range; {self.name} must be {self.allowed()}")
        if why == "nul":
            raise ValueError(f"{bad} holds a NUL character; {self.name} must be {self.allowed()}")
        if d.type is float:
            return float(value)
        if d.type is int:
            return int(value)  # an int subclass (an IntEnum) is plain int from here on
        if d.type is str:
            return str.__str__(value)  # a str subclass is plain str from here on
        if d.type is dict:
            return dict(value)
        return value


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut for an error message."""
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def _check_sandbox(value: Any) -> tuple[str, str] | None:
    from flowzoo.sandbox import BACKENDS, Sandbox

    allowed = f"a backend name ({', '.join(map(repr, BACKENDS))}) or a Sandbox instance"
    if isinstance(value, str):
        return None if value in BACKENDS else ("choice", f"{allowed} (unknown sandbox backend)")
    if isinstance(value, type) or not isinstance(value, Sandbox):
        return "type", allowed + " (with name, isolation, run, run_many and close)"
    return None


#: options of the engine itself (``WorkflowEnv``)
ENGINE = (
    Opt("reward_mode", "str", "team reward only, or mixed with per-role signals",
        choices=("team", "role")),
    Opt("role_weight", "float", "weight of the per-role signal in reward_mode='role'",
        lo=0.0, hi=1.0),
    Opt("max_cycles", "int", "steps after which the episode is truncated (default: the "
        "workflow's longest episode + 1)", lo=1, hi=1_000_000, nullable=True),
    Opt("max_prompt_chars", "int", "a longer prompt keeps its tail and is flagged", lo=64),
    Opt("max_action_chars", "int", "a longer action is cut and flagged", lo=1),
    Opt("overlong_penalty", "float", "subtracted from the reward of a turn cut at its token "
        "budget", lo=0.0),
    Opt("render_mode", "str", "ansi returns the transcript, human prints it",
        choices=("ansi", "human"), nullable=True),
)  # fmt: skip

#: a seed, as ``reset`` takes it: NumPy's and Gymnasium's generators take any int >= 0 (no
#: upper bound); every seed option is this declaration renamed, so their domains cannot drift
SEED = Opt("seed", "int", "seed of the episode draws (None: fresh entropy)", lo=0, nullable=True)

#: the most problems an env may ask a task source for (more fails here, not in a generator)
MAX_TASKS = 1_000_000

#: options choosing the problems (``dataset`` may also be a TaskSet: checked by make_env)
TASKS = (
    Opt("split", "str", "train, test, ood (the family's loader names the valid ones)"),
    Opt("n_tasks", "int", "how many problems to draw", lo=1, hi=MAX_TASKS),
    dataclasses.replace(SEED, name="task_seed", help="seed of the problem draw", nullable=False),
)

#: options of the built-in code family (``flowzoo.tasks.code.CodeFamily``)
CODE_FAMILY = (
    Opt("sandbox", "sandbox", "where programs run", check=_check_sandbox),
    Opt("sandbox_options", "dict", "the sandbox backend's limits and settings (SANDBOX)",
        nullable=True),
    Opt("partial_credit", "bool", "score the fraction of tests passed instead of all-or-none"),
    Opt("test_timeout_s", "float", "seconds for a program's tests", lo=0.0, hi=3600.0,
        lo_open=True),
    Opt("case_timeout_s", "float", "seconds per stdin/stdout case", lo=0.0, hi=3600.0,
        lo_open=True),
    Opt("time_budget_s", "float", "seconds per stdin/stdout task", lo=0.0, hi=3600.0,
        lo_open=True),
    Opt("early_stop", "bool", "stop a task's cases at the first failure"),
)  # fmt: skip


def _check_names(value: Any) -> tuple[str, str] | None:
    """A list or tuple of names (str), or what is allowed instead."""
    ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    return None if ok else ("type", "a list or tuple of names (str) or None")


#: options of the tools a role may call inside its turn (``flowzoo.envs.tools``, docs/tools.md)
TOOLS = (
    Opt("tools", "names", "tools the roles may call (code: run; math: python); None: none",
        nullable=True, check=_check_names),
    Opt("max_tool_calls", "int", "tool calls per turn; the action after the last is the turn's "
        "message", lo=0, hi=64),
    Opt("tool_output_chars", "int", "a longer tool result keeps its head and tail and is "
        "flagged", lo=64, hi=1 << 20),
    Opt("tool_timeout_s", "float", "seconds one tool call may take in the sandbox", lo=0.0,
        hi=600.0, lo_open=True),
    Opt("tool_time_budget_s", "float", "sandbox seconds all tool calls of an episode may take",
        lo=0.0, hi=3600.0, lo_open=True),
    Opt("tool_roles", "names", "roles that may call tools (None: every role)", nullable=True,
        check=_check_names),
)  # fmt: skip

DECLARED: dict[str, Opt] = {o.name: o for o in (*ENGINE, *TASKS, *CODE_FAMILY, *TOOLS)}


def _check_mechanism(value: Any) -> tuple[str, str] | None:
    from flowzoo.sandbox.process import MECHANISMS

    allowed = "one of " + ", ".join(map(repr, MECHANISMS))
    if not isinstance(value, str):
        return "type", "a str, " + allowed
    return None if value in MECHANISMS else ("choice", allowed)


_MB = 1 << 20  # the largest size in MiB (a TiB) any limit may name

#: every ``sandbox_options`` key of the built-in backends: which keys a backend takes is the
#: backend's own (its signature and limits dataclass, :func:`sandbox_keys`); what each value
#: must be is declared here. Nothing is clamped: a value a backend would silently raise (an
#: address space under 64 MiB) is refused.
SANDBOX = (
    Opt("timeout_s", "float", "seconds a program may run", lo=0.0, hi=3600.0, lo_open=True),
    Opt("memory_mb", "int", "address space (process) or memory (docker) in MiB", lo=64, hi=_MB),
    Opt("max_output_bytes", "int", "stdout/stderr kept per run", lo=1, hi=1 << 30),
    Opt("max_procs", "int", "processes per run", lo=1, hi=1 << 16),
    Opt("max_file_mb", "int", "largest file a run may write", lo=1, hi=_MB),
    Opt("max_open_files", "int", "open files per run (the interpreter needs a few)", lo=16,
        hi=_MB),
    Opt("disk_mb", "int", "each writable tmpfs under bubblewrap", lo=1, hi=_MB),
    Opt("max_files", "int", "files a run may create", lo=1, hi=1 << 30),
    Opt("mechanism", "str", "process isolation: auto, bwrap, unshare or none",
        check=_check_mechanism),
    Opt("workers", "int", "concurrent runs (None: the backend's default)", lo=1, hi=1024,
        nullable=True),
    Opt("use_cgroups", "bool", "account memory and processes per run in a cgroup"),
    Opt("forkserver", "bool", "start runs from a warm fork server"),
    Opt("allow_weak_isolation", "bool", "accept a mechanism that does not isolate runs"),
    Opt("image", "str", "docker image (None: the host's interpreter mounted read-only)",
        nullable=True),
    Opt("pool_size", "int", "warm containers", lo=1, hi=256),
    Opt("python", "str", "interpreter inside the image"),
    Opt("cpus", "float", "CPUs per container", lo=0.0, hi=1024.0, lo_open=True),
    Opt("pids_limit", "int", "processes per container", lo=1, hi=1 << 22),
    Opt("tmpfs_mb", "int", "the container's writable /box", lo=1, hi=_MB),
    Opt("url", "str", "the sandbox-fusion service (None: $FLOWZOO_SANDBOX_FUSION_URL)",
        nullable=True),
    Opt("max_concurrency", "int", "requests in flight", lo=1, hi=1024),
    Opt("retries", "int", "retries of a failed request", lo=0, hi=100),
    Opt("request_slack_s", "float", "seconds a request may take beyond the run's timeout",
        lo=0.0, hi=3600.0),
)  # fmt: skip
SANDBOX_DECLARED: dict[str, Opt] = {o.name: o for o in SANDBOX}


def sandbox_keys(backend: str) -> dict[str, Opt]:
    """The ``sandbox_options`` keys ``backend`` takes, each with its declaration (a key the
    backend added after this table is typed from its annotation)."""
    from flowzoo.sandbox import BACKEND_TABLE

    row = BACKEND_TABLE[backend]
    mod = __import__(row.module, fromlist=[row.cls])
    cls = getattr(mod, row.cls)
    params = inspect.signature(cls.__init__).parameters
    hints = _hints(cls.__init__)
    out = {
        p: SANDBOX_DECLARED.get(p) or Opt(p, _kind_of(hints.get(p)), f"{row.cls}({p})")
        for p, prm in params.items()
        if p != "self" and not p.startswith("_") and prm.kind is not prm.VAR_KEYWORD
    }
    if row.limits is not None:
        lim = getattr(mod, row.limits)
        hints = _hints(lim)
        for f in dataclasses.fields(lim):
            out[f.name] = SANDBOX_DECLARED.get(f.name) or Opt(
                f.name, _kind_of(hints.get(f.name)), f"{row.limits}.{f.name}"
            )
    return out


def default_backend() -> str:
    """The backend the code family runs programs on when ``sandbox`` is not given."""
    from flowzoo.tasks.code import CodeFamily

    return inspect.signature(CodeFamily).parameters["sandbox"].default


def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # an annotation naming what only type checkers import: untyped
        return {}


def check_sandbox_options(sandbox: Any, options: Any, where: str = "") -> dict[str, Any]:
    """``sandbox_options`` checked against the backend ``sandbox`` names, key by key, before
    any sandbox is built: a plain dict of str keys the backend takes, each value of its
    declared type and range (returned as plain Python values). A ``Sandbox`` instance carries
    its own settings, so options beside it (which it would silently ignore) are refused."""
    opt = DECLARED["sandbox_options"]
    options = opt.validate(options, where)
    if not options:
        return {}
    if not isinstance(sandbox, str):
        raise ValueError(
            f"{where}sandbox_options={short_repr(options)} given with "
            f"sandbox={short_repr(sandbox)}: a Sandbox instance carries its own settings; "
            "sandbox_options apply only to a backend name (sandbox='process', ...)"
        )
    keys = sandbox_keys(sandbox)
    bad_type = [k for k in options if not isinstance(k, str)]
    if bad_type:
        raise TypeError(
            f"{where}sandbox_options key {bad_type[0]!r} has type {type(bad_type[0]).__name__}; "
            f"keys are setting names (str): {', '.join(sorted(keys))}"
        )
    unknown = sorted(set(options) - set(keys))
    if unknown:
        raise ValueError(
            f"{where}unknown sandbox_options {unknown} for the {sandbox} backend; valid: "
            f"{', '.join(sorted(keys))}"
        )
    return {k: keys[k].validate(v, f"{where}sandbox_options: ") for k, v in options.items()}


#: the options that decide where and how untrusted code runs (the backend, its mechanism,
#: ``allow_weak_isolation``, its limits): set only by the user's own config (``make_env``'s
#: caller, ``TrainConfig.env_options``, an integration's env config), never by a data row
SANDBOX_CHOICE = ("sandbox", "sandbox_options")
#: what else a row may not set: the split it is read from (a red-team round moved a SkyRL
#: row to "test", which would put training rows in the held-out set)
ROW_OWNED = ("split",)


def row_env_options(options: Any, where: str) -> dict[str, Any]:
    """The env options a data row carries (a SkyRL row's ``flowzoo.options``, a verifiers
    task's ``info["options"]``), refused when they choose the sandbox. Why refused, not
    dropped: a data file that asks for ``mechanism="none"`` or another backend is either
    hostile or a user's mistake, and either way a run must not go on as if it had not asked;
    the error names the row and where the setting belongs."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(
            f"{where}: a row's options must be a JSON object, got {short_repr(options)}"
        )
    chosen = sorted((k for k in options if k in SANDBOX_CHOICE), key=repr)
    if chosen:
        raise ValueError(
            f"{where}: a data row may not choose the sandbox (it sets {chosen}); the sandbox "
            f"({', '.join(SANDBOX_CHOICE)}) is set only by your own config: make_env's "
            "arguments, TrainConfig.env_options, or the integration's env config"
        )
    owned = sorted((k for k in options if k in ROW_OWNED), key=repr)
    if owned:
        raise ValueError(
            f"{where}: a data row may not set {owned} (which split a row is read from is "
            "your own config's, as the sandbox is)"
        )
    return dict(options)


def user_sandbox_choice(config: Any) -> dict[str, Any]:
    """The :data:`SANDBOX_CHOICE` keys of a user's own config (a dict, a pydantic model's
    dict, an OmegaConf ``DictConfig``): the only place an integration takes them from."""
    if config is None:
        return {}
    get = getattr(config, "get", None)
    if not callable(get):
        raise TypeError(
            f"an env config must be a mapping (dict or DictConfig), got {type(config).__name__}"
        )
    out: dict[str, Any] = {}
    for key in SANDBOX_CHOICE:
        value = get(key, None)
        if value is None:
            continue
        items = getattr(value, "items", None)
        out[key] = {str(k): v for k, v in items()} if callable(items) else value
    return out


#: ``reset(options=...)`` keys; at most one of them picks the problem
RESET = (
    Opt("task", "Task", "the problem itself (a flowzoo Task of this env's family)"),
    Opt("task_id", "str", "the id of a problem in the env's task set"),
    Opt("task_index", "int", "the position of a problem in the env's task set", lo=0),
)
RESET_KEYS = tuple(o.name for o in RESET)
#: keys ``reset`` ignores: PettingZoo's ``api_test`` probes ``reset(options={"options": 1})``
#: to see that ``options`` is taken; every other unknown key is an error
IGNORED_RESET_KEYS = ("options",)


class UnknownTaskError(ValueError, KeyError):
    """A ``task_id`` the env's task set does not hold (a ValueError; a KeyError as before)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def explicit_task(options: Any, family: str, tasks: TaskSet, env: str) -> Task | None:
    """The task ``reset``'s options name for ``env`` (None: draw one), every key and value
    checked first: misspelt keys, wrong types, a task of another family are errors."""
    if options is None:
        return None
    if not isinstance(options, dict):
        raise TypeError(
            f"reset(options={short_repr(options)}) has type {type(options).__name__}; options "
            f"must be a dict with keys from {', '.join(RESET_KEYS)} (or None)"
        )
    unknown = sorted(set(options) - {*RESET_KEYS, *IGNORED_RESET_KEYS}, key=repr)
    if unknown:
        raise ValueError(
            f"reset(options=...) has unknown key(s) {unknown}; valid: {', '.join(RESET_KEYS)}"
        )
    given = {k: v for k, v in options.items() if v is not None and k in RESET_KEYS}
    if len(given) > 1:
        raise ValueError(
            f"reset(options=...) names the problem {len(given)} ways ({sorted(given)}); "
            f"give one of {', '.join(RESET_KEYS)}"
        )
    if "task" in given:
        t = given["task"]
        if not isinstance(t, Task):
            raise TypeError(
                f"reset(options={{'task': {short_repr(t)}}}) has type {type(t).__name__}; "
                "task must be a flowzoo Task"
            )
        if t.family != family:
            raise ValueError(
                f"reset(options={{'task': ...}}): task {t.id!r} is a {t.family!r} task; "
                f"{env} scores {family!r} tasks only"
            )
        return t
    if "task_id" in given:
        tid = given["task_id"]
        RESET[1].validate(tid, "reset(options): ")
        try:
            return tasks.by_id(tid)
        except KeyError as e:
            raise UnknownTaskError(f"reset(options): task_id={tid!r}: {e.args[0]}") from None
    if "task_index" in given:
        i = given["task_index"]
        RESET[2].validate(i, "reset(options): ")
        if i >= len(tasks):
            raise ValueError(
                f"reset(options): task_index={i!r} is out of range; task_index must be an "
                f"int in [0, {len(tasks) - 1}]"
            )
        return tasks[int(i)]
    return None


def workflow_opts(options_cls: type) -> dict[str, Opt]:
    """A workflow's options as declarations, typed by its ``Options`` dataclass annotations."""
    hints = typing.get_type_hints(options_cls)
    out = {}
    for f in dataclasses.fields(options_cls):
        kind = _kind_of(hints.get(f.name))
        out[f.name] = Opt(f.name, kind, f"{options_cls.__name__}.{f.name}")
    return out


def _kind_of(tp: Any) -> str:
    origin = typing.get_origin(tp) or tp
    for t, kind in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"),
                    (dict, "dict")):  # fmt: skip
        if origin is t:
            return kind
    return "any"


def check_seed(seed: Any) -> None:
    """``reset``'s seed against :data:`SEED`: None or an int >= 0 (a float, bool, str or list
    is refused)."""
    SEED.validate(seed)
