"""``flowzoo report``'s inputs checked where they enter: knobs out of their domain refused
naming it; a run whose records hold an accuracy outside [0, 1], a NaN or an infinity, or
whose config.json is malformed or wrong-typed, left out and named while the report goes on
(never averaged in, never a traceback); and outputs never written through a link or into a
FIFO planted where they go. Real run directories on disk, the real CLI in-process."""

import json
import math
import os
from pathlib import Path

import pytest

from flowzoo.analysis.inputs import config_fault, record_fault
from flowzoo.analysis.records import read_metrics
from flowzoo.analysis.report import build_report, cell_stats, load_runs
from flowzoo.cli import main
from flowzoo.files import UnsafePath
from tests.analysis.test_sweep_report import _fake_run

ROOT = Path(__file__).resolve().parents[2]
RISE = [(0, 0.40), (3, 0.50), (6, 0.55), (9, 0.60)]
SH = {"solver": 0.8, "aggregator": 0.2}
ROW = "| voting | tiny-s | shared | full | - |"


def _three(root: Path) -> Path:
    for seed in range(3):
        _fake_run(root, f"s{seed}", "voting-math", "shared", seed, RISE, SH)
    return root


def _edit(path: Path, fn) -> None:
    path.write_text(json.dumps(fn(json.loads(path.read_text()))))


# ---------------------------------------------------------------------------------- knobs


@pytest.mark.parametrize(
    ("knobs", "domain"),
    [
        ({"window": 0}, "window must be in 1..10,000, got 0"),
        ({"window": -2}, "window must be in 1..10,000"),
        ({"window": 10_001}, "window must be in 1..10,000"),
        ({"window": 2.5}, "window must be an int"),
        ({"window": True}, "window must be an int"),
        ({"floor": -0.05}, r"floor must be in \[0, 1\]"),
        ({"floor": math.nan}, r"floor must be in \[0, 1\]"),
        ({"floor": math.inf}, r"floor must be in \[0, 1\]"),
        ({"floor": 1.5}, r"floor must be in \[0, 1\]"),
        ({"floor": "0.1"}, "floor must be a number"),
    ],
)
def test_a_knob_out_of_its_domain_is_refused_before_anything_is_written(tmp_path, knobs, domain):
    _three(tmp_path)
    with pytest.raises(ValueError, match=domain):
        build_report(tmp_path, plots=False, **knobs)
    assert not (tmp_path / "report").exists()
    with pytest.raises(ValueError, match=domain):
        cell_stats(load_runs(tmp_path), **knobs)


