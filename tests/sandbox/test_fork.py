"""A code env judged in a parent process and used again in a forked child (``os.fork``,
``multiprocessing`` with the ``fork`` start method): the child's verdicts are right and come
in bounded time, and the parent's next programs are judged right afterwards (a correct one
scores 1, a wrong one 0), whatever the child did with the sandbox it inherited: judged and
exited normally (atexit finalizers), ended with ``os._exit``, closed the sandbox, forked again,
or was forked while a parent thread was mid-run. Real sandbox processes throughout (bubblewrap
or unshare, fork-server and fresh sandbox per run; Docker where an engine answers)."""

from __future__ import annotations

import atexit
import itertools
import json
import multiprocessing
import os
import signal
import threading
import time

import pytest

from flowzoo.sandbox import Job, get_sandbox
from flowzoo.sandbox.process import probe
from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily

#: the child's verdict must come in this long (a fresh server starts in about a second)
CHILD_LIMIT_S = 60

CALL = Task(
    id="fork-call",
    question="double",
    family="code",
    answer="def f(x):\n    return 2 * x\n",
    meta={"entry_point": "f", "tests": ["assert f(2) == 4", "assert f(5) == 10"], "setup": ""},
)
STDIO = Task(
    id="fork-stdio",
    question="sum",
    family="code",
    answer="print(sum(map(int, input().split())))\n",
    meta={"format": "stdio", "tests": [["1 2\n", "3\n"], ["4 5\n", "9\n"]]},
)

MODES = {
    "bwrap-forkserver": {},
    "bwrap-fresh-per-run": {"forkserver": False},
    "unshare-forkserver": {"mechanism": "unshare", "allow_weak_isolation": True},
}
_fresh = itertools.count()


def _needs(options: dict) -> None:
    mech = options.get("mechanism", "bwrap")
    if not probe(mech):
        pytest.skip(f"the {mech} mechanism does not work on this machine")


def good(task: Task) -> str:
    """A correct completion, new text each time (the verdict memo never answers it)."""
    return f"```python\n{task.answer}# {next(_fresh)}-{os.getpid()}\n```"


def bad(task: Task) -> str:
    src = "print(0)\n" if task.meta.get("format") == "stdio" else "def f(x):\n    return x\n"
    return f"```python\n{src}# {next(_fresh)}-{os.getpid()}\n```"


def _child_scores(fam: CodeFamily) -> list[float]:
    """What the child does: judge a correct and a wrong program of each task."""
    return [fam.score(t, make(t)).score for t in (CALL, STDIO) for make in (good, bad)]


EXPECTED = [1.0, 0.0, 1.0, 0.0]


def _parent_after(fam: CodeFamily) -> None:
    for t in (CALL, STDIO):
        v = fam.score(t, good(t))
        assert v.score == 1.0, (t.id, v.reason, v.details.get("stderr"))
        assert fam.score(t, bad(t)).score == 0.0


def _wait(pid: int, limit: float) -> int:
    """The child's exit status, or kill it and fail past ``limit`` (a hang)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child hung past {limit} s")


def _fork_child(fam: CodeFamily, exit_how: str, before=None) -> list[float]:
    """Fork; the child judges and ends ``exit_how``; its scores come back over a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(r)
            signal.alarm(CHILD_LIMIT_S + 5)
            if before is not None:
                before(fam)
            t0 = time.monotonic()
            scores = _child_scores(fam)
            os.write(w, json.dumps([scores, time.monotonic() - t0]).encode())
            if exit_how == "close":
                fam.sandbox.close()
            code = 0
        finally:
            os.close(w)
            if exit_how in ("atexit", "close"):
                atexit._run_exitfuncs()  # what a normal exit runs (finalizers included)
            os._exit(code)
    os.close(w)
    status = _wait(pid, CHILD_LIMIT_S + 10)
    with os.fdopen(r, "rb") as f:
        raw = f.read()
    assert os.waitstatus_to_exitcode(status) == 0, raw
    scores, took = json.loads(raw)
    assert took < CHILD_LIMIT_S
    return scores


@pytest.fixture(params=list(MODES), scope="module")
def family(request):
    options = MODES[request.param]
    _needs(options)
    fam = CodeFamily("process", sandbox_options=dict(options))
    yield fam


@pytest.mark.parametrize("exit_how", ["atexit", "os_exit", "close"])
def test_os_fork_child_judges_and_parent_keeps_judging(family, exit_how):
    assert family.score(CALL, good(CALL)).score == 1.0  # the parent's servers are warm
    assert _fork_child(family, exit_how) == EXPECTED
    _parent_after(family)
    # a second fork from the same parent, after the first child is gone, works the same
    assert _fork_child(family, "atexit") == EXPECTED
    _parent_after(family)


def _mp_target(fam: CodeFamily, q) -> None:
    q.put(_child_scores(fam))


def _pool_job(options: dict) -> list[float]:
    # a Pool worker reaches the family through the process's shared sandbox, as an env does
    return _child_scores(CodeFamily("process", sandbox_options=dict(options)))


def test_multiprocessing_fork_process(family):
    assert family.score(STDIO, good(STDIO)).score == 1.0
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_mp_target, args=(family, q))
    p.start()
    try:
        scores = q.get(timeout=CHILD_LIMIT_S)
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    assert scores == EXPECTED and p.exitcode == 0
    _parent_after(family)


