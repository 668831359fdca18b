"""The cliff early-warning monitor, torch-free: its two rules on hand-made metrics lines, its
settings refused at the config boundary, its replay on committed runs, the report's section,
and the committed evaluation's own arithmetic (the fall step, McNemar, the shipped values)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flowzoo.analysis.readings import evals_of
from flowzoo.analysis.report import DEFAULTS, load_runs
from flowzoo.analysis.warning import Alarm, Monitor, Thresholds, replay, warning_rows
from flowzoo.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "baselines" / "results"


def line(step, dev=0.001, reward=0.5, roles=("solver", "aggregator"), **extra):
    """A metrics line: every role's ratio_dev ``dev`` (or a dict role -> dev)."""
    devs = dev if isinstance(dev, dict) else {r: dev for r in roles}
    return {
        "step": step,
        "reward": reward,
        "roles": {r: {"ratio_dev": d, "grad_norm": 1.0} for r, d in devs.items()},
        **extra,
    }


def th(size=0.0, size_window=1, drop=0.0, drop_window=1):
    return Thresholds(size, size_window, drop, drop_window)


def test_update_size_warns_once_past_its_threshold_naming_the_role():
    m = Monitor(th(size=0.02))
    assert m.observe(line(0, 0.02)) == []  # at the threshold: not past it
    got = m.observe(line(1, {"solver": 0.001, "aggregator": 0.03}))
    assert got == [Alarm(1, "update_size", 0.03, 0.02, "aggregator")]
    assert m.observe(line(2, 0.5)) == []  # each signal warns once
    assert m.first == got[0] and m.alarms == got


def test_update_size_averages_its_window():
    m = Monitor(th(size=0.02, size_window=3))
    assert m.observe(line(0, 0.05)) == [] and m.observe(line(1, 0.001)) == []  # 2 < window
    assert m.observe(line(2, 0.001)) == []  # mean 0.0173
    (a,) = m.observe(line(3, 0.06))  # mean (0.001 + 0.001 + 0.06) / 3 = 0.0207
    assert a.step == 3 and a.value == pytest.approx(0.062 / 3)


def test_reward_drop_reads_the_fall_from_the_best_earlier_window():
    m = Monitor(th(drop=0.3, drop_window=2))
    rewards = [0.2, 0.9, 0.9, 0.7, 0.55, 0.5]  # window means .55 .9 .8 .625 .525
    out = [m.observe(line(i, reward=r)) for i, r in enumerate(rewards)]
    assert [bool(x) for x in out] == [False] * 5 + [True]
    assert out[5][0].signal == "reward_drop" and out[5][0].value == pytest.approx(0.9 - 0.525)
    assert out[5][0].role is None


def test_a_rule_at_zero_is_off_and_lines_that_are_not_steps_are_skipped():
    m = Monitor(th())
    assert all(m.observe(line(i, 9.0, reward=r)) == [] for i, r in enumerate([1, 0, 1, 0]))
    m = Monitor(th(size=0.01))
    for bad in ({"step": -1, "eval": {"accuracy": 0.5}}, {"step": 3}, {"roles": {}}, {}):
        assert m.observe(bad) == []
    # a role without ratio_dev (frozen), and non-finite or wrong-typed values, are not read
    odd = {"a": {"frozen": True}, "b": {"ratio_dev": float("nan")}, "c": {"ratio_dev": True}}
    assert m.observe({"step": 0, "reward": 0.5, "roles": odd}) == []


def test_the_monitor_never_reads_the_held_out_evaluation():
    lines = [line(i, 0.001 * i, reward=0.5) for i in range(30)]
    t = th(size=0.02, drop=0.1, drop_window=3)
    with_eval = [dict(x, eval={"accuracy": 0.9 if i < 15 else 0.1}) for i, x in enumerate(lines)]
    assert (
        replay(lines, t)
        == replay(with_eval, t)
        == [Alarm(21, "update_size", 0.021, 0.02, "solver")]
    )


def test_replay_feeds_lines_in_step_order():
    lines = [line(0, 0.001), line(1, 0.05), line(2, 0.001)]
    assert replay(lines[::-1], th(size=0.02)) == replay(lines, th(size=0.02))
    assert replay(lines + ["torn", {"step": "x"}], th(size=0.02))[0].step == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"monitor_response": "halt"},
        {"monitor_response": "Warn"},
        {"monitor_response": ""},
        {"monitor_response": 1},
        {"monitor_update_size": -0.01},
        {"monitor_update_size": float("nan")},
        {"monitor_update_size": float("inf")},
        {"monitor_update_size": "0.02"},
        {"monitor_update_size": True},
        {"monitor_update_size": 101.0},
        {"monitor_update_window": 0},
        {"monitor_update_window": -3},
        {"monitor_update_window": 2.5},
        {"monitor_reward_drop": -1},
        {"monitor_reward_drop": float("-inf")},
        {"monitor_reward_window": 0},
        {"monitor_reward_window": True},
        {"monitor_rollback_lr": 0},
        {"monitor_rollback_lr": 1.0},
        {"monitor_rollback_lr": 2},
        {"monitor_rollback_lr": -0.5},
        {"monitor_rollback_lr": float("nan")},
    ],
)
def test_a_monitor_setting_out_of_its_domain_is_refused_at_the_config(bad):
    ((name, value),) = bad.items()
    with pytest.raises(ValueError, match=name) as e:
        TrainConfig(**bad)
    assert repr(value) in str(e.value) or str(value) in str(e.value)  # the bad value named


