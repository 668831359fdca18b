"""The conflict testbed's declared capture reading: the final role's last bare rate,
Isolated - Shared, a paired t over seeds with Holm within a protocol, the team's accuracy
beside it, and no verdict from fewer runs than the sweep declared. Each verdict is shown
coming out both ways."""

import json

import pytest
from scipy import stats as sps

from flowzoo.analysis.conflict import holm, paired_t_p
from flowzoo.analysis.report import build_report
from tests.analysis.test_behaviour import _with_behaviour
from tests.analysis.test_sweep_report import _fake_run

CURVE = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]


def _pair_runs(
    root, env, iso_rates, sh_rates, matched=False, conflict=True, seeds=None, shared=True
):
    role = {"voting-math": "aggregator", "orch-workers-math": "synthesizer"}[env]
    tag = f"{env}-{'um' if matched else 'st'}"
    for k, (ri, rs) in enumerate(zip(iso_rates, sh_rates, strict=True)):
        seed = seeds[k] if seeds else k
        for pol, rate in (("isolated", ri), ("shared", rs))[: 2 if shared else 1]:
            name = f"{tag}-{pol}-s{seed}"
            _fake_run(
                root,
                name,
                env,
                pol,
                seed,
                CURVE,
                {role: 0.3},
                env_options={"conflict": conflict},
                update_matched=matched,
            )
            _with_behaviour(root, name, {role: 0.5}, {role: rate})


def _section(root) -> str:
    md = build_report(root, window=2, plots=False).read_text()
    assert "## Capture at a cost" in md
    return md.split("## Capture at a cost", 1)[1].split("\n## ", 1)[0]


def test_paired_t_p_matches_scipy_and_holm_steps_down():
    for diffs in ([0.1, 0.2, 0.15, 0.05], [0.3, -0.1, 0.2, 0.0, 0.1], [-0.2, -0.25, -0.1]):
        assert paired_t_p(diffs) == pytest.approx(sps.ttest_1samp(diffs, 0.0).pvalue, rel=1e-9)
    assert paired_t_p([0.1]) == 1.0 and paired_t_p([0.2, 0.2]) == 0.0
    assert holm([0.01, 0.04]) == [True, True]  # 0.01 <= 0.025, then 0.04 <= 0.05
    assert holm([0.03, 0.04]) == [False, False]  # 0.03 > 0.025 stops the procedure
    assert holm([0.04, 0.001]) == [True, True]


def test_capture_supported_when_isolated_keeps_the_bare_answer(tmp_path):
    _pair_runs(tmp_path, "voting-math", [0.60, 0.62, 0.58, 0.61], [0.30, 0.35, 0.28, 0.33])
    _pair_runs(tmp_path, "orch-workers-math", [0.5, 0.4, 0.55, 0.45], [0.45, 0.5, 0.5, 0.4])
    sec = _section(tmp_path)
    vote = next(x for x in sec.splitlines() if "voting-math" in x)
    orch = next(x for x in sec.splitlines() if "orch-workers-math" in x)
    assert "aggregator" in vote and "supported" in vote and "study's protocol" in vote
    assert "synthesizer" in orch and "inconclusive" in orch


def test_capture_contradicted_when_shared_answers_bare_more(tmp_path):
    _pair_runs(tmp_path, "voting-math", [0.30, 0.35, 0.28, 0.33], [0.60, 0.62, 0.58, 0.61])
    vote = next(x for x in _section(tmp_path).splitlines() if "voting-math" in x)
    assert "contradicted" in vote


def test_protocols_are_read_apart(tmp_path):
    _pair_runs(tmp_path, "voting-math", [0.6, 0.62, 0.58, 0.61], [0.3, 0.35, 0.28, 0.33])
    _pair_runs(tmp_path, "voting-math", [0.5, 0.4, 0.55, 0.45], [0.45, 0.5, 0.5, 0.4], True)
    rows = [x for x in _section(tmp_path).splitlines() if "voting-math" in x]
    study = next(x for x in rows if "study's protocol" in x)
    matched = next(x for x in rows if "update-matched" in x)
    assert "supported" in study and "inconclusive" in matched