@pytest.mark.parametrize(
    ("flag", "value", "domain"),
    [
        ("--window", "0", "1..10,000"),
        ("--window", "-3", "1..10,000"),
        ("--window", "1.5", "an int in 1..10,000"),
        ("--floor", "-0.1", "in [0, 1]"),
        ("--floor", "nan", "in [0, 1]"),
        ("--floor", "inf", "in [0, 1]"),
        ("--floor", "2", "in [0, 1]"),
        ("--floor", "x", "a number in [0, 1]"),
    ],
)
def test_the_cli_refuses_a_knob_naming_its_domain(tmp_path, capsys, flag, value, domain):
    _three(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["report", str(tmp_path), "--no-plots", flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be" in err and domain in err and "Traceback" not in err
    assert not (tmp_path / "report").exists()


def test_the_knobs_help_says_their_domain_and_their_edges_are_read():
    from flowzoo.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices["report"]
    text = " ".join(sub.format_help().split())
    assert "must be in 1..10,000" in text and "must be in [0, 1]" in text


@pytest.mark.parametrize("knobs", [{"window": 1}, {"window": 10_000}, {"floor": 0}, {"floor": 1}])
def test_a_knob_on_its_domain_edge_reads(tmp_path, knobs):
    assert build_report(_three(tmp_path), plots=False, **knobs).exists()


# --------------------------------------------------------------------- accuracy records


def _summary(**kw):
    return lambda d: _edit(d / "summary.json", lambda s: {**s, **kw})


def _curve_at(i, v):
    def edit(s):
        curve = [list(x) for x in s["eval_curve"]]
        curve[i][1] = v
        return {**s, "eval_curve": curve}

    return lambda d: _edit(d / "summary.json", edit)


def _base_eval(**kw):
    def mutate(d):
        lines = (d / "metrics.jsonl").read_text().splitlines()
        row = json.loads(lines[0])
        row["eval"] = {**row["eval"], **kw}
        lines[0] = json.dumps(row)
        (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")

    return mutate


def _step_row(key, value):
    def mutate(d):
        lines = (d / "metrics.jsonl").read_text().splitlines()
        row = json.loads(lines[2])
        row[key] = value
        lines[2] = json.dumps(row)
        (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")

    return mutate


BAD_RECORDS = {
    "curve above 1": (_curve_at(2, 1.5), "eval_curve[2]: its accuracy must be a number in [0, 1]"),
    "curve below 0": (_curve_at(1, -0.25), "eval_curve[1]: its accuracy"),
    "curve NaN": (_curve_at(3, math.nan), "got nan"),
    "curve Infinity": (_curve_at(1, math.inf), "got inf"),
    "curve -Infinity": (_curve_at(0, -math.inf), "got -inf"),
    "curve a string": (_curve_at(1, "0.5"), "got '0.5'"),
    "curve a bool": (_curve_at(1, True), "got True"),
    "curve a percent": (_curve_at(3, 60), "got 60"),
    "curve step negative": (_summary(eval_curve=[[-1, 0.4], [3, 0.5]]), "step must be an int"),
    "curve not pairs": (_summary(eval_curve=[[0, 0.4, 1]]), "must be [step, accuracy]"),
    "curve a table": (_summary(eval_curve={"0": 0.4}), "eval_curve must be a list"),
    "ood final 7": (_summary(ood={"final": 7}), "ood['final'] must be a number in [0, 1]"),
    "ood final NaN": (_summary(ood={"final": math.nan}), "ood['final']"),
    # a red-team round: an ood table without its final reading crashed the whole report
    "ood without final": (_summary(ood={"accuracy": math.nan}), "ood has no 'final'"),
    "ood with base only": (_summary(ood={"base": 0.5}), "ood has no 'final'"),
    "base accuracy 2": (_base_eval(accuracy=2.0), "eval['accuracy'] must be a number in [0, 1]"),
    "base accuracy NaN": (_base_eval(accuracy=math.nan), "must be a finite number, got nan"),
    "majority Infinity": (_base_eval(majority_correct=math.inf), "got inf"),
    "majority 1.01": (_base_eval(majority_correct=1.01), "majority_correct"),
    "ci reversed": (_base_eval(ci=[0.5, 0.3]), "low <= high"),
    "ci out of range": (_base_eval(ci=[-0.2, 0.5]), "['ci'][0]"),
    "per-problem count past samples": (
        _base_eval(samples=4, per_problem=[1, 5]),
        "per_problem'][1] must be a count in 0..4",
    ),
    "samples zero": (_base_eval(samples=0), "'samples'] must be an int >= 1"),
    "behaviour rate 3": (_base_eval(behaviour={"solver": 3}), "['behaviour']['solver']"),
    "behaviour count a float": (
        _base_eval(behaviour={"solver": 0.5}, behaviour_n={"solver": 2.5}),
        "['behaviour_n'] must be a table of role: count",
    ),
    "readings rule a number": (
        _summary(readings={"partner_quality": 3}),
        "readings['partner_quality'] must be a name or null",
    ),
    "readings parallel a string": (
        _summary(readings={"parallel": "solver"}),
        "readings['parallel'] must be a list of names",
    ),
    "eval not a table": (_step_row("eval", [0.5]), "eval must be a table"),
    "grad share NaN": (_step_row("roles", {"solver": {"grad_share": math.nan}}), "got nan"),
    "roles a string": (_step_row("roles", "solver"), "roles must be a table of tables"),
    "step a string": (_step_row("step", "3"), "step must be an int"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_run_with_a_bad_accuracy_is_left_out_named_never_averaged_in(tmp_path, capsys, case):
    mutate, said = BAD_RECORDS[case]
    _three(tmp_path / "all")
    mutate(tmp_path / "all" / "s1")
    assert main(["report", str(tmp_path / "all"), "--no-plots", "--window", "2"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"skipped {tmp_path / 'all' / 's1'}: unreadable" in err
    md = (tmp_path / "all" / "report" / "report.md").read_text()
    listed = md.split("## Runs left out", 1)[1]
    assert str(tmp_path / "all" / "s1") in listed and said in listed
    # the two good runs read exactly as they read alone: nothing of the bad one pooled in
    for seed in (0, 2):
        _fake_run(tmp_path / "good", f"s{seed}", "voting-math", "shared", seed, RISE, SH)
    alone = build_report(tmp_path / "good", window=2, plots=False).read_text()
    row = next(x for x in md.splitlines() if x.startswith(ROW))
    assert row == next(x for x in alone.splitlines() if x.startswith(ROW))
    assert f"{ROW} 2 |" in row


def test_json_nan_and_infinity_spelled_in_the_file_are_read_as_bad_values(tmp_path):
    """``NaN`` and ``Infinity`` as a JSON writer spells them (not valid JSON, but Python's
    json reads them): left out, named, not a crash inside the statistics."""
    _three(tmp_path)
    for name, word in (("s1", "NaN"), ("s2", "Infinity")):
        p = tmp_path / name / "summary.json"
        p.write_text(p.read_text().replace("0.55", word, 1))
    left: list[str] = []
    runs = load_runs(tmp_path, left)
    assert [r.path.name for r in runs] == ["s0"]
    assert any("s1: unreadable" in x and "nan" in x for x in left)
    assert any("s2: unreadable" in x and "inf" in x for x in left)


# ------------------------------------------------------------------------------ configs


def _config(**kw):
    def edit(c):
        c = {**c, **kw}
        return {k: v for k, v in c.items() if v != "DROP"}

    return lambda d: _edit(d / "config.json", edit)


BAD_CONFIGS = {
    "env an int": (_config(env=3), "env must be a string, got 3"),
    "env no task": (_config(env="voting"), "env must be an id <workflow>-<task>"),
    "env missing": (_config(env="DROP"), "no 'env' setting"),
    "model missing": (_config(model="DROP"), "no 'model' setting"),
    "model a table": (_config(model={"name": "tiny-s"}), "model must be a string"),
    "policy a list": (_config(policy=["shared"]), "policy must be a string"),
    "param null": (_config(param=None), "param must be a string, got None"),
    "seed a list": (_config(seed=[1]), "seed must be an int"),
    "seed negative": (_config(seed=-1), "seed must be in 0..4,294,967,295"),
    "seed a float": (_config(seed=1.5), "seed must be an int"),
    "temperature a word": (_config(eval_temperature="hot"), "eval_temperature must be a number"),
    "eval samples zero": (_config(eval_samples=0), "eval_samples must be in 1..4,096"),
    "warmup a string": (_config(warmup_steps="x"), "warmup_steps must be an int"),
    "lr NaN": (_config(lr=math.nan), "lr must be"),
    "role settings a list": (_config(role_settings=[1]), "role_settings must be"),
    "a JSON list": (lambda d: (d / "config.json").write_text("[1, 2]"), "not a JSON object"),
    "torn": (lambda d: (d / "config.json").write_text('{"env": "voting-m'), "unreadable"),
    "nested too deep": (lambda d: (d / "config.json").write_text("[" * 100_000), "unreadable"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_a_malformed_config_is_listed_unreadable_and_the_report_goes_on(tmp_path, capsys, case):
    mutate, said = BAD_CONFIGS[case]
    _three(tmp_path)
    mutate(tmp_path / "s1")
    assert main(["report", str(tmp_path), "--no-plots", "--window", "2"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "skipped" in err
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"{ROW} 2 |" in md  # the two good runs, read
    listed = md.split("## Runs left out", 1)[1]
    assert str(tmp_path / "s1" / "config.json") in listed and said in listed


def test_when_every_run_is_bad_the_report_says_why_without_a_traceback(tmp_path, capsys):
    _three(tmp_path)
    _config(env=3)(tmp_path / "s0")
    _curve_at(1, math.nan)(tmp_path / "s1")
    _base_eval(accuracy=-1)(tmp_path / "s2")
    assert main(["report", str(tmp_path), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "no finished runs" in err and "unreadable" in err


def test_no_committed_run_is_left_out_by_the_checks():
    """The checks refuse what no run writes: every run record committed under
    baselines/results (hundreds, from every round) reads."""
    summaries = sorted((ROOT / "baselines" / "results").rglob("summary.json"))
    assert len(summaries) > 100
    for s in summaries:
        config = json.loads((s.parent / "config.json").read_text())
        summary = json.loads(s.read_text())
        assert config_fault(config) is None, s
        assert record_fault(summary, read_metrics(s.parent / "metrics.jsonl")) is None, s


# ------------------------------------------------------------------------------ outputs


def _plant_link(out: Path, name: str, victim: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / name).symlink_to(victim)


@pytest.mark.parametrize("name", ["report.md", "cells.json", "voting-math_tiny-s_full.png"])
def test_a_link_planted_at_an_output_is_refused_and_its_target_untouched(tmp_path, capsys, name):
    if name.endswith(".png"):
        pytest.importorskip("matplotlib")
    runs = _three(tmp_path / "runs")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    _plant_link(runs / "report", name, victim)
    argv = ["report", str(runs), "--window", "2"] + (
        [] if name.endswith(".png") else ["--no-plots"]
    )
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{runs / 'report' / name} is a symbolic link" in err and "another --out" in err
    assert victim.read_text() == "keep me"
    written = {p.name for p in (runs / "report").iterdir()}
    assert written == {name}  # refused before any output was written


def test_a_dangling_link_and_a_link_to_a_directory_are_refused_too(tmp_path):
    runs = _three(tmp_path / "runs")
    out = tmp_path / "out"
    _plant_link(out, "report.md", tmp_path / "nowhere" / "x.md")
    with pytest.raises(UnsafePath, match="report.md is a symbolic link"):
        build_report(runs, out, plots=False)
    assert not (tmp_path / "nowhere").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.unlink(out / "report.md")
    _plant_link(out, "cells.json", elsewhere)
    with pytest.raises(UnsafePath, match="cells.json is a symbolic link"):
        build_report(runs, out, plots=False)
    assert list(elsewhere.iterdir()) == []


def test_an_output_directory_that_is_a_link_or_a_file_is_refused(tmp_path):
    runs = _three(tmp_path / "runs")
    target = tmp_path / "target"
    target.mkdir()
    (runs / "report").symlink_to(target)
    with pytest.raises(UnsafePath, match="report is a symbolic link, not a directory"):
        build_report(runs, plots=False)
    assert list(target.iterdir()) == []
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UnsafePath, match="afile is a regular file, not a directory"):
        build_report(runs, tmp_path / "afile", plots=False)
    assert (tmp_path / "afile").read_text() == "x"
    with pytest.raises(ValueError, match="cannot write .*afile/sub: Not a directory; use another"):
        build_report(runs, tmp_path / "afile" / "sub", plots=False)


def test_a_fifo_planted_at_an_output_never_blocks_the_report(tmp_path):
    runs = _three(tmp_path / "runs")
    (runs / "report").mkdir()
    os.mkfifo(runs / "report" / "report.md")
    with pytest.raises(UnsafePath, match="report.md is a FIFO"):
        build_report(runs, plots=False)


def test_outputs_of_a_rerun_are_replaced_whole_and_a_hard_link_keeps_its_bytes(tmp_path):
    """Rewriting report.md replaces the file (a temp renamed over it): a second name made
    for the old one (a backup's hard link) keeps the old bytes."""
    runs = _three(tmp_path / "runs")
    md = build_report(runs, window=2, plots=False)
    old = md.read_text()
    os.link(md, tmp_path / "backup.md")
    _fake_run(runs, "s3", "voting-math", "shared", 3, RISE, SH)
    assert build_report(runs, window=2, plots=False).read_text() != old
    assert (tmp_path / "backup.md").read_text() == old


def test_the_file_guard_is_torch_free_and_imports_no_training_code():
    from tests.test_layout import TRAINING, _hits, imports_of

    files = [ROOT / "flowzoo" / "files.py", ROOT / "flowzoo" / "analysis" / "inputs.py"]
    for f in files:
        assert not _hits(imports_of(f), TRAINING + ("torch",)), f
