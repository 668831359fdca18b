"""The readings the declared rollback and estimator sweeps ask for (flowzoo/analysis/
responses.py): rollback - warn on the final accuracy, and the log spike ratio of GRPO's
global normalisation against Dr. MAS's, each paired by seed, each shown coming out every
way, with no verdict from fewer runs than declared and no section without its cells."""

import json

import pytest

from flowzoo.analysis.report import build_report, cell_stats, load_runs
from flowzoo.analysis.responses import matched, spike_ratio
from tests.analysis.test_sweep_report import _fake_run

FELL = [(0, 0.40), (3, 0.75), (6, 0.45), (9, 0.40), (12, 0.35)]
HELD = [(0, 0.40), (3, 0.75), (6, 0.74), (9, 0.73), (12, 0.74)]
SH = {"solver": 0.8, "aggregator": 0.2}


def _section(root, title) -> str:
    md = build_report(root, window=2, plots=False).read_text()
    assert f"## {title}" in md, md[-2000:]
    return md.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _rollback_runs(root, warn_curves, rollback_curves):
    for seed, (w, r) in enumerate(zip(warn_curves, rollback_curves, strict=True)):
        for how, curve in (("warn", w), ("rollback", r)):
            _fake_run(root, f"{how}-s{seed}", "voting-math", "shared", seed, curve, SH,
                      monitor_response=how, lr=2e-4)  # fmt: skip


def _shift(curve, d):
    return [(s, a + (d if s else 0.0)) for s, a in curve]


def test_rollback_that_saves_the_model_is_supported(tmp_path):
    _rollback_runs(tmp_path, [_shift(FELL, 0.01 * k) for k in range(4)],
                   [_shift(HELD, -0.01 * k) for k in range(4)])  # fmt: skip
    sec = _section(tmp_path, "The early warning's rollback, measured")
    row = [x for x in sec.splitlines() if x.startswith("| voting-math")][0]
    assert "| 4 / 4 |" in row and "supported (p = " in row
    assert "| 12 / 12 |" in row  # steps run, each side


def test_rollback_that_loses_is_contradicted_and_a_tie_is_inconclusive(tmp_path):
    _rollback_runs(tmp_path / "a", [_shift(HELD, 0.01 * k) for k in range(4)],
                   [_shift(FELL, 0.01 * k) for k in range(4)])  # fmt: skip
    assert "contradicted (p = " in _section(tmp_path / "a", "The early warning's rollback")
    noise = [0.02, -0.03, 0.01, -0.01]
    _rollback_runs(tmp_path / "b", [_shift(HELD, 0) for _ in noise],
                   [_shift(HELD, e) for e in noise])  # fmt: skip
    assert "inconclusive (p = " in _section(tmp_path / "b", "The early warning's rollback")


def test_no_verdict_from_fewer_runs_than_declared_and_no_section_without_the_pair(tmp_path):
    _rollback_runs(tmp_path, [FELL] * 3, [HELD] * 3)
    declared = [f"{h}-s{k}" for h in ("warn", "rollback") for k in range(4)]
    (tmp_path / "sweep.json").write_text(json.dumps({"declared": declared}))
    assert "no verdict (runs missing)" in _section(tmp_path, "The early warning's rollback")
    for seed in range(3):
        _fake_run(tmp_path / "c", f"w{seed}", "voting-math", "shared", seed, FELL, SH)
    md = build_report(tmp_path / "c", window=2, plots=False).read_text()
    assert (
        "rollback, measured" not in md
        and "Gradient-norm spikes: one normalisation across agents" not in md
    )


def _with_norms(root, name, norms):
    """Rewrite a fake run's step lines with these per-step policy gradient norms."""
    p = root / name / "metrics.jsonl"
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    steps = [x for x in lines if x["step"] >= 0]
    for x, g in zip(steps, norms, strict=False):
        x["policies"] = {"shared": {"grad_norm": g, "opt_steps": 4}}
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _spike_runs(root, dm_norms, gl_norms):
    for seed, (a, b) in enumerate(zip(dm_norms, gl_norms, strict=True)):
        for name, norms, cfg in (
            (f"drmas-s{seed}", a, {"algo": "dr-mas", "group_by": "task"}),
            (f"grpo-s{seed}", b, {"algo": "grpo", "group_by": "task"}),
        ):
            _fake_run(root, name, "voting-math", "shared", seed, HELD, SH, **cfg)
            _with_norms(root, name, norms)


