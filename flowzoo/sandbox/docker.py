"""Docker backend: a pool of warm, hardened containers; a run costs a fork, not a start.

Containers run with no network, memory/CPU/pids limits, a read-only root with tmpfs work
dirs (size-capped), all capabilities dropped, ``no-new-privileges`` and uid 65534.

Fork-server mode (the default): every run gets user, pid, mount, IPC and network namespaces
of its own, its own ``/proc`` and fresh tmpfs mounts, as under bubblewrap
(``forkserver_ns.py``). Docker's default seccomp profile denies ``unshare`` and ``mount`` to a
container without ``CAP_SYS_ADMIN``, so these containers get ``docker_seccomp.json``: that
profile as Docker applies it to a ``--cap-drop ALL`` container plus those two syscalls, which
the kernel grants only inside a user namespace the caller made (no capability is added).
A new ``/proc`` can only be mounted while an uncovered one is visible, so the container's
``/proc`` is left without Docker's masks (``ReadonlyPaths``/``MaskedPaths`` there; those on
``/sys`` stay) and every run's init puts them on its own ``/proc`` (``PROC_MASKS``): a run sees
no less masked a ``/proc`` than a plain container's. Where the server still cannot isolate a
run (an AppArmor profile that denies ``mount``, no unprivileged user namespaces), the
sandbox falls back to a fresh container per run (``fresh_containers``): never shared state.

Without the fork-server (``forkserver=False``) a run is an exec into a warm container with
Docker's default profile that no run used before, replaced after it off the caller's time:
a container wiped and reused would still carry per-container state (its pid counter, its
tmpfs inode counters) from one run to the next. The program and its files travel inside
the exec command (no archive copy into tmpfs), a boot script applies rlimits, and a run
that overruns its time has its container killed (killing a ``docker`` client would leave
the program running). Every container is labelled and removed on ``close()``, at exit, and
by :func:`cleanup` after a crash.

Images: pass ``image=`` (any image with ``python3``; ``docker/Dockerfile`` builds one for a
registry), or leave it unset to use ``flowzoo-sandbox:host``, an image built offline from an
empty root into which the host's ``/usr``, ``/lib*``, ``/bin`` and the interpreter's prefix are
bind-mounted read-only (no registry needed).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import io
import json
import os
import queue
import shutil
import tarfile
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path

from flowzoo.sandbox.base import (
    ConcurrentRunMixin,
    ExecResult,
    SandboxUnavailable,
    checked_files,
    classify,
)
from flowzoo.sandbox.forksafe import ForkLock, track
from flowzoo.sandbox.forkserver import GUARD_SOURCE
from flowzoo.sandbox.runtime import runtime_dir, sandbox_python

LABEL = "flowzoo.sandbox"
HOST_IMAGE = "flowzoo-sandbox:host-rt1"  # rt1: the runtime layout (runtime.py)
NOBODY = "65534:65534"
#: Docker's default seccomp profile for a ``--cap-drop ALL`` container, plus ``unshare`` and
#: ``mount`` (the runs' namespaces and file systems); only fork-server containers get it
SECCOMP_PROFILE = Path(__file__).with_name("docker_seccomp.json")
#: Docker's ``MaskedPaths`` and ``ReadonlyPaths`` under /proc, which every run's init hides in
#: its own /proc (``bus``, ``irq``, ``sys``, ``sysrq-trigger`` it covers read-only anyway)
PROC_MASKS = (
    "asound",
    "acpi",
    "kcore",
    "keys",
    "latency_stats",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "scsi",
    "fs",
)
#: Docker's masks outside /proc, kept on fork-server containers (a run mounts no /sys; its
#: init covers ``/sys/fs/cgroup``, a writable tmpfs there, with a fresh one). A container without
#: the fork-server masks ``/sys/fs/cgroup`` besides: the runs it serves in turn share its cgroups,
#: whose counters (``pids.events``, the memory peak) one run moves and the next could read
SYS_MASKS = ["/sys/firmware", "/sys/devices/virtual/powercap"]

_BOOT = """\
import base64, json, os, sys, resource as R
_spec = json.loads(base64.b64decode({payload!r}))
_d = "/box/" + _spec["id"]
os.makedirs(_d)
for _n, _t in _spec["files"].items():
    _p = os.path.join(_d, _n)
    os.makedirs(os.path.dirname(_p), exist_ok=True)
    with open(_p, "w", encoding="utf-8", errors="surrogatepass") as _f:
        _f.write(_t)
