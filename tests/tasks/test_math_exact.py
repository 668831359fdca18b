"""The exact in-process path for closed forms (radicals, multiples of pi, sets, intervals,
tuples): its readings, what it leaves to the symbolic grader, and a differential check that
every verdict it gives is the one math-verify's symbolic check gives on the same pair."""

import random
import time

import pytest

from flowzoo.tasks.math import check, verify
from flowzoo.tasks.math.exact import closed_form, composite, exact_check
from flowzoo.tasks.math.extract import normalize
from flowzoo.tasks.math.verify import get_checker
from flowzoo.tasks.memo import Memo
from tests.math_pairs import TRICKY_PAIRS, latex_pairs, varied_pairs


@pytest.mark.parametrize(
    "gold,pred,want",
    [
        ("2\\sqrt{2}", "\\sqrt{8}", True),
        ("\\frac{\\sqrt{3}}{4}", "\\sqrt{3}/4", True),
        ("\\frac{\\sqrt{3}}{4}", "\\frac{1}{4}\\sqrt{3}", True),
        ("\\sqrt{2}", "\\frac{2}{\\sqrt{2}}", True),
        ("3\\pi", "\\pi \\cdot 3", True),
        ("3\\pi", "\\frac{6\\pi}{2}", True),
        ("3\\pi", "\\frac{\\pi}{3}", False),
        ("2\\sqrt{3}", "3\\sqrt{2}", False),
        ("\\sqrt{0}", "0", True),
        ("[1, 5)", "\\left[1,5\\right)", True),
        ("[1, 5)", "[1, 5]", False),
        ("\\{1, 2, 3\\}", "\\{3, 2, 1\\}", True),
        ("\\{1, 2\\}", "\\{1, 2, 2\\}", True),
        ("(1, 2, 3)", "(3, 2, 1)", False),
        ("[1, \\infty)", "[1, \\infty)", True),  # intervals with an infinite end (issue 40)
    ],
)
def test_closed_forms_are_decided_exactly(gold, pred, want):
    assert exact_check(normalize(gold), normalize(pred)) is want


@pytest.mark.parametrize(
    "gold,pred",
    [
        ("\\sqrt{2}", "1.41421356"),  # a decimal: the symbolic grader's tolerance rules
        ("\\frac{7}{2}", "3\\frac{1}{2}"),  # a mixed number, or 3 * 1/2?
        ("(6, 6]", "[6, 5)"),  # both empty as intervals
        ("(1, 2)", "\\{1, 2\\}"),  # a set against a pair
        ("\\sqrt{2} + \\sqrt{8}", "3\\sqrt{2}"),  # sums of radicals
        ("x^2 + y", "y + x \\cdot x"),  # two variables
        ("x + 1", "2"),  # a polynomial against a constant (an equation's solution?)
        ("\\frac{x}{2}", "0.5x"),  # a decimal coefficient
        ("\\sqrt{12345678}", "3\\sqrt{1371742}"),  # radicand past the bound
        ("1" * 30, "1" * 30 + "0"),  # integers past 18 digits
    ],
)
def test_what_it_cannot_read_exactly_goes_to_the_symbolic_grader(gold, pred):
    assert exact_check(normalize(gold), normalize(pred)) is None


@pytest.mark.parametrize(
    "gold,pred,want",
    [
        ("x^2 + 2x + 1", "(x+1)^2", True),
        ("2x + 12", "12 + 2x", True),
        ("3x + -21", "3x - -21", False),
        ("\\frac{x^2 - 1}{2}", "\\frac{(x-1)(x+1)}{2}", True),
        ("t^3", "t \\cdot t^{2}", True),
        ("x^2 + 1", "x^2 - 1", False),
        ("734829", "734{,}829", True),
        ("1234567", "1\\,234\\,568", False),
        (
            "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
            "\\begin{bmatrix}1&2\\\\3&\\frac{8}{2}\\end{bmatrix}",
            True,
        ),
        (
            "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
            "\\begin{pmatrix} 1 & 3 \\\\ 2 & 4 \\end{pmatrix}",
            False,
        ),
        (
            "\\begin{pmatrix} 1 & 2 \\end{pmatrix}",
            "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
            False,
        ),
    ],
)
def test_polynomials_matrices_and_grouped_numbers_are_exact(gold, pred, want):
    assert exact_check(normalize(gold), normalize(pred)) is want


def test_readings_are_canonical():
    assert closed_form("-\\frac{1}{2}") == closed_form("\\frac{-1}{2}")
    assert closed_form("\\frac{1}{0}") is None and closed_form("2-\\sqrt{3}") is None
    assert composite("(3)") is None and composite("\\{\\}") is None