@pytest.mark.parametrize(
    "bad",
    [
        dict(update_size=-1.0),
        dict(update_size=float("nan")),
        dict(reward_window=0),
        dict(update_window=1.5),
        dict(reward_drop="1"),
    ],
)
def test_thresholds_made_directly_are_checked_too(bad):
    kw = {"update_size": 0.02, "update_window": 1, "reward_drop": 0.5, "reward_window": 8}
    with pytest.raises(ValueError, match="monitor"):
        Thresholds(**{**kw, **bad})


def test_the_flag_refuses_a_bad_value_before_torch_is_imported():
    pre = "import sys; sys.modules['torch'] = None; from flowzoo.cli import main; "
    for args in (
        ["--monitor-response", "halt"],
        ["--monitor-rollback-lr", "1"],
        ["--monitor-update-size", "-1"],
    ):
        r = subprocess.run(
            [sys.executable, "-c", pre + "sys.exit(main(sys.argv[1:]))", "train", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        flag = args[0].lstrip("-")
        said = r.stderr.replace("_", "-")
        assert r.returncode == 2 and flag in said and args[1] in said, r.stderr
        assert "Traceback" not in r.stderr


def test_warn_is_the_default_and_its_thresholds_do_not_change_a_runs_identity():
    d = TrainConfig()
    assert d.monitor_response == "warn"
    assert TrainConfig(monitor_update_size=0.5, monitor_reward_drop=0).identity() == d.identity()
    # a response that acts shapes the run: a resume under another one is another run
    assert TrainConfig(monitor_response="rollback").identity() != d.identity()
    a = TrainConfig(monitor_response="stop", monitor_update_size=0.01).identity()
    assert a != TrainConfig(monitor_response="stop").identity()


def test_the_shipped_thresholds_are_the_tuned_ones():
    tuned = json.loads((RESULTS / "warning-eval" / "tuned.json").read_text())
    assert Thresholds.of(TrainConfig()).as_dict() == tuned["monitor"]


def _run(set_name, contains):
    runs = load_runs(RESULTS / set_name / "runs")
    return next(r for r in runs if contains in r.path.name)


def test_it_warns_early_on_a_committed_cliff_and_not_on_its_slow_lr_twin():
    """Voting on math, recipe 10: lr 2e-4 seed 1 (Isolated) rose then fell; at 5e-5 it held."""
    t = Thresholds.of(TrainConfig())
    fell = _run("testbed-ladder-r10", "extra2-policy=isolated-lr=0.0002-seed=1")
    held = _run("testbed-ladder-r10", "policy=isolated-lr=5e_05-seed=0")
    alarms = replay(fell.metrics, t)
    assert alarms and alarms[0].signal == "update_size"
    fall_at = next(s for s, e in evals_of(fell.metrics) if s > 0 and e["accuracy"] < 0.6)
    assert alarms[0].step + 1 + fell.config["eval_every"] <= fall_at
    assert replay(held.metrics, t) == []


def test_the_report_lists_each_runs_warnings(tmp_path):
    runs = load_runs(RESULTS / "testbed-ladder-r10" / "runs")
    md = "\n".join(warning_rows(runs, DEFAULTS))
    assert md.startswith("## Early warnings")
    assert "12 runs predate it and were replayed" in md
    assert "| extra2-policy=isolated-lr=0.0002-seed=1 | replayed | step " in md
    assert "policy=isolated-lr=5e_05-seed=0" not in md  # it did not warn: not listed
    # a run that recorded its own monitor is read from its record, not replayed
    r = runs[0]
    r.summary = dict(
        r.summary,
        monitor={
            "response": "rollback",
            "warnings": [
                {
                    "step": 4,
                    "signal": "update_size",
                    "value": 0.03,
                    "threshold": 0.017,
                    "role": "solver",
                }
            ],
            "rollbacks": [{}],
            "stopped_early": None,
        },
    )
    row = next(x for x in warning_rows([r], DEFAULTS) if x.startswith(f"| {r.path.name}"))
    assert "| rollback | step 4: update_size 0.03 > 0.017 (solver) | 1 rollbacks |" in row


def test_the_evaluations_arithmetic():
    sys.path.insert(0, str(ROOT / "baselines"))
    try:
        import warning_eval as we
    finally:
        sys.path.remove(str(ROOT / "baselines"))

    def ev(acc):
        return {"accuracy": acc, "per_problem": [round(acc * 4)] * 50 + [0] * 0, "samples": 4}

    # rises by step 8, falls by 16: the rule reads the fall at 16, never at the base or peak
    curve = [(0, ev(0.25)), (8, ev(1.0)), (16, ev(0.25)), (24, ev(0.25))]
    assert we.first_fall(curve, 3, 0.0) == 16
    assert we.first_fall([(0, ev(0.25)), (8, ev(1.0)), (16, ev(1.0))], 3, 0.0) is None
    m = we.mcnemar([True, True, True, False], [False, False, False, False])
    assert (m["only_monitor"], m["only_naive"]) == (3, 0) and m["p"] == pytest.approx(0.25)
    assert we.mcnemar([True], [True])["p"] == 1.0
    assert set(we.TUNING).isdisjoint(we.test_sets()) and "warning-eval" not in we.test_sets()
