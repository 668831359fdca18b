"""Running untrusted code. Knows nothing of tasks or environments.

``get_sandbox("process" | "docker" | "sandbox-fusion", **limits)`` returns a backend whose
``run(source, timeout_s=..., memory_mb=..., stdin=None)`` runs a Python program and returns an
:class:`ExecResult`.
"""

from __future__ import annotations

from flowzoo.sandbox.base import STATUSES, ExecResult, Job, Sandbox, SandboxUnavailable

BACKENDS = ("process", "docker", "sandbox-fusion")

__all__ = [
    "BACKENDS",
    "STATUSES",
    "ExecResult",
    "Job",
    "Sandbox",
    "SandboxUnavailable",
    "check_sandbox_options",
    "get_sandbox",
]


def check_sandbox_options(backend: str, options: dict) -> None:
    """A ValueError naming any option ``backend`` does not take (checked when an env is made,
    so a typo fails there, not at the first program run in the middle of training)."""
    import dataclasses
    import inspect

    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if not isinstance(options, dict):
        raise ValueError(f"sandbox_options must be a dict, got {type(options).__name__}")
    if backend == "process":
        from flowzoo.sandbox.process import ProcessLimits as limits
        from flowzoo.sandbox.process import ProcessSandbox as cls
    elif backend == "docker":
        from flowzoo.sandbox.docker import DockerLimits as limits
        from flowzoo.sandbox.docker import DockerSandbox as cls
    else:
        from flowzoo.sandbox.fusion import SandboxFusion as cls

        limits = None
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
    if backend == "process":
        from flowzoo.sandbox.process import ProcessSandbox

        return ProcessSandbox(**options)
    if backend == "docker":
        from flowzoo.sandbox.docker import DockerSandbox

        return DockerSandbox(**options)
    if backend == "sandbox-fusion":
        from flowzoo.sandbox.fusion import SandboxFusion

        return SandboxFusion(**options)
    raise ValueError(f"unknown sandbox backend {backend!r}; valid: {', '.join(BACKENDS)}")
