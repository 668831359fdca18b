"""The report builder on synthetic run directories, and 2-run sweeps on both backends."""

import json

import pytest

from flowzoo.agents.sweeps.runner import SweepSpec, expand, load_sweep, parse_subset, run_sweep
from flowzoo.analysis.findings import findings
from flowzoo.analysis.records import read_metrics
from flowzoo.analysis.report import build_report, cell_stats, load_runs


def _fake_run(
    root,
    name,
    env,
    policy,
    seed,
    curve,
    shares,
    model="tiny-s",
    ood=None,
    along=None,
    sampled=None,
    opt_steps=None,
    **config,
):
    d = root / name
    d.mkdir(parents=True)
    cfg = {
        "env": env,
        "model": model,
        "policy": policy,
        "param": "full",
        "seed": seed,
        "algo": "grpo",
        **config,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "summary.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "steps_done": curve[-1][0],
                "eval_curve": curve,
                "mean_grad_share": shares,
                **({"ood": {"final": ood}} if ood is not None else {}),
            }
        )
    )
    lines = [
        {
            "step": -1,
            "eval": {"accuracy": curve[0][1], "majority_correct": 0.5, "episodes": 37},
        }
    ]
    for s in range(curve[-1][0]):
        lines.append(
            {
                "step": s,
                "roles": {
                    r: {
                        "grad_share": v,
                        "grad_norm": 10 * v,
                        "tokens": 300 if r == "solver" else 100,
                        "turns": 3 if r == "solver" else 1,
                        **({"update_along": along * v} if along is not None else {}),
                    }
                    for r, v in shares.items()
                },
                **({"sampled": {"turns": sampled}} if sampled is not None else {}),
                **({"policies": opt_steps} if opt_steps is not None else {}),
            }
        )
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_report_tables_cliffs_and_findings(tmp_path):
    cliff = [(0, 0.40), (3, 0.70), (6, 0.30), (9, 0.20)]
    rise = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"solver": 0.8, "aggregator": 0.2}
    for seed in range(3):
        _fake_run(tmp_path, f"i{seed}", "voting-math", "isolated", seed, cliff, sh)
        _fake_run(tmp_path, f"s{seed}", "voting-math", "shared", seed, rise, sh, ood=0.1 * seed)
    runs = load_runs(tmp_path)
    stats = {c.key[3]: c for c in cell_stats(runs, window=2)}
    iso, shared = stats["isolated"], stats["shared"]
    assert iso.cliffs == 3 and shared.cliffs == 0
    assert iso.peak == [0.7] * 3 and iso.peak_step == [3] * 3
    assert iso.final == pytest.approx([0.25] * 3) and shared.final == pytest.approx([0.575] * 3)
    assert iso.majority == [0.5] * 3
    p = build_report(tmp_path, window=2)
    md = p.read_text()
    # 3 seeds: worsened 3/3 (gain CI below 0), every run rose then fell, 3 cliffs
    assert (
        "| voting | tiny-s | isolated | full | - | 3 | 0.400 ± 0.000 | 0.700 ± 0.000 (3/3/3) "
        "| 0.250 ± 0.000 | - | -0.150 ± 0.000 | 0/3 of 3 | 0/0/3 | 3/3 |" in md
    )
    # the out-of-distribution final beside the held-out one, where the runs evaluated it
    assert "| 0.575 ± 0.000 | 0.100 ± 0.082 | +0.175 ± 0.000 | 3/0 of 3 | 0/3/0 | 0/3 |" in md
    assert "Sample sizes: 6 runs in 2 cells; 3-3 seeds per cell; 4-4 evaluations" in md
    # the problems the evaluations read (their records), not the config's 0 for "whole split"
    # nor the 200 a curve-only record is given
    assert "evaluations per run (base included) of 37 held-out problems x" in md
    assert "improves over the base model** — inconclusive: 3/6 runs improved" in md
    assert (
        "Isolated-Policy reaches a higher peak than Shared-Policy** — supported: clearly "
        "higher (95% interval over seeds above 0) in 1/1" in md
    )
    assert (
        "rises then falls more often in Voting/Orch-Workers** — inconclusive (counts this far "
        "apart by chance: Fisher's exact p = 0.10): rose then fell isolated 3/3 runs vs shared "
        "0/3" in md
    )
    # the solvers' share (0.8) does not grow: not capture, whatever its size
    assert (
        "one role captures the gradient and its partner's decisions degrade** — not supported" in md
    )
    # per turn of its policy's batch, the shared solver's norm (8 x 1/0.75 turns) is the larger
    assert (
        "amplifies the parallel role's gradient** — contradicted: voting-math tiny-s full: "
        "solver per-turn gradient norm isolated 8.000 vs shared 10.667" in md
    )
    # one figure per workflow x model x param: Shared beside Isolated, named for what it shows
    assert (p.parent / "voting-math_tiny-s_full.png").stat().st_size > 1000
    assert "![voting-math_tiny-s_full](voting-math_tiny-s_full.png)" in md


