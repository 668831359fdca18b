"""Every option an env takes, declared once: its type, its range or choices, and its help.

``make_env``, ``WorkflowEnv`` and ``reset`` check values against these declarations before
anything is built or any state is touched, so a bad value fails where it was given, naming
the option, the value and what is allowed. Nothing is coerced: a bool where an int is meant,
a string for a number or a float seed is an error, not a silent conversion. Workflow options
are declared by their ``Options`` dataclass (type from the annotation; the workflow checks
ranges and choices); a family registered by others checks its own options.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: the largest seed numpy's generators take is unbounded; seeds must be non-negative ints
_SEED_ALLOWED = "None or an int >= 0"


@dataclass(frozen=True)
class Opt:
    """One option: what it must be (``kind``: int, float, bool, str, dict or a custom
    check), its range or choices, and a one-line help."""

    name: str
    kind: str
    help: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    #: a custom check for kinds the table cannot express: returns what is allowed, or None
    check: Callable[[Any], str | None] | None = None

    def allowed(self) -> str:
        """What the option accepts, as an error message says it."""
        if self.choices is not None:
            text = "one of " + ", ".join(map(repr, self.choices))
        else:
            text = {"int": "an int", "float": "a number", "bool": "a bool", "str": "a str"}.get(
                self.kind, f"a {self.kind}"
            )
            if self.lo is not None and self.hi is not None:
                left = "(" if self.lo_open else "["
                text += f" in {left}{_num(self.lo)}, {_num(self.hi)}]"
            elif self.lo is not None:
                text += f" {'>' if self.lo_open else '>='} {_num(self.lo)}"
        return text + (" or None" if self.nullable else "")

    def validate(self, value: Any, where: str = "") -> None:
        """Raise TypeError (wrong type) or ValueError (out of range, not a choice)."""
        if value is None and self.nullable:
            return
        bad = f"{where}{self.name}={value!r}"
        if self.check is not None:
            allowed = self.check(value)
            if allowed is not None:
                raise ValueError(f"{bad} is not allowed; {self.name} must be {allowed}")
            return
        if not _is_kind(value, self.kind):
            raise TypeError(
                f"{bad} has type {type(value).__name__}; {self.name} must be {self.allowed()}"
            )
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{bad} is not allowed; {self.name} must be {self.allowed()}")
        if self.kind in ("int", "float"):
            below = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
            above = self.hi is not None and value > self.hi
            if below or above or (self.kind == "float" and not _finite(value)):
                raise ValueError(f"{bad} is out of range; {self.name} must be {self.allowed()}")


def _finite(x: Any) -> bool:
    """Whether a number is a finite float (an int too large for a float is not)."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _num(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) >= 10_000 else f"{x:g}"


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):  # a bool is never a number here
        return False
    if kind == "int":
        return isinstance(value, numbers.Integral)
    if kind == "float":
        return isinstance(value, numbers.Real)
    if kind == "str":
        return isinstance(value, str)
    if kind == "dict":
        return isinstance(value, Mapping)
    return True


def _check_sandbox(value: Any) -> str | None:
    from flowzoo.sandbox import BACKENDS, Sandbox

    allowed = f"a backend name ({', '.join(map(repr, BACKENDS))}) or a Sandbox instance"
    if isinstance(value, str):
        return None if value in BACKENDS else f"{allowed} (unknown sandbox backend)"
    if isinstance(value, type) or not isinstance(value, Sandbox):
        return allowed + " (with name, isolation, run, run_many and close)"
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

#: the most problems an env may ask a task source for (more fails here, not in a generator)
MAX_TASKS = 1_000_000

#: options choosing the problems (``dataset`` may also be a TaskSet: checked by make_env)
TASKS = (
    Opt("split", "str", "train, test, ood (the family's loader names the valid ones)"),
    Opt("n_tasks", "int", "how many problems to draw", lo=1, hi=MAX_TASKS),
    Opt("task_seed", "int", "seed of the problem draw"),
)

#: options of the built-in code family (``flowzoo.tasks.code.CodeFamily``)
CODE_FAMILY = (
    Opt("sandbox", "sandbox", "where programs run", check=_check_sandbox),
    Opt("sandbox_options", "dict", "the sandbox backend's limits and settings"),
    Opt("partial_credit", "bool", "score the fraction of tests passed instead of all-or-none"),
    Opt("test_timeout_s", "float", "seconds for a program's tests", lo=0.0, hi=3600.0,
        lo_open=True),
    Opt("case_timeout_s", "float", "seconds per stdin/stdout case", lo=0.0, hi=3600.0,
        lo_open=True),
    Opt("time_budget_s", "float", "seconds per stdin/stdout task", lo=0.0, hi=3600.0,
        lo_open=True),
    Opt("early_stop", "bool", "stop a task's cases at the first failure"),
)  # fmt: skip

DECLARED: dict[str, Opt] = {o.name: o for o in (*ENGINE, *TASKS, *CODE_FAMILY)}

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
    """``reset``'s seed: None or a non-negative int (a float, bool, str or list is refused)."""
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            f"seed={seed!r} has type {type(seed).__name__}; seed must be {_SEED_ALLOWED}"
        )
    if seed < 0:
        raise ValueError(f"seed={seed!r} is out of range; seed must be {_SEED_ALLOWED}")
