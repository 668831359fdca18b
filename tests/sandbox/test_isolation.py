"""Runs share nothing: one fork-server runs many programs in turn, and nothing one run does
(files, processes, IPC, limits, disk, inodes, host dirs, cgroups) may be seen by the next."""

import os
import time
import uuid

import pytest

from flowzoo.sandbox import get_sandbox

# ------------------------------------------------------------------------------ fork-server
# One server runs many programs in turn; nothing one run does may be seen by the next.


@pytest.fixture(scope="module")
def fsrv():
    s = get_sandbox("process", timeout_s=5, memory_mb=256, forkserver=True)
    yield s
    s.close()


def test_forkserver_runs_leave_no_files_behind(fsrv):
    name = f"fz-{uuid.uuid4().hex}"
    src = (
        "import os\n"
        f"open({name!r}, 'w').write('x')\n"
        f"open('/tmp/' + {name!r}, 'w').write('x')\n"
        "print(sorted(os.listdir('.')))"
    )
    assert fsrv.run(src).status == "ok"
    probe_src = (
        "import os\n"
        f"print(os.path.exists({name!r}), os.path.exists('/tmp/' + {name!r}), sorted(os.listdir('.')))"
    )
    r = fsrv.run(probe_src)
    assert r.stdout.startswith("False False ['main.py']"), r


def test_forkserver_runs_leave_no_processes_or_ipc(fsrv):
    if "pid-ns" not in fsrv.isolation:
        pytest.skip("no PID namespace: processes of other programs are visible")
    count = "import os\nprint(sum(p.isdigit() for p in os.listdir('/proc')))"
    base = int(fsrv.run(count).stdout)
    leave = (
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "print('left three sleepers')"
    )
    assert fsrv.run(leave).status == "ok"
    assert int(fsrv.run(count).stdout) == base
    if "ipc-ns" in fsrv.isolation:
        shm = (
            "import ctypes\nlibc = ctypes.CDLL(None)\n"
            "print(libc.shmget(0, 4096, 0o1000 | 0o666) >= 0)"
        )
        assert fsrv.run(shm).stdout.strip() == "True"
        r = fsrv.run("print(len(open('/proc/sysvipc/shm').read().splitlines()) - 1)")
        assert r.stdout.strip() == "0"


def test_forkserver_runs_cannot_tamper_with_the_server(fsrv):
    # module state is the run's own copy
    assert fsrv.run("import json; json.dumps = None; print('patched')").status == "ok"
    assert fsrv.run("import json; print(json.dumps([1]))").stdout.strip() == "[1]"
    # the server is not dumpable: no ptrace, no reading its memory or environment
    src = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('ptrace', libc.ptrace(16, os.getppid(), None, None))\n"
        "try:\n"
        "    open(f'/proc/{os.getppid()}/mem', 'rb').read(1)\n"
        "    print('read mem')\n"
        "except OSError as e:\n"
        "    print('mem denied')\n"
    )
    r = fsrv.run(src)
    assert "ptrace -1" in r.stdout and "mem denied" in r.stdout, r
    # a fresh __main__ each run
    r = fsrv.run(
        "import __main__; print(sorted(k for k in vars(__main__) if not k.startswith('__')))"
    )
    assert r.stdout.strip() == "[]", r


_LEAVE = """
import os, resource
done = []
for how, act in [
    ("renice", lambda: os.setpriority(os.PRIO_PROCESS, os.getppid(), 19)),
    ("prlimit", lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (12, 12))),
    ("prlimit-cpu", lambda: resource.prlimit(os.getppid(), resource.RLIMIT_CPU, (1, 1))),
]:
    try:
        act(); done.append(how)
    except (OSError, AttributeError, ValueError):
        pass
for d in ("/tmp", "/dev/shm", "/dev", "/dev/mqueue", "/var/tmp", "/"):
    for how, act in [
        ("file", lambda: open(os.path.join(d, "fz-left"), "w").write("42")),
        ("mode", lambda: os.chmod(d, 0o777)),
        ("xattr", lambda: os.setxattr(d, "user.fz", b"42")),
        ("mtime", lambda: os.utime(d, (42, 42))),
    ]:
        try:
            act(); done.append(how + ":" + d)
        except (OSError, AttributeError):
            pass
print(done)
"""

