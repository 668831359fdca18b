"""A run's program can make no namespace and change no mount, in every mode (``guard.py``'s
second seccomp filter). Why: a user namespace makes its creator root over what it mounts
there; a program that could ``unshare`` mounted the cgroup file systems, lifted its own
``pids.max``, made dirs in the host's cgroup tree and read counters the previous run of its
container moved. The fork-server and each run's init still make theirs (runs work at all).

Each probe runs in a child of its own and reports ``ok`` or the errno's name. Several probes
are built so the kernel alone would answer something else (``unshare(0)`` succeeds, a bad
pointer is EFAULT, bad flags EINVAL): only the filter answers EPERM to all of them."""

import os
import secrets
import textwrap

import pytest

from flowzoo.sandbox import get_sandbox
from flowzoo.sandbox.base import classify
from flowzoo.sandbox.guard import _FZ_UNFILTERED_EXIT, _FZ_UNFILTERED_MARK
from flowzoo.sandbox.process import probe
from tests.sandbox.modes import DOCKER_MODES, PROCESS_MODES

MODES = PROCESS_MODES + DOCKER_MODES


def _docker(fork: bool):
    from flowzoo.sandbox.docker import docker_unavailable_reason

    why = docker_unavailable_reason()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    return get_sandbox("docker", pool_size=1, forkserver=fork, timeout_s=20)


@pytest.fixture(scope="module", params=MODES, ids=lambda m: f"{m[0]}-{'fork' if m[1] else 'spawn'}")
def sbx(request):
    mechanism, fork = request.param
    if mechanism == "docker":
        s = _docker(fork)
    elif not probe(mechanism):
        pytest.skip(f"{mechanism} does not work here")
    else:
        s = get_sandbox(
            "process",
            mechanism=mechanism,
            forkserver=fork,
            allow_weak_isolation=True,
            workers=1,
            timeout_s=20,
        )
    yield s
    s.close()


_HARNESS = r'''
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ARCH = os.uname().machine
NR = {"x86_64": {"clone": 56, "pivot_root": 155}, "aarch64": {"clone": 220, "pivot_root": 41}}[ARCH]
NEW = {"NEWNS": 0x20000, "NEWCGROUP": 0x02000000, "NEWUTS": 0x04000000, "NEWIPC": 0x08000000,
       "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000, "NEWTIME": 0x80}
USER = NEW["NEWUSER"]
AT_FDCWD = -100


def call(fn):
    """fn() in a child of its own: "ok" or the errno's name (a new process it made exits)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            ctypes.set_errno(0)
            rc = fn()
            out = "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
        except OSError as e:
            out = errno.errorcode.get(e.errno, "?")
        except BaseException as e:
            out = repr(e)
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    out = os.read(r, 200).decode()
    os.close(r)
    return out


def forked(rc):
    if rc == 0:  # the new process (the call worked): it must not go on
        os._exit(0)
    return rc


def as_root(flags):
    """unshare(flags) with a user namespace, root in it as the red team did; unshare's rc."""
    libc.prctl(4, 1, 0, 0, 0)
    rc = libc.unshare(flags)
    if rc == 0:
        for name, text in (("setgroups", "deny"), ("uid_map", "0 65534 1"), ("gid_map", "0 65534 1")):
            try:
                with open("/proc/self/" + name, "w") as f:
                    f.write(text)
            except OSError:
                pass
    return rc


def mount_as_root(fstype, data=None):
    as_root(USER | NEW["NEWNS"] | NEW["NEWCGROUP"])
    d = "/tmp/fz-mnt-" + fstype
    os.makedirs(d, exist_ok=True)
    return libc.mount(fstype.encode(), d.encode(), fstype.encode(), 0, data)
'''


def _run(sbx, body: str):
    r = sbx.run(_HARNESS + textwrap.dedent(body))
    assert r.status == "ok", r
    return r


