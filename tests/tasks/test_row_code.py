"""A row's own test code is untrusted: it runs confined, in a sandbox run of its own (every
attack here uses code a plain row, replayed in the judge's process, may not hold).

Each attack is placed where a dataset puts code (MBPP ``test_setup_code``, a HumanEval
prompt helper, a test statement, a HumanEval ``check`` function), on every sandbox mode that
works here. Reads, sockets, shells and the trainer's identity: the probe's case fails (and
the same probe run on the host, in this process, succeeds: the probes are real). Writes:
no file appears on the host. An honest row still scores a correct program 1, a wrong one 0.
"""

from __future__ import annotations

import os
import pwd
import socket
import textwrap
import uuid
from pathlib import Path

import pytest

import flowzoo
from flowzoo.sandbox import get_sandbox
from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily, judge, replay_reply, replay_worker
from flowzoo.tasks.code.judge import replay
from flowzoo.tasks.code.testcode import judge_spec

REPO = str(Path(flowzoo.__file__).resolve().parents[1])
SETUP_CFG = os.path.join(REPO, "setup.cfg")
RIGHT = "```python\ndef f(x):\n    return x + 1\n```"
WRONG = "```python\ndef f(x):\n    return x\n```"
CANARY = "assert f(1) == 2"
PLACEMENTS = ("setup", "prompt", "case", "check")


@pytest.fixture(
    scope="module",
    params=["process", "process-spawn", pytest.param("docker", marks=pytest.mark.docker)],
)
def sbx(request):
    """Every mode, as tests/sandbox/conftest.py: fork-server, a fresh sandbox per run, Docker."""
    if request.param == "docker":
        from flowzoo.sandbox.docker import docker_unavailable_reason

        why = docker_unavailable_reason()
        if why:
            pytest.skip(f"no Docker engine: {why}")
        s = get_sandbox("docker", timeout_s=5, memory_mb=256, pool_size=2)
    else:
        fork = request.param == "process"
        s = get_sandbox("process", timeout_s=5, memory_mb=256, forkserver=fork)
    yield s
    s.close()


def _cmdline() -> bytes:
    with open("/proc/self/cmdline", "rb") as f:
        return f.read()