_READ = """
import os, resource
seen = {}
try:
    seen["nice"] = os.getpriority(os.PRIO_PROCESS, os.getppid())
except OSError:
    pass
seen["cpu"] = resource.getrlimit(resource.RLIMIT_CPU)[0]
try:
    files = [open("/dev/null") for _ in range(30)]  # more than the 12 a run tried to leave
    seen["files"] = "ok"
except OSError as e:
    seen["files"] = type(e).__name__
for d in ("/tmp", "/dev/shm", "/dev", "/dev/mqueue", "/var/tmp", "/"):
    if not os.path.isdir(d):
        continue
    st = os.stat(d)
    try:
        xattrs = sorted(os.listxattr(d))
    except OSError:
        xattrs = []
    left = os.path.exists(os.path.join(d, "fz-left"))
    seen[d] = [oct(st.st_mode), st.st_mtime == 42, xattrs, left]
print(sorted(seen.items()))
"""


def test_a_run_leaves_nothing_the_next_run_inherits(sbx):
    """Nothing a run changes reaches a later run: not its server's priority or limits, not a
    file, mode bit, xattr or time stamp on any path it can write (every backend): what a run
    sees after an attacker's run is what it saw before."""
    before = sbx.run(_READ)
    left = sbx.run(_LEAVE)
    assert before.status == left.status == "ok", (before, left)
    for _ in range(2):
        r = sbx.run(_READ)
        assert r.status == "ok" and r.stdout == before.stdout, (left.stdout, before.stdout, r)


def test_forkserver_replaces_a_lost_server_and_honours_bigger_memory(fsrv):
    # a run cannot reach its server (its parent is the init of its own pid namespace) ...
    r = fsrv.run("import os, signal; os.kill(os.getppid(), signal.SIGKILL); print('alive')")
    assert r.status == "ok" and r.stdout.strip() == "alive", r
    # ... so a server is lost only from outside: the run it had says so, the next gets a new one
    for srv in list(fsrv._idle):
        os.kill(srv.proc.pid, 9)
        srv.proc.wait(5)
    r = fsrv.run("print(5)")
    assert r.stdout.strip() == "5" or "server was lost" in r.stderr, r
    assert fsrv.run("print(6)").stdout.strip() == "6"
    # a bigger per-call memory limit than the pool's servers: a server sized for it
    r = fsrv.run("x = bytearray(300 * 1024**2); print(len(x) > 0)", memory_mb=700)
    assert r.status == "ok" and r.stdout.strip() == "True", r
    r = fsrv.run("x = bytearray(300 * 1024**2); print(len(x) > 0)")
    assert r.status == "memory", r


def test_a_run_replies_before_its_server_has_cleaned_up_and_an_unclean_one_is_dropped(fsrv):
    """The reply comes before the server's clean-up (the run's namespaces torn down,
    leftovers killed), whose line the next run on that server reads first; a server that
    says it is not clean then is closed, never given another run."""
    r = fsrv.run("import os\nif os.fork() == 0:\n    import time; time.sleep(60)\nprint(1)")
    assert r.status == "ok" and r.stdout == "1\n", r
    assert any(srv._unsettled for srv in fsrv._idle)  # its clean line not read yet
    assert all(srv.settle() for srv in fsrv._idle)  # the leftover sleeper was killed
    assert not any(srv._unsettled for srv in fsrv._idle)
    assert fsrv.run("print(2)").stdout == "2\n"
    dirty = list(fsrv._idle)
    for srv in dirty:
        srv.settle = lambda *a, **k: False  # as a server that could not empty its dirs says
    assert fsrv.run("print(3)").stdout == "3\n"
    assert not any(srv.alive for srv in dirty)
    assert not {id(s) for s in fsrv._idle} & {id(s) for s in dirty}


def test_forkserver_outlives_the_thread_that_started_it():
    """bwrap's --die-with-parent follows the starting *thread*: servers started from a
    short-lived pool thread must survive it (they are spawned from one long-lived thread)."""
    from concurrent.futures import ThreadPoolExecutor

    s = get_sandbox("process", forkserver=True)
    try:
        with ThreadPoolExecutor(3) as ex:
            assert [r.stdout for r in ex.map(lambda i: s.run(f"print({i})"), range(3))] == [
                "0\n",
                "1\n",
                "2\n",
            ]
        time.sleep(0.3)
        assert s._idle and all(srv.alive for srv in s._idle)
        assert s.run("print('again')").stdout == "again\n"
    finally:
        s.close()