_PROBES = """
import json
class ArgsV2(ctypes.Structure):  # struct clone_args (88 bytes)
    _fields_ = [(n, ctypes.c_uint64) for n in ("flags", "pidfd", "child_tid", "parent_tid",
        "exit_signal", "stack", "stack_size", "tls", "set_tid", "set_tid_size", "cgroup")]
def clone3(flags):
    a = ArgsV2(flags=flags, exit_signal=17)
    return forked(libc.syscall(435, ctypes.byref(a), ctypes.c_size_t(88)))
def nsfd(name):
    return os.open("/proc/self/ns/" + name, os.O_RDONLY)
p = {}
for name, flag in NEW.items():
    p["unshare_" + name] = call(lambda: libc.unshare(flag))
    p["unshare_USER+" + name] = call(lambda: as_root(USER | flag))
    p["clone_" + name] = call(lambda: forked(libc.syscall(NR["clone"], USER | flag | 17, 0, 0, 0, 0)))
p["unshare_nothing"] = call(lambda: libc.unshare(0))  # the kernel: ok
p["unshare_bad_flag"] = call(lambda: libc.unshare(1))  # the kernel: EINVAL
p["clone3_USER"] = call(lambda: clone3(USER))
p["clone3_plain"] = call(lambda: clone3(0))
for fstype, data in (("cgroup", b"pids"), ("cgroup", b"memory"), ("cgroup2", None),
                     ("tmpfs", None), ("proc", None)):
    p["mount_%s_%s" % (fstype, data)] = call(lambda: mount_as_root(fstype, data))
p["mount_bad_pointer"] = call(lambda: libc.mount(None, b"/tmp", ctypes.c_void_p(1), 0, None))
p["umount2_bad_flags"] = call(lambda: libc.umount2(b"/tmp", 0xFF00))  # the kernel: EINVAL
p["umount2_tmp"] = call(lambda: (as_root(USER | NEW["NEWNS"]), libc.umount2(b"/tmp", 2))[1])
p["chroot_missing"] = call(lambda: libc.chroot(b"/fz-no-such-dir"))  # the kernel: ENOENT
p["pivot_root"] = call(lambda: (as_root(USER | NEW["NEWNS"]),
                                libc.syscall(NR["pivot_root"], b"/tmp", b"/tmp"))[1])
p["setns_bad_fd"] = call(lambda: libc.setns(-1, 0))  # the kernel: EBADF
for ns in ("user", "mnt", "net", "pid", "cgroup"):
    p["setns_" + ns] = call(lambda: libc.setns(nsfd(ns), 0))
# the new mount API (one table on every machine); open_tree without a clone is an O_PATH
# fd to the kernel, a bad fd or flags EBADF/EINVAL
p["open_tree"] = call(lambda: libc.syscall(428, AT_FDCWD, b"/", 0))
p["open_tree_clone"] = call(lambda: (as_root(USER | NEW["NEWNS"]),
                                     libc.syscall(428, AT_FDCWD, b"/tmp", 1))[1])
p["move_mount"] = call(lambda: libc.syscall(429, -1, b"", AT_FDCWD, b"/tmp", 4))
p["fsopen"] = call(lambda: (as_root(USER | NEW["NEWNS"]), libc.syscall(430, b"tmpfs", 0))[1])
p["fsconfig"] = call(lambda: libc.syscall(431, -1, 0, None, None, 0))
p["fsmount"] = call(lambda: libc.syscall(432, -1, 0, 0))
p["fspick"] = call(lambda: libc.syscall(433, AT_FDCWD, b"/tmp", 0))
p["mount_setattr"] = call(lambda: libc.syscall(442, -1, None, 0, None, 0))
p["open_tree_attr"] = call(lambda: libc.syscall(467, AT_FDCWD, b"/", 0, None, 0))
print(json.dumps(p))
"""


def test_no_namespace_and_no_mount_can_be_made(sbx):
    import json

    got = json.loads(_run(sbx, _PROBES).stdout)
    want = {k: ("ENOSYS" if k.startswith("clone3") else "EPERM") for k in got}
    assert len(got) == 53 and got == want, {k: v for k, v in got.items() if v != want[k]}


def test_children_and_exec_keep_the_filter(sbx):
    """A forked, threaded or exec'd process of the program is no way out: the filter is
    inherited; and every process the program can see holds a seccomp filter (none it could
    ptrace into making a namespace for it)."""
    body = """
    import subprocess, sys, threading
    sub = subprocess.run([sys.executable, "-I", "-S", "-c",
        "import ctypes, errno; l = ctypes.CDLL(None, use_errno=True); "
        "print(l.unshare(0x10000000), errno.errorcode[ctypes.get_errno()])"],
        capture_output=True, text=True)
    box = []
    t = threading.Thread(target=lambda: box.append(call(lambda: libc.unshare(USER))))
    t.start(); t.join()
    seen = {}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open("/proc/%s/status" % pid) as f:
                seen[pid] = [ln.split()[1] for ln in f if ln.startswith("Seccomp:")]
        except OSError:
            pass
    print(json.dumps([sub.stdout.strip(), box, sorted(set(map(tuple, seen.values())))]))
    """
    import json

    sub, threaded, modes = json.loads(_run(sbx, body).stdout)
    assert sub == "-1 EPERM" and threaded == ["EPERM"], (sub, threaded)
    assert modes == [["2"]], modes  # filter mode for every process in view


def _cgroup_dirs(token: str) -> list[str]:
    return [d for d, _, _ in os.walk("/sys/fs/cgroup") if token in os.path.basename(d)]


