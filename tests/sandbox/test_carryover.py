"""Answers carried between samples: on one fork-server, a sample that does the work and tries
to leave its answer for the next sample, then a sample that does no work and tries to pick
it up (and the other order). Whatever the channel, the no-work sample must not learn it.

Each channel pair is (leave, take): ``leave`` knows the secret (it "did the work"), ``take``
prints what it recovered; the secret never appears in ``take``'s source."""

import secrets

import pytest

from flowzoo.sandbox import get_sandbox
from flowzoo.sandbox.process import probe
from tests.sandbox.memscan import MEMORY_SCAN
from tests.sandbox.modes import DOCKER_MODES, PROCESS_MODES

MODES = PROCESS_MODES + DOCKER_MODES[:1]  # Docker without a fork server: a run there is not
# pid 1 of its own namespace; its container-per-run test is below

CHANNELS = {
    "tmp_file": (
        "open('/tmp/fz-answer', 'w').write('{s}')",
        "import os\nprint(open('/tmp/fz-answer').read() if os.path.exists('/tmp/fz-answer') else '')",
    ),
    "shm_file": (
        "open('/dev/shm/fz-answer', 'w').write('{s}')",
        "import os\np = '/dev/shm/fz-answer'\nprint(open(p).read() if os.path.exists(p) else '')",
    ),
    "cwd_and_parent": (
        "import os\nopen('fz-answer', 'w').write('{s}')\n"
        "try:\n    open('../fz-answer', 'w').write('{s}')\nexcept OSError:\n    pass",
        "import glob\nfound = glob.glob('fz-answer') + glob.glob('../*fz-answer') "
        "+ glob.glob('../*/fz-answer')\nprint(''.join(open(p).read() for p in found))",
    ),
    "module_attribute": (
        "import sys, json\njson.fz_answer = '{s}'\nsys.modules['fz_answer'] = type(sys)('x')\n"
        "sys.modules['fz_answer'].v = '{s}'",
        "import sys, json\nm = sys.modules.get('fz_answer')\n"
        "print(getattr(json, 'fz_answer', '') + (getattr(m, 'v', '') if m else ''))",
    ),
    "environ": (
        "import os\nos.environ['FZ_ANSWER'] = '{s}'\nos.putenv('FZ_ANSWER', '{s}')",
        "import os\ntry:\n    raw = open('/proc/self/environ').read()\nexcept OSError:\n"
        "    raw = ''\nprint(os.environ.get('FZ_ANSWER', '') + raw.partition('FZ_ANSWER=')[2])",
    ),
    "inherited_fd": (
        "import os\nr, w = os.pipe()\nos.write(w, b'{s}')\n"
        "for fd in (r, w):\n    os.set_inheritable(fd, True)\n"
        "os.dup2(r, 40, inheritable=True)",
        "import os\nout = ''\nfor fd in range(3, 256):\n    try:\n"
        "        os.set_blocking(fd, False)\n        out += os.read(fd, 100).decode(errors='replace')\n"
        "    except OSError:\n        pass\nprint(out)",
    ),
    "abstract_socket_daemon": (
        "import os, socket, time\nif os.fork() == 0:\n    os.setsid()\n"
        "    s = socket.socket(socket.AF_UNIX)\n    s.bind('\\0fz-answer')\n    s.listen(1)\n"
        "    while True:\n        c, _ = s.accept()\n        c.sendall(b'{s}')\n        c.close()\n"
        "time.sleep(0.2)",
        "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n"
        "    s.connect('\\0fz-answer')\n    print(s.recv(100).decode())\nexcept OSError:\n"
        "    print('')",
    ),
    "sysv_shm": (
        "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.shmat.restype = ctypes.c_void_p\n"
        "i = libc.shmget(4242, 64, 0o1000 | 0o666)\np = libc.shmat(i, None, 0)\n"
        "ctypes.memmove(p, b'{s}', len(b'{s}'))",
        "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.shmat.restype = ctypes.c_void_p\n"
        "i = libc.shmget(4242, 64, 0)\nprint(ctypes.string_at(libc.shmat(i, None, 0), 16).decode() "
        "if i >= 0 else '')",
    ),
    # freed memory of the fork-server, inherited by every run it forks: an earlier run's
    # request (its program, a replay's hidden tests) and output must never be in it
    "server_memory": (
        "import sys\nkept = 'FZMEM{s}' * 64\nprint(kept)\nprint(kept, file=sys.stderr)",
        MEMORY_SCAN + "print(' '.join(sorted({g[0].decode() for g in "
        "_fz_memory_matches(b'FZ' + b'MEM' + b'([0-9a-f]{16})')})))",
    ),
}


