"""The report's behaviour section: each role's considered rate at base and at the end, and
Isolated vs Shared on the end rate, read from the runs' evaluation records."""

import json

from flowzoo.analysis.report import build_report
from tests.analysis.test_sweep_report import _fake_run


def _with_behaviour(root, name, first: dict, last: dict) -> None:
    """Give a fake run's first and last evaluations a behaviour reading."""
    p = root / name / "metrics.jsonl"
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    lines[0]["eval"].update(behaviour=first, behaviour_n=dict.fromkeys(first, 500))
    end = {"accuracy": 0.6, "behaviour": last, "behaviour_n": dict.fromkeys(last, 40)}
    lines.append({"step": lines[-1]["step"], "eval": end})
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_behaviour_rates_and_isolated_vs_shared(tmp_path):
    curve = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    sh = {"optimizer": 0.8, "evaluator": 0.2}
    for seed in range(3):
        for pol, check in (("isolated", 0.50 + 0.01 * seed), ("shared", 0.20 + 0.02 * seed)):
            name = f"{pol[0]}{seed}"
            _fake_run(tmp_path, name, "eval-opt-math", pol, seed, curve, sh)
            _with_behaviour(
                tmp_path,
                name,
                {"optimizer": 0.5, "evaluator": 0.55},
                {"optimizer": 0.9 + 0.01 * seed, "evaluator": check},
            )
    md = build_report(tmp_path, window=2, plots=False).read_text()
    section = md.split("## Behaviour", 1)[1]
    assert "| evaluator | 0.55 (500) | 0.22 (40) | 0.20, 0.22, 0.24 |" in section
    # the evaluator checks clearly more under Isolated (+0.30, +0.29, +0.28 by seed); the
    # optimizer's end rate is the same on both sides
    assert "| evaluator | +0.290 ± 0.025 (paired) | isolated higher |" in section
    assert "| optimizer | +0.000 ± 0.000 (paired) | - |" in section


def test_no_behaviour_section_without_readings(tmp_path):
    curve = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
    for seed in range(3):
        _fake_run(tmp_path, f"s{seed}", "voting-math", "shared", seed, curve, {"solver": 1.0})
    md = build_report(tmp_path, window=2, plots=False).read_text()
    assert "## Behaviour" not in md
