"""Sandboxes shared by the sandbox tests: every backend that works here (Docker skips with
the reason when no engine answers)."""

import os

import pytest

from flowzoo.sandbox import get_sandbox


def _docker_or_skip():
    from flowzoo.sandbox.docker import docker_unavailable_reason

    why = docker_unavailable_reason()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    return get_sandbox("docker", timeout_s=5, memory_mb=256, pool_size=2)


@pytest.fixture(
    scope="module",
    params=["process", "process-spawn", pytest.param("docker", marks=pytest.mark.docker)],
)
def sbx(request):
    """``process`` is the default (fork-server); ``process-spawn`` a fresh sandbox per run."""
    if request.param == "docker":
        s = _docker_or_skip()
    else:
        fork = request.param == "process"
        s = get_sandbox("process", timeout_s=5, memory_mb=256, forkserver=fork)
    yield s
    s.close()


def _procs_with(token: str) -> list[int]:
    hits = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    hits.append(int(pid))
        except OSError:
            pass
    return hits