def test_too_little_evidence_decides_nothing(tmp_path):
    cliff = [(0, 0.40), (3, 0.70), (6, 0.30), (9, 0.20)]
    rise = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"solver": 0.8, "aggregator": 0.2}
    for seed in range(2):  # two seeds a side: a clear-looking difference, too few runs
        _fake_run(tmp_path, f"i{seed}", "voting-math", "isolated", seed, cliff, sh)
        _fake_run(tmp_path, f"s{seed}", "voting-math", "shared", seed, rise, sh)
    _fake_run(tmp_path, "short", "eval-opt-math", "shared", 0, [(0, 0.4), (3, 0.9)], sh)
    md = build_report(tmp_path, window=2).read_text()
    assert "supported" not in md.replace("not supported", "") and "contradicted" not in md
    assert "higher peak than Shared-Policy** — insufficient evidence (2 runs" in md
    assert "improves over the base model** — insufficient evidence (runs with 2 evaluations" in md


def test_a_swept_setting_separates_cells_and_one_run_apart_is_inconclusive(tmp_path):
    cliff = [(0, 0.40), (3, 0.70), (6, 0.30), (9, 0.20)]
    rise = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"solver": 0.8, "aggregator": 0.2}
    for i, lr in enumerate((2e-5, 1e-4)):
        for seed in range(3):
            iso = cliff if (lr == 1e-4 and seed == 0) else rise
            kw = {"lr": lr, "out_dir": f"{i}-{seed}"}
            _fake_run(tmp_path, f"i{i}{seed}", "voting-math", "isolated", seed, iso, sh, **kw)
            _fake_run(tmp_path, f"s{i}{seed}", "voting-math", "shared", seed, rise, sh, **kw)
    cells = cell_stats(load_runs(tmp_path), window=2)
    assert sorted(c.key[5] for c in cells) == ["lr=0.0001", "lr=0.0001", "lr=2e-05", "lr=2e-05"]
    md = build_report(tmp_path, window=2).read_text()
    assert "| voting | tiny-s | isolated | full | lr=0.0001 | 3 |" in md
    assert "stratified exact test p = 1.00): rose then fell isolated 1/6 runs vs shared 0/6" in md
    assert (
        "voting-math tiny-s full lr=0.0001 1/3 vs 0/3; voting-math tiny-s full lr=2e-05 0/3 vs 0/3"
        in md
    )


def test_a_setting_recorded_later_does_not_split_cells(tmp_path):
    """Runs recorded before a setting existed ran with its default: beside runs that record
    that default, they share a cell; a run that set another value is a cell of its own."""
    rise = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"solver": 0.8, "aggregator": 0.2}
    for seed in range(3):
        _fake_run(tmp_path, f"old{seed}", "voting-math", "shared", seed, rise, sh)
        _fake_run(
            tmp_path,
            f"new{seed}",
            "voting-math",
            "shared",
            seed + 3,
            rise,
            sh,
            role_settings={},
            frozen_roles="",
        )
    _fake_run(tmp_path, "other", "voting-math", "shared", 9, rise, sh, frozen_roles="aggregator")
    cells = cell_stats(load_runs(tmp_path), window=2)
    assert sorted((c.key[5], len(c.runs)) for c in cells) == [
        ("frozen_roles=", 6),
        ("frozen_roles=aggregator", 1),
    ]