def test_no_verdict_from_fewer_runs_than_declared(tmp_path):
    _pair_runs(tmp_path, "voting-math", [0.6, 0.62, 0.58, 0.61], [0.3, 0.35, 0.28, 0.33])
    names = sorted(p.name for p in tmp_path.iterdir())
    (tmp_path / "sweep.json").write_text(
        json.dumps({"sweep": "x", "runs": {}, "declared": names + ["voting-math-st-shared-s9"]})
    )
    sec = _section(tmp_path)
    assert "No verdict" in sec and "1 of the runs this test declared (of the 9" in sec
    assert "supported (p" not in sec and "no verdict (runs missing)" in sec
    (tmp_path / "sweep.json").write_text(json.dumps({"sweep": "x", "runs": {}, "declared": names}))
    assert "supported (p" in _section(tmp_path)


def test_a_test_waits_for_its_own_workflows_runs_only(tmp_path):
    """A sweep declares the capture test (Voting, Orch-Workers) beside a control (Eval-Opt):
    the test is read once all of its runs are in, whatever of the control is missing; a
    missing run of one of its workflows (Orch-Workers, not yet run at all) or one whose id
    names no env holds back the whole Holm family."""
    _pair_runs(tmp_path, "voting-math", [0.6, 0.62, 0.58, 0.61], [0.3, 0.35, 0.28, 0.33])
    names = sorted(p.name for p in tmp_path.iterdir())
    control = [
        f"env=eval_opt_math-policy={p}-seed={k}" for p in ("shared", "isolated") for k in (0, 1)
    ]
    orch = ["env=orch_workers_math-policy=shared-seed=0"]

    def declare(extra):
        rec = {"sweep": "x", "runs": {}, "declared": names + extra}
        (tmp_path / "sweep.json").write_text(json.dumps(rec))
        return _section(tmp_path)

    assert "supported (p" in declare(control) and "No verdict" not in declare(control)
    for waiting in (orch, ["extra3-policy=shared-seed=4"]):
        sec = declare(control + waiting)
        assert "no verdict (runs missing)" in sec and "supported (p" not in sec
        assert "1 of the runs this test declared" in sec


def test_each_protocols_test_waits_for_its_own_runs(tmp_path):
    """The update-matched control's Isolated runs serve only its test: one missing holds
    back the control's reading, not the study protocol's; a missing run that names neither
    protocol (a Shared run, both sides' partner) holds back both."""
    _pair_runs(tmp_path, "voting-math", [0.6, 0.62, 0.58, 0.61], [0.3, 0.35, 0.28, 0.33])
    _pair_runs(tmp_path, "voting-math", [0.6, 0.62, 0.58, 0.61], [0.3, 0.35, 0.28, 0.33], True)
    names = sorted(p.name for p in tmp_path.iterdir())
    um = "extra9-env=orch_workers_math-policy=isolated-update_matched=True-seed=5"

    def rows(extra):
        rec = {"sweep": "x", "runs": {}, "declared": names + [extra]}
        (tmp_path / "sweep.json").write_text(json.dumps(rec))
        sec = _section(tmp_path).splitlines()
        study = next(x for x in sec if "study's protocol" in x and "voting-math" in x)
        return study, next(x for x in sec if "update-matched" in x and "voting-math" in x)

    study, control = rows(um)
    assert "supported (p" in study and "no verdict (runs missing)" in control
    study, control = rows("env=orch_workers_math-policy=shared-seed=5")
    assert "no verdict (runs missing)" in study and "no verdict (runs missing)" in control


