"""The documented weak mode (``mechanism="none"``, opt-in) started as root: the program runs
as uid 65534 (never root's uid, silently kept), can read the stdlib it imports, and the judge
decides right (a correct program 1, a wrong one 0) in every task format, with the fork-server
and without. Where the runtime that uid must read cannot be made safely, the sandbox refuses
to start and says what to use instead."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import warnings

import pytest

from flowzoo.sandbox import SandboxUnavailable, get_sandbox, runtime
from flowzoo.sandbox.mechanisms import _traversable_by_others
from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily
from tests.sandbox.test_fork import CALL, STDIO, bad, good

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop is root's (run as root)")

WEAK = {"mechanism": "none", "allow_weak_isolation": True}
SETUP = Task(
    id="weak-setup",
    question="scale",
    family="code",
    answer="def f(x):\n    return 7 * x\n",
    meta={"entry_point": "f", "tests": ["assert f(3) == 21", "assert f(0) == 0"],
          "setup": "import fractions, textwrap\nK = int(fractions.Fraction(14, 2))"},
)  # fmt: skip
#: stdlib modules no mode preloads, pure Python and extension modules alike
IMPORTS = (
    "textwrap dataclasses fractions decimal statistics typing collections.abc inspect ast "
    "unicodedata csv zoneinfo encodings.idna difflib pprint enum _decimal _csv"
).split()


def _quiet_sandbox(**options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_sandbox("process", timeout_s=10, **WEAK, **options)


@pytest.fixture(params=[True, False], ids=["forkserver", "fresh-per-run"], scope="module")
def weak(request):
    sbx = _quiet_sandbox(forkserver=request.param)
    yield sbx
    sbx.close()


def test_the_program_runs_as_nobody_and_reads_its_stdlib(weak, tmp_path):
    secret = tmp_path / "private" / "root-only"
    secret.parent.mkdir(mode=0o700)
    secret.write_text("s3cret")
    secret.chmod(0o600)
    prog = (
        "import os\n"
        f"import {', '.join(IMPORTS)}\n"
        "print(os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups())\n"
        "try:\n"
        f"    print(open({str(secret)!r}).read())\n"
        "except PermissionError:\n"
        "    print('denied')\n"
        "try:\n"
        "    os.setuid(0)\n"
        "    print('root again')\n"
        "except OSError:  # EPERM, or EINVAL in a run's own user namespace\n"
        "    print('stays nobody')\n"
    )
    r = weak.run(prog)
    assert r.ok, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["65534 65534 65534 65534 []", "denied", "stays nobody"]


def test_the_runtime_it_reads_is_roots_and_read_only_to_others(weak):
    rt = weak._runtime
    assert _traversable_by_others(os.path.join(rt, "usr", "lib"))
    assert runtime._unsafe_ancestor(rt) is None
    for root, _, files in os.walk(rt):
        for n in [root, *(os.path.join(root, f) for f in files)]:
            st = os.lstat(n)
            links = stat.S_ISLNK(st.st_mode)  # a link's own mode means nothing
            assert st.st_uid == 0 and (links or not st.st_mode & 0o022), n


@pytest.mark.parametrize("task", [CALL, STDIO, SETUP], ids=lambda t: t.id)
def test_the_judge_decides_under_the_weak_mode(weak, task):
    fam = CodeFamily(weak)
    v = fam.score(task, good(task))
    assert v.score == 1.0, (v.reason, v.details)
    assert fam.score(task, bad(task)).score == 0.0


@pytest.fixture
def public_root(monkeypatch):
    """Point the shared runtime somewhere else for one test (the cached one is restored)."""
    rt = runtime.runtime_dir()
    if _traversable_by_others(rt):
        pytest.skip(f"the private runtime {rt} is readable by others here: no shared copy needed")

    def use(path: str) -> None:
        monkeypatch.setattr(runtime, "PUBLIC_ROOT", path)
        runtime.public_runtime_dir.cache_clear()

    yield use
    monkeypatch.undo()
    runtime.public_runtime_dir.cache_clear()


def _refused() -> str:
    with pytest.raises(SandboxUnavailable) as e:
        _quiet_sandbox()
    msg = str(e.value)
    assert "uid 65534" in msg and "mechanism='bwrap'" in msg and "non-root" in msg
    return msg


def test_refuses_to_start_under_a_dir_others_may_write(public_root, tmp_path):
    target = tmp_path / "rt"  # /tmp is writable by everyone: another user could swap it
    public_root(str(target))
    assert "/tmp" in _refused()
    assert not target.exists()  # nothing was made under it


def test_refuses_to_start_under_a_dir_another_user_owns(public_root):
    owned = tempfile.mkdtemp(dir=os.path.expanduser("~"))
    try:
        os.chmod(owned, 0o755)
        os.chown(owned, 65534, 65534)
        public_root(os.path.join(owned, "rt"))
        assert owned in _refused()
        assert os.listdir(owned) == []
    finally:
        shutil.rmtree(owned)


def test_refuses_to_start_through_a_link(public_root):
    home = tempfile.mkdtemp(dir=os.path.expanduser("~"))
    try:
        os.symlink(home, os.path.join(home, "link"))
        public_root(os.path.join(home, "link", "rt"))
        assert os.path.join(home, "link") in _refused()
    finally:
        shutil.rmtree(home)
