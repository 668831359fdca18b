"""The fork-server that runs *inside* a sandbox (stdlib only; started as ``python -I -S -c``).

Why: starting a fresh interpreter (and bubblewrap) per program costs ~25-40 ms; forking a
warm, clean interpreter costs a few ms. The server is started once inside the same isolation
as a per-run program (namespaces, read-only system, no capabilities, a cgroup).

Each run is structurally apart from the server and from every other run: the server's child
makes new user, pid, mount, IPC and network namespaces (``RUN_NS``) and forks their init,
which mounts a ``/proc`` of the new pid namespace, drops every capability and forks the
program (pid 2: rlimits, a fresh work dir, its own session, a fresh ``__main__``). The run
cannot name the server or any other run (no pid of theirs exists for it), so it can neither
signal, renice, re-pin, ``prlimit`` nor read them, and what it changes about itself dies with
it; when the program ends its init exits and the kernel kills whatever the run left. Where
the namespaces cannot be made (``fresh_ns`` false in the hello: Docker's seccomp profile,
no unprivileged user namespaces) runs are forked as plain children; the host refuses such a
server for mechanisms that promise namespaces.

Belt and braces between runs: leftovers are killed (the server is a child subreaper), the
root and scratch dirs are emptied whatever modes the run set, System V IPC is removed in a
private IPC namespace, and the server's limits, priority and dir metadata are compared with
the start (a server that differs or cannot clean says ``"clean": false`` and is replaced).
Keyrings and POSIX message queues are denied by ``guard.py``'s seccomp filter; the server is
not dumpable.

Protocol: one JSON object per line on the control fds (the server's original stdin/stdout).
Request ``{"files": {name: text}, "stdin": str|None, "limits": [[res, value], ...],
"timeout": s, "cap": bytes}``; reply ``{"rc", "sig", "timed_out", "truncated", "wall",
"out", "err", "clean", "failed"}`` with ``out``/``err`` base64. argv: ``ROOT [--wipe DIR ...]
[--ipc] [--max-files N] [--uid N --preload mod,mod]`` (the uid drop is for mechanisms
without a user namespace; ``--max-files`` is for tmpfs roots and scratch dirs).
"""

import base64
import json
import os
import resource
import select
import signal
import sys
import time

_LIBC: list = []


def _libc():
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
#: a run's namespaces: its own user ns (so the server needs no privilege to make them), pid ns
#: (it is pid 2 under an init of its own; nothing outside is addressable), mount ns (its own
#: /proc), IPC ns (System V IPC and POSIX queues die with it) and network ns (its sockets,
#: even a TIME_WAIT left on loopback, die with it)
RUN_NS = 0x10000000 | 0x20000000 | 0x20000 | 0x8000000 | 0x40000000
#: what bubblewrap covers read-only in every /proc it mounts: a run of a sandbox started by
#: root is uid 0 outside its namespaces, and these are guarded by file modes alone
PROC_COVERS = ("sys", "sysrq-trigger", "irq", "bus")


def _prctl(option, value):
    try:
        return _libc().prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError):
        return False


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


def _check(rc, what):
    if rc != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src, dst, fstype, flags):
    args = [x.encode() if isinstance(x, str) else x for x in (src, dst, fstype)]
    _check(_libc().mount(args[0], args[1], args[2], flags, None), f"mount {dst}")


def _drop_caps():
    """Drop every capability: ambient, bounding (where allowed), effective, permitted."""
    import ctypes

    libc = _libc()
    libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    _check(libc.capset(hdr, (ctypes.c_uint32 * 6)()), "capset")


def _fresh_proc():
    """In a run's own mount ns: a /proc that shows its own pid ns only, covered as
    bubblewrap covers its own."""
    nosuid, nodev, noexec, rdonly = 2, 4, 8, 1
    _mount(None, "/", None, 16384 | (1 << 18))  # MS_REC | MS_PRIVATE
    _mount("proc", "/proc", "proc", nosuid | nodev | noexec)
    for name in PROC_COVERS:
        p = "/proc/" + name
        if os.path.lexists(p):
            _mount(p, p, None, 4096 | 16384)  # MS_BIND | MS_REC
            _mount(None, p, None, 4096 | 32 | rdonly | nosuid | nodev | noexec)  # ro remount


def _say(fd, text):
    try:
        os.write(fd, text.encode(errors="replace")[:4000] + b"\n")
    except OSError:
        pass


