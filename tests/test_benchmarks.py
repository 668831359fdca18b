"""The benchmark harness: a side of a same-run comparison imports its own tree's ``flowzoo``
and nothing of this checkout's, a baseline that cannot run is a row saying why, and the busy
benchmark's fair-share floor. No timings are checked (benchmarks hold those)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import __main__ as bench_main
from benchmarks import bench_busy, bench_train
from benchmarks.isolate import HERE, TreeError, has_commit, run_code, worktree

#: reports where flowzoo, a module only this checkout has, and a grandchild's flowzoo come from
PROBE = r"""
import subprocess
try:
    import flowzoo.cli_help as only_here
    only_here = only_here.__file__
except ImportError as e:
    only_here = f"{type(e).__name__}"
kid = subprocess.run([sys.executable, "-c", "import flowzoo; print(flowzoo.__file__)"],
                     capture_output=True, text=True).stdout.strip()
print(json.dumps({"file": flowzoo.__file__, "mark": getattr(flowzoo, "MARK", None),
                  "only_here": only_here, "kid": kid, "path": sys.path,
                  "foreign": sitecustomize.foreign()}))
"""


def _tree(tmp_path: Path, init: str = 'MARK = "fake"\n', **files: str) -> Path:
    """A minimal source tree: ``flowzoo/__init__.py`` and any ``flowzoo/<name>.py``."""
    pkg = tmp_path / "tree" / "flowzoo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(init)
    for name, text in files.items():
        (pkg / f"{name}.py").write_text(text)
    return pkg.parent


def _inside(path: str, tree: Path) -> bool:
    return Path(path).resolve().is_relative_to(tree.resolve())


def test_a_side_imports_flowzoo_from_its_tree_only(tmp_path):
    tree = _tree(tmp_path)
    out = run_code(tree, PROBE)
    assert out["mark"] == "fake" and _inside(out["file"], tree)
    # a module the tree lacks is missing, not served from this checkout by the installed hook
    assert out["only_here"] == "ModuleNotFoundError"
    assert _inside(out["kid"], tree), out["kid"]  # the side's own subprocesses too
    hook = HERE / "benchmarks" / "isolated_site"  # holds only the start-up hook
    assert [p for p in out["path"] if p and _inside(p, HERE) and Path(p).resolve() != hook] == []
    assert out["foreign"] == []


def test_the_hazard_isolation_removes_is_real_here(tmp_path):
    """Control: with the tree only on ``PYTHONPATH`` (the harness before), an editable install
    of this checkout fills in what the tree lacks; skipped where flowzoo is not installed so."""
    tree = _tree(tmp_path)
    code = "import flowzoo, flowzoo.cli_help; print(flowzoo.__file__); print(flowzoo.cli_help.__file__)"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    got = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    if got.returncode != 0:
        pytest.skip("flowzoo is not an editable install of this checkout here")
    pkg, only_here = got.stdout.split()
    # where the editable install points (this checkout in CI; another one when the tests
    # run from a second worktree): the module the tree lacks comes from there
    where = subprocess.run(
        [sys.executable, "-c", "import flowzoo.cli_help as c; print(c.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.strip()
    installed = Path(where).parents[1]
    assert _inside(pkg, tree) and _inside(only_here, installed)  # the mix the harness refuses


def test_foreign_modules_are_named(tmp_path):
    tree = _tree(tmp_path)
    code = (
        "import types; m = types.ModuleType('flowzoo.planted'); m.__file__ = '/elsewhere/x.py';"
        " sys.modules['flowzoo.planted'] = m; print(json.dumps({'foreign': sitecustomize.foreign()}))"
    )
    with pytest.raises(TreeError, match="outside the tree.*flowzoo.planted"):
        run_code(tree, code)


@pytest.mark.parametrize(
    "init, files, says",
    [
        ("raise ImportError('broken at import')", {}, "cannot import flowzoo: ImportError: broken"),
        ("", {}, "no trainer module .*does not share the benchmark's API"),
        ("", {"trainer": "class TrainConfig: pass\n"}, "lacks TrainConfig or Trainer"),
    ],
)
def test_a_tree_that_cannot_run_is_a_clear_error(tmp_path, init, files, says):
    tree = _tree(tmp_path, init, **files)
    modules = ["flowzoo.trainer"]
    cfg = bench_train.settings("voting-math", "tiny-s", 1, 1)
    with pytest.raises(TreeError) as err:
        run_code(tree, bench_train._CHILD, ["probe", json.dumps(cfg), json.dumps(modules)])
    msg = str(err.value)
    assert str(tree) in msg and "Traceback" not in msg
    assert re.search(says, msg), msg


def test_a_trainer_without_the_shared_settings_is_named(tmp_path):
    trainer = (
        "import dataclasses\n@dataclasses.dataclass\nclass TrainConfig:\n    env: str = ''\n"
        "class Trainer:\n    def train_step(self): pass\n    def evaluate(self): pass\n"
    )
    tree = _tree(tmp_path, "", trainer=trainer)
    cfg = bench_train.settings("voting-math", "tiny-s", 1, 1)
    args = ["probe", json.dumps(cfg), json.dumps(["flowzoo.trainer"])]
    with pytest.raises(TreeError, match="has no field .*filter_groups"):
        run_code(tree, bench_train._CHILD, args)


def test_the_baseline_worktree_runs_its_own_trainer():
    why = has_commit(bench_train.BASELINE)
    if why:
        pytest.skip(why)
    cfg = bench_train.settings("voting-math", "tiny-s", 1, 1)
    with worktree(bench_train.BASELINE) as base:
        out = bench_train.side(base, "probe", cfg, 1, timeout=300)
        assert _inside(out["file"], base) and not _inside(out["file"], HERE)
        assert out["trainer"] in bench_train.TRAINER_MODULES and out["foreign"] == []
    assert not base.exists()
    listed = subprocess.run(
        ["git", "-C", str(HERE), "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert str(base) not in listed


def test_an_unreachable_baseline_is_a_row_saying_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench_train, "BASELINE", "0" * 40)
    out = tmp_path / "r.json"
    assert bench_main.main(["--only", "train", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == len(bench_train.WORKFLOWS)
    assert all(not r["measured"] and r["met"] is False and "0" * 40 in r["note"] for r in rows)
    assert "NOT RUN" in capsys.readouterr().out


def test_a_benchmark_that_raises_is_a_row(monkeypatch, tmp_path, capsys):
    def boom(quick: bool = False):
        raise KeyError("no such figure")

    monkeypatch.setattr(bench_busy, "run", boom)
    out = tmp_path / "r.json"
    assert bench_main.main(["--only", "busy", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["bench"] == "busy" and not row["measured"] and "KeyError" in row["note"]


@pytest.mark.parametrize(
    "cores, threads, busy, floor",
    [(1, 1, 2, 3.0), (2, 2, 2, 2.0), (2, 1, 2, 1.5), (4, 4, 0, 1.0), (16, 16, 2, 18 / 16)],
)
def test_fair_share_floor(cores, threads, busy, floor):
    assert bench_busy.fair_floor(cores, threads, busy) == pytest.approx(floor)


def test_the_busy_benchmark_reads_the_trainers_thread_line(monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    from flowzoo.agents.models import threads

    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "_count", None)
    try:
        threads.apply_threads(2)
    finally:
        torch.set_num_threads(before)
    m = bench_busy._THREADS.search(capsys.readouterr().err)
    assert m is not None and m.groups() == ("2", "threads setting")
