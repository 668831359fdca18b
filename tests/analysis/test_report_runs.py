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


# ------------------------------------------------------------------ builds kept apart

CALIBRATION = "baselines/results/code-testbed-calibration"


def _built(root, name, seed, digest=None, files=None, model="tiny-s"):
    """A fake run with a build: a ``weights_digest`` (a new record), or per-file digests
    only (``base_model.sha256``: a record written before the single digest)."""
    _fake_run(root, name, "voting-math", "shared", seed, RISE, SH, model=model)
    p = root / name / "summary.json"
    s = json.loads(p.read_text())
    if digest is not None:
        s["weights_digest"] = digest
    if files is not None:
        s["base_model"] = {"path": "/m", "sizes": dict.fromkeys(files, 1), "sha256": files}
    p.write_text(json.dumps(s))


def test_two_committed_builds_of_one_model_name_are_kept_apart_not_pooled_as_seeds(tmp_path):
    """The committed main jobs of the first and the second tiny-s-code build (seeds 0-2
    each), given one configuration (they differ in lr_decay_steps too): they pooled into one
    cell of "3 (6 runs)" as if seeds; each build is now its own cell, labelled with its
    build, and the report says so. Each set alone reads as it did."""
    import shutil

    from flowzoo.analysis.builds import build_digest

    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(f"{CALIBRATION}/first-build-main-job-runs", first)
    shutil.copytree(f"{CALIBRATION}/second-build-amd-main-job-runs", second)
    for seed in range(3):  # the first build's config, seed for seed
        shutil.copy(first / f"code-tb-s{seed}/config.json", second / f"code-tb-b2-s{seed}")
    runs = load_runs([first, second])
    assert len(runs) == 6 and runs[0].varying == ()
    cells = cell_stats(runs)
    want = {f"tiny-s-code (build {build_digest(r.summary['base_model'])[:12]})" for r in runs}
    assert len(cells) == 2 and {c.key[2] for c in cells} == want and len(want) == 2
    assert all(c.seeds == [0, 1, 2] and c.seeds_cell == "3" for c in cells)
    md = build_report([first, second], out=tmp_path / "rep", plots=False).read_text()
    assert "Builds kept apart" in md and "tiny-s-code: build " in md
    for d in (first, second):  # each alone: one build, nothing labelled
        alone = load_runs([d])
        assert len(cell_stats(alone)) == 1 and alone[0].cell[2] == "tiny-s-code"


def test_builds_are_labelled_only_where_one_model_name_holds_several(tmp_path):
    """Variants: two builds and a record without a digest (three cells: the unknown one is
    never pooled into either); one build beside records without a digest (pooled as
    before, no note); the same build recorded as a digest or as per-file digests (one
    build); two model names with a build each (nothing labelled)."""
    from flowzoo.analysis.builds import build_digest

    files_a, files_b = {"model.safetensors": "a" * 64}, {"model.safetensors": "b" * 64}
    da, db = build_digest({"sha256": files_a}), build_digest({"sha256": files_b})
    mixed = tmp_path / "mixed"
    for seed in range(2):
        _built(mixed, f"a{seed}", seed, da)
        _built(mixed, f"b{seed}", seed, files=files_b)
        _built(mixed, f"u{seed}", seed)  # no digest
    cells = cell_stats(load_runs(mixed), window=2)
    assert sorted(c.key[2] for c in cells) == [
        f"tiny-s (build {da[:12]})",
        f"tiny-s (build {db[:12]})",
        "tiny-s (build unknown)",
    ]
    assert all(len(c.runs) == 2 for c in cells)
    md = build_report(mixed, window=2, plots=False).read_text()
    assert "Builds kept apart" in md and f"build {db[:12]} (2 runs)" in md
    assert f"| voting | tiny-s (build {da[:12]}) | shared | full | - | 2 |" in md

    one = tmp_path / "one"  # a digest given two ways, and records without one: one cell
    _built(one, "a0", 0, da)
    _built(one, "a1", 1, files=files_a)
    _built(one, "u2", 2)
    (cell,) = cell_stats(load_runs(one), window=2)
    assert cell.key[2] == "tiny-s" and len(cell.runs) == 3
    assert "Builds kept apart" not in build_report(one, window=2, plots=False).read_text()

    names = tmp_path / "names"  # another name is another cell already: nothing to label
    _built(names, "s", 0, da)
    _built(names, "m", 0, db, model="tiny-m")
    assert sorted(c.key[2] for c in cell_stats(load_runs(names))) == ["tiny-m", "tiny-s"]


def test_committed_run_records_read_as_before_one_build_per_report():
    """Every committed set of run records (most from before the digest, some with per-file
    digests only) loads with no build label: the committed reports do not change."""
    from pathlib import Path

    from flowzoo.analysis.report import builds_kept_apart

    roots = sorted(Path("baselines/results").glob("*/runs"))
    roots += sorted(Path("baselines/results").glob("archive/*/runs"))  # superseded, still read
    roots += sorted(Path("baselines/results").glob("**/*-main-job-runs"))
    roots += sorted(Path("baselines/results").glob("main-job*-runs"))
    assert len(roots) >= 20
    for root in roots:
        runs = load_runs([root])
        assert runs and builds_kept_apart(runs) == [], root
        assert all(r.cell[2] == str(r.config["model"]) for r in runs), root
