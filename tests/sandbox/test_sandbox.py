"""Hostile programs against every sandbox backend that works here (Docker skips with the
reason when no engine answers). Each must be contained and reported, the host unaffected,
nothing left running."""

import os
import time
import uuid

import pytest

from flowzoo.sandbox import STATUSES, Job, SandboxUnavailable, get_sandbox
from flowzoo.sandbox.process import probe


def _docker_or_skip():
    from flowzoo.sandbox.docker import docker_unavailable_reason

    why = docker_unavailable_reason()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    return get_sandbox("docker", timeout_s=5, memory_mb=256, pool_size=2)


@pytest.fixture(
    scope="module",
    params=["process", "process-spawn", pytest.param("docker", marks=pytest.mark.docker)],
)
def sbx(request):
    """``process`` is the default (fork-server); ``process-spawn`` a fresh sandbox per run."""
    if request.param == "docker":
        s = _docker_or_skip()
    else:
        fork = request.param == "process"
        s = get_sandbox("process", timeout_s=5, memory_mb=256, forkserver=fork)
    yield s
    s.close()


def _procs_with(token: str) -> list[int]:
    hits = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    hits.append(int(pid))
        except OSError:
            pass
    return hits


def test_hello_and_stdin(sbx):
    r = sbx.run("import sys; print('hi', sys.stdin.read().upper())", stdin="abc")
    assert r.status == "ok" and r.stdout.strip() == "hi ABC" and r.exit_code == 0
    assert r.status in STATUSES and r.backend.startswith(sbx.name)


def test_files_beside_main(sbx):
    r = sbx.run("import helper; print(helper.X)", files={"helper.py": "X = 41 + 1"})
    assert r.stdout.strip() == "42"


def test_infinite_loop_times_out(sbx):
    t = time.monotonic()
    r = sbx.run("while True: pass", timeout_s=1.5)
    assert r.status == "timeout"
    assert time.monotonic() - t < 10


def test_sleep_times_out(sbx):
    r = sbx.run("import time; time.sleep(60)", timeout_s=1.0)
    assert r.status == "timeout" and r.wall_s < 5


def test_fork_bomb_is_contained(sbx):
    if sbx.name == "process" and not {"cgroup-pids", "nproc-rlimit"} & set(sbx.isolation):
        pytest.skip(
            f"no process-count limit binds here ({sbx.isolation}); running a fork bomb would hurt the host"
        )
    r = sbx.run(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        timeout_s=2,
    )
    assert r.status in ("timeout", "killed", "error")
    time.sleep(0.5)
    ok = sbx.run("print('still fine')")
    assert ok.status == "ok", ok


def test_memory_bomb(sbx):
    r = sbx.run("x = bytearray(2 * 1024**3)\nprint('allocated')", memory_mb=128)
    assert r.status in ("memory", "killed")
    assert "allocated" not in r.stdout


def test_stdout_flood_is_capped(sbx):
    r = sbx.run("import sys\nfor _ in range(100): sys.stdout.write('x' * 1_000_000)", timeout_s=20)
    assert r.truncated
    assert len(r.stdout) <= 1 << 20
    assert r.status in ("ok", "killed", "timeout")


def test_cannot_write_outside_work_dir(sbx):
    name = f"flowzoo-escape-{uuid.uuid4().hex}"
    src = (
        "import os\n"
        "for d in ('/tmp', '/root', '/etc', os.path.expanduser('~'), '/var/tmp'):\n"
        "    try:\n"
        f"        open(os.path.join(d, {name!r}), 'w').write('x')\n"
        "    except OSError:\n"
        "        pass\n"
        f"open({name!r}, 'w').write('inside is fine')\n"
        "print('done')"
    )
    r = sbx.run(src)
    assert r.status == "ok"
    if "fs-readonly" in sbx.isolation:
        for d in ("/tmp", "/root", "/etc", "/var/tmp"):
            assert not os.path.exists(os.path.join(d, name)), d
    else:
        for d in ("/root", "/etc"):
            assert not os.path.exists(os.path.join(d, name)), d


