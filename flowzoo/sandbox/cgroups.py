"""Per-run control groups: a hard cap on processes (and memory) for one sandboxed program.

Why: rlimits alone do not stop a fork bomb when the program's real uid is root outside its
user namespace (bubblewrap started by root maps uid 65534 inside to uid 0 outside, and the
kernel exempts root from RLIMIT_NPROC): one measured bomb reached 10,000 processes and the
OOM killer took an unrelated training run. A cgroup's ``pids`` limit holds for every uid.
Supports cgroup v1 (``/sys/fs/cgroup/pids``, ``/sys/fs/cgroup/memory``) and v2 (a unified
hierarchy with the ``pids`` and ``memory`` controllers enabled). Where no hierarchy is
writable, :func:`available` says so and the sandbox does not claim the isolation.
"""

from __future__ import annotations

import functools
import os
import signal
import time
import uuid
from dataclasses import dataclass

ROOT_NAME = "flowzoo-sandbox"


@dataclass
class _Hier:
    version: int
    pids: str | None
    memory: str | None


def _writable_dir(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f"probe-{uuid.uuid4().hex[:8]}")
        os.mkdir(probe)
        os.rmdir(probe)
        return True
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def _hierarchy() -> _Hier | None:
    base = "/sys/fs/cgroup"
    v1p, v1m = os.path.join(base, "pids"), os.path.join(base, "memory")
    if os.path.exists(os.path.join(v1p, "cgroup.procs")):
        pids = os.path.join(v1p, ROOT_NAME) if _writable_dir(os.path.join(v1p, ROOT_NAME)) else None
        mem = (
            os.path.join(v1m, ROOT_NAME)
            if os.path.exists(os.path.join(v1m, "cgroup.procs"))
            and _writable_dir(os.path.join(v1m, ROOT_NAME))
            else None
        )
        if pids:
            return _Hier(1, pids, mem)
    for unified in (base, os.path.join(base, "unified")):
        ctl = os.path.join(unified, "cgroup.controllers")
        if not os.path.exists(ctl):
            continue
        try:
            controllers = open(ctl).read().split()
        except OSError:
            continue
        if "pids" not in controllers:
            continue
        root = os.path.join(unified, ROOT_NAME)
        if not _writable_dir(root):
            continue
        try:
            with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
                f.write("+pids" + (" +memory" if "memory" in controllers else ""))
        except OSError:
            continue
        return _Hier(2, root, root if "memory" in controllers else None)
    return None


def available() -> tuple[str, ...]:
    """The limits cgroups can enforce here: ``("pids",)``, ``("pids", "memory")`` or ()."""
    h = _hierarchy()
    if h is None:
        return ()
    return ("pids", "memory") if h.memory else ("pids",)


#: an empty group older than this, of a maker that cannot be told (no pid in its name), is a
#: leftover: a run's group holds its processes from its first moment to its removal
STALE_S = 3600.0
#: and any group younger than this stays: a maker in another pid namespace (whose pid this
#: process cannot see) may have made it a moment ago, before its run joined it
GRACE_S = 60.0
_PRUNED_BY: list[int] = []


def _leftover(path: str, name: str, now: float) -> bool:
    """Whether group ``name`` outlived its maker: the pid before the dash has exited, or, for a
    name without one (made before names carried it), it is over :data:`STALE_S` old."""
    try:
        age = now - os.stat(path).st_mtime
    except OSError:
        return False
    pid, sep, _ = name.partition("-")
    if not sep or not pid.isdigit():
        return age > STALE_S
    if age <= GRACE_S:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


def prune_leftovers(h: _Hier) -> int:
    """Remove the groups their makers left: a host killed before it removed its runs' groups
    leaves them behind, one per run (544 were found on a machine after a day of killed test
    and sweep processes). Only an empty group can be removed (the kernel refuses the rest),
    so a group with a process in it always stays. How many were removed."""
    n, now = 0, time.time()
    for d in {h.pids, h.memory} - {None}:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            if os.path.isdir(path) and _leftover(path, name, now):
                try:
                    os.rmdir(path)
                    n += 1
                except OSError:
                    pass
    return n


