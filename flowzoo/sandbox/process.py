"""The default sandbox: a local child process, isolated as far as this machine allows.

Mechanisms (``mechanism="auto"`` takes bubblewrap, and refuses to run without it unless
``allow_weak_isolation=True``):

- ``bwrap`` (bubblewrap): new user, PID, network, IPC, UTS, cgroup and mount namespaces; the
  only host files shown are the minimal runtime (``runtime.py``: interpreter, its libraries,
  the stdlib; no site-packages, no ``/usr/share``, no home or project), read-only; the work dir, ``/tmp`` and
  ``/dev/shm`` are tmpfs file systems of the sandbox's own with a size quota (nothing lands on
  the host's disk, nothing survives the sandbox); uid 65534, all capabilities dropped,
  ``--die-with-parent`` (without it a killed bwrap leaves the program running), and the whole
  PID namespace dies with it.
- ``unshare`` (util-linux), opt-in only: network, PID, IPC, UTS and mount namespaces; the
  program drops to uid 65534 when started as root. ``jail.py`` pivots into a root holding only
  the minimal runtime, the run's dir and private scratch dirs. No user namespace: weaker than
  bubblewrap (the uid is a real host uid), so still opt-in.
- ``none``, opt-in only: rlimits, a scrubbed environment, its own session, uid 65534 when
  root. No network or PID isolation: a program can open sockets and a ``setsid`` daemon can
  outlive the run.

Keyrings and POSIX message queues (kernel state a run could leave for the next) are denied by
a seccomp filter (``guard.py``) in every mode; a second one, installed right before the
program's code, leaves it no namespace to make and no mount to change (a run where it cannot
be installed is a ``sandbox_error``, never an unfiltered run).

In every mode: rlimits on CPU time, address space, file size, open files and process count
(set by a tiny boot script in the child, not ``preexec_fn``, which costs ~4x throughput), a
wall-clock timeout that kills the whole process group, capped output capture, a clean
interpreter (``-I -S``: no site-packages, which alone cost ~45 ms a run) and a temp work dir
removed afterwards. ``isolation`` lists exactly what is in force.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import weakref
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from flowzoo.sandbox import cgroups
from flowzoo.sandbox.base import (
    MAIN,
    ConcurrentRunMixin,
    ExecResult,
    SandboxUnavailable,
    checked_files,
    classify,
    collect,
    kill_group,
    popen_isolated,
)
from flowzoo.sandbox.forksafe import ForkLock, track
from flowzoo.sandbox.forkserver import GUARD_SOURCE
from flowzoo.sandbox.guard import namespace_filter
from flowzoo.sandbox.mechanisms import (
    ISOLATION,
    NOBODY,
    PRELOAD,
    WARM,
    _bwrap_prefix,
    _traversable_by_others,
    _unshare_prefix,
    runtime_for,
)
from flowzoo.sandbox.runtime import sandbox_python, version_dir

MECHANISMS = ("auto", "bwrap", "unshare", "none")
#: mechanisms that leave the host's files and other runs reachable: only on explicit opt-in
WEAK = ("unshare", "none")
#: the whole environment a program sees (nothing of the parent's leaks in)
_RUN_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": "/tmp"}

# Runs in the child before the untrusted program: limits first, then the uid drop, then the
# program itself as __main__ (exec'd, not a second interpreter start).
_BOOT = """\
import os, sys, resource as R
if {copy_in!r}:  # bubblewrap: the files arrive read-only at /in; the run works on tmpfs
    for _r, _ds, _fs in os.walk("/in"):
        os.makedirs("." + _r[3:], exist_ok=True)
        for _n in _fs:
            with open(_r + "/" + _n, "rb") as _s, open("." + _r[3:] + "/" + _n, "wb") as _d:
                _d.write(_s.read())
for k, v in {limits!r}:
    try:
        R.setrlimit(k, (v, v))
    except (ValueError, OSError):
        pass
if os.getuid() == 0:
    for _m in {preload!r}:
        try:
            __import__(_m)
        except ImportError:
            pass
    os.setgroups([]); os.setgid({uid}); os.setuid({uid})