# ------------------------------------------------------------------------------ runs share nothing
# What one run writes anywhere it can write, and kernel state it can create, never reaches the
# next run; no run can fill the host's disk; nothing leaks on any failure path.


def test_nothing_written_anywhere_survives_into_the_next_run(sbx):
    leave = (
        "import os\n"
        "for d in ('.', '..', '/tmp', '/dev/shm', '/box', '/var/tmp'):\n"
        "    try:\n"
        "        os.makedirs(d + '/fz-left/deep', exist_ok=True)\n"
        "        open(d + '/fz-left/deep/f', 'w').write('x')\n"
        "        open(d + '/fz-note', 'w').write('x')\n"
        "        os.chmod(d + '/fz-left/deep', 0)\n"
        "        os.chmod(d + '/fz-left', 0o500)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('left')"
    )
    assert sbx.run(leave).status == "ok"
    look = (
        "import os\n"
        "seen = []\n"
        "for d in ('.', '..', '/tmp', '/dev/shm', '/box', '/var/tmp'):\n"
        "    for n in ('fz-left', 'fz-note'):\n"
        "        if os.path.lexists(os.path.join(d, n)):\n"
        "            seen.append(os.path.join(d, n))\n"
        "print(seen)"
    )
    for _ in range(2):  # whichever server or container the next run lands on
        r = sbx.run(look)
        assert r.status == "ok" and r.stdout.strip() == "[]", r


def test_keyrings_and_message_queues_are_denied(sbx):
    src = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "m = os.uname().machine\n"
        "add_key, mq_open = {'x86_64': (248, 240), 'aarch64': (217, 180)}[m]\n"
        "kr = libc.syscall(add_key, b'user', b'fz', b'secret', 6, -4)\n"
        "mq = libc.syscall(mq_open, b'fzq', 0o100 | 2, 0o600, None)\n"
        "print(kr, mq)"
    )
    r = sbx.run(src)
    assert r.status == "ok" and r.stdout.split() == ["-1", "-1"], r


def test_a_run_cannot_fill_the_disk_and_the_next_run_is_unharmed(sbx):
    fill = (
        "import os\n"
        "n = 0\n"
        "try:\n"
        "    for i in range(400):\n"
        "        with open(f'/tmp/fill{i}', 'wb') as f:\n"
        "            f.write(b'x' * (8 << 20))\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('stopped', n, e.errno)\n"
    )
    r = sbx.run(fill, timeout_s=20)
    assert "stopped" in r.stdout or r.status in ("killed", "memory"), r
    assert sbx.run("print('fine')").stdout.strip() == "fine"


def test_a_run_cannot_exhaust_inodes(fsrv):
    many = "for i in range(200000):\n    open(f'/tmp/f{i}', 'w').close()\nprint('made them all')"
    r = fsrv.run(many, timeout_s=20)
    assert "made them all" not in r.stdout and "files; killed" in r.stderr, r
    assert fsrv.run("import os; print(len(os.listdir('/tmp')))").stdout.strip() == "0"


def _flowzoo_host_dirs() -> set[str]:
    import tempfile

    root = tempfile.gettempdir()
    return {n for n in os.listdir(root) if n.startswith(("flowzoo-fsrv-", "flowzoo-sbx-"))}


def _run_cgroups() -> set[str]:
    """This process's run groups (named by its pid: other processes' runs come and go)."""
    from flowzoo.sandbox import cgroups

    h = cgroups._hierarchy()
    if h is None:
        return set()
    mine = f"{os.getpid()}-"
    return {
        os.path.join(d, n)
        for d in {h.pids, h.memory} - {None}
        if os.path.isdir(d)
        for n in os.listdir(d)
        if n.startswith(mine)
    }


@pytest.mark.parametrize("fork", [True, False])
def test_no_host_dirs_or_cgroups_leak_on_any_path(fork, monkeypatch, tmp_path):
    import tempfile

    from flowzoo.sandbox.forkserver import ForkServer

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's host dirs only
    dirs, groups = _flowzoo_host_dirs(), _run_cgroups()
    s = get_sandbox("process", timeout_s=2, forkserver=fork)
    try:
        for src in (
            "print(1)",
            "while True: pass",
            "import os, signal; os.kill(os.getppid(), signal.SIGKILL)",
            "import os; os._exit(3)",
        ):
            s.run(src)
        if fork:  # a request that fails in an unexpected way once the server is taken
            real = ForkServer.request

            def broken(self, *a, **k):
                raise RuntimeError("garbled reply")

            monkeypatch.setattr(ForkServer, "request", broken)
            r = s.run("print(1)")
            assert r.status == "sandbox_error" and "garbled" in r.stderr
            monkeypatch.setattr(ForkServer, "request", real)
            assert s.run("print(2)").stdout.strip() == "2"
    finally:
        s.close()
    time.sleep(0.2)
    assert _flowzoo_host_dirs() <= dirs
    assert _run_cgroups() <= groups