def test_one_report_reads_several_sweeps(tmp_path):
    """A math sweep and a code sweep in one map: one row per workflow x family, and a setting
    that differs only across the two dirs still separates cells."""
    rise = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"solver": 0.8, "aggregator": 0.2}
    for fam in ("math", "code"):
        for seed in range(3):
            _fake_run(tmp_path / fam, f"s{seed}", f"voting-{fam}", "shared", seed, rise, sh)
    md = build_report([tmp_path / "math", tmp_path / "code"], tmp_path / "out", window=2)
    text = md.read_text()
    assert md.parent == tmp_path / "out"
    assert len(load_runs([tmp_path / "math", tmp_path / "code"])) == 6
    assert text.count("| voting | tiny-s | shared | full | - | 3 |") == 2  # one under each:
    assert "## code" in text and "## math" in text


def test_report_needs_runs(tmp_path):
    with pytest.raises(ValueError, match="no finished runs"):
        build_report(tmp_path)


def test_sweep_expansion_and_subset(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(
        'name = "t"\nout_dir = "x"\n[base]\nsteps = 2\n[grid]\nenv = ["voting-math", "eval-opt-math"]\nseed = [0, 1]\n[[extra]]\nenv = "single-math"\n'
    )
    spec = load_sweep(p)
    runs = expand(spec)
    assert len(runs) == 5 and runs[0].config["steps"] == 2
    assert len(expand(spec, parse_subset("env=voting-math"))) == 2
    bad = SweepSpec("b", "x", grid={"stepz": [1]})
    with pytest.raises(ValueError, match="stepz"):
        expand(bad)


def _tiny_sweep(tiny_model, out):
    return SweepSpec(
        "t",
        str(out),
        base=dict(
            model=str(tiny_model),
            steps=1,
            problems_per_step=1,
            group_size=2,
            max_new_tokens=24,
            eval_every=1,
            eval_episodes=4,
            eval_ood_episodes=0,  # these tests are of the sweep, not of evaluation
        ),
        grid={"policy": ["shared", "isolated"]},
    )


def test_local_sweep_runs_resumes_and_reports(tiny_model, tmp_path):
    spec = _tiny_sweep(tiny_model, tmp_path / "local")
    rep = run_sweep(spec, backend="local", workers=2, progress=False)
    assert set(rep["runs"].values()) == {"completed"}, rep
    again = run_sweep(spec, backend="local", workers=2, progress=False)
    assert set(again["runs"].values()) == {"skipped"}
    assert build_report(tmp_path / "local").exists()


@pytest.mark.timeout(1200)  # a Ray cluster's start and two runs, on a machine that may be busy
def test_ray_sweep(tiny_model, tmp_path):
    pytest.importorskip("ray")
    spec = _tiny_sweep(tiny_model, tmp_path / "ray")
    rep = run_sweep(spec, backend="ray", progress=False)
    assert set(rep["runs"].values()) == {"completed"}, rep
    import ray

    ray.shutdown()


def test_a_killed_sweep_resumes_its_unfinished_runs_from_their_checkpoints(tiny_model, tmp_path):
    """Kill a sweep (its whole process group) once a run has checkpointed; re-invoking it
    continues that run from its checkpoint instead of starting it over."""
    import os
    import signal
    import subprocess
    import sys
    import time

    sweep = tmp_path / "s.toml"
    out = tmp_path / "runs"
    sweep.write_text(
        f'name = "k"\nout_dir = "{out}"\n[base]\nmodel = "{tiny_model}"\nsteps = 8\n'
        "problems_per_step = 1\ngroup_size = 2\nmax_new_tokens = 24\neval_every = 0\n"
        'save_every = 2\n[grid]\npolicy = ["shared"]\n'
    )
    cmd = [sys.executable, "-m", "flowzoo.cli", "sweep", str(sweep), "--workers", "1"]
    proc = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.DEVNULL)
    run = out / "policy=shared"
    deadline = time.time() + 240
    # the checkpoint written, not its directory made: the directory exists before the state
    # file is renamed into it (its digest sidecar first), and a kill in between left nothing
    # to resume from (the test then saw a fresh start on a loaded machine)
    saved = run / "checkpoint" / "state.pt"
    while not saved.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert saved.exists(), "the run never checkpointed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len([m for m in read_metrics(run / "metrics.jsonl") if m["step"] >= 0])
    assert done_before < 8
    subprocess.run(cmd, check=True, timeout=600, stderr=subprocess.DEVNULL)
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and s["resumed"] and s["steps_done"] == 8
    steps = [m["step"] for m in read_metrics(run / "metrics.jsonl") if m["step"] >= 0]
    assert steps == list(range(8))