def test_spike_ratio_is_the_largest_step_over_the_median_step(tmp_path):
    _fake_run(tmp_path, "r", "voting-math", "shared", 0, HELD, SH)
    _with_norms(tmp_path, "r", [1.0, 2.0, 1.0, 8.0, 1.0] + [1.0] * 7)
    (run,) = load_runs(tmp_path)
    assert spike_ratio(run) == pytest.approx(8.0)
    _with_norms(tmp_path, "r", [0.0] * 11 + [3.0])  # one step with a gradient: no ratio
    (run,) = load_runs(tmp_path)
    assert spike_ratio(run) is None


def test_pooled_normalisation_that_spikes_is_supported_and_the_reverse_contradicted(tmp_path):
    calm = [[1.0 + 0.05 * (i % 3) for i in range(12)] for _ in range(4)]
    spiky = [[1.0] * 5 + [6.0 + k] + [1.0] * 6 for k in range(4)]
    _spike_runs(tmp_path / "a", calm, spiky)
    row = [
        x
        for x in _section(
            tmp_path / "a", "Gradient-norm spikes: one normalisation across agents"
        ).splitlines()
        if x.startswith("| voting-math")
    ]
    assert "supported (p = " in row[0] and "| 4 |" in row[0]
    _spike_runs(tmp_path / "b", spiky, calm)
    assert "contradicted (p = " in _section(
        tmp_path / "b", "Gradient-norm spikes: one normalisation across agents"
    )


def test_cells_pair_only_when_alike_but_for_the_compared_settings(tmp_path):
    for seed in range(3):
        _fake_run(tmp_path, f"d{seed}", "voting-math", "shared", seed, HELD, SH, algo="dr-mas")
        _fake_run(
            tmp_path, f"g{seed}", "voting-math", "shared", seed, HELD, SH, kl_coef=0.1
        )  # fmt: skip another lever apart: no pair
        _fake_run(tmp_path, f"r{seed}", "voting-math", "shared", seed, HELD, SH,
                  algo="role-baseline")  # fmt: skip
    stats = cell_stats(load_runs(tmp_path), window=2)
    spikes = (("algo",), {"algo": "dr-mas"}, {"algo": "grpo", "adv_norm": "group"})
    assert matched(stats, *spikes) == []
    assert len(matched(stats, ("algo",), {"algo": "dr-mas"}, {"algo": "role-baseline"})) == 1


def test_steps_a_rollback_ran_again_are_counted_and_the_halved_lr_arm_pairs(tmp_path):
    _rollback_runs(tmp_path, [FELL] * 3, [HELD] * 3)
    for seed in range(3):
        p = tmp_path / f"rollback-s{seed}" / "summary.json"
        s = json.loads(p.read_text())
        s["monitor"] = {"rollbacks": [{"at_step": 2, "to_step": 0, "lr_scale": 0.5}]}
        p.write_text(json.dumps(s))
        _fake_run(tmp_path, f"half-s{seed}", "voting-math", "shared", seed, HELD, SH,
                  monitor_response="warn", lr=1e-4)  # fmt: skip
    sec = _section(tmp_path, "The early warning's rollback, measured")
    rows = [x for x in sec.splitlines() if x.startswith("| voting-math")]
    same = [x for x in rows if "| lr 0.0002 |" in x]
    half = [x for x in rows if "| lr 0.0001 |" in x]
    assert len(same) == 1 and len(half) == 1
    assert "| 12 / 14 |" in same[0] and "| 1.0 |" in same[0]  # 2 steps discarded, run again
    assert "supported" in same[0] and "inconclusive" in half[0]


