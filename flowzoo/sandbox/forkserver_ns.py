"""A fork-server run's own namespaces and file systems (stdlib only: the host concatenates
this source before ``forkserver_main.py`` and starts both as ``python -I -S -c``).

Why: a run forked from a long-lived server shares every kernel object the server holds. The
server's child makes new user, pid, mount, IPC and network namespaces (``RUN_NS``) and forks
their init (pid 1), which mounts a ``/proc`` of the new pid namespace and a *fresh* file
system over every writable place the sandbox has (the work root, ``/tmp``, ``/dev/shm``,
``/dev/pts``: :func:`fs_plan`), writes the request's files into the fresh work dir, drops every
capability, installs the filter that denies the program (and itself, from then on) every way to
make a namespace or change a mount (``guard.py``: the init's own mounts are done; a run that
could ``unshare`` would be root over any cgroup, ``/proc`` or tmpfs it mounted) and forks the
program (pid 2). A wipe empties a file system but keeps its per-mount
state (tmpfs numbers inodes from a per-mount counter; free blocks and inodes are per-mount
counts): a fresh mount per run has none of it. Each tmpfs gets the size and mode the sandbox
gave its own and ``nr_inodes`` from ``--max-files`` (the kernel refuses the file past it; the
init kills the run when one fills up). When the program ends the init exits, the kernel kills
whatever the run left, and its mounts go with its mount namespace.
"""

import os
import resource
import select
import signal
import sys

if __name__ != "__main__":  # imported (tests, docker.py); as ``-c`` guard.py's source precedes
    from flowzoo.sandbox.guard import _fz_deny_namespaces

_LIBC: list = []


def _libc():
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
#: a run's namespaces: its own user ns (so the server needs no privilege to make them), pid ns
#: (it is pid 2 under an init of its own; nothing outside is addressable), mount ns (its own
#: /proc and file systems), IPC ns (System V IPC and POSIX queues die with it) and network ns
#: (its sockets, even a TIME_WAIT left on loopback, die with it)
RUN_NS = 0x10000000 | 0x20000000 | 0x20000 | 0x8000000 | 0x40000000
CLONE_NEWUSER = 0x10000000
#: what bubblewrap covers read-only in every /proc it mounts: a run of a sandbox started by
#: root is uid 0 outside its namespaces, and these are guarded by file modes alone
PROC_COVERS = ("sys", "sysrq-trigger", "irq", "bus")
#: what a run's init hides in its /proc besides (``FZ_PROC_MASKS``, names joined by ``:``):
#: the covers a container runtime puts on its own /proc, which a sandbox that had to start
#: without them (Docker: a nested /proc mount needs an uncovered one) hands to every run
PROC_MASKS = tuple(n for n in os.environ.pop("FZ_PROC_MASKS", "").split(":") if n)
#: the uid and gid a run has in its user namespace (the server's own, mapped): what an
#: unmapped uid showed before, so nothing a run reads about itself changed
RUN_ID = 65534
#: the size of a fresh tmpfs made over a dir that is not one (the ``unshare`` jail's host work
#: root has /tmp's size; this is for ``mechanism="none"``: ``ProcessLimits.disk_mb``'s default)
DEFAULT_SIZE = "size=64m"
#: writable file systems a run gets a fresh instance of, wherever the sandbox shows one
FRESH_TYPES = ("tmpfs", "devpts", "mqueue")
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    16384,
    1 << 18,
)


def _prctl(option, value):
    try:
        return _libc().prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError):
        return False


def _check(rc, what):
    if rc != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src, dst, fstype, flags, data=None):
    args = [x.encode() if isinstance(x, str) else x for x in (src, dst, fstype, data)]
    _check(_libc().mount(args[0], args[1], args[2], flags, args[3]), f"mount {dst}")


def _drop_caps():
    """Drop every capability: ambient, bounding (where allowed), effective, permitted."""
    import ctypes

    libc = _libc()
    libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    _check(libc.capset(hdr, (ctypes.c_uint32 * 6)()), "capset")


def _mountinfo():
    """{mount point: (fs type, mount options, super options)} of the mounts visible here
    (the top one of a point wins)."""
    seen = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, r = left.split(), right.split()
            point = fields[4]
            for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
                point = point.replace(esc, ch)
            seen[point] = (r[0] if r else "", fields[5], r[2] if len(r) > 2 else "")
    return seen