class RunGroup:
    """One run's cgroup(s), named by the making process's pid (so that its leftovers can be
    told: :func:`prune_leftovers`, once per process). ``procs_files`` are what the launcher
    writes its pid into."""

    def __init__(self, max_procs: int, memory_mb: int | None) -> None:
        h = _hierarchy()
        if h is None:
            raise OSError("no writable cgroup hierarchy")
        self.h = h
        if os.getpid() not in _PRUNED_BY:
            _PRUNED_BY.append(os.getpid())
            prune_leftovers(h)
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.dirs: list[str] = []
        self.pids_dir = os.path.join(h.pids, name)
        os.mkdir(self.pids_dir)
        self.dirs.append(self.pids_dir)
        _write(os.path.join(self.pids_dir, "pids.max"), str(max_procs))
        self.mem_dir = None
        if h.memory and memory_mb:
            if h.version == 2:
                self.mem_dir = self.pids_dir
                _write(os.path.join(self.mem_dir, "memory.max"), str(memory_mb << 20))
                _write(os.path.join(self.mem_dir, "memory.swap.max"), "0", missing_ok=True)
            else:
                self.mem_dir = os.path.join(h.memory, name)
                os.mkdir(self.mem_dir)
                self.dirs.append(self.mem_dir)
                _write(os.path.join(self.mem_dir, "memory.limit_in_bytes"), str(memory_mb << 20))
                _write(
                    os.path.join(self.mem_dir, "memory.memsw.limit_in_bytes"),
                    str(memory_mb << 20),
                    missing_ok=True,
                )

    @property
    def procs_files(self) -> list[str]:
        return list(dict.fromkeys(os.path.join(d, "cgroup.procs") for d in self.dirs))

    def memory_hits(self) -> int:
        """How often the memory limit has been hit so far (a counter, so that a long-lived
        group, e.g. a fork-server's, can tell whether one run hit it)."""
        if self.mem_dir is None:
            return 0
        try:
            if self.h.version == 2:
                ev = open(os.path.join(self.mem_dir, "memory.events")).read()
                return sum(
                    int(ln.split()[1])
                    for ln in ev.splitlines()
                    if ln.startswith(("oom ", "oom_kill "))
                )
            return int(open(os.path.join(self.mem_dir, "memory.failcnt")).read())
        except (OSError, ValueError, IndexError):
            return 0

    def hit_memory_limit(self) -> bool:
        return self.memory_hits() > 0

    def hit_pids_limit(self) -> bool:
        try:
            if self.h.version == 2:
                ev = open(os.path.join(self.pids_dir, "pids.events")).read()
                return any(
                    ln.startswith("max ") and int(ln.split()[1]) > 0 for ln in ev.splitlines()
                )
            return int(open(os.path.join(self.pids_dir, "pids.events")).read().split()[1]) > 0
        except (OSError, ValueError, IndexError):
            return False

    def destroy(self) -> None:
        """Kill anything left inside, then remove the group(s)."""
        for _ in range(50):
            left = []
            for d in self.dirs:
                try:
                    left += [int(x) for x in open(os.path.join(d, "cgroup.procs")).read().split()]
                except OSError:
                    pass
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if not left:
                break
            time.sleep(0.02)
        for d in reversed(self.dirs):
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _write(path: str, value: str, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError:
        if not missing_ok:
            raise


#: joins the cgroups named in $FZ_CG, then execs the real command (a shell is the cheapest
#: place to do this before exec without Python's slow preexec_fn)
LAUNCHER = [
    "/bin/sh",
    "-c",
    'for p in $FZ_CG; do echo $$ > "$p" || exit 97; done; unset FZ_CG; exec "$@"',
    "flowzoo-launch",
]