if not _fz_deny_namespaces():  # guard.py: the program makes no namespace and no mount
    os.write(2, (_FZ_UNFILTERED_MARK + "\\n").encode()); os._exit(_FZ_UNFILTERED_EXIT)
sys.argv = [{main!r}]
sys.path.insert(0, os.getcwd())
_src = open({main!r}, "rb").read()
_g = {{"__name__": "__main__", "__file__": os.path.abspath({main!r}), "__builtins__": __builtins__}}
del os, sys, R, k, v
exec(compile(_src, {main!r}, "exec"), _g)
"""


@dataclass(frozen=True)
class ProcessLimits:
    """Per-run limits; each can be overridden per call where the protocol allows."""

    timeout_s: float = 10.0
    memory_mb: int = 512
    max_output_bytes: int = 1 << 20
    max_procs: int = 64
    max_file_mb: int = 16
    max_open_files: int = 64
    #: size of each writable tmpfs (work dir, /tmp, /dev/shm) under bubblewrap, and the most a
    #: run's files and stdin may take under every mechanism (refused past it, before the run)
    disk_mb: int = 64
    #: files a run may create (fork-server mode, bubblewrap: the run is killed past it)
    max_files: int = 10_000


def _rlimits(lim: ProcessLimits) -> list[tuple[int, int]]:
    """The rlimits of one run: CPU (timeout + 1 s), address space, file size, files, procs."""
    import resource as R

    return [
        (R.RLIMIT_CPU, int(lim.timeout_s) + 1),
        (R.RLIMIT_AS, max(64, lim.memory_mb) << 20),
        (R.RLIMIT_FSIZE, lim.max_file_mb << 20),
        (R.RLIMIT_NOFILE, lim.max_open_files),
        (R.RLIMIT_NPROC, lim.max_procs),
        (R.RLIMIT_CORE, 0),
    ]


@functools.lru_cache(maxsize=8)
def probe(mechanism: str) -> bool:
    """Whether ``mechanism`` actually works here (a real run of the interpreter inside it)."""
    tool = {"bwrap": "bwrap", "unshare": "unshare"}.get(mechanism)
    if tool is not None and shutil.which(tool) is None:
        return False
    with warnings.catch_warnings():  # the weak mode's warning is for the user's sandbox
        warnings.simplefilter("ignore")
        sbx = ProcessSandbox(
            mechanism=mechanism, forkserver=False, allow_weak_isolation=True, _probe=False
        )
    try:  # a module no mode preloads: the program reads the stdlib as the run's own user
        res = sbx.run("import textwrap\nprint(6 * 7)", timeout_s=20)
    finally:
        sbx.close()
    return res.status == "ok" and res.stdout.strip() == "42"


def detect_mechanism() -> str:
    """The best mechanism that works on this machine."""
    for m in ("bwrap", "unshare"):
        if probe(m):
            return m
    return "none"


class ProcessSandbox(ConcurrentRunMixin):
    """Runs Python programs in isolated local child processes (see the module doc)."""

    name = "process"

    def __init__(
        self,
        mechanism: str = "auto",
        workers: int | None = None,
        use_cgroups: bool = True,
        forkserver: bool = True,
        allow_weak_isolation: bool = False,
        _probe: bool = True,
        **limits,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(
                f"unknown sandbox mechanism {mechanism!r}; valid: {', '.join(MECHANISMS)}"
            )
        valid = set(ProcessLimits.__dataclass_fields__)
        bad = set(limits) - valid
        if bad:
            raise ValueError(
                f"unknown sandbox limits {sorted(bad)}; valid: {', '.join(sorted(valid))}"
            )
        self.limits = ProcessLimits(**limits)
        if mechanism == "auto":
            mechanism = "bwrap" if probe("bwrap") else detect_mechanism()
        if mechanism in WEAK and not allow_weak_isolation:
            raise SandboxUnavailable(
                f"sandbox mechanism {mechanism!r} does not isolate runs from the host's files or "
                "from each other (they can read the project and /tmp, and one run can rewrite a "
                "concurrent run's program); flowzoo refuses to run untrusted code with it. Install "
                "bubblewrap (apt-get install bubblewrap), use the docker backend, or accept the risk "
                "with allow_weak_isolation=True (sandbox_options={'allow_weak_isolation': True})."
            )
        if mechanism == "none":
            warnings.warn(
                "flowzoo sandbox: untrusted code runs with rlimits only (no network, PID or file "
                "isolation), as allowed by allow_weak_isolation=True.",
                stacklevel=2,
            )
        self._runtime = runtime_for(mechanism)
        if _probe and not probe(mechanism):
            why = ""
            if mechanism == "none" and os.geteuid() == 0:
                why = (
                    f": started as root, a trial program run as uid 65534 from {self._runtime} "
                    "failed; use mechanism='bwrap' (or 'unshare'), which work as root, or run "
                    "flowzoo as a non-root user"
                )
            raise SandboxUnavailable(
                f"sandbox mechanism {mechanism!r} does not work on this machine{why}"
            )
        self.mechanism = mechanism
        self.default_workers = workers or max(2, os.cpu_count() or 2)
        # every mechanism runs the minimal runtime's interpreter (runtime.py): no site-packages
        # on any path; bubblewrap (and unshare's jail) show nothing else of the host
        host_exe = os.path.join(self._runtime, "usr", "bin", version_dir())
        self._exe = sandbox_python() if mechanism == "bwrap" else host_exe
        self._stdlib_public = mechanism == "unshare" or _traversable_by_others(self._runtime)
        self._cgroups = cgroups.available() if use_cgroups else ()
        self.forkserver = bool(forkserver)
        self._idle: list = []
        self._pool_lock = ForkLock()
        self._closed = False
        # servers still idle when the sandbox is dropped are killed with it
        self._finalizer = weakref.finalize(self, _close_servers, self._idle)
        #: the process whose servers ``_idle`` holds (a forked child starts its own)
        self._pid = os.getpid()
        self._mp_finalizer = False
        track(self)

    def _forked(self) -> None:
        """In a forked child (``forksafe.py``): the idle servers are the parent's, talked to
        over pipes the parent reads too. The child closes its copies, never kills them, and
        starts servers of its own on first use; the parent's keep serving the parent."""
        if self._pid == os.getpid():
            return
        inherited = list(self._idle)
        self._idle.clear()  # the child's copy of the list: an inherited finalizer finds none
        self._finalizer.detach()
        self._idle = []
        self._pool_lock = ForkLock()
        for srv in inherited:
            srv.forget()
        self._finalizer = weakref.finalize(self, _close_servers, self._idle)
        self._pid = os.getpid()
        self._mp_finalizer = False

    def _exit_cleanup(self) -> None:
        """A ``multiprocessing`` child ends with ``os._exit`` after its own finalizers (no
        atexit, so no ``weakref.finalize``): its servers go with those (registered in the
        child, after multiprocessing cleared the ones it inherited)."""
        mp_util = sys.modules.get("multiprocessing.util")
        if self._mp_finalizer or mp_util is None:
            return
        self._mp_finalizer = True
        mp_util.Finalize(self, _close_servers, args=(self._idle,), exitpriority=10)

    @property
    def isolation(self) -> tuple[str, ...]:
        extra = tuple(f"cgroup-{c}" for c in self._cgroups)
        if self.forkserver:
            extra += ("forkserver",)
        # RLIMIT_NPROC binds only when the program's real uid outside its namespaces is not
        # root: bwrap started by root maps the sandbox uid to root, and root is exempt
        if not (self.mechanism == "bwrap" and os.geteuid() == 0):
            extra += ("nproc-rlimit",)
        return ISOLATION[self.mechanism] + extra

    def __repr__(self) -> str:
        return f"ProcessSandbox(mechanism={self.mechanism!r}, limits={self.limits})"

    @property
    def _preload(self) -> tuple[str, ...]:
        return () if self.mechanism == "bwrap" or self._stdlib_public else PRELOAD

    def _interpreter_command(
        self, inputs: str | None, lim: ProcessLimits, filter_fd: int | None = None
    ) -> list[str]:
        """The clean interpreter inside this mechanism's isolation (arguments follow);
        ``filter_fd``: a seccomp filter bubblewrap installs (``--seccomp``)."""
        py = [self._exe, "-I", "-S"]
        if self.mechanism == "bwrap":
            seccomp = ["--seccomp", str(filter_fd)] if filter_fd is not None else []
            return _bwrap_prefix(self._runtime, lim.disk_mb, inputs) + seccomp + py
        if self.mechanism == "unshare":
            return _unshare_prefix() + py
        return py

    def _env(self, box: str | None, lim: ProcessLimits) -> dict[str, str]:
        """The run's whole environment; under unshare, what its jail (``jail.py``) mounts."""
        env = dict(_RUN_ENV)
        if self.mechanism == "unshare":
            env["FZ_JAIL"] = f"{self._runtime}\n{box}\n{lim.disk_mb}"
        return env

    def _filter_fd(self) -> int | None:
        """Under bubblewrap without the fork-server, a memfd holding the program's seccomp
        filter (``guard.py``) for ``--seccomp``. Why: bubblewrap's own pid 1 shares the run's
        pid namespace, uid and dumpability, so a program could ptrace it (or write its
        ``/proc/1/mem``) and make it call ``unshare`` and ``mount``; with ``--seccomp`` it
        holds the filter too. None elsewhere (a fork-server run's init holds it; under
        ``unshare`` the program is its pid namespace's init)."""
        raw = namespace_filter() if self.mechanism == "bwrap" else None
        if raw is None:
            return None  # an unknown machine: the start code cannot install it either
        fd = os.memfd_create("flowzoo-no-namespaces")
        try:
            os.write(fd, raw)
            os.lseek(fd, 0, os.SEEK_SET)
        except OSError:
            os.close(fd)
            raise
        return fd

    def _command(self, workdir: str, lim: ProcessLimits, filter_fd: int | None = None) -> list[str]:
        boot = _BOOT.format(
            limits=_rlimits(lim),
            uid=NOBODY,
            main=MAIN,
            preload=self._preload,
            copy_in=self.mechanism == "bwrap",
        )
        argv = self._interpreter_command(workdir, lim, filter_fd)
        return argv + ["-c", GUARD_SOURCE + boot]

    def run(
        self,
        source: str,
        *,
        files: dict[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float | None = None,
        memory_mb: int | None = None,
    ) -> ExecResult:
        """Run ``source`` as ``main.py`` (with extra ``files`` beside it); never raises for
        anything the program does."""
        lim = self.limits
        if timeout_s is not None:
            lim = replace(lim, timeout_s=float(timeout_s))
        if memory_mb is not None:
            lim = replace(lim, memory_mb=int(memory_mb))
        backend = f"process:{self.mechanism}" + ("+forkserver" if self.forkserver else "")
        if self.forkserver:
            return self._run_forked(source, files or {}, stdin, lim, backend)
        try:
            workdir = self._prepare(source, files or {}, stdin)
        except (ValueError, OSError) as e:
            return ExecResult(
                "sandbox_error", None, "", f"cannot prepare the work dir: {e}", 0.0, backend=backend
            )
        try:
            return self._execute(workdir, lim, stdin is not None, backend)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _prepare(self, source: str, files: dict[str, str], stdin: str | None) -> str:
        all_files = checked_files(source, files, stdin, self.limits.disk_mb)
        if stdin is not None:
            all_files[".stdin"] = stdin
        workdir = tempfile.mkdtemp(prefix="flowzoo-sbx-")
        for name, text in all_files.items():
            dest = os.path.join(workdir, *PurePosixPath(name).parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(text)
        if os.geteuid() == 0 and self.mechanism != "bwrap":
            # the program runs as uid 65534 and must be able to write its own work dir
            for root, dirs, fs in os.walk(workdir):
                for n in [
                    root,
                    *[os.path.join(root, d) for d in dirs],
                    *[os.path.join(root, f) for f in fs],
                ]:
                    os.chown(n, NOBODY, NOBODY)
        return workdir

    def _execute(
        self, workdir: str, lim: ProcessLimits, has_stdin: bool, backend: str
    ) -> ExecResult:
        try:
            fd = self._filter_fd()
        except OSError as e:
            msg = f"cannot hand bubblewrap the run's seccomp filter: {e}"
            return ExecResult("sandbox_error", None, "", msg, 0.0, backend=backend)
        try:
            return self._execute_filtered(workdir, lim, has_stdin, backend, fd)
        finally:
            if fd is not None:
                os.close(fd)

    def _execute_filtered(
        self, workdir: str, lim: ProcessLimits, has_stdin: bool, backend: str, fd: int | None
    ) -> ExecResult:
        env = self._env(workdir, lim)
        cmd = self._command(workdir, lim, fd)
        group = None
        if self._cgroups:
            try:
                group = cgroups.RunGroup(lim.max_procs, lim.memory_mb + 64)
                env["FZ_CG"] = " ".join(group.procs_files)
                cmd = cgroups.LAUNCHER + cmd
            except OSError as e:
                return ExecResult(
                    "sandbox_error",
                    None,
                    "",
                    f"cannot create the run's cgroup: {e}",
                    0.0,
                    backend=backend,
                )
        try:
            fds = (fd,) if fd is not None else ()
            return self._spawn(cmd, env, workdir, lim, has_stdin, backend, group, fds)
        finally:
            if group is not None:
                group.destroy()

    def _spawn(self, cmd, env, workdir, lim, has_stdin, backend, group, fds=()) -> ExecResult:
        stdin_f = open(os.path.join(workdir, ".stdin"), "rb") if has_stdin else subprocess.DEVNULL
        t0 = time.monotonic()
        try:
            proc = popen_isolated(cmd, stdin_f, env, workdir, fds)
        except OSError as e:
            return ExecResult(
                "sandbox_error", None, "", f"cannot start the sandbox: {e}", 0.0, backend=backend
            )
        finally:
            if has_stdin:
                stdin_f.close()
        out, err, truncated, timed_out = collect(proc, t0 + lim.timeout_s, lim.max_output_bytes)
        wall = time.monotonic() - t0
        kill_group(proc)
        rc = proc.returncode
        sig = None
        if rc is not None and rc < 0:
            sig = -rc
        elif self.mechanism in ("bwrap", "unshare") and rc is not None and rc > 128:
            sig = rc - 128  # both tools report a child killed by signal N as 128+N
        stdout = out.decode("utf-8", errors="replace")
        stderr = err.decode("utf-8", errors="replace")
        if (self.mechanism == "bwrap" and rc == 1 and stderr.startswith("bwrap:")) or (
            group is not None and rc == 97 and not stdout
        ):
            return ExecResult("sandbox_error", rc, stdout, stderr, wall, None, truncated, backend)
        status = classify(rc, sig, stderr, timed_out)
        if group is not None and status in ("killed", "error") and group.hit_memory_limit():
            status = "memory"
        return ExecResult(status, rc, stdout, stderr, wall, sig, truncated, backend)

    # ------------------------------------------------------------------ fork-server mode
    def _server_args(self, root: str | None, lim: ProcessLimits) -> list[str]:
        warm = ["--preload", ",".join(dict.fromkeys(WARM + self._preload))]
        if self.mechanism == "bwrap":  # /box, /tmp and /dev/shm: the sandbox's own tmpfs
            return ["/box", "--wipe", "/tmp", "--wipe", "/dev/shm", "--ipc"] + [
                "--max-files",
                str(lim.max_files),
                *warm,
            ]
        args = [root]
        if self.mechanism == "unshare":  # the jail: the host root dir is /box, scratch is private
            args = ["/box", "--wipe", "/tmp", "--wipe", "/dev/shm", "--ipc"]
            args += ["--max-files", str(lim.max_files)]
        if os.geteuid() == 0:
            args += ["--uid", str(NOBODY)]
        return args + warm

    def _start_server(self, lim: ProcessLimits):
        from flowzoo.sandbox.forkserver import ForkServer

        # under bubblewrap the runs live on the sandbox's own tmpfs: no host dir at all
        root = None if self.mechanism == "bwrap" else tempfile.mkdtemp(prefix="flowzoo-fsrv-")
        group = None
        try:
            if root is not None and os.geteuid() == 0:
                os.chown(root, NOBODY, NOBODY)
            env = self._env(root, lim)
            argv = self._interpreter_command(None, lim)
            if self._cgroups:
                # one cgroup for the server and the run it is doing
                group = cgroups.RunGroup(lim.max_procs + 1, lim.memory_mb + 96)
                env["FZ_CG"] = " ".join(group.procs_files)
                argv = cgroups.LAUNCHER + argv
            return ForkServer(
                argv, self._server_args(root, lim), env, lim.memory_mb, group=group, owned_dir=root
            )
        except OSError:
            if group is not None:
                group.destroy()
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)
            raise

    def _take_server(self, lim: ProcessLimits):
        if self._pid != os.getpid():  # a fork the at-fork hook did not see (a raw fork)
            self._forked()
        self._exit_cleanup()
        while True:
            with self._pool_lock:
                i = next((i for i, s in enumerate(self._idle) if s.memory_mb >= lim.memory_mb), -1)
                if i < 0:
                    break
                srv = self._idle.pop(i)
            if self._settled(srv):
                return srv
        return self._start_server(lim)

    @staticmethod
    def _settled(srv) -> bool:
        """Whether an idle server cleaned up after its last run (its line read now: the
        run's reply came back before it, ``request(settle=False)``); one that did not, or
        died meanwhile, is closed."""
        from flowzoo.sandbox.forkserver import ServerDied

        try:
            if srv.settle():
                return True
        except (ServerDied, OSError, ValueError):
            pass
        except BaseException:  # an interrupt while waiting: the server goes, always
            srv.close()
            raise
        srv.close()
        return False

    def _give_back(self, srv) -> None:
        with self._pool_lock:
            if srv.alive and not self._closed and len(self._idle) < self.default_workers:
                self._idle.append(srv)
                return
        srv.close()

    def _run_forked(self, source, files, stdin, lim: ProcessLimits, backend: str) -> ExecResult:
        from flowzoo.sandbox.forkserver import ServerDied

        try:
            all_files = checked_files(source, files, stdin, lim.disk_mb)
        except ValueError as e:
            return ExecResult(
                "sandbox_error", None, "", f"cannot prepare the work dir: {e}", 0.0, backend=backend
            )
        try:
            srv = self._take_server(lim)
        except OSError as e:
            return ExecResult("sandbox_error", None, "", str(e), 0.0, backend=backend)
        t0 = time.monotonic()
        try:
            # the reply comes before the server's clean-up, which overlaps the caller's work;
            # the next run that takes this server reads how it went (_take_server)
            r = srv.request(
                all_files, stdin, _rlimits(lim), lim.timeout_s, lim.max_output_bytes, settle=False
            )
        except ServerDied as e:
            srv.close()
            wall = time.monotonic() - t0
            timed_out = wall >= lim.timeout_s
            return ExecResult(
                "timeout" if timed_out else "killed",
                None,
                "",
                f"the sandbox server was lost during the run ({e})",
                wall,
                backend=backend,
            )
        except BaseException as e:  # a garbled reply, an interrupt: the server goes, always
            srv.close()
            if not isinstance(e, Exception):
                raise
            return ExecResult(
                "sandbox_error", None, "", f"sandbox server failure: {e!r}", 0.0, backend=backend
            )
        if r.clean:
            self._give_back(srv)
        else:  # it could not empty what the run wrote: never reuse it
            srv.close()
        return r.result(backend)

    def close(self) -> None:
        """Stop the fork-servers (nothing else persists between runs)."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle[:] = list(self._idle), []
        _close_servers(idle)


def _close_servers(servers: list) -> None:
    for srv in list(servers):
        srv.close()
    servers.clear()