def test_cannot_read_parent_environment(sbx, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("FLOWZOO_TEST_SECRET", secret)
    src = (
        "import os\nprint(dict(os.environ))\n"
        "try:\n    print(open(f'/proc/{os.getppid()}/environ', 'rb').read())\nexcept OSError as e:\n    print(e)"
    )
    r = sbx.run(src)
    assert secret not in r.stdout and secret not in r.stderr


def test_no_network(sbx):
    if "net-ns" not in sbx.isolation and sbx.name == "process":
        pytest.skip(
            f"this machine's mechanism {sbx.isolation} has no network isolation (reported as such)"
        )
    src = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "    print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('blocked', e)\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 80), timeout=1)\n"
        "    print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('blocked', e)\n"
    )
    r = sbx.run(src)
    assert "CONNECTED" not in r.stdout and r.stdout.count("blocked") == 2


def test_killing_its_parent_does_not_hurt_the_host(sbx):
    r = sbx.run(
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(1, signal.SIGKILL)\nprint('tried')"
    )
    assert r.status in STATUSES
    assert sbx.run("print(1)").status == "ok"


def test_daemon_does_not_outlive_the_run(sbx):
    if sbx.name == "process" and "pid-ns" not in sbx.isolation:
        pytest.skip("no PID namespace here: a setsid daemon can escape (reported in isolation)")
    token = f"{int(uuid.uuid4().int % 1000) + 100}.{uuid.uuid4().int % 10**6:06d}"
    src = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', {token!r}])\n"
        "    os._exit(0)\n"
        "print('parent exits')"
    )
    r = sbx.run(src)
    assert r.status == "ok"
    time.sleep(0.5)
    assert _procs_with(token) == []


@pytest.mark.parametrize(
    "src,status,code",
    [
        ("import sys; sys.exit(3)", "error", 3),
        ("import os; os._exit(7)", "error", 7),
        ("raise SystemExit(0)", "ok", 0),
        ("def f(:\n", "error", 1),
        ("raise ValueError('boom')", "error", 1),
    ],
)
def test_exits_and_errors(sbx, src, status, code):
    r = sbx.run(src)
    assert (r.status, r.exit_code) == (status, code)
    if "def f(" in src:
        assert "SyntaxError" in r.stderr


def test_non_utf8_output(sbx):
    r = sbx.run("import sys; sys.stdout.buffer.write(b'\\xff\\xfe ok\\n')")
    assert r.status == "ok" and "ok" in r.stdout and "\ufffd" in r.stdout


def test_run_many_keeps_order_and_mixes_outcomes(sbx):
    jobs = [Job(f"print({i})") for i in range(6)] + [
        Job("while True: pass", timeout_s=1),
        Job("1/0"),
    ]
    res = sbx.run_many(jobs)
    assert [r.stdout.strip() for r in res[:6]] == [str(i) for i in range(6)]
    assert res[6].status == "timeout" and res[7].status == "error"


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="valid"):
        get_sandbox("vm")
    with pytest.raises(ValueError, match="bwrap"):
        get_sandbox("process", mechanism="chroot")
    with pytest.raises(ValueError, match="timeout_s"):
        get_sandbox("process", timeout=3)
    s = get_sandbox("process")
    r = s.run("print(1)", files={"../evil.py": "x"})
    assert r.status == "sandbox_error" and "inside the work dir" in r.stderr


@pytest.mark.parametrize(
    "files",
    [{"../evil.py": "x"}, {"/etc/evil.py": "x"}, {".stdin": "x"}, {"": "x"}, {"a.py": b"x"}],
)
def test_every_backend_refuses_the_same_bad_files(sbx, files):
    """One check for all backends: escaping names, the stdin slot, non-text contents."""
    r = sbx.run("print(1)", files=files)
    assert r.status == "sandbox_error" and "work dir" in r.stderr, r


def test_every_backend_reads_normalised_names(sbx):
    r = sbx.run("import pkg.mod\nprint(pkg.mod.X)", files={"pkg//mod.py": "X = 7\n"})
    assert r.status == "ok" and r.stdout.strip() == "7", r


def test_process_count_is_capped():
    s = get_sandbox("process", max_procs=20)
    if not {"cgroup-pids", "nproc-rlimit"} & set(s.isolation):
        pytest.skip(f"no process-count limit binds here: {s.isolation}")
    src = (
        "import os, time\nn = 0\nfor i in range(200):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(1)\n        os._exit(0)\n    n += 1\nprint(n)"
    )
    r = s.run(src)
    assert r.status == "ok" and int(r.stdout.strip()) < 20