def test_compare_sweeps_sees_a_changed_evaluation_or_update(tmp_path):
    """The refactor check can fail: one changed per-problem count, or one changed gradient
    norm, makes the runs differ."""
    import json

    from baselines.compare_sweeps import compare

    lines = [
        {"step": -1, "eval": {"accuracy": 0.5, "per_problem": [1, 0]}},
        {"step": 0, "roles": {"solver": {"loss": 0.1, "grad_norm": 2.0, "reward": 0.5}}},
    ]

    def write(root, rows):
        (root / "run").mkdir(parents=True)
        (root / "run" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))

    write(tmp_path / "a", lines)
    write(tmp_path / "b", lines)
    assert compare(tmp_path / "a", tmp_path / "b") == 0
    for i, change in enumerate(
        [
            {"eval": {"accuracy": 0.5, "per_problem": [0, 1]}},
            {"roles": {"solver": {"loss": 0.1, "grad_norm": 2.5, "reward": 0.5}}},
        ]
    ):
        other = [dict(lines[0]), dict(lines[1])]
        other[i].update(change)
        write(tmp_path / f"c{i}", other)
        assert compare(tmp_path / "a", tmp_path / f"c{i}") == 1


@pytest.mark.parametrize("single_final,verdict", [(0.45, "supported"), (0.70, "contradicted")])
def test_the_control_is_decided_per_workflow_and_can_contradict(tmp_path, single_final, verdict):
    """Voting trained to 0.60 against the single agent trained the same way: above a single
    agent that ends at 0.45 (supported), clearly below one that ends at 0.70 (contradicted,
    not merely "not supported"); paired by seed, with the numbers."""

    sh = {"solver": 0.8, "aggregator": 0.2}
    for seed in range(3):
        rise = [(0, 0.40), (3, 0.50), (6, 0.60 + 0.01 * seed), (9, 0.60 + 0.01 * seed)]
        single = [
            (0, 0.40),
            (3, 0.45),
            (6, single_final + 0.01 * seed),
            (9, single_final + 0.01 * seed),
        ]
        _fake_run(tmp_path, f"v{seed}", "voting-math", "shared", seed, rise, sh)
        _fake_run(tmp_path, f"s{seed}", "single-math", "shared", seed, single, {"solver": 1.0})
    lines = findings(cell_stats(load_runs(tmp_path), window=2))
    (control,) = [x for x in lines if "single agent trained the same way" in x]
    assert control.startswith(
        f"**voting ends above the single agent trained the same way** — {verdict}"
    )
    side = "above in 1/1" if verdict == "supported" else "below in 1/1"
    assert "paired by seed" in control and side in control