def _run_init(st_w, start, args):
    """pid 1 of a run's pid namespace (never returns): its own /proc, no capabilities, then
    the program as pid 2; writes the program's wait status to ``st_w`` and exits, and with it
    every process the run made (the kernel kills a pid namespace whose init ends)."""
    try:
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the server ends the run
        _fresh_proc()
        _drop_caps()
        pid = os.fork()
    except BaseException as e:
        _say(st_w, f"E{e}")
        os._exit(1)
    if pid == 0:
        os.close(st_w)
        start(*args)
    # default dispositions: pid 1 ignores every signal the run sends it then
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.closerange(3, st_w)
    os.closerange(st_w + 1, 1 << 16)
    while True:
        try:
            got, st = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if got == pid:
            _say(st_w, str(st))
            os._exit(0)


def _enter_run_ns(st_w, start, args):
    """In the server's child (never returns): new namespaces for the run (``RUN_NS``) and
    their init. This process stays outside them: killing it kills the init, and the run."""
    try:
        _check(_libc().unshare(RUN_NS), "unshare")
        pid = os.fork()
    except BaseException as e:
        _say(st_w, f"E{e}")
        os._exit(1)
    if pid == 0:
        _run_init(st_w, start, args)
    os.closerange(0, 1 << 16)
    try:
        os.waitpid(pid, 0)
    finally:
        os._exit(0)


def _prepare_run_ns():
    """Once, at start: None when every run can have namespaces and a /proc of its own (a
    trial run proves it), else why not. A nested mount ns may only mount a /proc when one
    without locked covers is visible: bubblewrap's is covered, so a server given
    CAP_SYS_ADMIN (for this alone) stacks an uncovered one first; every capability is
    dropped before any request is read."""
    try:
        _mount("proc", "/proc", "proc", 2 | 4 | 8)
    except OSError:
        pass  # no capability (unshare's jail needs none: its /proc has no covers)
    try:
        _drop_caps()
    except OSError as e:
        return f"cannot drop capabilities: {e}"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _enter_run_ns(w, os._exit, (0,))
    os.close(w)
    os.waitpid(pid, 0)
    got = os.read(r, 4096).decode(errors="replace").strip()
    os.close(r)
    if got == "0":
        return None
    return got[1:] if got.startswith("E") else f"the trial run ended with {got!r}"


def _read_status(fd):
    """The program's wait status as its init reported it: (status or None, failure or None)."""
    os.set_blocking(fd, False)
    try:
        got = os.read(fd, 4096).decode(errors="replace").strip()
    except OSError:
        got = ""
    os.close(fd)
    if got.startswith("E"):
        return None, got[1:]
    return (int(got) if got.lstrip("-").isdigit() else None), None


