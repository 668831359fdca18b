"""A fork-server's kernel-side I/O (stdlib only; concatenated before ``forkserver_main.py``).

Why apart: no run's data may pass through the server's memory (``forkserver_main.py``), so
a request's body and a run's output move between pipes and memfds inside the kernel
(``splice``, ``sendfile``), and only the run's own process reads the body's first line.
"""

import errno
import json
import os

if __name__ != "__main__":  # imported (tests, docker.py); as ``-c`` forkserver_ns.py precedes
    from flowzoo.sandbox.forkserver_ns import _libc


def _memfd(name):
    if hasattr(os, "memfd_create"):
        return os.memfd_create("fz-" + name, os.MFD_CLOEXEC)
    return _syscall(_libc().memfd_create, ("fz-" + name).encode(), 1)  # MFD_CLOEXEC


def _syscall(fn, *args):
    import ctypes

    got = fn(*args)
    if got < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return got


def _kernel_splice(src, dst, n):
    """``os.splice`` (Python 3.10+), else the libc call: a sandbox image may have 3.8."""
    if hasattr(os, "splice"):
        return os.splice(src, dst, n)
    import ctypes

    f = _libc().splice
    f.restype = ctypes.c_ssize_t
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    f.argtypes += [ctypes.c_size_t, ctypes.c_uint]
    return _syscall(f, src, None, dst, None, n, 0)


def _splice(src, dst, n):
    """Up to ``n`` bytes from ``src`` (a pipe) to ``dst`` inside the kernel; 0 at its end.
    Where ``src`` is no pipe (a socket) they bounce through a pipe of this process's own,
    still never through its memory."""
    try:
        return _kernel_splice(src, dst, n)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
    r, w = os.pipe()
    try:
        got = _kernel_splice(src, w, min(n, 1 << 16))
        left = got
        while left:
            left -= _kernel_splice(r, dst, left)
        return got
    finally:
        os.close(r)
        os.close(w)


def _spool(src, n):
    """A memfd holding the next ``n`` bytes of ``src`` (the request's body)."""
    fd = _memfd("request")
    while n:
        got = _splice(src, fd, n)
        if not got:
            os.close(fd)
            raise EOFError("the request ended early")
        n -= got
    return fd


def _read_body(fd, size):
    """The request's first line, read by the run's own process from the body's memfd; the
    files and stdin stay there (``body``: the fd, their offset) for :func:`make_workdir`."""
    line = bytearray()
    while b"\n" not in line:
        chunk = os.pread(fd, min(1 << 16, size - len(line)), len(line))
        if not chunk:
            raise ValueError("a request without its first line")
        line += chunk
    start = line.index(b"\n") + 1
    req = json.loads(bytes(line[: start - 1]))
    if start + sum(n for _, n in req["files"]) + (req.get("stdin") or 0) != size:
        raise ValueError("a request whose sizes do not add up")
    req["body"] = (fd, start)
    return req


def _send_file(out, fd, n):
    """``n`` bytes of memfd ``fd`` to ``out`` inside the kernel (``sendfile``)."""
    off = 0
    while off < n:
        sent = os.sendfile(out, fd, off, n - off)
        if not sent:
            raise OSError(errno.EIO, "short sendfile")
        off += sent