def _opt(opts, key):
    return next((o for o in opts.split(",") if o.startswith(key + "=")), None)


def _under(path, top):
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


def fs_plan(root, wipe, max_files):
    """What every run mounts fresh, as ``[(dir, fs type, flags, options, inodes)]``: a tmpfs
    over the work root (first), each scratch dir and every other writable tmpfs the sandbox
    shows, a new devpts or mqueue instance over each one mounted writable (pty numbers and
    queues are per instance). A tmpfs has the size, mode and ``noexec`` the sandbox gave its
    own (a root that is a host dir has the scratch dirs' size) and ``nr_inodes`` room for
    ``max_files`` files and one more, the one that says the run went past it (the work
    root's grows by the request's files at mount time). A mount inside a planned one is
    hidden by it; one that holds the work root or a scratch dir is left (``none``'s host)."""
    mounts = _mountinfo()
    own = [root, *wipe]
    sizes = [_opt(mounts[d][2], "size") for d in wipe if mounts.get(d, ("",))[0] == "tmpfs"]
    found = [
        p
        for p, (fstype, opts, _) in mounts.items()
        if fstype in FRESH_TYPES
        and "rw" in opts.split(",")
        and p != "/"
        and not any(_under(d, p) for d in own)
    ]
    plan = []
    for d in own + sorted(found, key=lambda p: p.count("/")):
        if any(_under(d, p[0]) for p in plan) or not os.path.isdir(d):
            continue
        fstype, flags, opts = mounts.get(d, ("", "", ""))
        # a sandbox's noexec stays (Docker's tmpfs mounts have it)
        noexec = MS_NOEXEC if "noexec" in flags.split(",") else 0
        if d in own or fstype == "tmpfs":
            size = _opt(opts, "size") if fstype == "tmpfs" else None
            size = size or next((s for s in sizes if s), DEFAULT_SIZE)
            data = f"{size},mode={os.stat(d).st_mode & 0o7777:o}"
            inodes = max_files + 2 if max_files > 0 else 0
            plan.append((d, "tmpfs", MS_NOSUID | MS_NODEV | noexec, data, inodes))
        else:  # no uid=/gid=: not mapped in a run's user namespace
            keep = ("mode=", "ptmxmode=", "max=")
            data = ",".join(o for o in opts.split(",") if o.startswith(keep))
            plan.append((d, fstype, MS_NOSUID | MS_NODEV | MS_NOEXEC, data, 0))
    return plan


def _request_inodes(req):
    """Inodes :func:`make_workdir` uses for ``req``: its dir, the files' dirs, the files."""
    if not req:
        return 0
    names = [n for n, _ in req["files"]]  # (name, size) pairs
    dirs = {"/".join(n.split("/")[:i]) for n in names for i in range(1, n.count("/") + 1)}
    return 1 + len(dirs) + len(req["files"]) + (req.get("stdin") is not None)


