"""The fork-server that runs *inside* a sandbox (stdlib only; started as ``python -I -S -c``).

Why: starting a fresh interpreter (and bubblewrap) per program costs ~25-40 ms; forking a
warm, clean interpreter costs a few ms. The server is started once inside the same isolation
as a per-run program (namespaces, read-only system, no capabilities, a cgroup).

Each run is structurally apart from the server and from every other run
(``forkserver_ns.py``, concatenated before this source): the server's child makes new user,
pid, mount, IPC and network namespaces and forks their init, which mounts a ``/proc`` of the
new pid namespace and a fresh file system over every writable place (work root, ``/tmp``,
``/dev/shm``, ``/dev/pts``), writes the request's files into a new work dir there, drops every
capability and forks the program (pid 2: rlimits, its own session, a fresh ``__main__``). The
run cannot name the server or any other run, what it changes about itself dies with it, and
no file system it wrote to (nor its inode counter, free blocks or free inodes) outlives it.
Where the namespaces cannot be made (``fresh_ns`` false in the hello: a seccomp profile
without ``unshare``/``mount``, no unprivileged user namespaces) runs would be forked as plain
children in the server's own file systems, so the host refuses such a server (bubblewrap,
unshare) or falls back to a container no run has used per run (Docker, ``docker.py``).

Belt and braces between runs: leftovers are killed (the server is a child subreaper), the
root and scratch dirs are emptied whatever modes the run set, System V IPC is removed in a
private IPC namespace, and the server's limits, priority and dir metadata are compared with
the start (a server that differs or cannot clean says ``"clean": false`` and is replaced).
Keyrings and POSIX message queues are denied by ``guard.py``'s seccomp filter; the server is
not dumpable. A program can make no namespace and change no mount (``guard.py``'s second
filter, installed by the run's init before it forks the program, or by the run's process
where runs share the server's namespaces); a run that cannot have it fails as
``sandbox_error``.

No run's data ever passes through the server's memory. Every run is forked from the server,
so whatever the server's heap held (a freed buffer is not zeroed) a later run could read from
its own memory: an earlier run's files (a replay's hidden tests) or output (another sample's
program). So the server reads only a request's small header; the body goes from the control
pipe into a memfd inside the kernel (``splice``), and only the run's own process reads it; a
run's output goes from its pipes into memfds the same way, and from there to the control pipe
(``sendfile``). Each request is handled, header to reply, by a child of the server that exits
after it (:func:`_handle`), so the reply's text (exit status, output sizes, wall time) is
never in the server either; the server learns only whether the run went well, and says
whether it is clean on a line of its own after the reply. The handler itself moves into the
run's namespaces (one fork fewer: a fork of the server is a third of a run's start-up) and
replies as soon as the init reports the program's end; the namespaces' teardown and the
server's checks come after the reply, overlapping the host's own work.

Protocol on the control fds (the server's original stdin/stdout). Request: a header line
``{"timeout": s, "cap": bytes, "size": n}`` and ``n`` bytes of body: a JSON line ``{"files":
[[name, bytes], ...], "stdin": bytes|None, "limits": [[res, value], ...]}``, then the files'
UTF-8 and stdin's, raw (copied out a chunk at a time). Reply: a header line ``{"rc", "sig",
"timed_out", "truncated", "wall", "out", "err", "clean", "failed"}`` (``out``/``err``: byte
counts), that many bytes of stdout and of stderr, then the server's line ``{"clean": bool}``.
argv: ``ROOT [--wipe DIR ...] [--ipc] [--max-files N] [--uid N] [--preload mod,mod]`` (the
uid drop: mechanisms without a user namespace; ``--max-files``: the files a run may make on
each of its file systems, a fresh tmpfs's ``nr_inodes``, else a watch on the shared ones).
"""

import json
import os
import resource
import select
import signal
import sys
import time

