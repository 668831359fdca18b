"""Running untrusted code. Knows nothing of tasks or environments.

``get_sandbox("process" | "docker" | "sandbox-fusion", **limits)`` returns a backend whose
``run(source, timeout_s=..., memory_mb=..., stdin=None)`` runs a Python program and returns an
:class:`ExecResult`. The backends are one table (:data:`BACKEND_TABLE`): a new one is a class
implementing :class:`Sandbox` and a row here.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import NamedTuple

from flowzoo.sandbox.base import STATUSES, ExecResult, Job, Sandbox, SandboxUnavailable


class Backend(NamedTuple):
    """Where a backend lives (imported only when used: Docker's client is an extra)."""

    module: str
    cls: str
    #: its limits dataclass, whose fields are options too (None: options are the class's own)
    limits: str | None = None


#: name -> backend, in the order the docs list them
BACKEND_TABLE: dict[str, Backend] = {
    "process": Backend("flowzoo.sandbox.process", "ProcessSandbox", "ProcessLimits"),
    "docker": Backend("flowzoo.sandbox.docker", "DockerSandbox", "DockerLimits"),
    "sandbox-fusion": Backend("flowzoo.sandbox.fusion", "SandboxFusion"),
}
BACKENDS = tuple(BACKEND_TABLE)

__all__ = [
    "BACKENDS",
    "BACKEND_TABLE",
    "STATUSES",
    "ExecResult",
    "Job",
    "Sandbox",
    "SandboxUnavailable",
    "check_backend_keys",
    "get_sandbox",
]


def _backend(name: str) -> tuple[type, type | None]:
    """The backend's class and its limits dataclass; an unknown name names the valid ones."""
    if name not in BACKEND_TABLE:
        raise ValueError(f"unknown sandbox backend {name!r}; valid: {', '.join(BACKENDS)}")
    row = BACKEND_TABLE[name]
    mod = importlib.import_module(row.module)
    return getattr(mod, row.cls), (getattr(mod, row.limits) if row.limits else None)


def check_backend_keys(backend: str, options: dict) -> None:
    """A ValueError naming any option key ``backend`` does not take (checked when a code
    family is made, so a typo fails there, not at the first program run in the middle of
    training). The keys only: an env checks every key and value of ``sandbox_options``
    (:func:`flowzoo.envs.options.check_sandbox_options`) before it gets here."""
    cls, limits = _backend(backend)
    if not isinstance(options, dict):
        raise ValueError(f"sandbox_options must be a dict, got {type(options).__name__}")
    valid = {p for p in inspect.signature(cls.__init__).parameters if not p.startswith("_")}
    valid -= {"self", "limits", "options"}
    if limits is not None:
        valid |= {f.name for f in dataclasses.fields(limits)}
    bad = sorted(set(options) - valid)
    if bad:
        raise ValueError(
            f"unknown sandbox_options {bad} for the {backend} backend; valid: {', '.join(sorted(valid))}"
        )


def get_sandbox(backend: str = "process", **options) -> Sandbox:
    """A sandbox backend by name (default ``process``); options are its limits/settings."""
    cls, _ = _backend(backend)
    return cls(**options)