def test_the_cgroup_limits_and_tree_stay_out_of_reach(sbx):
    """The red team's run: mount every cgroup hierarchy, lift pids.max, join the root, make a
    dir in the host's tree, then fork past the cap. The cap holds; the host gains no dir."""
    token = "fz-escape-" + secrets.token_hex(6)
    body = f"""
    import time
    as_root(USER | NEW["NEWNS"] | NEW["NEWCGROUP"])
    for fstype, data in (("cgroup", b"pids"), ("cgroup", b"memory"), ("cgroup2", None)):
        d = "/tmp/fz-" + fstype + str(data)
        os.makedirs(d, exist_ok=True)
        libc.mount(fstype.encode(), d.encode(), fstype.encode(), 0, data)
        for name, value in (("pids.max", "max"), ("cgroup.procs", str(os.getpid()))):
            try:
                with open(d + "/" + name, "w") as f:
                    f.write(value)
            except OSError:
                pass
        try:
            os.mkdir(d + "/{token}")
        except OSError:
            pass
        # (a plain dir in the run's own /tmp when nothing was mounted: harmless)
    kids = []
    for _ in range(150):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(2)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    print(len(kids))
    """
    assert not _cgroup_dirs(token)
    made = int(_run(sbx, body).stdout)
    assert made < 100, made  # the sandbox's process cap (64 here) held
    assert not _cgroup_dirs(token)


_COUNTERS = """
def counters():
    # what a run could read of its sandbox's cgroup counters: mounted in namespaces of its
    # own (the red team's way), or shown in the container's /sys/fs/cgroup
    seen = []
    for d in ("/sys/fs/cgroup", "/tmp/fz-cg"):
        for f in ("pids/pids.events", "memory/memory.max_usage_in_bytes", "pids.events",
                  "memory.peak", "memory.events"):
            try:
                with open(d + "/" + f) as fh:
                    seen.append(fh.read().strip())
            except OSError:
                pass
    return seen

def mounted():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        as_root(USER | NEW["NEWNS"] | NEW["NEWCGROUP"])
        for c in ("pids", "memory"):
            os.makedirs("/tmp/fz-cg/" + c, exist_ok=True)
            libc.mount(b"cgroup", ("/tmp/fz-cg/" + c).encode(), b"cgroup", 0, c.encode())
        os.write(w, json.dumps(counters()).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    return json.loads(os.read(r, 4000) or b"[]")

import json
MODE = "{mode}"
if MODE == "write":  # moves the counters: hits the pids cap 37 times, peaks the memory
    import time
    block = bytearray(96 << 20)
    kids, fails = [], 0
    while fails < 37:
        try:
            pid = os.fork()
        except OSError:
            fails += 1
            continue
        if pid == 0:
            time.sleep(5)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
print(json.dumps([counters(), mounted()]))
"""


def test_the_next_run_reads_no_counter_a_run_moved(sbx):
    """Docker's carry-over channel: a run's cgroup counters (pids.events, the memory peak)
    read the same after a run that moved them as before it."""
    before = _run(sbx, _COUNTERS.replace("{mode}", "read")).stdout
    _run(sbx, _COUNTERS.replace("{mode}", "write"))
    after = _run(sbx, _COUNTERS.replace("{mode}", "read")).stdout
    assert before == after, (before, after)


def test_programs_still_fork_thread_and_spawn(sbx):
    body = """
    import multiprocessing, subprocess, sys, threading
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    forked_rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    out = []
    ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    sub = subprocess.run([sys.executable, "-I", "-S", "-c", "print(6 * 7)"],
                         capture_output=True, text=True).stdout.strip()
    with multiprocessing.Pool(2) as pool:
        mp = pool.map(abs, [-1, -2, -3])
    print(forked_rc, sorted(out) == list(range(8)), sub, mp)
    """
    r = _run(sbx, body)
    assert r.stdout.strip() == "7 True 42 [1, 2, 3]", r


# ------------------------------------------------------------------ no filter, no program
_NO_FILTER = "\ndef _fz_deny_namespaces():\n    return False\n"


@pytest.mark.parametrize("fork", [True, False], ids=["fork", "spawn"])
def test_a_run_that_cannot_be_filtered_is_a_sandbox_error(monkeypatch, fork):
    """Where the filter cannot be installed the program never runs: the start code (spawn) or
    the fork-server's trial run (which then refuses to serve) says so, never an unfiltered
    run. The failure is made real by start code whose installer fails."""
    from flowzoo.sandbox import forkserver, process

    if not probe("bwrap"):  # (cached before the start code is broken)
        pytest.skip("bubblewrap does not work here")
    monkeypatch.setattr(process, "GUARD_SOURCE", process.GUARD_SOURCE + _NO_FILTER)
    src = forkserver.SERVER_SOURCE.replace(
        forkserver.GUARD_SOURCE, forkserver.GUARD_SOURCE + _NO_FILTER, 1
    )
    monkeypatch.setattr(forkserver, "SERVER_SOURCE", src)
    s = get_sandbox("process", mechanism="bwrap", forkserver=fork, timeout_s=20)
    try:
        r = s.run("open('/tmp/ran', 'w').write('x')\nprint('the program ran')")
    finally:
        s.close()
    assert r.status == "sandbox_error" and "the program ran" not in r.stdout, r


def test_only_the_start_codes_mark_reads_as_a_sandbox_error():
    mark = _FZ_UNFILTERED_MARK + "\n"
    assert classify(_FZ_UNFILTERED_EXIT, None, mark, False) == "sandbox_error"
    assert classify(_FZ_UNFILTERED_EXIT, None, "boom\n" + mark, False) == "error"
    assert classify(1, None, mark, False) == "error"
