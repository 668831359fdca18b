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
    "get_sandbox",
]


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