def _docker(**kw):
    from flowzoo.sandbox.docker import docker_unavailable_reason

    why = docker_unavailable_reason()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    return get_sandbox("docker", pool_size=1, **kw)


@pytest.fixture(scope="module", params=MODES, ids=lambda m: f"{m[0]}-{'fork' if m[1] else 'spawn'}")
def sbx(request):
    mechanism, fork = request.param
    if mechanism == "docker":  # its default mode, whatever this engine allows
        s = _docker()
    elif not probe(mechanism):
        pytest.skip(f"{mechanism} does not work here")
    else:
        s = get_sandbox(
            "process", mechanism=mechanism, forkserver=fork, allow_weak_isolation=True, workers=1
        )
    yield s
    s.close()


def _servers(sbx) -> list:
    """The sandbox's fork-servers (the process pool's idle ones, one per Docker container)."""
    if hasattr(sbx, "_idle"):
        return list(sbx._idle)
    return list(getattr(sbx, "_servers", {}).values())


@pytest.mark.parametrize("channel", sorted(CHANNELS))
@pytest.mark.parametrize("order", ["work_first", "no_work_first"])
def test_no_work_sample_learns_nothing_from_a_correct_one(sbx, channel, order):
    secret = secrets.token_hex(8)
    leave, take = CHANNELS[channel]
    leave = leave.replace("{s}", secret)
    runs = [leave, take] if order == "work_first" else [take, leave, take]
    outs = [sbx.run(src) for src in runs]
    assert outs[-2].status == "ok", outs[-2]  # the correct sample did leave its answer
    assert outs[-1].status == "ok", outs[-1]
    assert secret not in outs[-1].stdout + outs[-1].stderr, (channel, outs[-1])


_EXIT_TAKE = (
    MEMORY_SCAN
    + r"""
pat = rb'"rc": (-?\d+)[^{}]{0,200}?"out": (\d+), "err": (\d+)'
print(' '.join(sorted({b'/'.join(g).decode() for g in _fz_memory_matches(pat)})))
"""
)


def test_a_runs_exit_details_are_not_read_by_the_next(sbx):
    """A run's exit status and output sizes (a covert channel of ~48 bits from a sample that
    did the work to one that did not) are not in the memory of the next run: the server's
    reply, which holds them, is written by a handler process that exits after it."""
    r = secrets.randbelow(10**5)
    rc, n_out, n_err = 3 + r % 200, 600_000 + r, 300_000 + r
    leave = f"import sys\nsys.stdout.write('a' * {n_out})\nsys.stderr.write('b' * {n_err})\nsys.exit({rc})"
    done = sbx.run(leave)
    assert done.exit_code == rc, done
    took = sbx.run(_EXIT_TAKE)
    assert took.status == "ok", took
    assert f"{rc}/{n_out}/{n_err}" not in took.stdout, took.stdout[-500:]


# ---------------------------------------------------------------- class 3: process state
# Every fork-server run has its own user, pid, mount, IPC and network namespace under an init
# of its own: nothing outside its tree is addressable, and nothing it changes about itself is
# what the next run (forked from the untouched server) inherits.

_PIDS = """
import os, threading
vals = [os.getpid(), os.getppid()]
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
t = threading.Thread(target=lambda: vals.append(threading.get_native_id()))
t.start(); t.join()
vals.append(pid)
for path, field in (("/proc/sys/kernel/ns_last_pid", 0), ("/proc/loadavg", -1)):
    try:
        vals.append(open(path).read().split()[field])
    except (OSError, IndexError):
        vals.append(None)
print(vals)
"""
_MAKE = {
    "forks": "import os\nfor _ in range({k}):\n    if os.fork() == 0:\n        os._exit(0)\n    os.wait()",
    "threads": "import threading\nfor _ in range({k}):\n    t = threading.Thread(target=int)\n"
    "    t.start(); t.join()",
    "daemons": "import os, time\nfor _ in range({k}):\n    if os.fork() == 0:\n        os.setsid()\n"
    "        time.sleep(30)\n        os._exit(0)",
}


@pytest.mark.parametrize("how", sorted(_MAKE))
def test_the_pid_counter_carries_nothing(sbx, how):
    """What a run reads of pid numbers (its own, its child's and thread's, the last pid) is
    the same whatever the previous run made: no run learns how many processes came before."""
    seen = []
    for k in (0, 9, 0, 23):
        sbx.run(_MAKE[how].format(k=k))
        r = sbx.run(_PIDS)
        assert r.status == "ok", r
        seen.append(r.stdout)
    assert len(set(seen)) == 1, seen


