"""baselines/claims.py: the claims table is recomputed from the records, and --check fails
on any number that differs from them (a committed file edited by hand, or records that
changed), and on an INDEX.md that does not cover the result folders. Real records in a
scratch repository: a small Voting sweep (Shared / Isolated x 3 seeds) with its single-agent
control, read by the report's own code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from baselines import claims

INDEX_HEAD = "| entry | status | supports / superseded by | sweep file or command | build | why |\n|---|---|---|---|---|---|\n"
# per seed: base, then three more evaluations; Isolated rises higher than Shared, the single
# agent lands in between
CURVES = {
    ("voting-math", "shared"): [0.30, 0.50, 0.55, 0.55],
    ("voting-math", "isolated"): [0.30, 0.60, 0.70, 0.70],
    ("single-math", "shared"): [0.30, 0.55, 0.60, 0.60],
}


def _run(root: Path, env: str, policy: str, seed: int, accs: list[float]) -> None:
    d = root / f"{env}-{policy}-s{seed}"
    d.mkdir(parents=True)
    accs = [round(a + 0.01 * seed, 3) for a in accs]
    cfg = {"env": env, "model": "tiny-s", "policy": policy, "param": "full", "seed": seed}
    cfg |= {"eval_samples": 4, "eval_episodes": 50, "eval_every": 8, "steps": 24}
    (d / "config.json").write_text(json.dumps(cfg))
    curve = [[8 * i, a] for i, a in enumerate(accs)]
    summary = {"status": "completed", "steps_done": 24, "eval_curve": curve}
    (d / "summary.json").write_text(json.dumps(summary))
    lines = [{"step": s - 1, "eval": {"accuracy": a, "episodes": 50}} for s, a in curve]
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _repo(tmp_path: Path) -> Path:
    """A scratch repository: one current sweep, one superseded entry, the two pages."""
    res = tmp_path / "baselines" / "results"
    for (env, pol), accs in CURVES.items():
        for seed in range(3):
            _run(res / "map-claims-r10" / "runs", env, pol, seed, accs)
    (res / "archive" / "old.json").parent.mkdir(parents=True)
    (res / "archive" / "old.json").write_text("{}")
    (res / "INDEX.md").write_text(
        "# index\n\n" + INDEX_HEAD + "| `map-claims-r10/` | current | the claims | "
        "`baselines/sweeps/map-claims.toml` | tiny-s, a test build | - |\n"
        "| `archive/old.json` | superseded | by `map-claims-r10/` | - | - | - |\n"
    )
    (tmp_path / "docs").mkdir()
    for page in ("README.md", "docs/results.md"):
        (tmp_path / page).write_text(
            f"# {page}\n\nabove\n\n{claims.BEGIN}\n{claims.END}\n\nbelow\n"
        )
    return tmp_path


def _check(root: Path, capsys) -> tuple[int, str]:
    rc = claims.main(["--root", str(root), "--check"])
    return rc, capsys.readouterr().err


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    root = _repo(tmp_path_factory.mktemp("repo"))
    assert claims.main(["--root", str(root)]) == 0
    return root


def _copy(written: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(written, tmp_path / "r")
    return tmp_path / "r"


def test_written_tables_and_json_match_the_records_and_the_findings(written, capsys):
    data = json.loads((written / "baselines/results/claims.json").read_text())
    (sweep,) = data["sweeps"]
    assert sweep["result"] == "map-claims-r10" and sweep["runs"] == 9
    assert sweep["sweep_file"] == "baselines/sweeps/map-claims.toml"
    got = {c["id"]: c for c in sweep["claims"]}
    assert got["rl-improves"]["verdict"] == "supported" and got["rl-improves"]["runs"] == 6
    assert got["rl-improves"]["problems"] == "50 × 4" and got["rl-improves"]["seeds"] == "3"
    (peak,) = got["isolated-peaks-higher"]["values"]
    assert peak["diff"] == pytest.approx(0.15) and peak["paired"] is True
    assert got["workflow-vs-single"]["by_workflow"] == {"voting": "inconclusive"}
    readme = (written / "README.md").read_text()
    assert readme.startswith("# README.md\n\nabove\n") and readme.endswith("\n\nbelow\n")
    assert "| Isolated peaks higher | " in readme and "+0.150 ± 0.000" in readme
    docs = (written / "docs/results.md").read_text()
    assert "**map-claims-r10**: tiny-s, a test build; `baselines/sweeps/map-claims.toml`" in docs
    assert _check(written, capsys)[0] == 0


@pytest.mark.parametrize(
    "rel,old,new",
    [
        ("baselines/results/claims.json", "+0.150 ± 0.000", "+0.160 ± 0.000"),
        ("baselines/results/claims.json", '"runs": 9', '"runs": 10'),
        ("baselines/results/claims.json", '"verdict": "supported"', '"verdict": "contradicted"'),
        ("README.md", "+0.150 ± 0.000", "+0.015 ± 0.000"),
        ("README.md", "| supported |", "| inconclusive |"),
        ("docs/results.md", "6 / 3 / 50 × 4", "6 / 3 / 200 × 4"),
        ("docs/results.md", "tiny-s, a test build", "tiny-m, a test build"),
    ],
)
def test_check_fails_naming_the_file_when_a_committed_number_is_edited(
    written, tmp_path, capsys, rel, old, new
):
    root = _copy(written, tmp_path)
    text = (root / rel).read_text()
    assert old in text
    (root / rel).write_text(text.replace(old, new, 1))
    rc, err = _check(root, capsys)
    assert rc == 1 and f"{rel} differs from what the records give" in err and new in err
    assert claims.main(["--root", str(root)]) == 0  # regenerating mends it
    assert _check(root, capsys)[0] == 0


def test_text_outside_the_markers_is_the_pages_own(written, tmp_path, capsys):
    root = _copy(written, tmp_path)
    p = root / "README.md"
    p.write_text(p.read_text().replace("above", "above, edited by hand"))
    assert _check(root, capsys)[0] == 0


@pytest.mark.parametrize("final", [0.45, 0.90])
def test_check_fails_when_the_records_change(written, tmp_path, capsys, final):
    root = _copy(written, tmp_path)
    d = root / "baselines/results/map-claims-r10/runs/voting-math-isolated-s1"
    s = json.loads((d / "summary.json").read_text())
    s["eval_curve"][-1][1] = final
    (d / "summary.json").write_text(json.dumps(s))
    lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    lines[-1]["eval"]["accuracy"] = final
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rc, err = _check(root, capsys)
    assert rc == 1 and "baselines/results/claims.json differs" in err


@pytest.mark.parametrize(
    "change,why",
    [
        (lambda r: (r / "baselines/results/new-sweep").mkdir(), "new-sweep: not in INDEX.md"),
        (
            lambda r: (r / "baselines/results/archive/older").mkdir(),
            "archive/older: not in INDEX.md",
        ),
        (
            lambda r: (r / "baselines/results/archive/old.json").unlink(),
            "lists archive/old.json, which is not there",
        ),
        (
            lambda r: (r / "baselines/results/INDEX.md").write_text(
                (r / "baselines/results/INDEX.md")
                .read_text()
                .replace("| superseded |", "| current |")
            ),
            "archive/old.json is current: it belongs outside archive/",
        ),
        (
            lambda r: (r / "baselines/results/INDEX.md").write_text(
                (r / "baselines/results/INDEX.md").read_text()
                + "| `archive/old.json` | superseded | by x | - | - | - |\n"
            ),
            "lists archive/old.json twice",
        ),
    ],
    ids=["unlisted", "unlisted-archived", "listed-absent", "current-in-archive", "twice"],
)
def test_check_fails_when_index_md_does_not_cover_the_result_folders(
    written, tmp_path, capsys, change, why
):
    root = _copy(written, tmp_path)
    change(root)
    rc, err = _check(root, capsys)
    assert rc == 1 and why in err


@pytest.mark.parametrize("status", ["Current", "old", "", "archived"])
def test_a_status_outside_the_two_words_is_refused_naming_the_valid_ones(tmp_path, status):
    root = _repo(tmp_path)
    p = root / "baselines/results/INDEX.md"
    p.write_text(p.read_text().replace("| current |", f"| {status} |"))
    with pytest.raises(ValueError, match=f"status '{status}' of map-claims-r10; valid: 'current'"):
        claims.read_index(root)


@pytest.mark.parametrize(
    "page,text",
    [
        ("README.md", "# no markers\n"),
        ("docs/results.md", f"{claims.END}\n{claims.BEGIN}\n"),
        ("README.md", f"{claims.BEGIN}\n{claims.END}\n{claims.BEGIN}\n{claims.END}\n"),
    ],
)
def test_a_page_without_one_pair_of_markers_is_refused_by_name(written, tmp_path, page, text):
    root = _copy(written, tmp_path)
    (root / page).write_text(text)
    with pytest.raises(ValueError, match=f"{page}: needs one"):
        claims.main(["--root", str(root)])


@pytest.mark.parametrize(
    "line,verdict",
    [
        ("**X** — supported: 3/3 runs", "supported"),
        (
            "**X** — inconclusive (counts this far apart by chance: Fisher's exact p = 0.11): a",
            "inconclusive (counts this far apart by chance: Fisher's exact p = 0.11)",
        ),
        (
            "**X** — insufficient evidence (2 runs; a claim needs >= 3 a side): b",
            "insufficient evidence (2 runs; a claim needs >= 3 a side)",
        ),
        (
            "**X** — contradicted (stratified exact test p = 0.015): c",
            "contradicted (stratified exact test p = 0.015)",
        ),
    ],
)
def test_the_verdict_is_read_up_to_the_first_colon_outside_brackets(line, verdict):
    assert claims.verdict_of(line) == verdict


def test_the_committed_index_covers_every_result_folder():
    root = Path(__file__).resolve().parents[2]
    entries = claims.read_index(root)
    assert claims.index_problems(root, entries) == []
    current = [
        e
        for e in entries
        if e.status == "current" and (root / claims.RESULTS / e.name / "runs").is_dir()
    ]
    assert current and all(e.sweep and e.build for e in current)


def test_a_conflict_sweep_is_read_per_protocol_with_its_capture_test(tmp_path):
    """A sweep under both protocols (the role-conflict testbed's): each pair claim is read
    within one protocol, as its finding is, and the declared capture test is a claim of its
    own, one verdict per workflow and protocol, and none while a declared run is missing."""
    from tests.analysis.test_conflict_reading import _pair_runs

    root = _repo(tmp_path)
    runs = root / "baselines" / "results" / "conflict" / "runs"
    runs.mkdir(parents=True)
    _pair_runs(runs, "voting-math", [0.6, 0.62, 0.58, 0.61], [0.3, 0.35, 0.28, 0.33])
    _pair_runs(
        runs, "voting-math", [0.32, 0.30, 0.35, 0.29], [0.3, 0.35, 0.28, 0.33], True, shared=False
    )
    index = root / "baselines" / "results" / "INDEX.md"
    index.write_text(
        index.read_text()
        + "| `conflict/` | current | test | `baselines/sweeps/c.toml` | tiny-s-conflict | - |\n"
    )
    data = claims.compute(root)
    got = {s["result"]: s for s in data["sweeps"]}["conflict"]["claims"]
    # the headline reads the shipped build's cells; a claim they cannot read shows where it is
    row = next(x for x in claims.headline_table(data).splitlines() if "role-conflict" in x)
    assert "(on **conflict**)" in row and "supported" in row
    peaks = [c["claim"] for c in got if c["id"] == "isolated-peaks-higher"]
    assert peaks == [
        "Isolated peaks higher, under the study's protocol",
        "Isolated peaks higher, under the update-matched control",
    ]
    cap = next(c for c in got if c["id"] == "capture-at-cost")
    assert cap["by_workflow"]["voting-math (study's protocol)"].startswith("supported")
    assert cap["by_workflow"]["voting-math (update-matched control)"].startswith("inconclusive")
    names = sorted(p.name for p in runs.iterdir())
    (runs / "sweep.json").write_text(json.dumps({"declared": [*names, "voting-math-st-shared-s9"]}))
    got = {s["result"]: s for s in claims.compute(root)["sweeps"]}["conflict"]["claims"]
    cap = next(c for c in got if c["id"] == "capture-at-cost")
    assert set(cap["by_workflow"].values()) == {"no verdict (runs missing)"}