@pytest.mark.parametrize("matched_final,verdict", [(0.50, "supported"), (0.70, "contradicted")])
def test_the_compute_matched_control_is_the_single_agent_given_as_many_turns(
    tmp_path, matched_final, verdict
):
    """Voting samples 256 turns a step; the single agent trained the same way samples 64 and
    ends below it; the one given 4x the problems samples 256 and is the compute-matched
    control, whose verdict can come out either way."""

    sh = {"solver": 0.8, "aggregator": 0.2}
    for seed in range(3):
        end = 0.60 + 0.01 * seed
        v = [(0, 0.40), (3, 0.50), (6, end), (9, end)]
        same = [(0, 0.40), (3, 0.42), (6, 0.45 + 0.01 * seed), (9, 0.45 + 0.01 * seed)]
        more = [(0, 0.40), (3, 0.45), (6, matched_final + 0.01 * seed)]
        more.append((9, matched_final + 0.01 * seed))
        _fake_run(
            tmp_path,
            f"v{seed}",
            "voting-math",
            "shared",
            seed,
            v,
            sh,
            sampled=256,
            problems_per_step=8,
        )
        _fake_run(
            tmp_path,
            f"s{seed}",
            "single-math",
            "shared",
            seed,
            same,
            {"solver": 1.0},
            sampled=64,
            problems_per_step=8,
        )
        _fake_run(
            tmp_path,
            f"m{seed}",
            "single-math",
            "shared",
            seed,
            more,
            {"solver": 1.0},
            sampled=250,
            problems_per_step=32,
        )
    lines = findings(cell_stats(load_runs(tmp_path), window=2))
    (same_way,) = [x for x in lines if "trained the same way" in x]
    (matched,) = [x for x in lines if "same compute" in x]
    assert "— supported" in same_way and "above in 1/1" in same_way
    assert f"— {verdict}" in matched and "[problems_per_step=32]" in matched


def _amplification(tmp_path, iso_along: float, iso_steps=None, shared_steps=None) -> str:
    """The amplification finding of 3 matched Voting seeds a side (Shared: update length
    1e-3 along the solvers' direction; Isolated: ``iso_along``), with each policy's Adam
    steps per rollout step where given."""

    rise = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"solver": 0.8, "aggregator": 0.2}
    for seed in range(3):
        j = 1 + 0.01 * seed
        for name, policy, along, steps in (
            (f"i{seed}", "isolated", iso_along * j, iso_steps),
            (f"s{seed}", "shared", 1e-3 * j, shared_steps),
        ):
            _fake_run(tmp_path, name, "voting-math", policy, seed, rise, sh, along=along,
                      opt_steps=steps)  # fmt: skip
    lines = findings(cell_stats(load_runs(tmp_path), window=2))
    (amp,) = [x for x in lines if "amplifies the parallel role" in x]
    return amp


@pytest.mark.parametrize("iso_along,verdict", [(2e-3, "supported"), (5e-4, "contradicted")])
def test_amplification_is_read_on_what_moves_the_weights(tmp_path, iso_along, verdict):
    """The raw per-turn norms say Shared is larger (as in the report test); where runs record
    the update after Adam along the solvers' direction, the verdict is read on that and comes
    out either way."""
    amp = _amplification(tmp_path, iso_along)
    assert amp.startswith(f"**Isolated-Policy amplifies the parallel role's gradient** — {verdict}")
    assert "per-turn gradient norm isolated 8.000 vs shared 10.667" in amp  # beside it
    assert "the verdict's reading" in amp


def test_amplification_per_rollout_step_beside_per_adam_step(tmp_path):
    """Per Adam step the isolated solver moves more; but the shared policy makes 4 Adam steps
    per rollout step to the isolated solver's 1, so per rollout step the order flips: the
    report gives both readings, each computed from the records."""
    iso_steps = {"solver": {"opt_steps": 1}, "aggregator": {"opt_steps": 1}}
    amp = _amplification(tmp_path, 2e-3, iso_steps, {"shared": {"opt_steps": 4}})
    # per Adam step: 2e-3 x 0.8 vs 1e-3 x 0.8; per rollout step: x1 vs x4
    assert "per Adam step isolated 1.62e-03 vs shared 8.08e-04" in amp
    assert "per rollout step isolated 1.62e-03 vs shared 3.23e-03" in amp
    assert "(difference -1.62e-03" in amp


