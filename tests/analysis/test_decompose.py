"""The gain split into behaviour and execution change, on records whose answer is known."""

import pytest

from flowzoo.analysis.decompose import split_gain, split_run


def _ev(p: float, n: int, a_c: float, a_s: float) -> dict:
    n_c = round(p * n)
    return {
        "behaviour": {"solver": p},
        "behaviour_n": {"solver": n},
        "behaviour_hits": {"solver": [a_c * n_c, a_s * (n - n_c)]},
    }


def test_a_pure_behaviour_shift_is_all_behaviour():
    # half the turns worked (right 0.9) at base, all worked at the end, same accuracies
    s = split_gain(_ev(0.5, 400, 0.9, 0.1), _ev(1.0, 400, 0.9, 0.1), "solver")
    assert s.base == pytest.approx(0.5) and s.final == pytest.approx(0.9)
    assert s.behaviour == pytest.approx(0.4) and s.execution == pytest.approx(0.0)


def test_a_pure_execution_gain_is_all_execution():
    s = split_gain(_ev(0.5, 400, 0.6, 0.2), _ev(0.5, 400, 0.9, 0.4), "solver")
    assert s.behaviour == pytest.approx(0.0) and s.execution == pytest.approx(0.25)


def test_the_parts_add_up_to_the_change():
    s = split_gain(_ev(0.25, 400, 0.8, 0.3), _ev(0.75, 400, 0.9, 0.2), "solver")
    assert s.behaviour + s.execution == pytest.approx(s.total)
    assert s.behaviour == pytest.approx(0.5 * 0.5) and s.total == pytest.approx(0.725 - 0.425)


def test_what_cannot_be_read_is_not_decomposed():
    old = {"behaviour": {"solver": 0.5}, "behaviour_n": {"solver": 10}}  # no hits recorded
    assert split_gain(old, _ev(1.0, 10, 1, 0), "solver") is None
    # every base turn worked: the direct answer's base accuracy is unknown, and the end
    # takes it
    assert split_gain(_ev(1.0, 10, 0.9, 0), _ev(0.5, 10, 0.9, 0.1), "solver") is None
    assert split_run([(0, _ev(0.5, 400, 0.9, 0.1))]) == []
    got = split_run([(0, _ev(0.5, 400, 0.9, 0.1)), (8, {}), (16, _ev(1.0, 400, 0.9, 0.1))])
    assert [s.role for s in got] == ["solver"]


def test_the_report_section_reads_every_run_of_a_cell():
    from types import SimpleNamespace

    from flowzoo.analysis.decompose import gain_rows

    def run(p1):
        return SimpleNamespace(evals=[(0, _ev(0.5, 400, 0.9, 0.1)), (8, _ev(p1, 400, 0.9, 0.1))])

    key = ("math", "voting", "tiny-s", "shared", "full", "-")
    rows = gain_rows([SimpleNamespace(key=key, runs=[run(1.0), run(0.75)])])
    assert rows[0] == "## What the gain is made of"
    line = next(r for r in rows if r.startswith("| voting-math"))
    assert "| solver | 2 |" in line and "+0.300 ±" in line  # behaviour: mean of 0.4 and 0.2
    # an old run without hits leaves the cell out rather than averaging a part of it
    old = SimpleNamespace(evals=[(0, {}), (8, {})])
    assert gain_rows([SimpleNamespace(key=key, runs=[run(1.0), old])]) == []
