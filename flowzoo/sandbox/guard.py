"""Kernel state a sandboxed run must not share with the next one (stdlib only: this file's
source is prepended to the code that starts every run, in every backend).

Why: a fork-server keeps one set of namespaces for many runs. Files and System V IPC are
wiped between runs, but the kernel keyrings (``add_key`` to the user keyring) and POSIX
message queues outlive a process and are not namespaced by bubblewrap, so run N could leave
data for run N+1. A seccomp filter denies those syscalls (EPERM), and syscalls of a foreign
ABI (x32, i386 ``int 0x80``), whose numbers the filter would not recognise.
"""


def _fz_deny_shared_kernel_state():
    import ctypes
    import os
    import struct

    arch = os.uname().machine
    if arch == "x86_64":  # add_key, request_key, keyctl, mq_open
        audit, denied = 0xC000003E, (248, 249, 250, 240)
    elif arch == "aarch64":
        audit, denied = 0xC00000B7, (217, 218, 219, 180)
    else:
        return False
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, eperm = 0x7FFF0000, 0x00050001
    prog = [(ld_abs, 0, 0, 4), (jeq, 1, 0, audit), (ret, 0, 0, eperm), (ld_abs, 0, 0, 0)]
    n = len(denied)
    prog.append((jge, n + 1, 0, 0x40000000))  # x32 ABI numbers
    for i, nr in enumerate(denied):
        prog.append((jeq, n - i, 0, nr))
    prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Prog(len(prog), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0  # PR_SET_SECCOMP, FILTER


_fz_guarded = _fz_deny_shared_kernel_state()
del _fz_deny_shared_kernel_state