_VISIBLE = """
import os
mine = {1, os.getpid(), os.getppid()}
seen = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
reach = []
for pid in range(1, 5000):
    if pid in mine:
        continue
    try:
        os.kill(pid, 0)
        reach.append(pid)
    except ProcessLookupError:
        pass
    except PermissionError:
        reach.append(pid)
print(sorted(set(seen) - mine), reach, os.getpid() <= 2)
"""


def test_a_run_sees_and_reaches_no_process_outside_its_own_tree(sbx):
    sbx.run("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)")
    r = sbx.run(_VISIBLE)
    assert r.status == "ok" and r.stdout.strip() == "[] [] True", r


_ATTACKS = {
    "kill_all": "import os\nos.kill(-1, 9)",
    "kill_parent": "import os\nos.kill(os.getppid(), 9)",
    "kill_init": "import os\nos.kill(1, 9)",
    "kill_init_group": "import os\nos.killpg(os.getpgid(1), 9)",
    "kill_server_pid": "import os\nos.kill({server}, 9)",
    "stop_all": "import os\nos.kill(-1, 19)",
    "daemon_kill_loop": "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
    "    while True:\n        try:\n            os.kill(-1, 9)\n        except OSError:\n"
    "            pass\n        time.sleep(0.01)\ntime.sleep(0.1)",
}


@pytest.mark.parametrize("attack", sorted(_ATTACKS))
def test_a_run_cannot_signal_its_server_or_the_next_run(sbx, attack):
    sbx.run("print(0)")
    before = _servers(sbx)
    server = before[0].pid if before else 2
    src = (
        "try:\n"
        + "".join("    " + ln + "\n" for ln in _ATTACKS[attack].format(server=server).splitlines())
        + "except OSError:\n    pass\nprint('alive')"
    )
    r = sbx.run(src)
    if attack in ("kill_all", "kill_parent", "kill_init", "stop_all"):  # none reaches the run
        assert r.status == "ok" and r.stdout.strip() == "alive", r
    if sbx.forkserver:  # the very same server, still serving
        assert _servers(sbx) == before and all(srv.alive for srv in before), attack
    for _ in range(2):
        assert sbx.run("print(7)").stdout.strip() == "7"


_STATE = """
import ctypes, os, resource
libc = ctypes.CDLL(None, use_errno=True)
IOPRIO_GET = {"x86_64": 252, "aarch64": 31}[os.uname().machine]
seen = {}
for who, pid in (("self", 0), ("parent", os.getppid())):
    if who == "parent" and pid == 0:
        continue
    for name, read in [
        ("affinity", lambda: sorted(os.sched_getaffinity(pid))),
        ("nice", lambda: os.getpriority(os.PRIO_PROCESS, pid)),
        ("policy", lambda: os.sched_getscheduler(pid)),
        ("ioprio", lambda: libc.syscall(IOPRIO_GET, 1, pid)),
        ("oom", lambda: open(f"/proc/{pid or 'self'}/oom_score_adj").read().strip()),
    ]:
        try:
            seen[f"{who}.{name}"] = read()
        except OSError as e:
            seen[f"{who}.{name}"] = type(e).__name__
seen["slack"] = libc.prctl(30, 0, 0, 0, 0)
seen["thp"] = libc.prctl(42, 0, 0, 0, 0)
seen["umask"] = os.umask(0o22)
seen["limits"] = [resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource))
                  if n.startswith("RLIMIT_")]
print(sorted(seen.items()))
"""

_CHANGE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
IOPRIO_SET = {"x86_64": 251, "aarch64": 30}[os.uname().machine]
mine = {os.getpid(), os.getppid(), 1}
outside = []
targets = sorted(mine | set(range(1, 400)))
for pid in targets:
    done = []
    for name, act in [
        ("affinity", lambda: os.sched_setaffinity(pid, [min(os.sched_getaffinity(0))])),
        ("nice", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)),
        ("policy", lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))),
        ("ioprio", lambda: libc.syscall(IOPRIO_SET, 1, pid, 3 << 13) == 0 or 1 / 0),
        ("oom", lambda: open(f"/proc/{pid}/oom_score_adj", "w").write("1000")),
    ]:
        try:
            act()
            done.append(name)
        except (OSError, ZeroDivisionError):
            pass
    if done and pid not in mine:
        outside.append((pid, done))
