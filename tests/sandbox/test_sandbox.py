"""Hostile programs against every sandbox backend that works here (Docker skips with the
reason when no engine answers). Each must be contained and reported, the host unaffected,
nothing left running. Isolation between runs: ``test_isolation.py``."""

import os
import time
import uuid

import pytest

from flowzoo.sandbox import STATUSES, Job, SandboxUnavailable, get_sandbox
from flowzoo.sandbox.process import probe
from tests.sandbox.conftest import _procs_with


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


def test_a_large_output_under_a_large_cap_comes_back_whole():
    """64 MB of output under a 64 MB cap: the host reads it in one pass (it grew the reply's
    buffer by copying it on every read, so a 48 MB output ran out of time)."""
    sb = get_sandbox("process", max_output_bytes=64 << 20, memory_mb=1024, timeout_s=60)
    try:
        r = sb.run('import os\nb = b"x" * (1 << 20)\nfor _ in range(64):\n    os.write(1, b)')
        assert r.status == "ok" and len(r.stdout) == 64 << 20 and not r.truncated, r.stderr[-300:]
    finally:
        sb.close()


@pytest.mark.parametrize("forkserver", [True, False])
def test_a_request_near_the_memory_limit_runs_and_one_past_the_disk_is_refused(forkserver):
    """A 40 MB file and 12 MB of stdin under a 128 MB memory limit run as without the
    fork-server (whose run read the request whole into its memory: killed before the program
    started, a bare ``error``); a request past the run's disk (its files in whole pages) is
    refused before the run, with its size, in either mode (it was ``sandbox_error``,
    ``error`` or ``killed`` by size); one that fills the disk exactly runs."""
    sb = get_sandbox("process", forkserver=forkserver, memory_mb=128, timeout_s=30)
    src = "import os, sys\nprint(os.path.getsize('big.txt'), len(sys.stdin.read()))"
    try:
        r = sb.run(src, files={"big.txt": "é" * (20 << 20)}, stdin="y" * (12 << 20))
        assert (r.status, r.stdout) == ("ok", f"{40 << 20} {12 << 20}\n"), r.stderr[-300:]
        many = {f"d{i % 50}/f{i}": "z" * 4097 for i in range(8200)}  # 32 MiB, 64 MiB of pages
        for files, stdin in (
            ({"big.txt": "x" * (60 << 20)}, "y" * (5 << 20)),
            ({}, "y" * (200 << 20)),
            (many, None),
        ):
            r = sb.run(src, files=files, stdin=stdin)
            assert r.status == "sandbox_error" and "MiB (" in r.stderr, (r.status, r.stderr)
        # what fits the disk's pages exactly runs (main.py takes one)
        big = {"a/b.bin": "x" * ((64 << 20) - 4096)}
        r = sb.run("import os\nprint(os.path.getsize('a/b.bin'))", files=big)
        assert (r.status, r.stdout) == ("ok", f"{(64 << 20) - 4096}\n"), r.stderr[-300:]
        assert sb.run("print(7)").stdout == "7\n"  # the sandbox goes on
    finally:
        sb.close()


@pytest.mark.docker
def test_docker_without_the_fork_server_refuses_a_request_its_exec_cannot_carry():
    """Without the fork-server a Docker run's request travels in one exec argument (at most
    128 KiB): past that it is refused with the sizes (it ended as ``error``, blamed on the
    program: "argument list too long"); the fork-server takes the same request."""
    from flowzoo.sandbox.docker import docker_unavailable_reason

    if why := docker_unavailable_reason():
        pytest.skip(why)
    src = "import os\nprint(os.path.getsize('f.txt'))"
    for forkserver, want in ((False, "sandbox_error"), (True, "ok")):
        sb = get_sandbox("docker", forkserver=forkserver, timeout_s=20, pool_size=1)
        try:
            r = sb.run(src, files={"f.txt": "a" * 200_000})
            assert r.status == want, (forkserver, r.status, r.stderr[-300:])
            assert forkserver or "exec argument" in r.stderr
            assert sb.run(src, files={"f.txt": "a" * 60_000}).stdout == "60000\n"
        finally:
            sb.close()


def test_stdin_reaches_the_program_as_a_fresh_interpreter_reads_it():
    """With and without the fork-server a program reads the same stdin: line endings as
    given (POSIX stdin translates none) and the same error handlers as a fresh interpreter;
    the fork-server translated ``\r\n`` and refused a lone surrogate."""
    prog = "import sys\nprint(repr(sys.stdin.read()), sys.stdin.errors, sys.stdout.errors)"
    got = {}
    for fork in (True, False):
        sb = get_sandbox("process", forkserver=fork)
        try:
            got[fork] = [sb.run(prog, stdin=x) for x in ("a\r\nb\rc\n", "x\ud800y", "é\n")]
        finally:
            sb.close()
    assert all(r.status == "ok" for rs in got.values() for r in rs), got
    assert [r.stdout for r in got[True]] == [r.stdout for r in got[False]]
    assert got[True][0].stdout.startswith(repr("a\r\nb\rc\n"))


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