def test_unpaired_seeds_and_non_conflict_runs(tmp_path):
    _pair_runs(tmp_path, "voting-math", [0.6, 0.62, 0.58], [0.3, 0.35, 0.28])
    # a fourth isolated seed with no shared partner: the declared test is paired
    _fake_run(
        tmp_path,
        "extra",
        "voting-math",
        "isolated",
        7,
        CURVE,
        {"aggregator": 0.3},
        env_options={"conflict": True},
        update_matched=False,
    )
    _with_behaviour(tmp_path, "extra", {"aggregator": 0.5}, {"aggregator": 0.6})
    assert "paired by seed" in _section(tmp_path)


def test_no_section_without_the_conflict(tmp_path):
    _pair_runs(tmp_path, "voting-math", [0.6, 0.62, 0.58], [0.3, 0.35, 0.28], conflict=False)
    assert "## Capture at a cost" not in build_report(tmp_path, window=2, plots=False).read_text()


def test_the_control_pairs_with_the_study_protocols_shared_runs(tmp_path):
    """The sweep runs Shared once for both protocols: the isolated runs under the control
    are read against the same shared runs, and each claim is read within one protocol."""
    _pair_runs(tmp_path, "voting-math", [0.6, 0.62, 0.58, 0.61], [0.3, 0.35, 0.28, 0.33])
    _pair_runs(
        tmp_path, "voting-math", [0.5, 0.4, 0.55, 0.45], [0, 0, 0, 0], matched=True, shared=False
    )
    md = build_report(tmp_path, window=2, plots=False).read_text()
    rows = [x for x in _section(tmp_path).splitlines() if "voting-math" in x]
    assert any("study's protocol" in x and "supported (p" in x for x in rows)
    assert any("update-matched" in x and "| 0.315 |" in x for x in rows)  # the same shared runs
    findings = md.split("## Findings", 1)[1].split("\n## ", 1)[0]
    assert "*Under the study's protocol:* **Isolated-Policy reaches a higher peak" in findings
    assert "*Under the update-matched control:* **Isolated-Policy reaches a higher peak" in findings


def _intervention_run(root, name, seed, synth, acc=0.9, status="completed"):
    d = root / name.format(s=seed, x=12 + seed)
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"status": status}))
    ev = {"accuracy": acc, "behaviour": {"synthesizer": synth, "orchestrator": 0.8}}
    (d / "metrics.jsonl").write_text(json.dumps({"step": 47, "eval": ev}) + "\n")


@pytest.mark.parametrize(
    "shift, word", [(0.004, "carries"), (-0.004, "contradicted"), (0.0, "inconclusive")]
)
def test_the_intervention_reading_can_come_out_every_way_and_waits_for_its_runs(
    tmp_path, shift, word
):
    """The declared intervention reading (baselines/conflict_intervention.py): equal weights
    minus Shared, paired by seed; no verdict while a declared run is missing or failed."""
    from baselines.conflict_intervention import ARMS, main

    noise = [0.001, -0.001, 0.0005, -0.0005, 0.0, 0.001, -0.001, 0.0]
    for s in range(8):
        for arm, pattern in ARMS.items():
            root = tmp_path / ("int" if "equal" in arm else "claims")
            base = 0.99 + (0.004 if arm.startswith("isolated") else 0.0)
            extra = (
                shift + noise[s]
                if "equal" in arm and shift
                else (noise[s] if "equal" in arm else 0.0)
            )
            _intervention_run(root, pattern, s, base + extra)
    args = ["--claims", str(tmp_path / "claims"), "--intervention", str(tmp_path / "int")]
    assert main([*args, "--out", str(tmp_path / "out")]) == 0
    got = json.loads((tmp_path / "out" / "reading.json").read_text())
    assert word in got["verdict"], got["verdict"]
    (tmp_path / "int" / "seed=3" / "summary.json").write_text(json.dumps({"status": "failed"}))
    assert main([*args, "--out", str(tmp_path / "out2")]) == 0
    got = json.loads((tmp_path / "out2" / "reading.json").read_text())
    assert got["verdict"].startswith("no verdict (7 of the 8")
