"""The CPU threads torch takes: the cores this process may use (CPU affinity capped by the
cgroup quota, v2 and v1), ``OMP_NUM_THREADS`` when set (a sweep's one per run), and the
``threads`` setting over both. The cgroup files are real files in a temporary tree."""

import os
import subprocess
import sys

import pytest

from flowzoo.agents.models.threads import (
    automatic,
    busy_elsewhere,
    cgroup_cpu_limit,
    pick_threads,
    usable_cores,
)


def _v2(tmp_path, cpu_max: str, rel: str = "") -> tuple:
    """A cgroup v2 tree whose leaf (``rel``) has ``cpu.max``; (root, /proc/self/cgroup)."""
    root = tmp_path / "cg"
    leaf = root / rel.strip("/") if rel.strip("/") else root
    leaf.mkdir(parents=True)
    (leaf / "cpu.max").write_text(cpu_max + "\n")
    self_cg = tmp_path / "self_cgroup"
    self_cg.write_text(f"0::{rel or '/'}\n")
    return root, self_cg


def test_a_v2_quota_caps_the_affinity(tmp_path):
    root, self_cg = _v2(tmp_path, "200000 100000", "/user.slice/job")
    assert cgroup_cpu_limit(root, self_cg) == 2.0
    assert usable_cores(range(16), root, self_cg) == 2
    # a fractional quota rounds down (1.5 CPUs: one thread runs unthrottled), never to 0
    (root / "user.slice" / "job" / "cpu.max").write_text("150000 100000\n")
    assert usable_cores(range(16), root, self_cg) == 1
    (root / "user.slice" / "job" / "cpu.max").write_text("50000 100000\n")
    assert usable_cores(range(16), root, self_cg) == 1


def test_no_quota_leaves_the_affinity(tmp_path):
    root, self_cg = _v2(tmp_path, "max 100000")
    assert cgroup_cpu_limit(root, self_cg) is None
    assert usable_cores({0, 3, 5}, root, self_cg) == 3
    assert usable_cores({0, 1}, tmp_path / "no-cgroup-here", tmp_path / "nothing") == 2


def test_an_ancestor_quota_holds_and_the_tightest_wins(tmp_path):
    root, self_cg = _v2(tmp_path, "800000 100000", "/a/b")
    (root / "cpu.max").write_text("300000 100000\n")  # the container's own limit, at the top
    assert usable_cores(range(64), root, self_cg) == 3