def test_isolation_is_reported_honestly():
    s = get_sandbox("process")
    if probe("bwrap"):
        assert s.mechanism == "bwrap" and "net-ns" in s.isolation
    with pytest.warns(UserWarning, match="rlimits only"):
        none = get_sandbox("process", mechanism="none", allow_weak_isolation=True)
    assert "net-ns" not in none.isolation and "pid-ns" not in none.isolation
    assert none.run("print(2)").stdout.strip() == "2"


def test_unavailable_mechanism_refuses(monkeypatch):
    import flowzoo.sandbox.process as sp

    monkeypatch.setattr(sp, "probe", lambda m: m == "none")
    with pytest.raises(SandboxUnavailable):
        sp.ProcessSandbox(mechanism="bwrap")
    with pytest.warns(UserWarning, match="rlimits only"):
        weak = sp.ProcessSandbox(mechanism="auto", allow_weak_isolation=True)
        assert weak.mechanism == "none"


@pytest.mark.parametrize("mechanism", ["auto", "unshare", "none"])
def test_weak_isolation_is_refused_without_the_opt_in(monkeypatch, mechanism):
    """Without bubblewrap, untrusted code does not run unless the user says it may."""
    import flowzoo.sandbox.process as sp

    monkeypatch.setattr(sp, "probe", lambda m: m != "bwrap")
    with pytest.raises(SandboxUnavailable, match="allow_weak_isolation=True"):
        sp.ProcessSandbox(mechanism=mechanism)


def test_sandbox_fusion_status_mapping_and_missing_url(monkeypatch):
    from flowzoo.sandbox.fusion import map_fusion_status

    ok = {
        "status": "Success",
        "run_result": {"status": "Finished", "return_code": 0, "stdout": "1\n", "stderr": ""},
    }
    assert map_fusion_status(ok)[:3] == ("ok", 0, "1\n")
    tle = {"status": "Failed", "run_result": {"status": "TimeLimitExceeded", "return_code": None}}
    assert map_fusion_status(tle)[0] == "timeout"
    err = {
        "status": "Failed",
        "run_result": {"status": "Finished", "return_code": 1, "stderr": "MemoryError"},
    }
    assert map_fusion_status(err)[0] == "memory"
    assert map_fusion_status({"status": "SandboxError", "message": "down"})[0] == "sandbox_error"
    monkeypatch.delenv("FLOWZOO_SANDBOX_FUSION_URL", raising=False)
    with pytest.raises(SandboxUnavailable, match="url"):
        get_sandbox("sandbox-fusion")


def test_sandbox_fusion_server():
    url = os.environ.get("FLOWZOO_SANDBOX_FUSION_URL")
    if not url:
        pytest.skip("no SandboxFusion server: set FLOWZOO_SANDBOX_FUSION_URL to run this test")
    s = get_sandbox("sandbox-fusion", url=url)
    assert s.run("print(6 * 7)").stdout.strip() == "42"
    assert s.run("while True: pass", timeout_s=1).status == "timeout"


def test_sandbox_fusion_unreachable_is_a_sandbox_error():
    s = get_sandbox("sandbox-fusion", url="http://127.0.0.1:9", retries=1)
    r = s.run("print(1)")
    assert r.status == "sandbox_error" and "request failed" in r.stderr


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
    r = fsrv.run(
        "import os, signal; os.kill(os.getppid(), signal.SIGKILL); import time; time.sleep(5)"
    )
    assert r.status in ("killed", "ok", "error"), r
    assert fsrv.run("print(5)").stdout.strip() == "5"
    # a bigger per-call memory limit than the pool's servers: a server sized for it
    r = fsrv.run("x = bytearray(300 * 1024**2); print(len(x) > 0)", memory_mb=700)
    assert r.status == "ok" and r.stdout.strip() == "True", r
    r = fsrv.run("x = bytearray(300 * 1024**2); print(len(x) > 0)")
    assert r.status == "memory", r


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


def _run_cgroups() -> int:
    from flowzoo.sandbox import cgroups

    h = cgroups._hierarchy()
    if h is None:
        return 0
    return sum(
        len([n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))])
        for d in {h.pids, h.memory}
        if d and os.path.isdir(d)
    )


@pytest.mark.parametrize("fork", [True, False])
def test_no_host_dirs_or_cgroups_leak_on_any_path(fork, monkeypatch):
    from flowzoo.sandbox.forkserver import ForkServer

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


def test_docker_without_forkserver_wipes_between_runs():
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
    finally:
        s.close()