def test_multiprocessing_fork_pool(family):
    options = dict(family.sandbox_options)
    assert _pool_job(options) == EXPECTED  # the same shared sandbox, warm in the parent
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        jobs = [pool.apply_async(_pool_job, (options,)) for _ in range(3)]
        assert [j.get(timeout=CHILD_LIMIT_S) for j in jobs] == [EXPECTED] * 3
    _parent_after(family)


def test_fork_while_a_parent_thread_is_mid_run(family):
    """A parent thread keeps a sandbox run going (and the pool's and memo's locks busy)
    while the parent forks: the child neither waits on a lock that thread held nor talks to
    its server, and that thread's run and the parent's later ones are judged right."""
    slow = Task(
        id="fork-slow",
        question="q",
        family="code",
        answer="import time\ndef f(x):\n    time.sleep(0.3)\n    return 2 * x\n",
        meta=dict(CALL.meta),
    )
    stop = threading.Event()
    seen: list[float] = []

    def busy() -> None:
        while not stop.is_set():
            seen.append(family.score(slow, good(slow)).score)

    th = threading.Thread(target=busy, daemon=True)
    th.start()
    try:
        time.sleep(0.5)
        for _ in range(3):
            assert _fork_child(family, "atexit") == EXPECTED
            time.sleep(0.1)
    finally:
        stop.set()
        th.join(60)
    assert seen and set(seen) == {1.0}
    _parent_after(family)


def test_fork_while_a_parent_thread_sends_a_large_program():
    """Forks that land while other threads are sending large programs to their servers:
    neither the child (its own server) nor those threads' runs (their servers, the parent's)
    are disturbed. (Requests go to a server's pipe unbuffered, so no file lock is held by a
    thread the child will not have; Docker's child forgets busy servers too.)"""
    sbx = get_sandbox("process", timeout_s=20, memory_mb=256)
    big = "x = 1\n" + "#" * (8 << 20) + "\nprint(x)\n"  # 8 MiB: the write takes a while
    stop = threading.Event()
    outs: list[str] = []

    def send() -> None:
        while not stop.is_set():
            outs.append(sbx.run(big).stdout)

    threads = [threading.Thread(target=send, daemon=True) for _ in range(2)]
    for th in threads:
        th.start()
    try:
        for _ in range(12):
            time.sleep(0.05)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    signal.alarm(CHILD_LIMIT_S)
                    code = 0 if sbx.run("print(5)").stdout == "5\n" else 6
                finally:
                    os._exit(code)
            assert os.waitstatus_to_exitcode(_wait(pid, CHILD_LIMIT_S)) == 0
    finally:
        stop.set()
        for th in threads:
            th.join(60)
        sbx.close()
    assert outs and set(outs) == {"1\n"}


def test_a_grandchild_judges_too(family):
    def fork_again(fam: CodeFamily) -> None:
        assert _child_scores(fam) == EXPECTED
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if _child_scores(fam) == EXPECTED else 3
            finally:
                atexit._run_exitfuncs()
                os._exit(code)
        assert os.waitstatus_to_exitcode(_wait(pid, CHILD_LIMIT_S)) == 0

    assert _fork_child(family, "atexit", before=fork_again) == EXPECTED
    _parent_after(family)


def test_a_child_never_kills_or_talks_to_the_parents_servers():
    """At the sandbox level: the idle servers the child inherited are alive after the child
    ran, closed its sandbox and exited; the parent's next runs use them."""
    sbx = get_sandbox("process", timeout_s=10, memory_mb=256)
    try:
        res = sbx.run_many([Job("print(1)")] * 2, 2)
        assert [r.stdout for r in res] == ["1\n", "1\n"]
        servers = list(sbx._idle)
        assert servers and all(s.alive for s in servers)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                r = sbx.run("import os\nprint(os.getpid())", timeout_s=10)
                code = 0 if r.ok and r.stdout.strip() == "2" else 4
                sbx.close()
            finally:
                atexit._run_exitfuncs()
                os._exit(code)
        assert os.waitstatus_to_exitcode(_wait(pid, CHILD_LIMIT_S)) == 0
        assert all(s.alive for s in servers)  # not killed by the child's close or exit
        assert sbx.run("print(2)").stdout == "2\n"
        assert {id(s) for s in sbx._idle} & {id(s) for s in servers}  # reused, not replaced
    finally:
        sbx.close()


@pytest.mark.docker
def test_docker_sandbox_in_a_forked_child():
    from flowzoo.sandbox.docker import docker_unavailable_reason

    why = docker_unavailable_reason()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    sbx = get_sandbox("docker", timeout_s=10, memory_mb=256, pool_size=1)
    try:
        assert sbx.run("print(1)").stdout == "1\n"
        parents = set(sbx._all)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                r = sbx.run("print(3)")
                code = 0 if r.ok and r.stdout == "3\n" and not set(sbx._all) & parents else 5
            finally:
                atexit._run_exitfuncs()  # removes the child's containers, not the parent's
                os._exit(code)
        assert os.waitstatus_to_exitcode(_wait(pid, CHILD_LIMIT_S * 2)) == 0
        assert set(sbx._all) == parents
        assert sbx.run("print(2)").stdout == "2\n"
    finally:
        sbx.close()