os.chdir(_d)
if _spec["stdin"] is not None:
    _fd = os.open(".stdin", os.O_RDONLY); os.dup2(_fd, 0); os.close(_fd)
for _k, _v in _spec["limits"]:
    try:
        R.setrlimit(_k, (_v, _v))
    except (ValueError, OSError):
        pass
if not _fz_deny_namespaces():  # guard.py: the program makes no namespace and no mount
    os.write(2, (_FZ_UNFILTERED_MARK + "\\n").encode()); os._exit(_FZ_UNFILTERED_EXIT)
sys.argv = ["main.py"]
sys.path.insert(0, _d)
_src = open("main.py", "rb").read()
_g = {{"__name__": "__main__", "__file__": os.path.join(_d, "main.py"), "__builtins__": __builtins__}}
exec(compile(_src, "main.py", "exec"), _g)
"""


def _client():
    try:
        import docker
    except ImportError as e:
        raise SandboxUnavailable(
            "the Docker backend needs the docker SDK: pip install 'flowzoo[docker]'"
        ) from e
    try:
        c = docker.from_env(timeout=30)
        c.ping()
        return c
    except Exception as e:
        raise SandboxUnavailable(f"no Docker engine answers: {e}") from e


def docker_unavailable_reason() -> str | None:
    """None when a Docker engine answers, else why not (for skips and errors)."""
    try:
        _client().close()
        return None
    except SandboxUnavailable as e:
        return str(e)


def ensure_host_image(client) -> str:
    """Build ``flowzoo-sandbox:host`` offline (an empty root with mount points) if absent."""
    try:
        client.images.get(HOST_IMAGE)
        return HOST_IMAGE
    except Exception:
        pass
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        # the system is the runtime's ``usr`` (see runtime.py): the rest links into it
        for d in ("box", "tmp", "usr", "lib", "lib64", "bin", "sbin", "etc", "proc", "dev", "sys"):
            info = tarfile.TarInfo(d)
            if d in ("lib", "lib64", "bin", "sbin"):
                info.type, info.linkname = tarfile.SYMTYPE, "usr/" + d
            else:
                info.type = tarfile.DIRTYPE
                info.mode = 0o1777 if d in ("tmp", "box") else 0o755
            tar.addfile(info)
        passwd = b"root:x:0:0::/:/bin/false\nnobody:x:65534:65534::/box:/bin/false\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
    repo, tag = HOST_IMAGE.split(":")
    client.api.import_image_from_data(buf.getvalue(), repository=repo, tag=tag)
    return HOST_IMAGE


def _host_mounts() -> tuple[dict, str]:
    """The minimal runtime (interpreter, its libraries, the stdlib; no site-packages, no host
    data) as the container's read-only ``/usr``: nothing else of the host is mounted."""
    rt = runtime_dir()
    return {os.path.join(rt, "usr"): {"bind": "/usr", "mode": "ro"}}, sandbox_python()


#: the longest argument the kernel passes to an exec (``MAX_ARG_STRLEN``: 32 pages)
MAX_ARG_BYTES = 32 * 4096


@dataclass(frozen=True)
class DockerLimits:
    timeout_s: float = 10.0
    memory_mb: int = 512
    cpus: float = 1.0
    pids_limit: int = 64
    max_output_bytes: int = 1 << 20
    max_file_mb: int = 16
    tmpfs_mb: int = 64
    #: files a fork-server run may create in /box, /tmp and /dev/shm (killed past it)
    max_files: int = 10_000


_LIVE: weakref.WeakSet = weakref.WeakSet()


