"""How many CPU threads torch may take: the cores this process may actually use.

Why: torch and BLAS default to every core of the machine, not the ones a process may run
on. On a shared machine, in a container (a cgroup CPU quota) or under ``taskset``, that
oversubscribes the cores and every thread waits on the others. The count here is the
smaller of the CPU affinity and the cgroup quota; ``OMP_NUM_THREADS`` (set by a sweep, one
thread per run, or by the user) and the ``threads`` setting override it. Torch-free at
import, so the CLI and the sweep read it without torch; in ``models/`` so that both the
training side and the model builds (which never import the training loop) use this one.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Collection, Mapping
from pathlib import Path

#: where the cgroup hierarchies are mounted, and which cgroup this process is in
CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def _quota_v2(d: Path) -> float | None:
    """``cpu.max`` of cgroup v2: ``"<quota> <period>"`` or ``"max <period>"`` (no limit)."""
    text = _read(d / "cpu.max")
    if not text:
        return None
    parts = text.split()
    if parts[0] == "max" or len(parts) != 2:
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(d: Path) -> float | None:
    """``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` of cgroup v1 (a quota of -1: no limit)."""
    q, p = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
    try:
        quota, period = int(q or "-1"), int(p or "0")
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _dirs(top: Path, rel: str) -> list[Path]:
    """``top/rel`` and each of its ancestors up to ``top`` (a limit set on any of them holds);
    in a container the path named in /proc/self/cgroup is often not mounted, ``top`` is."""
    out = [top]
    cur = top
    for part in [x for x in rel.split("/") if x and x not in (".", "..")]:
        cur = cur / part
        out.append(cur)
    return out


def cgroup_cpu_limit(
    root: str | os.PathLike = CGROUP_ROOT, self_cgroup: str | os.PathLike = SELF_CGROUP
) -> float | None:
    """The CPUs the cgroup quota allows this process (``quota / period``, the tightest over
    its cgroup and their ancestors, v2 and v1 alike); None when no quota is set."""
    root = Path(root)
    rel_v2, rel_v1 = "", ""
    for line in (_read(Path(self_cgroup)) or "").splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":
            rel_v2 = path
        elif "cpu" in controllers.split(","):
            rel_v1 = path
    limits = [q for d in _dirs(root, rel_v2) if (q := _quota_v2(d)) is not None]
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        if (root / name).is_dir():
            limits += [q for d in _dirs(root / name, rel_v1) if (q := _quota_v1(d)) is not None]
    return min(limits) if limits else None


def usable_cores(
    affinity: Collection[int] | None = None,
    root: str | os.PathLike = CGROUP_ROOT,
    self_cgroup: str | os.PathLike = SELF_CGROUP,
) -> int:
    """The cores this process may use: its CPU affinity (``os.sched_getaffinity``), capped by
    the cgroup quota rounded down (1.5 CPUs of quota run 1 thread without throttling); >= 1."""
    if affinity is None:
        try:
            affinity = os.sched_getaffinity(0)
        except (AttributeError, OSError):  # macOS, Windows: no affinity call
            affinity = range(os.cpu_count() or 1)
    n = len(affinity)
    limit = cgroup_cpu_limit(root, self_cgroup)
    if limit is not None:
        n = min(n, math.floor(limit))
    return max(1, n)


def pick_threads(
    requested: int = 0, environ: Mapping[str, str] | None = None, cores: int | None = None
) -> tuple[int, str]:
    """(threads, why): ``requested`` when > 0, else a valid ``OMP_NUM_THREADS``, else the
    usable cores (``cores``, or :func:`usable_cores`)."""
    if requested < 0:
        raise ValueError(f"threads must be >= 0 (0: the usable cores), got {requested}")
    if requested > 0:
        return requested, "threads setting"
    env = os.environ if environ is None else environ
    omp = env.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        return int(omp), "OMP_NUM_THREADS"
    n = usable_cores() if cores is None else cores
    return n, "usable cores (CPU affinity and cgroup quota)"


_announced: int | None = None


def apply_threads(requested: int = 0, announce: bool = True) -> int:
    """Set torch's thread count from :func:`pick_threads` before any parallel work, and say
    it once (a second call with the same count stays quiet); returns the count."""
    global _announced
    import torch

    n, why = pick_threads(requested)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    if announce and _announced != n:
        print(f"flowzoo: {n} CPU thread(s) for torch ({why}; --threads sets it)", file=sys.stderr)
    _announced = n
    return n