for who in (os.PRIO_PGRP, os.PRIO_USER):
    try:
        os.setpriority(who, 0, 19)
    except OSError:
        pass
for who in (2, 3):  # IOPRIO_WHO_PGRP, IOPRIO_WHO_USER
    libc.syscall(IOPRIO_SET, who, 0, 3 << 13)
libc.prctl(29, 1 << 30, 0, 0, 0)  # PR_SET_TIMERSLACK
libc.prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
os.umask(0o777)
if os.fork() == 0:  # and a daemon that keeps doing it
    import time
    os.setsid()
    for _ in range(300):
        for who in (os.PRIO_PGRP, os.PRIO_USER):
            try:
                os.setpriority(who, 0, 19)
            except OSError:
                pass
        time.sleep(0.01)
    os._exit(0)
print("outside", outside)
"""


def test_per_process_state_a_run_changes_is_not_what_the_next_run_reads(sbx):
    """CPU affinity, nice, scheduling policy, I/O priority, oom_score_adj, timer slack, THP,
    umask and limits, changed on itself, its parent, its group, its uid and every pid it
    can name: the next run reads what it read before, and nothing outside the run's own
    tree could be changed."""
    before = sbx.run(_STATE)
    assert before.status == "ok", before
    r = sbx.run(_CHANGE)
    assert r.status == "ok" and r.stdout.strip() == "outside []", r
    for _ in range(2):
        after = sbx.run(_STATE)
        assert after.stdout == before.stdout, (before.stdout, after.stdout)


def test_a_server_that_cannot_give_runs_namespaces_does_not_serve(monkeypatch):
    """No silent loss: where the kernel refuses a run's namespaces (here: flags it rejects),
    the namespaced fork-server does not start and every run says why."""
    from flowzoo.sandbox import forkserver

    bad = forkserver.SERVER_SOURCE.replace("RUN_NS = ", "RUN_NS = 1 | ", 1)
    assert bad != forkserver.SERVER_SOURCE
    monkeypatch.setattr(forkserver, "SERVER_SOURCE", bad)
    s = get_sandbox("process", workers=1)
    try:
        r = s.run("print('ran')")
    finally:
        s.close()
    assert r.status == "sandbox_error" and "namespaces of its own" in r.stderr, r
    assert "ran" not in r.stdout


# ------------------------------------------------------------ class 4: file-system state
# A writable file system keeps state that no wipe resets: tmpfs numbers inodes from a
# per-mount counter, and its free blocks and inodes are per-mount counts. Every writable file
# system a fork-server run sees is mounted fresh for that run, so none of it outlives the run.

_WRITABLE = """
import os
def writable_mounts():
    seen = {os.getcwd()}
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        point, opts = f[4].replace("\\\\040", " "), f[5].split(",")
        if "rw" in opts and os.path.isdir(point) and not point.startswith("/proc"):
            seen.add(point)
    return sorted(seen)
"""

_FS_PROBE = (
    _WRITABLE
    + """
import json
out = {}
for d in writable_mounts():
    p = os.path.join(d, "fz-probe")
    try:
        open(p, "w").close()
        st = os.stat(p)
        os.unlink(p)
        ino = (st.st_ino, os.stat(d).st_nlink)
    except OSError as e:
        ino = type(e).__name__
    v = os.statvfs(d)
    out[d if d != os.getcwd() else "cwd"] = [ino, v.f_blocks, v.f_bfree, v.f_bavail,
                                             v.f_files, v.f_ffree, v.f_favail, v.f_flag]
try:
    out["pty"] = os.ttyname(os.openpty()[1])
except OSError as e:
    out["pty"] = type(e).__name__
print(json.dumps(out, sort_keys=True))
"""
)

# advances every per-mount counter it can: inode numbers (create/unlink), a big file filled
# and deleted, files and dirs left behind (the wipe's work), a file kept open by a daemon
_FS_LEAVE = (
    _WRITABLE
    + """
import time
for d in writable_mounts():
    try:
        for i in range({k}):
            p = os.path.join(d, f"fz-{i}")
            open(p, "w").close()
            os.unlink(p)
        with open(os.path.join(d, "fz-big"), "wb") as f:
            f.write(b"x" * (3 << 20))
        os.unlink(os.path.join(d, "fz-big"))
        os.makedirs(os.path.join(d, "fz-dir", "sub"), exist_ok=True)
        open(os.path.join(d, "fz-dir", "sub", "left"), "w").write("x" * {k})
        held = open(os.path.join(d, "fz-held"), "w")
        held.write("y" * 5000)
        held.flush()
    except OSError:
        pass