def _child(workdir, has_stdin, limits, out_w, err_w):
    """In the forked child: never returns."""
    code = 1
    try:
        os.setsid()
        os.chdir(workdir)
        fd_in = os.open(".stdin" if has_stdin else "/dev/null", os.O_RDONLY)
        os.dup2(fd_in, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)
        for res, value in limits:
            try:
                resource.setrlimit(res, (value, value))
            except (ValueError, OSError):
                pass
        for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(
            2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
        )
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        import types

        main = types.ModuleType("__main__")
        main.__file__ = os.path.join(workdir, "main.py")
        sys.modules["__main__"] = main
        sys.argv = ["main.py"]
        sys.path.insert(0, workdir)
        with open("main.py", "rb") as f:
            src = f.read()
        code = 0
        exec(compile(src, "main.py", "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            try:
                print(e.code, file=sys.stderr)
            except Exception:
                pass
            code = 1
    except BaseException as e:
        code = 1
        try:  # as a fresh interpreter would: the program's excepthook, without our frame
            tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
            sys.excepthook(type(e), e.with_traceback(tb), tb)
        except BaseException:
            pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code & 0xFF)


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


def _collect(pid, out_r, err_r, deadline, cap, watch=None, kill=None):
    """Read the run's output until it ends; ``watch`` = (dirs, max new inodes): a run that
    creates more files than that is killed (tmpfs has no inode limit bubblewrap can set).
    ``kill`` ends the whole run (default: the process group of ``pid``)."""
    if kill is None:

        def kill():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass

    bufs = {out_r: bytearray(), err_r: bytearray()}
    open_fds = [out_r, err_r]
    truncated = timed_out = over_quota = False
    status = None
    exited_at = None
    base = _inodes(watch[0]) if watch else 0
    while open_fds:
        now = time.monotonic()
        if now >= deadline:
            timed_out = status is None
            break
        if watch and status is None and _inodes(watch[0]) - base > watch[1]:
            over_quota = True
            kill()
        if status is None:
            got, st = os.waitpid(pid, os.WNOHANG)
            if got:
                status, exited_at = st, now
        if exited_at is not None and now - exited_at > 0.2:
            break  # something the program left behind holds the pipes
        ready, _, _ = select.select(open_fds, [], [], min(deadline - now, 0.05))
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                open_fds.remove(fd)
                continue
            buf = bufs[fd]
            room = cap - len(buf)
            if room > 0:
                buf += chunk[:room]
            if len(chunk) > max(room, 0):
                truncated = True
    if status is None and not timed_out:
        while time.monotonic() < deadline:
            got, st = os.waitpid(pid, os.WNOHANG)
            if got:
                status = st
                break
            time.sleep(0.002)
        else:
            timed_out = True
    kill()
    if status is None:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = None
    err = bytes(bufs[err_r])
    if over_quota:
        err += f"\nflowzoo sandbox: the run created more than {watch[1]} files; killed\n".encode()
    return bytes(bufs[out_r]), err, truncated, timed_out, status


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


def serve(root, wipe, private_ipc, max_files=0):
    ctl_in = os.fdopen(os.dup(0), "rb")
    ctl_out = os.fdopen(os.dup(1), "wb")
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _prctl(PR_SET_DUMPABLE, 0)
    subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    me = os.getpid()

    def send(obj):
        ctl_out.write(json.dumps(obj).encode() + b"\n")
        ctl_out.flush()

    why = _prepare_run_ns()
    fresh = why is None
    send({"ready": True, "pid": me, "subreaper": subreaper, "fresh_ns": fresh, "why": why})
    baseline = _server_state()
    dirs = {d: _dir_state(d) for d in [root, *wipe]}
    n = 0
    for line in ctl_in:
        req = json.loads(line)
        n += 1
        # an unguessable name: no run can prepare the next run's dir (and the root is wiped)
        workdir = os.path.join(root, f"run{n}-{os.urandom(8).hex()}")
        os.mkdir(workdir, 0o700)
        for name, text in req["files"].items():
            dest = os.path.join(workdir, *name.split("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(text)
        has_stdin = req.get("stdin") is not None
        if has_stdin:
            with open(os.path.join(workdir, ".stdin"), "w", encoding="utf-8") as f:
                f.write(req["stdin"])
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        st_r, st_w = os.pipe() if fresh else (None, None)
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            limits = req["limits"]
            if fresh:
                os.close(st_r)
                _enter_run_ns(st_w, _child, (workdir, has_stdin, limits, out_w, err_w))
            _child(workdir, has_stdin, limits, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        kill = None
        if fresh:
            os.close(st_w)

            def kill(pid=pid):
                try:
                    os.kill(pid, signal.SIGKILL)  # its init dies with it, and the run with that
                except OSError:
                    pass

        watch = ([root, *wipe], max_files) if max_files else None
        out, err, truncated, timed_out, status = _collect(
            pid, out_r, err_r, t0 + float(req["timeout"]), int(req["cap"]), watch, kill
        )
        failed = None
        if fresh:
            status, failed = _read_status(st_r)
        wall = time.monotonic() - t0
        os.close(out_r)
        os.close(err_r)
        kill_leftovers(me)
        _reap()
        # nothing a run wrote anywhere it could write may reach the next run
        clean = all([_wipe(d) for d in [root, *wipe]])
        clean = all([_restore_dir(d, st) for d, st in dirs.items() if st]) and clean
        clean = clean and _server_state() == baseline
        if private_ipc:
            _remove_sysv_ipc()
        rc = sig = None
        if status is not None:
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                rc = -sig
            elif os.WIFEXITED(status):
                rc = os.WEXITSTATUS(status)
        send(
            {
                "rc": rc,
                "sig": sig,
                "timed_out": timed_out,
                "truncated": truncated,
                "wall": wall,
                "out": base64.b64encode(out).decode(),
                "err": base64.b64encode(err).decode(),
                "clean": clean and failed is None,
                "failed": failed,
            }
        )


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
    if uid is not None and os.getuid() == 0:
        # stdlib modules first, while the interpreter's prefix is still readable
        for m in preload:
            try:
                __import__(m)
            except ImportError:
                pass
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    # a scratch dir this system does not have (no /dev/mqueue outside Docker) is nothing to wipe
    serve(root, [d for d in wipe if os.path.isdir(d)], private_ipc, max_files)


if __name__ == "__main__":
    main(sys.argv[1:])