class Host:
    """What a row would reach on the host: listeners, a secret, the trainer's cwd and env."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tag = uuid.uuid4().hex[:12]
        self.cwd = tmp / "cwd"
        self.cwd.mkdir()
        monkeypatch.chdir(self.cwd)
        home = tmp / "home"
        (home / ".ssh").mkdir(parents=True)
        self.secret = home / ".ssh" / "id_rsa"
        self.secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
        monkeypatch.setenv("HOME", str(home))
        self.canary = "canary-" + self.tag
        monkeypatch.setenv("FZ_ROW_CANARY", self.canary)
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix_path = str(tmp / "u.sock")
        self.unix.bind(self.unix_path)
        self.unix.listen()
        for s in (self.tcp, self.udp, self.unix):
            s.setblocking(False)
        # the trainer's own home (HOME above is a stand-in with the secret)
        self.real_home = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, f".fz-row-{self.tag}")
        #: host paths a row's writes aim at: the trainer's cwd, home, /tmp, the checkout
        self.targets = [
            self.cwd / f"rel-{self.tag}",
            self.cwd / f"abs-{self.tag}",
            home / f"home-{self.tag}",
            Path(self.real_home),
            Path(f"/tmp/fz-row-{self.tag}"),
            Path(REPO) / f".fz-row-{self.tag}",
            self.cwd / f"sh-{self.tag}",
            Path(f"/tmp/fz-row-sh-{self.tag}"),
        ]

    def probes(self) -> dict[str, str]:
        """Probe bodies: True when the attack got through."""
        tcp_port, udp_port = self.tcp.getsockname()[1], self.udp.getsockname()[1]
        return {
            "read_checkout": f"return len(open({SETUP_CFG!r}).read()) > 0",
            "list_checkout": f"import os\nreturn len(os.listdir({REPO!r})) > 0",
            "read_secret": f"return 'BEGIN' in open({str(self.secret)!r}).read()",
            "read_home_ssh": "import os\n"
            "return 'BEGIN' in open(os.path.expanduser('~/.ssh/id_rsa')).read()",
            "trainer_env": f"import os\nreturn os.environ.get('FZ_ROW_CANARY') == {self.canary!r}",
            # the trainer's own command line, read through its pid (a pytest-xdist worker's
            # names no pytest: compared whole)
            "trainer_proc": f"return open('/proc/{os.getpid()}/cmdline', 'rb').read() == {_cmdline()!r}",
            "trainer_uid": f"import os\nreturn os.getuid() == {os.getuid()}",
            "tcp_local": "import socket\n"
            f"socket.create_connection(('127.0.0.1', {tcp_port}), timeout=2).close()\nreturn True",
            "unix_socket": "import socket\ns = socket.socket(socket.AF_UNIX)\ns.settimeout(2)\n"
            f"s.connect({self.unix_path!r})\nreturn True",
            "shell_read": "import subprocess\n"
            f"r = subprocess.run(['/bin/sh', '-c', 'cat {SETUP_CFG}'], capture_output=True,\n"
            "                   timeout=5)\n"
            "return len(r.stdout) > 0",
            "os_system": f"import os\nreturn os.system('cat {SETUP_CFG} > /dev/null') == 0",
            "udp_local": "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"s.sendto(b'row', ('127.0.0.1', {udp_port}))\nreturn False",
            "tcp_external": "import socket\n"
            "socket.create_connection(('1.1.1.1', 53), timeout=2).close()\nreturn True",
        }

    def writes(self) -> list[str]:
        """Attempts to write each target: plain, absolute, through ``~``, a shell, a child."""
        t = self.targets
        return [
            f"open('rel-{self.tag}', 'w').write('row')",
            f"open({str(t[1])!r}, 'w').write('row')",
            f"import os\nopen(os.path.expanduser('~/home-{self.tag}'), 'w').write('row')",
            f"open({str(t[2])!r}, 'w').write('row')",
            f"open({str(t[3])!r}, 'w').write('row')",
            f"open({str(t[4])!r}, 'w').write('row')",
            f"open({str(t[5])!r}, 'w').write('row')",
            f"import os\nos.system('echo row > {t[6]}')",
            f"import subprocess\nsubprocess.run(['/bin/sh', '-c', 'echo row > {t[7]}'], timeout=5)",
            f"import os\nos.makedirs({str(self.cwd / ('dir-' + self.tag))!r})",
        ]

    def leaks(self) -> list[str]:
        """What reached the host: files written, connections or datagrams received."""
        out = [str(p) for p in [*self.targets, self.cwd / f"dir-{self.tag}"] if p.exists()]
        for name, sock in (("tcp", self.tcp), ("unix", self.unix)):
            try:
                sock.accept()[0].close()
                out.append(f"a {name} connection")
            except BlockingIOError:
                pass
        try:
            self.udp.recv(64)
            out.append("a datagram")
        except BlockingIOError:
            pass
        return out

    def close(self) -> None:
        for p in self.targets:  # only there if a test failed: never leave them behind
            if p.is_file():
                p.unlink()
        for s in (self.tcp, self.udp, self.unix):
            s.close()


@pytest.fixture
def host(tmp_path, monkeypatch):
    h = Host(tmp_path, monkeypatch)
    yield h
    h.close()


def _guarded(name: str, body: str) -> str:
    inner = textwrap.indent(body, " " * 8)
    return f"def probe_{name}():\n    try:\n{inner}\n    except Exception:\n        return False\n"


def _attempts(writes: list[str]) -> str:
    return "".join(
        f"try:\n{textwrap.indent(w, '    ')}\nexcept Exception:\n    pass\n" for w in writes
    )


def row(placement: str, probes: dict[str, str], writes: list[str], mark: str) -> Task:
    """A row with the probes (one test case each, after the canary) and the writes, placed
    where a dataset puts code."""
    defs = "".join(_guarded(n, b) for n, b in probes.items())
    meta = {"entry_point": "f", "setup": "", "prompt_code": ""}
    cases = [f"assert probe_{n}()" for n in probes]
    if placement == "setup":  # MBPP's test_setup_code: runs before every case
        meta["setup"] = f"# {mark}\n" + defs + _attempts(writes)
        tests = [CANARY, *cases]
    elif placement == "prompt":  # a HumanEval prompt's helper code
        meta["prompt_code"] = f"# {mark}\n" + defs + _attempts(writes)
        tests = [CANARY, *cases]
    elif placement == "case":  # a test statement
        tests = [CANARY] + [f"{_guarded(n, b)}assert probe_{n}()" for n, b in probes.items()]
        tests.append(f"# {mark}\n" + _attempts(writes) + "assert True")
    else:  # a HumanEval check(candidate), called on the entry point
        tests = [CANARY] + [
            f"def check(candidate):\n{textwrap.indent(_guarded(n, b), '    ')}"
            f"    assert candidate(1) == 2\n    assert probe_{n}()\ncheck(f)"
            for n, b in probes.items()
        ]
        tests.append(
            f"def check(candidate):\n{textwrap.indent(_attempts(writes), '    ')}"
            f"    assert candidate(1) == 2\ncheck(f)  # {mark}"
        )
    meta["tests"] = tests
    return Task(id=f"row-{placement}", question="q", family="code", meta=meta)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_rows_code_is_confined(sbx, host, placement):
    probes = host.probes()
    t = row(placement, probes, host.writes(), f"{sbx.name} {placement} {host.tag}")
    v = CodeFamily(sandbox=sbx).score(t, RIGHT)
    cases = v.details["cases"]
    assert cases[0][0], v.details  # the canary: the row ran, the candidate answered
    got = {n: c[0] for n, c in zip(probes, cases[1:], strict=False)}
    assert not any(got.values()), f"attacks that got through: {[n for n in got if got[n]]}"
    assert host.leaks() == []
    assert v.details["status"] == "ok" and not v.details["tamper"]


def test_the_probes_work_on_the_host(host):
    """The control: the same probes replayed in this process reach the host (what a row got
    before its code was confined), so the confinement test can fail."""
    probes = host.probes()
    probes.pop("tcp_external")  # this machine may have no network at all
    writes = host.writes()[:2]  # only the trainer's cwd (a temp dir): nothing else is touched
    t = row("setup", probes, writes, host.tag)
    m = t.meta
    spec = judge_spec("f", m["prompt_code"], m["setup"], tuple(m["tests"]))
    results, _ = replay(spec, {})
    got = {n: c.passed for n, c in zip(probes, results[1:], strict=False)}
    probes_through = {n for n, ok in got.items() if ok}
    assert probes_through == set(probes) - {"udp_local"}, got
    leaks = host.leaks()
    for what in (str(host.targets[0]), str(host.targets[1]), "a tcp connection", "a datagram"):
        assert what in leaks


def test_an_honest_row_still_judges(sbx):
    """HumanEval-style (a prompt helper, a check function) and MBPP-style (setup code, test
    statements) rows: a correct program scores 1, a wrong one 0, in every mode."""
    helper = "def shift(s):\n    return ''.join(chr(ord(c) + 1) for c in s)\n"
    he = Task(
        id="he",
        question="q",
        family="code",
        meta={
            "entry_point": "unshift",
            "prompt_code": helper,
            "setup": "",
            "tests": [
                "def check(candidate):\n    for s in ['abc', 'xyz', '']:\n"
                "        assert candidate(shift(s)) == s\ncheck(unshift)"
            ],
        },
    )
    mbpp = Task(
        id="mbpp",
        question="q",
        family="code",
        meta={
            "entry_point": "area",
            "prompt_code": "",
            "setup": "import math\nR = [1, 2, 3]",
            "tests": [f"assert math.isclose(area({r}), math.pi * {r} ** 2)" for r in (1, 2, 3)],
        },
    )
    good_he = "```python\ndef unshift(s):\n    return ''.join(chr(ord(c) - 1) for c in s)\n```"
    bad_he = "```python\ndef unshift(s):\n    return s\n```"
    good_mbpp = "```python\nimport math\ndef area(r):\n    return math.pi * r * r\n```"
    bad_mbpp = "```python\ndef area(r):\n    return 3.14 * r * r\n```"
    fam = CodeFamily(sandbox=sbx)
    got = fam.score_pairs([(he, good_he), (he, bad_he), (mbpp, good_mbpp), (mbpp, bad_mbpp)])
    assert [v.score for v in got] == [1.0, 0.0, 1.0, 0.0], [v.reason for v in got]


@pytest.mark.parametrize(
    "setup",
    [
        "import os\nos._exit(0)",  # ends its run before the judge's reply
        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'junk\\n')\n"
        "    except OSError:\n        pass",  # writes garbage on every fd it may hold
        "import sys\nsys.stdout.write('x' * 3_000_000)",  # floods what it prints
        "import time\ntime.sleep(600)",  # blocks past the limit
    ],
)
def test_a_row_breaking_its_own_replay_fails_its_cases(setup, monkeypatch):
    """A row's code that kills, garbles, floods or blocks its replay: every case fails (or,
    for what only went to its own prints, the replay still answers); the judge carries on."""
    monkeypatch.setattr(judge, "REPLAY_LIMIT_S", 2.0)
    monkeypatch.setattr(replay_worker, "GRACE_S", 1.0)
    t = Task(
        id="broken",
        question="q",
        family="code",
        meta={"entry_point": "f", "setup": setup, "prompt_code": "", "tests": [CANARY]},
    )
    fam = CodeFamily(sandbox_options={"timeout_s": 5})
    try:
        v = fam.score(t, RIGHT)
        if "stdout" in setup:
            assert v.correct, v.details
        else:
            assert not v.correct and v.reason == "judge_limit:replay_killed", v.details
        ok = Task(id="ok", question="q", family="code", meta={**t.meta, "setup": ""})
        assert fam.score(ok, RIGHT).correct
    finally:
        fam.sandbox.close()


def test_the_replay_loads_from_source_where_the_sandbox_runs_another_python():
    """The shipped modules' compiled code is for this interpreter build: under another
    Python (a Docker image of one's own) the run imports their source instead."""
    import json

    source = ("f", "", "", ("assert f(1) == 2",))
    main, files = replay_worker.request(source, {}, 100, 10.0)
    bundle = json.loads(files["compiled.json"])
    files = {**files, "compiled.json": json.dumps({**bundle, "python": "2.7.18"})}
    sbx = get_sandbox("process", timeout_s=10)
    try:
        res = sbx.run(main, files=files, timeout_s=10)
    finally:
        sbx.close()
    cases, calls, keys, _ = replay_reply.read_reply(res.stdout, 1, 100, source)
    assert cases == [None] and calls == [["f", [1], {}]] and len(keys) == 1, res.stderr
