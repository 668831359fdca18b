"""What the report pools and how it shows it: the seeds column counts distinct seeds, only
completed runs are pooled and every run left out is named with its reason, and a curve
without a 95% band is not drawn on an axis zoomed onto it."""

import json

import pytest

from flowzoo.analysis.report import _plot_group, build_report, cell_stats, load_runs
from tests.analysis.test_sweep_report import _fake_run

RISE = [(0, 0.40), (3, 0.42), (6, 0.43), (9, 0.44)]
SH = {"solver": 0.8, "aggregator": 0.2}


def _set_status(run, status, steps_done):
    p = run / "summary.json"
    s = json.loads(p.read_text())
    p.write_text(json.dumps({**s, "status": status, "steps_done": steps_done}))


def test_seeds_are_counted_once_and_unfinished_runs_are_left_out_and_named(tmp_path, capsys):
    for seed in range(3):
        _fake_run(tmp_path, f"s{seed}", "voting-math", "shared", seed, RISE, SH, steps=9)
    _fake_run(tmp_path, "s0-copy", "voting-math", "shared", 0, RISE, SH, steps=9)  # seed 0 again
    for name, status in (("s3", "interrupted"), ("s4", "failed: RuntimeError"), ("s5", None)):
        _fake_run(tmp_path, name, "voting-math", "shared", int(name[1]), RISE[:2], SH, steps=9)
        _set_status(tmp_path / name, status, 3)
    _fake_run(tmp_path, "s6", "voting-math", "shared", 6, RISE, SH, steps=9)
    (tmp_path / "s6" / "summary.json").write_text('{"status": "compl')  # torn by a kill
    left: list[str] = []
    runs = load_runs(tmp_path, left)
    assert sorted(r.path.name for r in runs) == ["s0", "s0-copy", "s1", "s2"]
    why = dict(x.split(": ", 1) for x in left)
    assert why[str(tmp_path / "s3")] == "unfinished (status interrupted, 3 of 9 steps)"
    assert why[str(tmp_path / "s4")].startswith("unfinished (status failed: RuntimeError")
    assert why[str(tmp_path / "s5")].startswith("unfinished (status missing")
    assert why[str(tmp_path / "s6" / "summary.json")].startswith("unreadable")
    assert "skipped" in capsys.readouterr().err
    (cell,) = cell_stats(runs, window=2)
    assert cell.seeds == [0, 1, 2] and cell.seeds_cell == "3 (4 runs)"
    md = build_report(tmp_path, window=2, plots=False).read_text()
    assert "| voting | tiny-s | shared | full | - | 3 (4 runs) |" in md
    assert "4 runs in 1 cells (4 unfinished or unreadable runs left out, named below)" in md
    assert "3-3 seeds per cell" in md
    listed = md.split("## Runs left out", 1)[1]
    for name in ("s3", "s4", "s5", "s6"):
        assert str(tmp_path / name) in listed


def test_no_finished_run_is_an_error_naming_the_unfinished_ones(tmp_path):
    _fake_run(tmp_path, "a", "voting-math", "shared", 0, RISE, SH)
    _set_status(tmp_path / "a", "interrupted", 2)
    with pytest.raises(ValueError, match=r"no finished runs .* left out: .*a: unfinished"):
        build_report(tmp_path, plots=False)


def test_a_curve_without_a_band_is_drawn_on_the_whole_accuracy_axis(tmp_path):
    pytest.importorskip("matplotlib")
    _fake_run(tmp_path / "one", "r", "voting-math", "shared", 0, RISE, SH)
    for seed in range(3):
        _fake_run(tmp_path / "three", f"r{seed}", "voting-math", "shared", seed, RISE, SH)
    (single,) = cell_stats(load_runs(tmp_path / "one"))
    lo, hi, note = _plot_group([single], tmp_path / "one.png")
    assert lo <= 0.0 and hi >= 1.0 and "one run, no 95% band" in note and "shared" in note
    (seeds,) = cell_stats(load_runs(tmp_path / "three"))
    lo, hi, note = _plot_group([seeds], tmp_path / "three.png")
    assert note == "" and lo > 0.2 and hi < 0.6  # a band shows the noise: zoomed is fair
    md = build_report(tmp_path / "one", window=2).read_text()
    assert "voting-math_tiny-s_full: shared: one run, no 95% band" in md
