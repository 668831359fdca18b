"""How many CPU threads torch may take: the cores this process may actually use.

Why: torch and BLAS default to every core of the machine, not the ones a process may run
on. On a shared machine, in a container (a cgroup CPU quota) or under ``taskset``, that
oversubscribes the cores and every thread waits on the others. The count here is the
smaller of the CPU affinity and the cgroup quota, less the cores other work keeps busy when
the run starts (fixed for the run; a resume reuses it); ``OMP_NUM_THREADS`` (set by a sweep, one
thread per run, or by the user) and the ``threads`` setting override it. Torch-free at
import, so the CLI and the sweep read it without torch; in ``models/`` so that both the
training side and the model builds (which never import the training loop) use this one.
"""

from __future__ import annotations

import argparse
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


#: how long :func:`busy_elsewhere` watches the CPUs before a run picks its threads
WATCH_S = 0.3
PROC_STAT = Path("/proc/stat")


def _cpu_ticks(stat: Path) -> dict[int, tuple[int, int]]:
    """Per CPU of ``/proc/stat``: (busy ticks, all ticks); iowait counts as idle."""
    out = {}
    for line in (_read(stat) or "").splitlines():
        name, *vals = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()) or len(vals) < 4:
            continue
        v = [int(x) for x in vals[:8]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        out[int(name[3:])] = (sum(v) - idle, sum(v))
    return out


def busy_elsewhere(
    cpus: Collection[int] | None = None, seconds: float = WATCH_S, stat: Path = PROC_STAT
) -> float:
    """How many of ``cpus`` (default: this process's affinity) other work kept busy over the
    next ``seconds`` (this process sleeps meanwhile): the sum of their busy shares. 0.0
    where ``/proc/stat`` cannot be read (not Linux)."""
    import time

    if cpus is None:
        try:
            cpus = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            return 0.0
    before = _cpu_ticks(stat)
    time.sleep(seconds)
    after = _cpu_ticks(stat)
    busy = 0.0
    for c in cpus:
        if c in before and c in after:
            d_busy, d_all = (after[c][0] - before[c][0]), (after[c][1] - before[c][1])
            busy += d_busy / d_all if d_all > 0 else 0.0
    return busy


def pick_threads(
    requested: int = 0,
    environ: Mapping[str, str] | None = None,
    cores: int | None = None,
    busy: float | None = None,
) -> tuple[int, str]:
    """(threads, why): ``requested`` when > 0, else a valid ``OMP_NUM_THREADS``, else the
    usable cores (``cores``, or :func:`usable_cores`) less those other work keeps busy
    (``busy``, or :func:`busy_elsewhere`), at least 1.

    Why less the busy ones: torch's threads meet at a barrier after every operation, so a
    thread that shares its core with another process holds all the others up; on a 2-core
    machine beside two busy processes a 2-thread run took 4.75x its idle time, a
    1-thread run 2.0x (docs/performance.md). The count is
    fixed for the run (a resume reuses it: :func:`restore`): results depend on it in the
    last bits, so ``--threads`` (or ``OMP_NUM_THREADS``) pins it across machines and loads."""
    if requested < 0:
        raise ValueError(f"threads must be >= 0 (0: the usable cores), got {requested}")
    if requested > 0:
        return requested, "threads setting"
    env = os.environ if environ is None else environ
    omp = env.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        return int(omp), "OMP_NUM_THREADS"
    n = usable_cores() if cores is None else cores
    why = "usable cores (CPU affinity and cgroup quota)"
    if n == 1:
        return 1, why
    load = busy_elsewhere() if busy is None else busy
    free = max(1, min(n, math.floor(n - load + 0.5)))
    if free < n:
        return free, f"{n} usable cores, {load:.1f} of them busy with other work"
    return n, why


def threads_option(parser: argparse.ArgumentParser) -> None:
    """The commands' ``--threads`` (``eval``, ``pretrain-tiny``; ``train`` has its config's)."""
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads torch may use (0: OMP_NUM_THREADS if set, else the cores this "
        "process may use: its CPU affinity capped by the cgroup CPU quota)",
    )


def automatic(requested: int = 0, environ: Mapping[str, str] | None = None) -> bool:
    """Whether :func:`pick_threads` chooses the count itself (no setting, no valid
    ``OMP_NUM_THREADS``): only then may a resume restore the count the run started with."""
    env = os.environ if environ is None else environ
    omp = env.get("OMP_NUM_THREADS", "").strip()
    return requested == 0 and not (omp.isdigit() and int(omp) > 0)


#: the count this process set last (announced once)
_count: int | None = None
#: this process's automatic pick, (threads, why)
_auto: tuple[int, str] | None = None


def apply_threads(requested: int = 0, announce: bool = True, keep: bool = False) -> int:
    """Set torch's thread count from :func:`pick_threads` before any parallel work, and say
    it once (a second call with the same count stays quiet); returns the count. The
    automatic pick is made once per process (the CLI and the trainer both ask). ``keep``:
    a count this process has already set stands (a model built on first use inside a run
    keeps the run's ``--threads``)."""
    global _auto
    if keep and requested == 0 and _count is not None:  # re-set: torch may have been told since
        return _set(_count, "the count this process set", announce)
    if automatic(requested) and _auto is not None:
        return _set(*_auto, announce)
    n, why = pick_threads(requested)
    if automatic(requested):
        _auto = (n, why)
    return _set(n, why, announce)


def restore(n: int, announce: bool = True) -> int:
    """A resumed run's thread count: the one it started with (results depend on it in the
    last bits, so a resumed run continues exactly only with the same count)."""
    return _set(int(n), "the count this run started with", announce)


def _set(n: int, why: str, announce: bool) -> int:
    global _count
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    # with more than one thread, some CPU kernels accumulate in a thread-dependent order: two
    # runs of the main job at 2 threads differed in the last bits (29 of 36 tensors, 6e-8),
    # so a resumed run could not continue exactly; the deterministic kernels gave one digest,
    # at no measured cost, and at one thread the same digest as before
    torch.use_deterministic_algorithms(True, warn_only=True)
    if announce and _count != n:
        print(f"flowzoo: {n} CPU thread(s) for torch ({why}; --threads sets it)", file=sys.stderr)
    _count = n
    return n
