"""Seccomp filters for sandboxed runs (stdlib only: this file's source is prepended to the code
that starts every run, in every backend; imported as a module it installs nothing).

Kernel state a run must not share with the next one: a fork-server keeps one set of
namespaces for many runs. Files and System V IPC are wiped between runs, but the kernel
keyrings (``add_key`` to the user keyring) and POSIX message queues outlive a process and are
not namespaced by bubblewrap, so run N could leave data for run N+1. The first filter, on the
whole sandbox, denies those syscalls (EPERM), and syscalls of a foreign ABI (x32, i386
``int 0x80``), whose numbers no filter here would recognise.

No namespaces, no mounts for the program: a user namespace makes its creator root over
whatever it then mounts, so a program that could ``unshare`` could mount the cgroup file
systems (and rewrite its own ``pids.max``, make dirs in the host's cgroup tree, read the
counters of the container it shares with the next run), a new ``/proc`` or a ``tmpfs``. The
fork-server and each run's init must make namespaces and mounts; the program never needs to.
So :func:`_fz_deny_namespaces` adds a second filter right before the program's code runs
(the per-run start code, a fork-server run's init before it forks the program): ``unshare``,
``setns``, ``mount``, ``umount2``, ``pivot_root``, ``chroot``, the new mount API, and ``clone``
with any ``CLONE_NEW*`` flag get EPERM; ``clone3`` (whose flags sit in memory, out of a
filter's reach) gets ENOSYS, so the C library falls back to ``clone``. Where it cannot be
installed, the start code exits with :data:`_FZ_UNFILTERED_EXIT` and
:data:`_FZ_UNFILTERED_MARK` (``classify`` reads that as ``sandbox_error``) and the program
never runs.
"""

#: the start code's exit when the program's filter could not be installed (the program never
#: ran), with this line first on stderr
_FZ_UNFILTERED_EXIT = 96
_FZ_UNFILTERED_MARK = "flowzoo sandbox: cannot deny namespaces and mounts to the run"

#: (audit arch, {syscall: number}) per machine; keyrings and mq_open, then what makes a
#: namespace or changes a mount
_FZ_ARCH = {
    "x86_64": (
        0xC000003E,
        {
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "mq_open": 240,
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "clone": 56,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "mq_open": 180,
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "clone": 220,
        },
    ),
}
#: numbers from 424 on are one table for every architecture: the new mount API (open_tree,
#: move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr, open_tree_attr) and clone3
_FZ_MOUNT_API = (428, 429, 430, 431, 432, 433, 442, 467)
_FZ_CLONE3 = 435
#: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME: in clone's first
#: argument (its low 32 bits, little-endian on both machines)
_FZ_CLONE_NEW = 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
_FZ_CLONE_NEW |= 0x40000000 | 0x80


def _fz_bpf(build):
    """The filter ``build(audit, numbers)`` returns (labelled classic-BPF instructions, see
    below) for this machine as ``struct sock_filter`` bytes; None on another machine."""
    import os
    import struct

    arch = _FZ_ARCH.get(os.uname().machine)
    if arch is None:
        return None
    prog = build(*arch)
    # ("label",) marks a place; a jump's jt/jf may name one: resolved to an offset here
    where, code = {}, []
    for ins in prog:
        if len(ins) == 1:
            where[ins[0]] = len(code)
        else:
            code.append(ins)

    def off(i, t):
        return where[t] - i - 1 if isinstance(t, str) else t

    return b"".join(
        struct.pack("HBBI", c, off(i, jt), off(i, jf), k) for i, (c, jt, jf, k) in enumerate(code)
    )


#: filters ready to install, by the function that builds them
_FZ_READY: dict = {}


def _fz_prepare(build):
    """(libc, sock_fprog, its buffer) for the filter ``build`` makes, made once per process: a
    fork-server prepares it before it forks runs, so a run's process only makes two ``prctl``
    calls (building it in a freshly forked child cost ~0.5 ms of page faults); None where
    this machine is not known."""
    if build not in _FZ_READY:
        import ctypes

        raw = _fz_bpf(build)
        if raw is None:
            return None
        buf = ctypes.create_string_buffer(raw, len(raw))

        class _Prog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        fprog = _Prog(len(raw) // 8, ctypes.addressof(buf))
        _FZ_READY[build] = (ctypes.CDLL(None, use_errno=True), ctypes.byref(fprog), buf, fprog)
    return _FZ_READY[build]


def _fz_seccomp(build):
    """Install the filter ``build`` makes (:func:`_fz_bpf`); False where it cannot."""
    ready = _fz_prepare(build)
    if ready is None:
        return False
    libc, fprog = ready[0], ready[1]
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, fprog, 0, 0) == 0  # PR_SET_SECCOMP, FILTER


# classic BPF: load a word of seccomp_data (nr at 0, arch at 4, args[0] at 16), jumps, returns
_FZ_LD, _FZ_JEQ, _FZ_JGE, _FZ_JSET, _FZ_RET = 0x20, 0x15, 0x35, 0x45, 0x06
_FZ_ALLOW, _FZ_EPERM, _FZ_ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026


def _fz_head(audit):
    """Foreign architecture or x32 numbers: EPERM; else the syscall number is loaded."""
    return [
        (_FZ_LD, 0, 0, 4),
        (_FZ_JEQ, 0, "eperm", audit),
        (_FZ_LD, 0, 0, 0),
        (_FZ_JGE, "eperm", 0, 0x40000000),
    ]


def _fz_tail():
    return [
        ("allow",),
        (_FZ_RET, 0, 0, _FZ_ALLOW),
        ("eperm",),
        (_FZ_RET, 0, 0, _FZ_EPERM),
        ("enosys",),
        (_FZ_RET, 0, 0, _FZ_ENOSYS),
    ]


def _fz_shared_state_filter(audit, nr):
    names = ("add_key", "request_key", "keyctl", "mq_open")
    return _fz_head(audit) + [(_FZ_JEQ, "eperm", 0, nr[n]) for n in names] + _fz_tail()


def _fz_namespace_filter(audit, nr):
    names = ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot")
    denied = [nr[n] for n in names] + list(_FZ_MOUNT_API)
    return (
        _fz_head(audit)
        + [(_FZ_JEQ, "eperm", 0, n) for n in denied]
        + [
            (_FZ_JEQ, "enosys", 0, _FZ_CLONE3),
            (_FZ_JEQ, 0, "allow", nr["clone"]),
            (_FZ_LD, 0, 0, 16),  # clone's flags: the low half of args[0]
            (_FZ_JSET, "eperm", "allow", _FZ_CLONE_NEW),
        ]
        + _fz_tail()
    )


def _fz_deny_namespaces(install=True):
    """Deny the calling process and all it starts every way to make a namespace or change a
    mount (see the module doc); True once the filter holds. Called right before a program;
    ``install=False`` only prepares it (a fork-server, before it forks runs)."""
    try:
        if not install:
            return _fz_prepare(_fz_namespace_filter) is not None
        return _fz_seccomp(_fz_namespace_filter)
    except (OSError, AttributeError, ValueError):
        return False


def namespace_filter() -> "bytes | None":
    """The program's filter as bytes, for a tool that installs it itself (bubblewrap's
    ``--seccomp``: its own pid 1 then holds it too); None on a machine it does not know."""
    return _fz_bpf(_fz_namespace_filter)


if __name__ == "__main__":  # the start code of a run (``python -c``), never an import
    _fz_guarded = _fz_seccomp(_fz_shared_state_filter)