def test_a_v1_quota_is_read(tmp_path):
    cpu = tmp_path / "cg" / "cpu,cpuacct"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("400000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    self_cg = tmp_path / "self_cgroup"
    self_cg.write_text("4:memory:/x\n2:cpu,cpuacct:/\n")
    assert cgroup_cpu_limit(tmp_path / "cg", self_cg) == 4.0
    assert usable_cores(range(32), tmp_path / "cg", self_cg) == 4
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")  # -1: no limit
    assert usable_cores(range(32), tmp_path / "cg", self_cg) == 32


def test_the_setting_wins_then_omp_num_threads_then_the_cores():
    assert pick_threads(3, {"OMP_NUM_THREADS": "1"}, cores=8)[0] == 3
    assert pick_threads(0, {"OMP_NUM_THREADS": "1"}, cores=8) == (1, "OMP_NUM_THREADS")
    assert pick_threads(0, {"OMP_NUM_THREADS": "junk"}, cores=8, busy=0.0)[0] == 8
    assert pick_threads(0, {}, cores=8, busy=0.0)[0] == 8
    with pytest.raises(ValueError, match="threads must be >= 0.*-2"):
        pick_threads(-2, {}, cores=8)


def test_this_process_never_counts_more_than_its_affinity():
    n = usable_cores()
    assert 1 <= n <= len(os.sched_getaffinity(0))


def test_torch_takes_the_count_and_says_it_once():
    """In a fresh process (torch's thread pool untouched): the count set, one line saying it."""
    pytest.importorskip("torch")
    code = (
        "import torch\n"
        "from flowzoo.agents.models.threads import apply_threads\n"
        "apply_threads(2); apply_threads(2)\n"
        "print(torch.get_num_threads())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2"  # the setting over OMP_NUM_THREADS=1
    said = [x for x in r.stderr.splitlines() if "CPU thread" in x]
    assert said == ["flowzoo: 2 CPU thread(s) for torch (threads setting; --threads sets it)"]


@pytest.mark.parametrize(
    "setting, count",
    [("apply_threads(3)", "3"), ("apply_threads(3); torch.set_num_threads(2)", "3"), ("", "1")],
)
def test_a_model_built_inside_a_run_keeps_the_runs_count(tmp_path, setting, count):
    """A run that set its count (``--threads``, its config's) and then builds its model on
    first use: the build (a real one, a few steps) keeps the run's count over
    ``OMP_NUM_THREADS``; with nothing set, the build takes ``OMP_NUM_THREADS`` as before."""
    pytest.importorskip("torch")
    code = (
        "import sys, torch\n"
        "from flowzoo.agents.models.threads import apply_threads\n"
        "from flowzoo.tiny.recipe import fast_config\n"
        "from flowzoo.tiny.build import pretrain\n"
        f"{setting}\n"
        "cfg = fast_config('tiny-s', steps=2, episodes_per_env=5, code_testbed_episodes=5)\n"
        "pretrain(cfg, sys.argv[1], progress=False)\n"
        "print(torch.get_num_threads())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "m")], capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == count


def test_pretrain_tiny_takes_threads():
    """The line every build prints says ``--threads`` sets the count: the command has it."""
    from flowzoo.cli import build_parser

    args = build_parser().parse_args(["pretrain-tiny", "--scale", "tiny-s", "--threads", "1"])
    assert args.threads == 1


def test_cores_busy_with_other_work_are_left_to_it():
    """Automatic picks leave the cores other work keeps busy (at least one thread); a setting
    or OMP_NUM_THREADS is taken as given whatever the load."""
    assert pick_threads(0, {}, cores=2, busy=2.0) == (
        1,
        "2 usable cores, 2.0 of them busy with other work",
    )
    assert pick_threads(0, {}, cores=8, busy=2.6)[0] == 5
    assert pick_threads(0, {}, cores=8, busy=0.4)[0] == 8
    assert pick_threads(0, {}, cores=2, busy=0.7)[0] == 1
    assert pick_threads(2, {}, cores=2, busy=2.0)[0] == 2
    assert pick_threads(0, {"OMP_NUM_THREADS": "2"}, cores=2, busy=2.0)[0] == 2
    assert automatic(0, {}) and not automatic(3, {}) and not automatic(0, {"OMP_NUM_THREADS": "2"})


def test_a_busy_core_is_seen_busy():
    """A real busy loop pinned to one of this process's cores: that core reads (nearly) fully
    busy, whatever else shares it; /proc/stat's format is parsed, not assumed."""
    cpu = min(os.sched_getaffinity(0))
    loop = subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"])
    try:
        os.sched_setaffinity(loop.pid, {cpu})
        import time

        time.sleep(0.2)
        assert busy_elsewhere([cpu], seconds=0.5) > 0.8
    finally:
        loop.kill()
        loop.wait()


def test_proc_stat_lines_are_read_per_cpu(tmp_path):
    from flowzoo.agents.models.threads import _cpu_ticks

    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  10 0 10 80 0 0 0 0 0 0\n"
        "cpu0 5 0 5 40 10 0 0 0 0 0\n"
        "cpu1 30 2 8 60 0 0 0 0\n"
        "intr 1 2 3\n"
    )
    assert _cpu_ticks(stat) == {0: (10, 60), 1: (40, 100)}
    assert busy_elsewhere([0, 1, 7], seconds=0.0, stat=stat) == 0.0  # nothing moved


def test_two_runs_at_two_threads_give_the_same_weights(tmp_path):
    """At more than one thread some CPU kernels accumulated in a thread-dependent order: the
    same seeded run twice differed in the last bits (so a resumed run could not continue
    exactly). With the deterministic kernels the two are byte-identical."""
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    digests = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        args = ["train", "--steps", "2", "--eval-every", "0", "--save-every", "0", "--threads"]
        r = subprocess.run(
            [sys.executable, "-m", "flowzoo.cli", *args, "2", "--out-dir", str(out)],
            capture_output=True,
            text=True,
            env=env,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        digests.append((out / "final" / "shared" / "model.safetensors").read_bytes())
    assert digests[0] == digests[1]