ptys = []
for _ in range({k} % 7):
    try:
        ptys.append(os.openpty())
    except OSError:
        pass
if os.fork() == 0:
    os.setsid()
    time.sleep(30)
    os._exit(0)
print("left")
"""
)


def _fs_state(sbx) -> str:
    r = sbx.run(_FS_PROBE)
    assert r.status == "ok", r
    return r.stdout


@pytest.mark.parametrize("k", [1, 4242 % 1000 + 3])
def test_file_system_counters_carry_nothing(sbx, k):
    """Inode numbers (the next file's ``st_ino``), free blocks and inodes of every writable
    file system a run sees (``/tmp``, ``/dev/shm``, the work dir's, any other) and the next
    pty's number read the same after a run that advanced them all as on a fresh server."""
    before = _fs_state(sbx)
    assert "/tmp" in before and "/dev/shm" in before and "cwd" in before, before
    r = sbx.run(_FS_LEAVE.replace("{k}", str(k)), timeout_s=20)
    assert r.status == "ok" and r.stdout.strip() == "left", r
    for _ in range(2):
        assert _fs_state(sbx) == before


_INO_SET = """
import os
def ino(d):
    p = os.path.join(d, ".c"); open(p, "w").close(); i = os.stat(p).st_ino; os.unlink(p); return i
for d in ("/tmp", "/dev/shm", "."):
    for _ in range({k}):
        ino(d)
"""
_INO_GET = """
import os
out = []
for d in ("/tmp", "/dev/shm", "."):
    p = os.path.join(d, ".r"); open(p, "w").close(); out.append(os.stat(p).st_ino); os.unlink(p)
print(out)
"""


def test_an_inode_counter_set_by_one_run_is_not_read_by_the_next(sbx):
    """The red team's channel: run N sets each tmpfs's inode counter to a secret with a
    create/unlink loop, run N+1 reads it with one ``stat``. It reads what a fresh server reads."""
    fresh = sbx.run(_INO_GET)
    assert fresh.status == "ok", fresh
    secret = secrets.randbelow(3000) + 50
    assert sbx.run(_INO_SET.format(k=secret), timeout_s=20).status == "ok"
    assert sbx.run(_INO_GET).stdout == fresh.stdout


def test_docker_where_runs_cannot_have_namespaces_gets_a_fresh_container_each(tmp_path):
    """Docker's own default profile (no ``unshare``/``mount``): the fork-server cannot isolate
    runs, so the sandbox says why and gives every run a container no run used; the pid and
    inode counters carry nothing. (A ``docker exec``'s own pid varies by one or two with
    runc's start-up in the container: pids are compared within that.)"""
    import json

    from flowzoo.sandbox import docker

    profile = json.loads(docker.SECCOMP_PROFILE.read_text())
    profile["syscalls"] = [r for r in profile["syscalls"] if "unshare" not in r["names"]]
    (tmp_path / "default.json").write_text(json.dumps(profile))
    mp = pytest.MonkeyPatch()
    mp.setattr(docker, "SECCOMP_PROFILE", tmp_path / "default.json")
    try:
        s = _docker()
    finally:
        mp.undo()
    assert "unshare" in (s.shared_why or ""), s.shared_why
    _carries_nothing_across_containers(s)


def test_docker_without_a_fork_server_gets_a_fresh_container_each():
    """``forkserver=False``: a run is an exec into a container no run used (a run there is
    not pid 1 of its own namespace, so the pid matrix above does not apply; the counters
    are compared within runc's start-up noise)."""
    _carries_nothing_across_containers(_docker(forkserver=False))


def _carries_nothing_across_containers(s) -> None:
    try:
        assert not s.forkserver and s.fresh_containers, s.isolation
        assert "container-per-run" in s.isolation, s.isolation
        seen = []
        for k in (0, 23):
            assert s.run(_MAKE["forks"].format(k=k)).status == "ok"
            seen.append(eval(s.run(_PIDS).stdout))
        fresh = s.run(_INO_GET)
        assert s.run(_INO_SET.format(k=secrets.randbelow(3000) + 50)).status == "ok"
        after = s.run(_INO_GET)
    finally:
        s.close()
    # 23 forks in the run before would show as 23 more in every number
    assert all(abs(int(b) - int(a)) < 5 for a, b in zip(*seen, strict=True) if a is not None), seen
    assert fresh.status == "ok" and fresh.stdout == after.stdout, (fresh, after)
