"""How the process sandbox isolates a program, mechanism by mechanism: the bubblewrap and
unshare command lines, the interpreter they run, and what each one puts in force (the
``isolation`` a sandbox reports never claims more than this)."""

from __future__ import annotations

import os
import sys

from flowzoo.sandbox.base import SandboxUnavailable
from flowzoo.sandbox.runtime import bwrap_binds, public_runtime_dir, runtime_dir

NOBODY = 65534


def _interpreter() -> tuple[str, str]:
    """The real interpreter binary (not a venv shim) and the prefix holding its stdlib."""
    exe = os.path.realpath(sys.executable)
    return exe, os.path.realpath(sys.base_prefix)


#: Imported by every fork-server at its start, so that each run is forked with them instead
#: of importing them itself: the judge's runner and replay import them in every run, and so
#: does common task code (``typing`` alone cost ~8 ms a run). Pure stdlib, loaded before any
#: request is read: a run that changes one changes its own copy only.
WARM = (
    "typing",
    "re",
    "collections",
    "functools",
    "itertools",
    "math",
    "json",
    "base64",
    "zlib",
    "marshal",
    "types",
    "threading",
    "importlib",
    "heapq",
    "string",
    "ast",
    "__future__",
    "keyword",
    "hashlib",
    "binascii",
)

#: Imported before the uid drop when the interpreter lives where uid 65534 cannot read (e.g.
#: pyenv under /root), so that common task code still finds its stdlib extension modules.
PRELOAD = (
    "math",
    "cmath",
    "json",
    "re",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "string",
    "random",
    "statistics",
    "fractions",
    "decimal",
    "datetime",
    "typing",
    "hashlib",
    "copy",
    "operator",
    "array",
    "struct",
    "signal",
    "socket",
    "time",
)


def _traversable_by_others(path: str) -> bool:
    """Whether an unprivileged uid can reach and read ``path`` (every ancestor o+x)."""
    p = os.path.realpath(path)
    while True:
        try:
            if not os.stat(p).st_mode & 0o001:
                return False
        except OSError:
            return False
        parent = os.path.dirname(p)
        if parent == p:
            return True
        p = parent


def _bwrap_prefix(runtime: str, disk_mb: int, inputs: str | None) -> list[str]:
    """bubblewrap around the interpreter. The only host files shown are the minimal runtime
    (``runtime.py``: the interpreter, its libraries and the stdlib, no site-packages, no
    ``/usr/share``, no home or project), read-only. Every writable place is a tmpfs of the
    sandbox's own, ``disk_mb`` each (the run cannot fill the host's disk; it vanishes with the
    sandbox); ``inputs``, a host dir of a single run's files, is shown read-only at ``/in``."""
    args = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        str(NOBODY),
        "--gid",
        str(NOBODY),
        "--hostname",
        "sandbox",
        *bwrap_binds(runtime),
    ]
    size = str(max(1, disk_mb) << 20)
    args += ["--proc", "/proc", "--dev", "/dev"]
    for d in ("/tmp", "/dev/shm", "/box"):
        args += ["--size", size, "--tmpfs", d]
    if inputs is not None:
        args += ["--ro-bind", inputs, "/in"]
    # bubblewrap's new root is itself a writable tmpfs, and so is its /dev: without these a
    # run could leave files in /var, /home, / or /dev for the next run of the same fork-server
    return args + ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/box"]


def _unshare_prefix() -> list[str]:
    args = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--uts"]
    if os.geteuid() != 0:
        args.insert(1, "--map-root-user")
    return args


ISOLATION = {
    "bwrap": (
        "bwrap",
        "user-ns",
        "pid-ns",
        "net-ns",
        "ipc-ns",
        "uts-ns",
        "mount-ns",
        "fs-readonly",
        "fs-runtime-only",
        "uid-65534",
        "cap-drop-all",
        "rlimits",
        "clean-env",
    ),
    "unshare": (
        "unshare",
        "mount-ns",
        "fs-runtime-only",
        "pid-ns",
        "net-ns",
        "ipc-ns",
        "uts-ns",
        "uid-65534",
        "rlimits",
        "clean-env",
    ),
    "none": ("rlimits", "clean-env", "own-session"),
}


def runtime_for(mechanism: str) -> str:
    """The runtime a mechanism's programs run from. ``none`` started as root drops the
    program to uid 65534 with no mount namespace, so it reads the runtime at its host path:
    where the private cache is closed to that uid, the shared copy (``public_runtime_dir``).
    Where that cannot be made safely the sandbox refuses to start (never a run that keeps
    root's uid, never one that cannot read its stdlib)."""
    rt = runtime_dir()
    if mechanism != "none" or os.geteuid() != 0 or _traversable_by_others(rt):
        return rt
    try:
        return public_runtime_dir()
    except OSError as e:
        raise SandboxUnavailable(
            "sandbox mechanism 'none' started as root runs each program as uid 65534, which "
            f"cannot read the interpreter runtime at {rt}, and the shared copy cannot be "
            f"made ({e}). Use mechanism='bwrap' (or 'unshare'), which work as root, run "
            "flowzoo as a non-root user, or set FLOWZOO_SANDBOX_RUNTIME_DIR to a root-owned "
            "dir every user may traverse."
        ) from None
