"""``flowzoo train`` on a shared machine: the same short run (the defaults, fewer steps) idle,
then beside ``BUSY`` busy-loop processes, in the same benchmark run.

Why: on a busy machine a trainer that takes a thread per core of the machine (not per core it
may use) oversubscribes them, and every thread waits on the others: a run that took 2 min idle
once took 58 min and 8x the CPU under load. The trainer picks its torch threads from the cores
it may use (``flowzoo/agents/models/threads.py``); this measures the result as a whole
command, start-up, evaluations and saving included. ``OMP_NUM_THREADS`` is removed from the
command's environment, so the trainer's own choice is what is measured. The busy processes
inherit this process's CPU affinity and niceness; the note gives the fair-share floor (the
slowdown a scheduler that splits the usable cores evenly between runnable threads gives).
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Row, failed
from benchmarks.isolate import HERE, PYTHON, env_for

#: busy-loop processes beside the run (the issue's load)
BUSY = 2
TARGET = 2.5
_THREADS = re.compile(r"flowzoo: (\d+) CPU thread\(s\) for torch \((.+?); --threads sets it\)")


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def train_once(steps: int, timeout: float = 3600) -> dict:
    """One ``flowzoo train --steps N`` of this checkout in a fresh run directory: wall and CPU
    seconds, and the thread line it printed; ``RuntimeError`` with its last lines on failure."""
    env = env_for(HERE)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(var, None)
    with tempfile.TemporaryDirectory(prefix="fz-bench-busy-") as tmp:
        cmd = [*PYTHON, "-m", "flowzoo.cli", "train", "--steps", str(steps)]
        cmd += ["--out-dir", str(Path(tmp) / "run")]
        cpu, t = _cpu(), time.perf_counter()
        got = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=timeout)
        wall, cpu = time.perf_counter() - t, _cpu() - cpu
    if got.returncode != 0:
        tail = "\n".join((got.stdout + got.stderr).strip().splitlines()[-6:])
        raise RuntimeError(f"flowzoo train exited with status {got.returncode}:\n{tail}")
    m = _THREADS.search(got.stderr + got.stdout)
    return {
        "wall": wall,
        "cpu": cpu,
        "threads": int(m.group(1)) if m else None,
        "why": m.group(2) if m else "not printed",
    }


def fair_floor(cores: int, threads: int, busy: int) -> float:
    """The slowdown an even split of ``cores`` between ``busy`` loops and ``threads`` gives a
    run that uses ``threads`` threads idle (a lower bound on the measured ratio)."""
    idle = min(threads, cores)
    loaded = min(threads, cores * threads / (threads + busy))
    return idle / loaded


def run(quick: bool = False) -> list[Row]:
    steps = 2 if quick else 4
    metric = f"flowzoo train, {steps} steps, {BUSY} busy: wall"
    ref = "the same command, idle"
    try:
        idle = train_once(steps)
        loops = [
            subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"]) for _ in range(BUSY)
        ]
        try:
            time.sleep(0.5)  # the loops are running before the run starts
            busy = train_once(steps)
        finally:
            for p in loops:
                p.kill()
                p.wait()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"[busy] {e}", file=sys.stderr)
        return [failed("busy", metric, ref, "s", str(e), target=TARGET, lower_is_better=True)]
    cores = len(os.sched_getaffinity(0))
    threads = busy["threads"] or 1
    note = (
        f"{cores} usable core(s); {busy['threads']} torch thread(s) ({busy['why']}); "
        f"fair-share floor {fair_floor(cores, threads, BUSY):.2f}x"
    )
    return [
        Row(
            "busy",
            metric,
            busy["wall"],
            idle["wall"],
            ref,
            "s",
            target=TARGET,
            lower_is_better=True,
            note=note,
        ),
        Row(
            "busy",
            f"flowzoo train, {steps} steps, {BUSY} busy: CPU time",
            busy["cpu"],
            idle["cpu"],
            ref,
            "s",
            lower_is_better=True,
            note="user + system seconds of the command (threads that spin or wait cost CPU)",
        ),
    ]