def test_fall_counts_decide_only_past_chance(tmp_path):
    """Counts of runs that fell decide the dynamics claim only when Fisher's exact test says
    they are unlikely by chance: 3 of 3 against 0 of 3 did (a report said "supported" on it),
    6 of 6 against 0 of 6 does."""
    from flowzoo.analysis.stats import fisher_exact

    assert fisher_exact(3, 3, 0, 3) == pytest.approx(0.1)  # scipy.stats.fisher_exact's values
    assert fisher_exact(6, 6, 0, 6) == pytest.approx(0.0021645, rel=1e-4)
    assert fisher_exact(2, 9, 4, 9) == pytest.approx(0.6199095, rel=1e-6)
    assert fisher_exact(5, 9, 0, 9) == pytest.approx(0.0294118, rel=1e-5)
    assert fisher_exact(1, 6, 0, 6) == fisher_exact(3, 6, 2, 6) == 1.0
    cliff = [(0, 0.40), (3, 0.70), (6, 0.30), (9, 0.20)]
    rise = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"solver": 0.8, "aggregator": 0.2}
    for seed in range(6):
        _fake_run(tmp_path, f"i{seed}", "voting-math", "isolated", seed, rise, sh)
        _fake_run(tmp_path, f"s{seed}", "voting-math", "shared", seed, cliff, sh)
    md = build_report(tmp_path, window=2).read_text()
    assert (
        "rises then falls more often in Voting/Orch-Workers** — contradicted: rose then fell "
        "isolated 0/6 runs vs shared 6/6" in md
    )


def test_the_stratified_test_is_the_exact_law_of_the_pooled_count():
    """Checked against brute force: every outcome of two strata with their margins fixed,
    weighted by the product of hypergeometric chances; p sums the outcomes (by first-side
    total) no likelier than the one seen."""
    import itertools
    import math

    from flowzoo.analysis.stats import stratified_exact

    tables = [(5, 9, 2, 7), (1, 4, 3, 6)]

    def hyper(a, n1, b, n2, x):
        k = a + b
        return math.comb(n1, x) * math.comb(n2, k - x) / math.comb(n1 + n2, k)

    law: dict[int, float] = {}
    ranges = [range(max(0, a + b - n2), min(a + b, n1) + 1) for a, n1, b, n2 in tables]
    for xs in itertools.product(*ranges):
        w = math.prod(hyper(*t, x) for t, x in zip(tables, xs, strict=True))
        law[sum(xs)] = law.get(sum(xs), 0.0) + w
    seen = law[6]
    p, expected = stratified_exact(tables)
    assert p == pytest.approx(sum(v for v in law.values() if v <= seen * (1 + 1e-9)))
    assert expected == pytest.approx(7 * 9 / 16 + 4 * 4 / 10)
    assert sum(law.values()) == pytest.approx(1.0)


def test_falls_are_read_within_each_cell_not_pooled_across_builds(tmp_path):
    """Two builds (models), each with Isolated falling *less* often than Shared, but one
    build falls often and ran most of its Isolated runs there: pooled into one table the
    counts say Isolated falls more (18/24 vs 6/24, Fisher p = 0.001); read within each build
    they say nothing of the kind. The report stratifies and names each cell's counts."""
    from flowzoo.analysis.stats import fisher_exact

    assert fisher_exact(18, 24, 6, 24) < 0.01
    cliff = [(0, 0.40), (3, 0.70), (6, 0.30), (9, 0.20)]
    rise = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"solver": 0.8, "aggregator": 0.2}
    plan = {  # model: (isolated falls of runs, shared falls of runs)
        "build-a": ((18, 20), (4, 4)),
        "build-b": ((0, 4), (2, 20)),
    }
    for model, sides in plan.items():
        for policy, (fell, runs) in zip(("isolated", "shared"), sides, strict=True):
            for seed in range(runs):
                _fake_run(tmp_path, f"{model}-{policy}-{seed}", "voting-math", policy, seed,
                          cliff if seed < fell else rise, sh, model=model)  # fmt: skip
    lines = findings(cell_stats(load_runs(tmp_path), window=2))
    (falls,) = [x for x in lines if "rises then falls" in x]
    assert "rose then fell isolated 18/24 runs vs shared 6/24" in falls
    assert (
        "— inconclusive (counts this far apart by chance: stratified exact test p = 1.00" in falls
    )
    assert "isolated fell more often in 0 and less often in 2 of 2:" in falls
    assert (
        "voting-math build-a full - 18/20 vs 4/4; voting-math build-b full - 0/4 vs 2/20" in falls
    )