class DockerSandbox(ConcurrentRunMixin):
    """Runs Python programs in a pool of warm hardened containers: forked by each one's
    fork-server into namespaces of their own, else a fresh container per run."""

    name = "docker"

    def __init__(
        self,
        image: str | None = None,
        pool_size: int = 2,
        python: str = "python3",
        forkserver: bool = True,
        **limits,
    ) -> None:
        valid = set(DockerLimits.__dataclass_fields__)
        bad = set(limits) - valid
        if bad:
            raise ValueError(
                f"unknown docker sandbox limits {sorted(bad)}; valid: {', '.join(sorted(valid))}"
            )
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        self.limits = DockerLimits(**limits)
        self.client = _client()
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        if image is None:
            self.image = ensure_host_image(self.client)
            self._volumes, self.python = _host_mounts()
        else:
            self.image, self._volumes, self.python = image, {}, python
        self.pool_size = pool_size
        self.default_workers = pool_size
        # fork-server mode needs the docker CLI for a long-lived `docker exec -i` stream
        self.forkserver = bool(forkserver) and shutil.which("docker") is not None
        #: every run in a container no run used before (without a fork-server, or where it
        #: cannot isolate): a reused container would carry state from run to run
        self.fresh_containers = not self.forkserver
        #: why the fork-server could not give runs namespaces of their own (None: it can)
        self.shared_why: str | None = (
            "the fork-server needs the docker CLI" if forkserver and not self.forkserver else None
        )
        self._servers: dict[str, object] = {}
        self._pool: queue.Queue = queue.Queue()
        self._all: set[str] = set()
        self._lock = ForkLock()
        self._closed = False
        #: the pool, servers and client are a forked parent's (renewed on the first run)
        self._stale = False
        self._renew_lock = ForkLock()
        _LIVE.add(self)
        track(self)
        for _ in range(pool_size):
            self._pool.put(self._start())
        if self.forkserver:
            self._check_isolation()

    def _forked(self) -> None:
        """In a forked child (``forksafe.py``): the containers, their fork-servers and the
        engine connection are the parent's (runs in them would mix with the parent's, and
        removing them at the child's exit broke the parent). The child forgets them, never
        removes them, and its first run starts a pool of its own."""
        for srv in self._servers.values():
            srv.forget()
        self._servers = {}
        self._pool = queue.Queue()
        self._all = set()
        self._lock = ForkLock()
        self._stale = True

    def _renew(self) -> None:
        """A forked child's own engine connection and pool (see :meth:`_forked`)."""
        with self._renew_lock:
            if not self._stale:
                return
            self.client = _client()
            self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            for _ in range(self.pool_size):
                self._pool.put(self._start())
            self._stale = False

    def _check_isolation(self) -> None:
        """Start one server now: where it cannot give runs namespaces of their own, switch to
        a fresh container per run (the containers it made are replaced by plain ones)."""
        from flowzoo.sandbox.forkserver import ServerDied

        c = self._pool.get()
        try:
            srv = self._server(c)
            why = None if srv.fresh_ns else (srv.why or "no reason given")
        except (OSError, ServerDied) as e:
            why = str(e)
        self._pool.put(c)
        if why is None:
            return
        self.shared_why, self.forkserver, self.fresh_containers = why, False, True
        for _ in range(self.pool_size):
            self._discard(self._pool.get())
        for _ in range(self.pool_size):
            self._pool.put(self._start())

    @property
    def isolation(self) -> tuple[str, ...]:
        return (
            "docker",
            "net-none",
            "read-only-root",
            "cap-drop-all",
            "no-new-privileges",
            "uid-65534",
            "memory",
            "pids",
            "cpus",
            "rlimits",
        ) + (
            ("forkserver", "run-namespaces", "fresh-fs-per-run")
            if self.forkserver
            else ("container-per-run",)
            if self.fresh_containers
            else ()
        )

    def _start(self):
        """A new container; a fork-server's gets the namespace seccomp profile and a /proc
        without Docker's covers (its runs put them on their own /proc)."""
        lim = self.limits
        api = self.client.api
        security = ["no-new-privileges"]
        if self.forkserver:
            security.append("seccomp=" + SECCOMP_PROFILE.read_text())
        hc = api.create_host_config(
            network_mode="none",
            mem_limit=f"{lim.memory_mb + 64}m",
            memswap_limit=f"{lim.memory_mb + 64}m",
            nano_cpus=int(lim.cpus * 1e9),
            pids_limit=lim.pids_limit,
            read_only=True,
            tmpfs={"/box": f"size={lim.tmpfs_mb}m,mode=1777", "/tmp": "size=16m,mode=1777"},
            cap_drop=["ALL"],
            security_opt=security,
            binds=self._volumes,
        )
        if self.forkserver:  # the SDK has no argument for these (the CLI's systempaths=)
            hc["MaskedPaths"], hc["ReadonlyPaths"] = list(SYS_MASKS), []
        else:  # Docker's masks, and the cgroup counters runs in this container would share
            hc["MaskedPaths"] = [*(f"/proc/{n}" for n in PROC_MASKS if n != "fs"), *SYS_MASKS]
            hc["MaskedPaths"].append("/sys/fs/cgroup")
        cid = api.create_container(
            self.image,
            [self.python, "-I", "-S", "-c", "import time\nwhile True: time.sleep(3600)"],
            user=NOBODY,
            environment={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/box"},
            working_dir="/box",
            labels={LABEL: "1", f"{LABEL}.owner": self.owner},
            host_config=hc,
        )["Id"]
        with self._lock:
            self._all.add(cid)
        try:
            api.start(cid)
            c = self.client.containers.get(cid)
        except Exception:
            self._discard_id(cid)
            raise
        if self._closed:  # close() ran meanwhile (a background refill): nothing may outlive it
            self._discard_id(cid)
        return c

    def _server(self, c):
        """The container's fork-server (started on first use): one `docker exec -i` whose
        stdin/stdout carry every run, so a run costs a fork inside the container."""
        from flowzoo.sandbox.forkserver import ForkServer

        srv = self._servers.get(c.id)
        if srv is None or not srv.alive:
            argv = [
                "docker",
                "exec",
                "-i",
                "-u",
                NOBODY,
                "-w",
                "/box",
                "-e",
                "FZ_PROC_MASKS=" + ":".join(PROC_MASKS),
                c.id,
                self.python,
                "-I",
                "-S",
            ]
            # /dev/mqueue: a file opened there is a POSIX message queue (no mq_open call for
            # the seccomp filter to deny) that would outlive the run
            args = [
                "/box",
                "--wipe",
                "/tmp",
                "--wipe",
                "/dev/shm",
                "--wipe",
                "/dev/mqueue",
                "--ipc",
            ]
            args += ["--max-files", str(self.limits.max_files)]
            srv = ForkServer(argv, args, dict(os.environ), self.limits.memory_mb)
            self._servers[c.id] = srv
        return srv

    def _discard(self, c) -> None:
        srv = self._servers.pop(c.id, None)
        if srv is not None:
            srv.close()
        self._discard_id(c.id)

    def _discard_id(self, cid: str) -> None:
        with contextlib.suppress(Exception):
            self.client.api.remove_container(cid, force=True)
        with self._lock:
            self._all.discard(cid)

    def _replace(self, c) -> None:
        """Remove ``c`` and put a new container in the pool; a failed start puts a ``None``
        in its place (the run that takes it starts one, or reports why it cannot), so the
        pool never shrinks and a run never waits on a container that will not come."""
        self._discard(c)
        if not self._closed:
            try:
                new = self._start()
            except Exception:
                new = None
            self._pool.put(new)

    def run(
        self, source: str, *, files=None, stdin=None, timeout_s=None, memory_mb=None
    ) -> ExecResult:
        """Run ``source`` as ``main.py`` in a warm container; never raises for what it does."""
        import resource as R

        if self._closed:
            return ExecResult("sandbox_error", None, "", "sandbox is closed", backend="docker")
        if self._stale:
            try:
                self._renew()
            except Exception as e:
                msg = f"cannot start this process's sandbox containers: {type(e).__name__}: {e}"
                return ExecResult("sandbox_error", None, "", msg, backend="docker")
        lim = self.limits
        timeout = float(timeout_s if timeout_s is not None else lim.timeout_s)
        mem = int(memory_mb if memory_mb is not None else lim.memory_mb)
        try:
            all_files = checked_files(source, files or {}, stdin, lim.tmpfs_mb)
        except ValueError as e:
            return ExecResult(
                "sandbox_error", None, "", f"cannot prepare the work dir: {e}", backend="docker"
            )
        if stdin is not None:
            all_files[".stdin"] = stdin
        spec = {
            "id": uuid.uuid4().hex,
            "files": all_files,
            "stdin": stdin,
            "limits": [
                (R.RLIMIT_CPU, int(timeout) + 1),
                (R.RLIMIT_AS, max(64, mem) << 20),
                (R.RLIMIT_FSIZE, lim.max_file_mb << 20),
                (R.RLIMIT_CORE, 0),
            ],
        }
        c = self._pool.get()
        if c is None:  # a start failed earlier: try again now, in the caller's time
            try:
                c = self._start()
            except Exception as e:
                self._pool.put(None)
                msg = f"cannot start a sandbox container: {type(e).__name__}: {e}"
                return ExecResult("sandbox_error", None, "", msg, backend="docker")
        healthy = True
        try:
            if self.forkserver:
                res, healthy = self._run_forked(c, spec, timeout, lim.max_output_bytes)
                return res
            payload = base64.b64encode(json.dumps(spec).encode()).decode()
            cmd = [self.python, "-I", "-S", "-c", GUARD_SOURCE + _BOOT.format(payload=payload)]
            need = len(cmd[-1].encode())
            if need >= MAX_ARG_BYTES:  # the kernel would refuse the exec
                msg = (
                    f"cannot prepare the work dir: without the fork-server a request travels in "
                    f"one exec argument, at most {MAX_ARG_BYTES:,} bytes; this one needs "
                    f"{need:,} (forkserver=True, the default, takes up to tmpfs_mb)"
                )
                return ExecResult("sandbox_error", None, "", msg, backend="docker")
            res, healthy = self._exec(c, cmd, timeout, lim.max_output_bytes)
            return res
        finally:
            if self.fresh_containers and not self._closed:
                # the next run gets a container no run used: replaced off the caller's time
                threading.Thread(target=self._replace, args=(c,), daemon=True).start()
            elif healthy and not self._closed:
                self._pool.put(c)
            else:
                self._replace(c)

    def _run_forked(self, c, spec: dict, timeout: float, cap: int) -> tuple[ExecResult, bool]:
        """One run through the container's fork-server; (result, container still healthy).
        The server kills whatever the run left and wipes /tmp, so no ``top`` check is needed."""
        from flowzoo.sandbox.forkserver import ServerDied

        backend = "docker+forkserver"
        files = {k: v for k, v in spec["files"].items() if k != ".stdin"}
        t0 = time.monotonic()
        try:
            srv = self._server(c)
            if not srv.fresh_ns:  # never a run in the server's own namespaces
                msg = f"docker fork-server cannot isolate the run: {srv.why}"
                return ExecResult("sandbox_error", None, "", msg, backend=backend), False
            r = srv.request(files, spec["stdin"], spec["limits"], timeout, cap)
        except (OSError, ServerDied) as e:
            wall = time.monotonic() - t0
            status = "timeout" if wall >= timeout else "sandbox_error"
            return ExecResult(
                status, None, "", f"docker fork-server: {e}", wall, backend=backend
            ), False
        return r.result(backend), r.clean

    def _exec(self, c, cmd, timeout: float, cap: int) -> tuple[ExecResult, bool]:
        api = self.client.api
        t0 = time.monotonic()
        try:
            ex = api.exec_create(c.id, cmd, user=NOBODY, workdir="/box")
            stream = api.exec_start(ex["Id"], stream=True, demux=True)
        except Exception as e:
            wall = time.monotonic() - t0
            msg = f"docker exec failed: {e}"
            return ExecResult("sandbox_error", None, "", msg, wall, backend="docker"), False
        bufs = [bytearray(), bytearray()]
        state = {"truncated": False}

        def pump():
            try:
                for out, err in stream:
                    for i, chunk in enumerate((out, err)):
                        if chunk:
                            room = cap - len(bufs[i])
                            if room > 0:
                                bufs[i] += chunk[:room]
                            if len(chunk) > max(room, 0):
                                state["truncated"] = True
            except Exception:
                pass

        th = threading.Thread(target=pump, daemon=True)
        th.start()
        th.join(timeout)
        timed_out = th.is_alive()
        healthy = True
        code = None
        if timed_out:
            healthy = False
            with contextlib.suppress(Exception):
                c.kill()
            th.join(5)
        else:
            try:
                code = api.exec_inspect(ex["Id"]).get("ExitCode")
            except Exception:
                healthy = False
        wall = time.monotonic() - t0
        stdout = bytes(bufs[0]).decode("utf-8", errors="replace")
        stderr = bytes(bufs[1]).decode("utf-8", errors="replace")
        sig = code - 128 if code is not None and code > 128 else None
        status = classify(code, sig, stderr, timed_out)
        return ExecResult(
            status, code, stdout, stderr, wall, sig, state["truncated"], "docker"
        ), healthy

    def close(self) -> None:
        """Remove every container this sandbox started."""
        self._closed = True
        for srv in list(self._servers.values()):
            srv.close()
        self._servers.clear()
        with self._lock:
            ids = list(self._all)
        for cid in ids:
            with contextlib.suppress(Exception):
                self.client.api.remove_container(cid, force=True)
        with self._lock:
            self._all.clear()


def cleanup(client=None) -> int:
    """Remove every flowzoo sandbox container on this engine (e.g. after a crash)."""
    client = client or _client()
    n = 0
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        try:
            c.remove(force=True)
            n += 1
        except Exception:
            pass
    return n


@atexit.register
def _close_all() -> None:
    for s in list(_LIVE):
        with contextlib.suppress(Exception):
            s.close()