def test_groups_whose_maker_exited_are_removed_and_no_other(monkeypatch):
    """A host killed before it removed its runs' groups left them (544 on a machine after a
    day of killed test and sweep processes): the next host to make a group removes the empty
    ones whose maker (the pid in the name) has exited; a live maker's group stays, and so does
    any group with a process in it."""
    import subprocess
    import sys

    from flowzoo.sandbox import cgroups

    h = cgroups._hierarchy()
    if h is None:
        pytest.skip("no writable cgroup hierarchy")
    monkeypatch.setattr(cgroups, "GRACE_S", -1.0)  # these groups are made a moment before
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    tag = uuid.uuid4().hex[:8]
    dead, live, busy = f"{gone.pid}-{tag}a", f"{os.getpid()}-{tag}b", f"{gone.pid}-{tag}c"
    for name in (dead, live, busy):
        os.mkdir(os.path.join(h.pids, name))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open(os.path.join(h.pids, busy, "cgroup.procs"), "w") as f:
            f.write(str(child.pid))
        cgroups.prune_leftovers(h)
        left = set(os.listdir(h.pids))
        assert dead not in left and live in left and busy in left
        os.mkdir(os.path.join(h.pids, dead))  # within the grace, a dead maker's group stays
        monkeypatch.setattr(cgroups, "GRACE_S", 60.0)
        cgroups.prune_leftovers(h)
        assert dead in os.listdir(h.pids)
    finally:
        child.kill()
        child.wait()
        for name in (dead, live, busy):
            for _ in range(50):
                try:
                    os.rmdir(os.path.join(h.pids, name))
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def test_docker_without_forkserver_never_reuses_a_container():
    """Without a fork-server every run gets a container no run used: what one run filled or
    left is not there for the next (the carry-over matrix runs this mode too)."""
    from flowzoo.sandbox.docker import docker_unavailable_reason

    why = docker_unavailable_reason()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    s = get_sandbox("docker", timeout_s=5, pool_size=1, forkserver=False)
    try:
        fill = (
            "import os\n"
            "for d in ('/box', '/tmp', '/dev/shm'):\n"
            "    open(d + '/fz-left', 'w').write('x')\n"
            "try:\n"
            "    with open('/box/fill', 'wb') as f:\n"
            "        while True:\n"
            "            f.write(b'x' * (1 << 20))\n"
            "except OSError as e:\n"
            "    print('full', e.errno)\n"
        )
        s.run(fill)
        look = (
            "import os\n"
            "here = os.path.basename(os.getcwd())\n"
            "print([d for d in ('/box', '/tmp', '/dev/shm') if set(os.listdir(d)) - {here}])"
        )
        r = s.run(look)
        assert r.status == "ok" and r.stdout.strip() == "[]", r
        assert s.run("open('x', 'w').write('fine'); print('ok')").stdout.strip() == "ok"
        assert "container-per-run" in s.isolation
    finally:
        s.close()


def test_docker_a_container_that_cannot_start_is_an_error_not_a_hang(monkeypatch):
    """When replacing a used container fails, the pool keeps a placeholder: the next run
    tries to start one in its own time and reports why it cannot (sandbox_error), and runs
    resume once starts work again; the pool never shrinks into a wait that never ends."""
    from flowzoo.sandbox.docker import DockerSandbox, docker_unavailable_reason

    why = docker_unavailable_reason()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    s = get_sandbox("docker", timeout_s=5, pool_size=1, forkserver=False)
    try:
        real = DockerSandbox._start

        def broken(self):
            raise RuntimeError("engine refused the container")

        monkeypatch.setattr(DockerSandbox, "_start", broken)
        assert s.run("print(1)").stdout.strip() == "1"  # its replacement fails to start
        for _ in range(2):
            r = s.run("print(2)")
            assert r.status == "sandbox_error" and "engine refused" in r.stderr, r
        monkeypatch.setattr(DockerSandbox, "_start", real)
        assert s.run("print(3)").stdout.strip() == "3"
    finally:
        s.close()