if __name__ != "__main__":  # imported (docker.py, tests); as ``-c`` the run side precedes this
    from flowzoo.sandbox.forkserver_io import _memfd, _read_body, _send_file, _splice, _spool
    from flowzoo.sandbox.forkserver_ns import (
        _child,
        _prctl,
        _say,
        deny_namespaces,
        make_workdir,
        prepare_run_ns,
        read_status,
        start_run,
    )
    from flowzoo.sandbox.guard import _FZ_UNFILTERED_EXIT, _FZ_UNFILTERED_MARK

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def _children(me):
    """Direct children of ``me`` (all leftovers come back here: we are the subreaper)."""
    path = f"/proc/{me}/task/{me}/children"
    try:
        with open(path) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        pass
    kids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                kids.append(int(name))
        except (OSError, ValueError, IndexError):
            pass
    return kids


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_leftovers(me, deadline_s=5.0):
    """SIGKILL every descendant until none is left (each round kills the current children;
    their own children are reparented to us and go in the next round)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        kids = _children(me)
        if not kids:
            return True
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)
        _reap()
    return False


def _wipe(path, keep_top=True):
    """Remove everything under ``path`` (and ``path`` unless ``keep_top``), whatever modes a
    run set on it (we own all of it: same uid). True when nothing is left."""
    try:
        os.chmod(path, 0o700 if not keep_top else os.stat(path).st_mode | 0o700)
    except OSError:
        pass  # not ours to chmod (a scratch dir's top): listing it is what matters
    try:
        names = os.listdir(path)
    except OSError:
        return False
    for n in names:
        p = os.path.join(path, n)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if (st.st_mode & 0o170000) == 0o040000:
            _wipe(p, keep_top=False)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass
    if not keep_top:
        try:
            os.rmdir(path)
        except OSError:
            return False
        return True
    try:
        return not os.listdir(path)
    except OSError:
        return False


def _remove_sysv_ipc():
    """Remove every System V IPC object (only called in a private IPC namespace)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except (OSError, ImportError):
        return
    ipc_rmid = 0
    for kind, fn in (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl")):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 2:
                continue
            ident = int(parts[1])
            if kind == "sem":
                getattr(libc, fn)(ident, 0, ipc_rmid)
            else:
                getattr(libc, fn)(ident, ipc_rmid, None)


def _inodes(dirs):
    """Inodes in use on the file systems of ``dirs`` (each a tmpfs of the sandbox's own)."""
    used = 0
    for d in dirs:
        try:
            st = os.statvfs(d)
            used += st.f_files - st.f_ffree
        except OSError:
            pass
    return used


def _over_quota(max_files):
    return f"\nflowzoo sandbox: the run created more than {max_files} files; killed\n".encode()


#: the longest request header (its timeout, output cap and body size)
HEADER_LIMIT = 4096


def _read_header(fd):
    """The next request's header, read a byte at a time so that nothing of its body is read
    into this process; None at the end of the input."""
    line = bytearray()
    while True:
        b = os.read(fd, 1)
        if not b:
            return None
        if b == b"\n":
            return json.loads(bytes(line))
        line += b
        if len(line) > HEADER_LIMIT:
            raise ValueError("request header too long")


def _collect(pid, out_r, err_r, deadline, cap, null, watch=None, kill=None, told=None):
    """Move the run's output into two memfds (at most ``cap`` bytes each, the rest to
    ``null``) until it ends; ``watch`` = (dirs, max new inodes, inodes before the run): a run
    that creates more files than that is killed (tmpfs has no inode limit bubblewrap can set). ``kill`` ends
    the whole run (default: the process group of ``pid``). ``told``: the fd the run's init
    reports the program's end on (fresh namespaces): the run has ended when it is readable,
    and ``pid`` is not waited for (its namespaces' teardown comes after the reply; the
    status is then ``REPORTED``, the init's report still unread). (out memfd, its size, err
    memfd, its size, truncated, timed_out, status)."""
    if kill is None:

        def kill():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass

    sinks = {out_r: _memfd("out"), err_r: _memfd("err")}
    kept = {out_r: 0, err_r: 0}
    open_fds = [out_r, err_r]
    truncated = timed_out = over_quota = False
    status = None
    exited_at = None
    while open_fds:
        now = time.monotonic()
        if now >= deadline:
            timed_out = status is None
            break
        if watch and status is None and _inodes(watch[0]) - watch[2] > watch[1]:
            over_quota = True
            kill()
        if status is None:
            got, st = _ended(pid, told)
            if got:
                status, exited_at = st, now
        if exited_at is not None and now - exited_at > 0.2:
            break  # something the program left behind holds the pipes
        waits = open_fds + ([told] if told is not None and status is None else [])
        ready, _, _ = select.select(waits, [], [], min(deadline - now, 0.05))
        for fd in ready:
            if fd == told:
                continue  # seen by _ended on the next pass
            room = cap - kept[fd]
            moved = _splice(fd, sinks[fd] if room > 0 else null, room if room > 0 else 1 << 16)
            if not moved:
                open_fds.remove(fd)
            elif room > 0:
                kept[fd] += moved
            else:
                truncated = True
    if status is None and not timed_out:
        while time.monotonic() < deadline:
            got, st = _ended(pid, told)
            if got:
                status = st
                break
            wait = [told] if told is not None else []
            select.select(wait, [], [], min(max(deadline - time.monotonic(), 0), 0.002))
        else:
            timed_out = True
    kill()
    if status is None:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = None
    if over_quota:
        kept[err_r] += os.pwrite(sinks[err_r], _over_quota(watch[1]), kept[err_r])
    return sinks[out_r], kept[out_r], sinks[err_r], kept[err_r], truncated, timed_out, status


#: the status ``_collect`` gives when the run's init has reported (``read_status`` reads it)
REPORTED = -1


def _ended(pid, told):
    """(True, status) once the run has ended: its init's report fd readable (fresh
    namespaces: the report or the init's death), else ``pid`` exited; (False, None) before."""
    if told is None:
        got, st = os.waitpid(pid, os.WNOHANG)
        return bool(got), st if got else None
    ready, _, _ = select.select([told], [], [], 0)
    return bool(ready), REPORTED if ready else None


def _server_state():
    """What a run could change about this server that later runs would inherit: every resource
    limit (a run may lower its parent's with ``prlimit``) and its scheduling priority (a run
    may renice its parent). Compared after every run: a change makes the server unclean and
    the host replaces it (a lowered hard limit cannot be raised back unprivileged)."""
    limits = []
    for name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_")):
        try:
            limits.append((name, resource.getrlimit(getattr(resource, name))))
        except (ValueError, OSError):
            pass
    try:
        nice = os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        nice = None
    return limits, nice


def _dir_state(path):
    """A scratch dir's own metadata a run could leave a message in: mode, xattrs and, on a dir
    this server owns (and so a run of the same uid could ``utime``), its times. A dir owned
    by another uid (Docker's root-owned 1777 dirs) keeps its times out: no run can set them,
    and the wipe moves them anyway."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    try:
        xattrs = sorted(os.listxattr(path))
    except (OSError, AttributeError):
        xattrs = []
    times = (st.st_atime_ns, st.st_mtime_ns) if st.st_uid == os.getuid() else None
    return st.st_mode & 0o7777, times, xattrs


def _restore_dir(path, state):
    """Put a scratch dir's mode, xattrs and times back as they were; True when it matches."""
    mode, times, xattrs = state
    try:
        os.chmod(path, mode)
    except OSError:
        pass
    try:
        for name in os.listxattr(path):
            if name not in xattrs:
                os.removexattr(path, name)
    except (OSError, AttributeError):
        pass
    if times is not None:
        try:
            os.utime(path, ns=times)
        except OSError:
            pass
    return _dir_state(path) == state


#: a request handler's exit codes: it replied; it replied and the run's init reported a
#: failure; there was no request (the host closed the pipe)
HANDLED, HANDLED_FAILED, NO_REQUEST = 0, 4, 3


def serve(root, wipe, private_ipc, max_files=0):
    ctl_in = os.dup(0)  # read raw: a buffered reader would hold a request's body
    ctl_out = os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _prctl(PR_SET_DUMPABLE, 0)
    subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    me = os.getpid()
    # every writable place the runs see, mounted fresh for each run (fresh namespaces only)
    plan, why = prepare_run_ns(root, wipe, max_files)
    fresh = why is None
    _send(
        ctl_out, {"ready": True, "pid": me, "subreaper": subreaper, "fresh_ns": fresh, "why": why}
    )
    baseline = _server_state()
    dirs = {d: _dir_state(d) for d in [root, *wipe]}
    while True:
        # one request, start to reply, in a process of its own: what it read (the header) and
        # wrote (the reply: exit details, output sizes) dies with it, never in the server
        # every later run is forked from
        handler = os.fork()
        if handler == 0:
            try:
                code = _handle(ctl_in, ctl_out, null, fresh, plan, root, wipe, max_files)
            except BaseException:  # noqa: BLE001 - any failure is the server's to report
                code = 1
            os._exit(code)
        _, st = os.waitpid(handler, 0)
        code = os.WEXITSTATUS(st) if os.WIFEXITED(st) else -1
        if code == NO_REQUEST:
            return
        kill_leftovers(me)
        _reap()
        # nothing a run wrote anywhere it could write may reach the next run
        clean = all([_wipe(d) for d in [root, *wipe]])
        clean = all([_restore_dir(d, st) for d, st in dirs.items() if st]) and clean
        clean = clean and _server_state() == baseline
        if private_ipc:
            _remove_sysv_ipc()
        if code not in (HANDLED, HANDLED_FAILED):  # it died before its reply: one in its place
            _send(ctl_out, {"rc": None, "sig": None, "timed_out": False, "truncated": False,
                            "wall": 0.0, "out": 0, "err": 0, "failed": "the request's handler died"})  # fmt: skip
        _send(ctl_out, {"clean": clean and code == HANDLED})


def _send(fd, obj):
    data = json.dumps(obj).encode() + b"\n"
    while data:
        data = data[os.write(fd, data) :]


def _load(body, size):
    """The request's body (in the run's own process): its files, stdin and limits."""
    try:
        return _read_body(body, size)
    except BaseException as e:  # noqa: BLE001 - too big for its memory, or malformed
        raise OSError(
            f"the request could not be read in the run ({type(e).__name__}: {e})"[:500]
        ) from None


def _program(workdir, req, out_w, err_w):
    """The run's program (pid 2 in fresh namespaces; never returns)."""
    _child(workdir, req.get("stdin") is not None, req["limits"], out_w, err_w)


def _drain(out_r, err_r):
    """A run that never started: empty output, both pipes closed."""
    os.close(out_r)
    os.close(err_r)
    return _memfd("out"), 0, _memfd("err"), 0, False, False


def _handle(ctl_in, ctl_out, null, fresh, plan, root, wipe, max_files):
    """One request (in a child of the server): read its header, spool its body, fork the
    run, collect its output and reply; the exit code says how it went."""
    head = _read_header(ctl_in)
    if head is None:
        return NO_REQUEST
    size = int(head["size"])
    body = _spool(ctl_in, size)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe() if fresh else (None, None)
    # shared file systems: counted before the run's process writes the request's files
    # (``inodes`` of them, the header says), which the run may make beyond max_files
    before = _inodes([root, *wipe]) if max_files and not fresh else 0
    t0 = time.monotonic()
    if fresh:  # the run's own process (its init) reads the request, never the server
        pid = start_run(st_w, plan, lambda: _load(body, size), _program, (out_w, err_w))
    else:
        pid = os.fork()
    if pid == 0:
        try:  # the run's own process reads the request, never the server
            req = _load(body, size)
        except BaseException as e:  # noqa: BLE001 - too big for its memory, or malformed
            _say(err_w, f"flowzoo sandbox: {e}")
            os._exit(1)
        # shared namespaces: the files go in the server's own root (emptied after the run)
        workdir = make_workdir(root, req)
        try:  # the run's init does this in fresh namespaces
            deny_namespaces()
        except OSError:
            os.write(err_w, (_FZ_UNFILTERED_MARK + "\n").encode())
            os._exit(_FZ_UNFILTERED_EXIT)
        _program(workdir, req, out_w, err_w)
    os.close(body)
    os.close(out_w)
    os.close(err_w)
    kill = watch = None
    if fresh:  # the run's init kills it past max_files (its file systems are its own)
        os.close(st_w)

        def kill(pid=pid):
            try:
                os.kill(pid, signal.SIGKILL)  # the run's init: the run dies with it
            except (OSError, TypeError):
                pass

    elif max_files:
        watch = ([root, *wipe], max_files + int(head.get("inodes", 0)), before)
    if pid is None:  # no namespaces for the run (why: on st_r); nothing ran
        out, n_out, err, n_err, truncated, timed_out, status = *_drain(out_r, err_r), None
    else:
        out, n_out, err, n_err, truncated, timed_out, status = _collect(
            pid,
            out_r,
            err_r,
            t0 + float(head["timeout"]),
            int(head["cap"]),
            null,
            watch,
            kill,
            st_r if fresh else None,
        )
    failed = None
    status_pending = fresh and status == REPORTED  # its process not yet reaped
    if fresh:
        status, failed, over = read_status(st_r)
        if over:
            n_err += os.pwrite(err, _over_quota(max_files), n_err)
    wall = time.monotonic() - t0
    rc = sig = None
    if status is not None:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            rc = -sig
        elif os.WIFEXITED(status):
            rc = os.WEXITSTATUS(status)
    reply = {"rc": rc, "sig": sig, "timed_out": timed_out, "truncated": truncated}
    _send(ctl_out, {**reply, "wall": wall, "out": n_out, "err": n_err, "failed": failed})
    for fd, n in ((out, n_out), (err, n_err)):
        _send_file(ctl_out, fd, n)
    if status_pending:  # the run's namespaces go after the reply, before the server's checks
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return HANDLED if failed is None else HANDLED_FAILED


def main(argv):
    root = argv[0]
    wipe = []
    private_ipc = False
    uid = None
    preload = []
    max_files = 0
    rest = argv[1:]
    while rest:
        a = rest.pop(0)
        if a == "--wipe":
            wipe.append(rest.pop(0))
        elif a == "--ipc":
            private_ipc = True
        elif a == "--uid":
            uid = int(rest.pop(0))
        elif a == "--max-files":
            max_files = int(rest.pop(0))
        elif a == "--preload":
            preload = [m for m in rest.pop(0).split(",") if m]
    # stdlib modules first (before a uid drop, while the prefix is readable): runs fork warm
    for m in preload:
        try:
            __import__(m)
        except ImportError:
            pass
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    # a scratch dir this system does not have (no /dev/mqueue outside Docker) is nothing to wipe
    serve(root, [d for d in wipe if os.path.isdir(d)], private_ipc, max_files)


if __name__ == "__main__":
    main(sys.argv[1:])