def test_a_spike_verdict_needs_every_run_paired(tmp_path):
    calm = [[1.0 + 0.05 * (i % 3) for i in range(12)] for _ in range(4)]
    spiky = [[1.0] * 5 + [6.0 + k] + [1.0] * 6 for k in range(4)]
    _spike_runs(tmp_path, calm, spiky)
    _with_norms(tmp_path, "grpo-s3", [0.0] * 12)  # one run without gradient norms
    assert "no verdict (a run without gradient norms" in _section(
        tmp_path, "Gradient-norm spikes: one normalisation across agents"
    )


def test_falls_by_estimator_read_with_fishers_test_both_ways(tmp_path):
    for seed in range(5):
        _fake_run(tmp_path / "a", f"g{seed}", "voting-math", "shared", seed, FELL, SH)
        _fake_run(tmp_path / "a", f"r{seed}", "voting-math", "shared", seed, HELD, SH,
                  algo="role-baseline")  # fmt: skip
    sec = _section(tmp_path / "a", "Falls by estimator")
    assert "| 5/5 | 0/5 |" in sec and "fewer falls (p = 0.0079)" in sec
    for seed in range(5):
        curve = FELL if seed < 3 else HELD
        _fake_run(tmp_path / "b", f"g{seed}", "voting-math", "shared", seed, curve, SH)
        _fake_run(tmp_path / "b", f"r{seed}", "voting-math", "shared", seed, FELL, SH,
                  algo="role-baseline")  # fmt: skip
    assert "inconclusive (p = " in _section(tmp_path / "b", "Falls by estimator")


def test_a_setting_whose_text_looks_like_a_lever_does_not_pair_cells(tmp_path):
    """Cells are matched on their runs' settings, not on their labels' text: an env option
    whose value reads like ``, monitor_response=warn`` keeps two cells apart."""
    odd = {"note": "x, monitor_response=warn"}
    for seed in range(3):
        _fake_run(tmp_path, f"w{seed}", "voting-math", "shared", seed, FELL, SH,
                  monitor_response="warn", env_options={"note": "plain"})  # fmt: skip
        _fake_run(tmp_path, f"r{seed}", "voting-math", "shared", seed, HELD, SH,
                  monitor_response="rollback", env_options=odd)  # fmt: skip
    stats = cell_stats(load_runs(tmp_path), window=2)
    assert len(stats) == 2 and all(len(c.runs) == 3 for c in stats)  # both cells were read
    rollback = (
        ("monitor_response",),
        {"monitor_response": "warn"},
        {"monitor_response": "rollback"},
    )
    assert matched(stats, *rollback) == []
    for seed in range(3):  # the same option on both sides: they pair
        _fake_run(tmp_path / "same", f"w{seed}", "voting-math", "shared", seed, FELL, SH,
                  monitor_response="warn", env_options=odd)  # fmt: skip
        _fake_run(tmp_path / "same", f"r{seed}", "voting-math", "shared", seed, HELD, SH,
                  monitor_response="rollback", env_options=odd)  # fmt: skip
    assert len(matched(cell_stats(load_runs(tmp_path / "same"), window=2), *rollback)) == 1


def test_a_reading_waits_for_the_runs_of_its_own_workflow_only(tmp_path):
    """estimators-falls declares the spike pair on one workflow and the falls pair on
    another: the spike reading is decided once its own runs are in, while the other
    workflow's declared runs are still missing; one missing run of its own workflow (the
    sweep wrote the env in the id) holds it back."""
    calm = [[1.0 + 0.05 * (i % 3) for i in range(12)] for _ in range(4)]
    spiky = [[1.0] * 5 + [6.0 + k] + [1.0] * 6 for k in range(4)]
    _spike_runs(tmp_path, calm, spiky)
    have = sorted(p.name for p in tmp_path.iterdir())
    title = "Gradient-norm spikes: one normalisation across agents"
    for other, verdict in (
        ("env=eval_opt_math-algo=role_baseline-seed=0", "supported (p = "),
        ("env=voting_math-algo=grpo-seed=9", "no verdict (runs missing)"),
    ):
        (tmp_path / "sweep.json").write_text(json.dumps({"declared": have + [other]}))
        assert verdict in _section(tmp_path, title)