def test_the_direction_of_a_stratified_fall_count_is_read_within_cells(tmp_path):
    """Isolated falls in 10/10 runs of one cell against Shared's 4/8 there, and nowhere in a
    second cell where it ran most of its runs: pooled, Isolated's rate is the lower (10/40
    against 4/12, only because of where its runs were); within the cells it falls more, and
    that is the verdict, with the cell that did not fall named too."""
    from flowzoo.analysis.stats import stratified_exact

    cliff = [(0, 0.40), (3, 0.70), (6, 0.30), (9, 0.20)]
    rise = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"solver": 0.8, "aggregator": 0.2}
    plan = {"build-a": ((10, 10), (4, 8)), "build-b": ((0, 30), (0, 4))}
    for model, sides in plan.items():
        for policy, (fell, runs) in zip(("isolated", "shared"), sides, strict=True):
            for seed in range(runs):
                _fake_run(tmp_path, f"{model}-{policy}-{seed}", "voting-math", policy, seed,
                          cliff if seed < fell else rise, sh, model=model)  # fmt: skip
    p, expected = stratified_exact([(10, 10, 4, 8), (0, 30, 0, 4)])
    assert p < 0.05 and 10 / 40 < 4 / 12 and 10 > expected
    (falls,) = [x for x in findings(cell_stats(load_runs(tmp_path), window=2)) if "falls" in x]
    assert (
        f"— supported (stratified exact test p = {p:.2g}): rose then fell isolated 10/40" in falls
    )
    assert "more often in 1 and less often in 0 of 2:" in falls
    assert (
        "voting-math build-a full - 10/10 vs 4/8; voting-math build-b full - 0/30 vs 0/4" in falls
    )


def test_the_stratified_test_refuses_an_impossible_table():
    """A count above its runs is a caller's error, named, not an IndexError deep inside."""
    from flowzoo.analysis.stats import stratified_exact

    for bad in [(5, 4, 0, 3), (0, 4, -1, 3), (1, -2, 0, 3)]:
        with pytest.raises(ValueError, match="fell of"):
            stratified_exact([(1, 3, 1, 3), bad])


def test_falls_by_build_reads_each_build_from_the_records(tmp_path, capsys):
    """The cross-build reading: one row per matched cell with its counts and Fisher's p,
    the stratified test over them, and a plot; counts recomputed from the run records."""
    from baselines.falls_by_build import main

    cliff = [(0, 0.40), (3, 0.70), (6, 0.30), (9, 0.20)]
    rise = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"solver": 0.8, "aggregator": 0.2}
    plan = {"build-a": (3, 0), "build-b": (1, 2)}  # isolated fell, shared fell, of 3 each
    for model, (fi, fs) in plan.items():
        for seed in range(3):
            for policy, fell in (("isolated", fi), ("shared", fs)):
                _fake_run(tmp_path / "runs", f"{model}-{policy}-{seed}", "voting-math", policy,
                          seed, cliff if seed < fell else rise, sh, model=model)  # fmt: skip
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "f.png")]) == 0
    out = capsys.readouterr().out
    assert "| voting build-a | 3/3 | 0/3 | 0.100 |" in out
    assert "| voting build-b | 1/3 | 2/3 | 1.000 |" in out
    assert (
        "stratified exact test over 2 cells: p = " in out and "isolated fell 4 against 3.0" in out
    )
    assert (tmp_path / "f.png").stat().st_size > 0
