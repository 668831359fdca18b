"""Run a source tree's own ``flowzoo`` in a subprocess: this checkout, or a past commit checked
out into a temporary ``git worktree``.

Why: under the README's editable install the installed ``flowzoo`` is this checkout, and its
import hook serves every module an older tree lacks, so a baseline run imported a mix of
both trees and stopped with an ``ImportError`` once the layout moved. Here each side runs
with ``isolated_site/`` first on ``PYTHONPATH`` (its ``sitecustomize`` puts the tree first
and drops the hooks that serve ``flowzoo`` from elsewhere, in the side's subprocesses too),
``-P`` (no script or working directory on the path) and its working directory in a temp
dir; the side's code reports the files of every ``flowzoo`` module it loaded
(``sitecustomize.foreign()``), and a run that loaded one from outside its tree is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

#: this checkout (the tree the benchmark code is in)
HERE = Path(__file__).resolve().parents[1]
SITE = Path(__file__).resolve().parent / "isolated_site"
#: a side's interpreter: ``-P``, no script or working directory on the path
PYTHON = [sys.executable, "-P"]

#: run first by a side's code: the tree's flowzoo, or a clear error line and exit 3
PRELUDE = r"""
import json, os, sys
def fail(msg):
    print(json.dumps({"error": msg})); sys.exit(3)
try:
    import sitecustomize
    sitecustomize.foreign
except (ImportError, AttributeError):
    fail("the isolation hook (benchmarks/isolated_site/sitecustomize.py) did not run")
TREE = os.environ["FLOWZOO_BENCH_TREE"]
try:
    import flowzoo
except ImportError as e:
    fail(f"the tree {TREE} cannot import flowzoo: {type(e).__name__}: {e}")
if not sitecustomize.inside(flowzoo.__file__, TREE):
    fail(f"flowzoo was imported from {flowzoo.__file__}, not from the tree {TREE}")
"""


class TreeError(RuntimeError):
    """A side could not run: the message says which tree and why (no traceback to read)."""


def env_for(tree: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a subprocess that imports ``flowzoo`` from ``tree`` only."""
    env = dict(os.environ if environ is None else environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), str(tree)])
    env["FLOWZOO_BENCH_TREE"] = str(tree)
    return env


def run_code(
    tree: Path,
    code: str,
    args: Sequence[str] = (),
    timeout: float = 1800,
    environ: dict[str, str] | None = None,
) -> dict:
    """Run ``PRELUDE + code`` against ``tree`` and return the JSON object it printed last;
    :class:`TreeError` naming the tree when it could not run or loaded a foreign module."""
    with tempfile.TemporaryDirectory(prefix="fz-bench-cwd-") as cwd:
        try:
            got = subprocess.run(
                [*PYTHON, "-c", PRELUDE + code, *args],
                env=env_for(tree, environ),
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise TreeError(f"{tree}: no result within {timeout:.0f}s") from None
    last = (got.stdout.strip().splitlines() or [""])[-1]
    try:
        out = json.loads(last)
    except json.JSONDecodeError:
        out = None
    if isinstance(out, dict) and "error" in out:
        raise TreeError(f"{tree}: {out['error']}")
    if got.returncode != 0 or not isinstance(out, dict):
        tail = "\n".join(got.stderr.strip().splitlines()[-6:])
        raise TreeError(f"{tree}: exited with status {got.returncode}; its last lines:\n{tail}")
    if out.get("foreign"):
        raise TreeError(f"{tree}: loaded modules from outside the tree: {out['foreign'][:5]}")
    return out


def has_commit(commit: str, repo: Path = HERE) -> str | None:
    """Why ``commit`` cannot be checked out here, or None when it can."""
    if shutil.which("git") is None:
        return "git is not installed"
    got = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if got.returncode != 0:
        return (
            f"commit {commit} is not in {repo}'s history (not a git checkout, or a shallow "
            f"clone: `git fetch --unshallow` brings it)"
        )
    return None


@contextlib.contextmanager
def worktree(commit: str, repo: Path = HERE) -> Iterator[Path]:
    """``commit`` checked out (detached) in a temp dir, removed with its git record after."""
    why = has_commit(commit, repo)
    if why:
        raise TreeError(f"no baseline tree: {why}")
    top = Path(tempfile.mkdtemp(prefix="fz-baseline-"))
    dest = top / "tree"
    got = subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", str(dest), commit],
        capture_output=True,
        text=True,
    )
    try:
        if got.returncode != 0:
            raise TreeError(f"git worktree add {commit} failed: {got.stderr.strip()[-500:]}")
        yield dest
    finally:
        gone = subprocess.run(
            ["git", "-C", str(repo), "worktree", "remove", "--force", str(dest)],
            capture_output=True,
        )
        shutil.rmtree(top, ignore_errors=True)
        if gone.returncode != 0 and got.returncode == 0:  # drop the record of the removed dir
            subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)
