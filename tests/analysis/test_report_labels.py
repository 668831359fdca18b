"""A report cell's label names what separates it: of a dict-valued setting (``env_options``),
the entries that differ between the runs read together, never the whole option JSON; cells
stay apart exactly as the settings do."""

import pytest

from flowzoo.analysis.report import build_report, cell_stats, load_runs
from tests.analysis.test_sweep_report import _fake_run

RISE = [(0, 0.40), (3, 0.42), (6, 0.43), (9, 0.44)]
SH = {"solver": 0.8, "aggregator": 0.2}
BIG = {"dataset": "jsonl:data/train.jsonl", "n_tasks": 400, "task_seed": 3, "max_cycles": 60}


@pytest.mark.parametrize(
    "a,b,label",
    [
        ({**BIG}, {**BIG, "dataset": "jsonl:data/other.jsonl"}, "env_options.dataset=jsonl:data/other.jsonl"),
        ({**BIG}, {**BIG, "n_tasks": 200}, "env_options.n_tasks=200"),
        ({}, {"reward_mode": "role"}, "env_options.reward_mode=role"),
        ({**BIG, "sandbox_options": {"memory_mb": 512}}, {**BIG, "sandbox_options": {"memory_mb": 1024}},
         'env_options.sandbox_options={"memory_mb": 1024}'),
    ],
)  # fmt: skip
def test_a_cell_label_names_the_differing_option_not_the_whole_json(tmp_path, a, b, label):
    for seed in range(2):
        _fake_run(tmp_path, f"a{seed}", "voting-math", "shared", seed, RISE, SH, env_options=a)
        _fake_run(tmp_path, f"b{seed}", "voting-math", "shared", seed, RISE, SH, env_options=b)
    cells = cell_stats(load_runs(tmp_path), window=2)
    assert len(cells) == 2 and all(len(c.runs) == 2 for c in cells)
    labels = [c.key[-1] for c in cells]
    assert label in labels
    for lev in labels:
        assert '{"dataset"' not in lev and "task_seed" not in lev and len(lev) < 80
    md = build_report(tmp_path, window=2, plots=False).read_text()
    assert label.replace("|", "\\|") in md or label in md
    assert '"max_cycles": 60' not in md


def test_runs_that_share_their_options_have_no_option_in_their_label(tmp_path):
    for seed in range(2):
        _fake_run(tmp_path, f"a{seed}", "voting-math", "shared", seed, RISE, SH, env_options=BIG)
        _fake_run(tmp_path, f"i{seed}", "voting-math", "isolated", seed, RISE, SH, env_options=BIG)
    cells = cell_stats(load_runs(tmp_path), window=2)
    assert [c.key[-1] for c in cells] == ["-", "-"]