def make_workdir(root, req):
    """A new dir under ``root`` holding the request's files and ``.stdin``, copied out of the
    request's memfd (``req["body"]``: the fd, where the bytes start), which is then closed;
    its path."""
    # an unguessable name: where the root is not fresh, no run can prepare the next run's dir
    workdir = os.path.join(root, f"run-{os.urandom(8).hex()}")
    os.mkdir(workdir, 0o700)
    src, at = req["body"]
    for name, n in req["files"]:
        dest = os.path.join(workdir, *name.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        at = _copy_out(src, at, n, dest)
    if req.get("stdin") is not None:
        _copy_out(src, at, req["stdin"], os.path.join(workdir, ".stdin"))
    os.close(src)
    return workdir


def _copy_out(src, at, n, dest):
    """``n`` bytes of fd ``src`` from offset ``at`` into a new file ``dest``, a chunk at a
    time: a request's file is never whole in the run's memory, whose limit is the program's
    (a 55 MB file under a 128 MB limit once killed the run before its program started).
    Where the next bytes start."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        while n:
            chunk = os.pread(src, min(n, 1 << 20), at)
            if not chunk:
                raise ValueError("the request ended early")
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
            at, n = at + len(chunk), n - len(chunk)
    finally:
        os.close(fd)
    return at


def _fresh_fs(plan, req):
    """In a run's own mount ns: a /proc that shows its own pid ns only, covered as bubblewrap
    covers its own, and a fresh file system over every writable place in ``plan``."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in PROC_COVERS:
        p = "/proc/" + name
        if os.path.lexists(p):
            _mount(p, p, None, MS_BIND | MS_REC)
            ro = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
            _mount(None, p, None, ro)
    for name in PROC_MASKS:  # as runc masks: an empty read-only dir, or /dev/null
        p = "/proc/" + name
        if os.path.isdir(p):
            ro = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
            _mount("tmpfs", p, "tmpfs", ro, "size=4k,nr_inodes=2,mode=555")
        elif os.path.lexists(p):
            _mount("/dev/null", p, None, MS_BIND)
    for i, (d, fstype, flags, data, inodes) in enumerate(plan):
        if inodes:  # the work root (first) also holds the request's files
            data += f",nr_inodes={inodes + (_request_inodes(req) if i == 0 else 0)}"
        _mount(fstype, d, fstype, flags, data)
    os.chdir("/")  # not the covered dir the server works in


def _exhausted(dirs):
    """True when a watched file system has no inode left: the run made more than its files."""
    for d in dirs:
        try:
            if os.statvfs(d).f_ffree == 0:
                return True
        except OSError:
            pass
    return False


def _say(fd, text):
    try:
        os.write(fd, text.encode(errors="replace")[:4000] + b"\n")
    except OSError:
        pass


def _await_program(pid, watch):
    """Reap the run's processes until ``pid`` ends; with ``watch`` (dirs), kill the whole run
    as soon as one of them is full of inodes. The program's wait status and whether it was."""
    pidfd = None
    if watch and hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None
    over = False
    while True:
        if watch:
            if pidfd is not None:
                select.select([pidfd], [], [], 0.05)
            else:
                select.select([], [], [], 0.01)
            if not over and _exhausted(watch):
                over = True
                try:
                    os.kill(-1, signal.SIGKILL)  # every process of the run (pid 1 is spared)
                except OSError:
                    pass
        while True:
            try:
                got, st = os.waitpid(-1, os.WNOHANG if watch else 0)
            except ChildProcessError:
                return None, over
            if got == 0:
                break
            if got == pid:
                return st, over or bool(watch and _exhausted(watch))


def deny_namespaces():
    """The filter that leaves a program no namespace or mount to make (``guard.py``), or
    OSError: a run that cannot have it does not run."""
    if not _fz_deny_namespaces():
        raise OSError("cannot install the seccomp filter that denies namespaces and mounts")


def _run_init(st_w, plan, load, start, args):
    """pid 1 of a run's pid namespace (never returns): reads the request (``load()``), makes
    its own /proc and file systems with the request's files, drops every capability, leaves
    no namespace or mount to make from here on (for it and the program), then
    ``start(workdir, request, *args)`` as pid 2; writes the program's wait status (and ``Q``
    if it made more files than allowed) to ``st_w`` and exits, and with it every process the
    run made (the kernel kills a pid namespace whose init ends)."""
    try:
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the server ends the run
        req = load() if load is not None else None  # the run's own process reads it
        _fresh_fs(plan, req)
        _drop_caps()
        workdir = make_workdir(plan[0][0], req) if req else None
        deny_namespaces()  # every mount of the run's is made; the trial run proves it holds
        pid = os.fork()
    except BaseException as e:
        _say(st_w, f"E{e}")
        os._exit(1)
    if pid == 0:
        os.close(st_w)
        start(workdir, req, *args)
    # default dispositions: pid 1 ignores every signal the run sends it then
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.closerange(3, st_w)
    os.closerange(st_w + 1, 1 << 16)
    status, over = _await_program(pid, [p[0] for p in plan if p[4]])
    if status is None:
        os._exit(1)
    _say(st_w, f"{status} Q" if over else str(status))
    os._exit(0)


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
        # as a fresh interpreter opens them (POSIX: stdin splits lines at "\n" and translates
        # nothing; each stream's error handler the locale's): the server's were opened so
        errors = [getattr(f, "errors", None) or "strict" for f in (sys.__stdin__, sys.__stdout__)]
        sys.stdin = open(0, encoding="utf-8", errors=errors[0], newline="\n", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", errors=errors[1], closefd=False)
        sys.stderr = open(
            2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
        )
        for name in ("stdin", "stdout", "stderr"):  # as a fresh interpreter has them
            setattr(sys, f"__{name}__", getattr(sys, name))
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


def _map_ids(uid, gid):
    """Give the run's user ns one uid and gid, ours: a file system mounted in it can only hold
    files of an owner it can name (the uid it showed unmapped, ``RUN_ID``, stays)."""
    _prctl(PR_SET_DUMPABLE, 1)  # else /proc/self's maps may belong to another uid
    try:
        for name, text in (
            ("uid_map", f"{RUN_ID} {uid} 1"),
            ("setgroups", "deny"),
            ("gid_map", f"{RUN_ID} {gid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    finally:
        _prctl(PR_SET_DUMPABLE, 0)


def start_run(st_w, plan, load, start, args):
    """In the request's handler: new namespaces (``RUN_NS``) for this process, and their
    init forked (:func:`_run_init`); the init's pid, or None when they could not be made (why
    is on ``st_w``). The handler stays outside the pid ns, where the run cannot name it:
    killing the init kills the run. Why the handler and no process of its own: a fork of
    the server is a third of a run's start-up."""
    try:
        uid, gid = os.geteuid(), os.getegid()
        _check(_libc().unshare(RUN_NS), "unshare")
        _map_ids(uid, gid)
        pid = os.fork()
    except BaseException as e:
        _say(st_w, f"E{e}")
        return None
    if pid == 0:
        _run_init(st_w, plan, load, start, args)
    return pid


def prepare_run_ns(root, wipe, max_files):
    """Once, at start: ``(plan, why)``: the runs' :func:`fs_plan`, and None when every run can
    have namespaces, a /proc and file systems of its own (a trial run proves it), else why
    not. A nested mount ns may only mount a /proc when one without locked covers is visible:
    bubblewrap's is covered, so a server given CAP_SYS_ADMIN (for this alone) stacks an
    uncovered one first; every capability is dropped before any request is read."""
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass  # no capability (unshare's jail needs none: its /proc has no covers)
    if os.geteuid() == 0:
        # a run's user ns may map its creator's uid only where that is not the parent's
        # root (else it needs CAP_SETFCAP, no run's to hold): so the server moves into a
        # user ns of its own first, as RUN_ID, while it still holds CAP_SETFCAP
        try:
            uid, gid = os.geteuid(), os.getegid()
            _check(_libc().unshare(CLONE_NEWUSER), "unshare")
            _map_ids(uid, gid)
        except OSError as e:
            return [], f"cannot leave uid 0: {e}"
    try:
        _drop_caps()
    except OSError as e:
        return [], f"cannot drop capabilities: {e}"
    try:
        plan = fs_plan(root, wipe, max_files)
    except (OSError, ValueError, IndexError) as e:
        return [], f"cannot read the sandbox's mounts: {e}"
    _fz_deny_namespaces(install=False)  # built once here, installed by every run's init
    return plan, _trial(plan)


def _trial(plan):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # as a request's handler would, with a program that exits at once
        os.close(r)
        init = start_run(w, plan, None, lambda *_: os._exit(0), ())
        os.closerange(0, 1 << 16)
        if init is not None:
            os.waitpid(init, 0)
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    got = os.read(r, 4096).decode(errors="replace").strip()
    os.close(r)
    if got == "0":
        return None
    return got[1:] if got.startswith("E") else f"the trial run ended with {got!r}"


def read_status(fd):
    """What a run's init reported: (wait status or None, failure or None, over its files)."""
    os.set_blocking(fd, False)
    try:
        got = os.read(fd, 4096).decode(errors="replace").strip()
    except OSError:
        got = ""
    os.close(fd)
    if got.startswith("E"):
        return None, got[1:], False
    parts = got.split()
    status = int(parts[0]) if parts and parts[0].lstrip("-").isdigit() else None
    return status, None, "Q" in parts[1:]