def _closed_form_pairs(n: int, seed: int):
    r = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, k = r.randint(-9, 9), r.randint(1, 9), r.randint(1, 9)
        s, m = r.choice([1, 2, 3, 4, 8, 12, 18, 50]), r.randint(1, 9)
        forms = [
            f"\\frac{{{a}\\sqrt{{{s}}}}}{{{b}}}", f"{a}\\sqrt{{{s}}}/{b}", f"\\sqrt{{{s * k * k}}}",
            f"{k}\\sqrt{{{s}}}", f"\\frac{{{a}\\pi}}{{{b}}}", f"{a}\\pi", f"\\frac{{{k}}}{{\\sqrt{{{s}}}}}",
            f"\\{{{a}, {b}\\}}", f"({a}, {b}]", f"[{a},{k})", f"({a}, {b})", f"[{a}, {b}]",
            f"\\sqrt{{{s}}}\\sqrt{{{m}}}", f"\\frac{{{a}}}{{{b}\\pi}}", f"({a}, {b}, {k})",
        ]  # fmt: skip
        out.append((r.choice(forms), r.choice(forms)))
    return out


def test_every_exact_verdict_is_the_symbolic_graders():
    pairs = [(g, p) for g, p, _ in TRICKY_PAIRS] + [
        (g, p) for g, p, _ in latex_pairs(120, 7, distinct=True)
    ]
    pairs += _closed_form_pairs(240, seed=3)
    # equations, matrices, thousands separators, decimals, polynomials
    pairs += [(g, p) for g, p, _ in varied_pairs(200, seed=9)]
    checker = get_checker()
    decided = trues = 0
    for g, p in pairs:
        ng, np_ = normalize(g), normalize(p)
        ex = exact_check(ng, np_)
        if ex is None or ng.replace(" ", "") == np_.replace(" ", ""):
            continue  # undecided here, or equal as strings (the older fast path's)
        decided += 1
        trues += ex
        sym, reason = checker.check(g, p)
        assert reason in ("symbolic", "symbolic_mismatch"), (g, p, reason)
        assert ex == sym, (g, p, ex, reason)
    assert decided > 150 and 0.2 < trues / decided < 0.8  # both verdicts were compared


def test_settled_verdicts_and_timeouts_are_remembered(monkeypatch):
    """A timeout is remembered with its limit (issue 40: an answer built to exhaust the limit
    would cost it, and a worker restart, once per sample): the same answer under the same or a
    shorter limit gets the remembered verdict without reaching a worker; a longer limit asks
    again. Settled verdicts are remembered whatever the limit."""
    checker = get_checker()
    calls = []

    def counted(gold, pred, timeout_s=None):
        calls.append((gold, pred, timeout_s))
        if pred == "\\sqrt{2}^{10^{10}}":
            return False, "timeout"  # what the worker answers after the whole limit
        return True, "symbolic"

    monkeypatch.setattr(checker, "check", counted)
    monkeypatch.setattr(verify, "_MEMO", Memo(1 << 16))  # whatever earlier tests settled
    monkeypatch.setattr(verify, "_VERDICTS", Memo(1 << 13))
    tower = ("\\sqrt{2}", "\\sqrt{2}^{10^{10}}")
    for _ in range(20):  # a group of samples with the same tower
        assert check(*tower, timeout_s=2.0).reason == "timeout"
    assert check(*tower, timeout_s=1.0).reason == "timeout"  # a shorter limit: remembered
    assert len(calls) == 1
    check(*tower, timeout_s=5.0)  # a longer limit may settle it: asked again
    assert len(calls) == 2
    gold, pred = "\\sqrt{2} + \\sqrt{8}", "3\\sqrt{2}"  # sums of radicals: symbolic
    for _ in range(50):
        assert check(gold, pred).correct
    assert len(calls) == 3


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(verify, "_MEMO", Memo(8))
    monkeypatch.setattr(verify, "_VERDICTS", Memo(1 << 13))
    for k in range(30):
        check("1", f"\\frac{{{k}}}{{7}} + \\sqrt{{2}}")  # symbolic verdicts, remembered
    assert len(verify._MEMO) == 8
    assert ("1", "\\frac{29}{7} + \\sqrt{2}") in verify._MEMO
    assert ("1", "\\frac{0}{7} + \\sqrt{2}") not in verify._MEMO


def test_exact_integer_arithmetic_is_bounded_in_the_parent():
    """Nested constant powers are refused before they are computed (the size is estimated
    first) and left to the time-limited worker; small ones are still read exactly."""
    from flowzoo.tasks.math.poly import polynomial

    for base in ("999999999999999999", "123456789012", "7"):
        tower = base
        for _ in range(7):
            tower = f"({tower})^{{12}}"
        t = time.perf_counter()
        assert polynomial(tower) is None
        assert time.perf_counter() - t < 0.05
    assert polynomial("(2^{12})^{3}") == ("", {0: 2**36})
    assert polynomial("(x+1)^{2}")[1] == {0: 1, 1: 2, 2: 1}
