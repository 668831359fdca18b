"""Math verifier: checks/s and accuracy vs math_verify called the right way (same run), on an
integer-heavy mix (what the generated tasks produce) and on LaTeX-heavy mixes (fractions,
radicals, multiples of pi, intervals, sets, tuples, polynomials; and a varied mix with
equations, matrices, thousands separators and decimals; and a wider one with the forms of
issue 40 and answers only the symbolic path decides; and issue 64's value words and answers
written as completions): every string distinct, and rollout-like groups of G=8 predictions per
gold with repeats (the memo of settled verdicts counts there, as it does in training); and
issue 64's 40 held-out pairs, scored as they were first written."""

from __future__ import annotations

import logging
import random
import time

from benchmarks.common import Row
from flowzoo.tasks.math import arithmetic_tasks, check
from tests.math_pairs import (
    TRICKY_PAIRS,
    freeform_golds,
    golds_pairs,
    latex_pairs,
    value_word_golds,
    varied_pairs,
)


def generated_pairs(n: int, seed: int = 0) -> list[tuple[str, str, bool]]:
    """Gold/prediction pairs in the forms rollouts produce, half right, half wrong."""
    r = random.Random(seed)
    golds = [t.answer for t in arithmetic_tasks(400, seed=seed)]
    out = []
    while len(out) < n:
        g = r.choice(golds)
        v = int(g)
        right = r.random() < 0.5
        w = v if right else v + r.choice([-2, -1, 1, 2, 10])
        form = r.randrange(8)
        if form == 0:
            p = str(w)
        elif form == 1:
            p = f"{w}.0"
        elif form == 2:
            p = f"x = {w}"
        elif form == 3:
            p = f"{w} apples"
        elif form == 4:
            p = f"\\frac{{{2 * w}}}{{2}}"
        elif form == 5:
            p = f"\\text{{{w}}}"
        elif form == 6:
            p = f"{w:,}"
        else:
            p = f"\\sqrt{{{w * w}}}" if w >= 0 else str(w)
        out.append((g, p, right))
    return out


NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def wide_golds(r: random.Random) -> list[tuple[str, list[str], list[str]]]:
    """(gold, [right], [wrong]) with fresh numbers in the forms the other mixes leave out:
    mixed numbers, number words, inequalities for intervals, units, column vectors, percent,
    decimals, and answers only the symbolic path decides (powers, a factored polynomial,
    multiples of e^2, logarithms, binomials). Wrong ones include a mixed number read as one
    number, the wrong unit, the closed end of an interval and a swapped vector."""
    a, b, w = r.randint(1, 9), r.randint(2, 9), r.randint(1, 30)
    n, lo, c = r.randint(0, 12), r.randint(-20, 20), r.randint(2, 99)
    x, y, p, k, q = (r.randint(-99, 99), r.randint(-99, 99), r.randint(2, 60), r.randint(2, 99),
                     r.randint(2, 99))  # fmt: skip
    dec = f"{a / b:.10g}" if len(f"{a / b}") < 8 else f"\\frac{{{2 * a}}}{{{2 * b}}}"
    return [
        (f"\\frac{{{w * b + a}}}{{{b}}}", [f"{w} {a}/{b}", f"{w}\\frac{{{a}}}{{{b}}}"],
         [f"{w + 1} {a}/{b}", f"{w}{a}/{b}"]),
        (str(n), [NUMBER_WORDS[n]], [NUMBER_WORDS[(n + 1) % 13]]),
        (f"({lo}, \\infty)", [f"x > {lo}", f"x>{lo}"], [f"x \\ge {lo}", f"x < {lo}"]),
        (f"(-\\infty, {lo}]", [f"x \\le {lo}"], [f"x < {lo}"]),
        (f"{c} \\text{{ cm}}", [f"{c}cm", f"{c}"], [f"{c} km", f"{c + 1} cm"]),
        (f"\\begin{{pmatrix}} {x} \\\\ {y} \\end{{pmatrix}}", [f"({x}, {y})"], [f"({y}, {x + 1})"]),
        (str(2**p), [f"2^{{{p}}}"], [f"2^{{{p + 1}}}"]),
        (f"x^2 - {k * k}", [f"(x-{k})(x+{k})"], [f"(x-{k})^2"]),
        (f"{k}e^{{2}}", [f"{k} e^2", f"e^{{2}} \\cdot {k}"], [f"{k}e^{{3}}"]),
        (f"\\ln {k}", [f"\\ln({k})"], [f"\\ln {k + 1}"]),
        (str(q * (q - 1) // 2), [f"\\binom{{{q}}}{{2}}"], [f"\\binom{{{q + 1}}}{{2}}"]),
        (f"{c}\\%", [f"{c}%"], [f"{c + 1}\\%"]),
        (f"\\frac{{{a}}}{{{b}}}", [dec], [f"{a / b + 0.1:.4g}"]),
    ]  # fmt: skip


def wide_pairs(n: int, seed: int = 0) -> list[tuple[str, str, bool]]:
    """``n`` (gold, prediction, expected) pairs from :func:`wide_golds`, half right, nearly
    all distinct (the memo of settled verdicts barely counts)."""
    r = random.Random(seed)
    out = []
    while len(out) < n:
        g, right, wrong = r.choice(wide_golds(r))
        forms = right if r.random() < 0.5 else wrong
        out.append((g, r.choice(forms), forms is right))
    return out


#: issue 64's held-out check: 40 pairs written before they were first scored and not tuned on
#: afterwards (20 to accept, 20 to reject): value words, answers written as completions, and
#: forms the exact path reads. First scored: ours 39/40 (0 false accepts; missed
#: ``\(\boxed{7}\)``), math-verify 31/40 with the prediction boxed (0 false accepts)
HELDOUT_64: list[tuple[str, str, bool]] = [
    ("1250", "1.25 thousand", True), ("\\frac{9}{4}", "two and a quarter", True),
    ("64", "4 cubed", True), ("0.75", "three-fourths", True), ("1000000", "one million", True),
    ("42", "Final Answer: **42**", True), ("7", "\\(\\boxed{7}\\)", True),
    ("\\frac{11}{4}", "2 \\tfrac{3}{4}", True), ("12", "#### 12 cookies", True),
    ("3.5", "3 1/2", True), ("\\$1,500", "1500 dollars", True), ("2^{20}", "1048576", True),
    ("\\binom{6}{3}", "20", True), ("36", "3 dozen", True), ("15\\%", "15 percent", True),
    ("x^2-9", "(x-3)(x+3)", True), ("\\frac{1}{8}", "2^{-3}", True), ("-4", "negative four", True),
    ("5040", "7!", True), ("20", "The answer is $20$ apples.", True),
    ("4", "4 million", False), ("12", "12 squared", False), ("3", "3 and a quarter", False),
    ("5", "5 to the power of 2", False), ("100", "100 thousand", False), ("6", "6 times 2", False),
    ("9", "9 halves", False), ("18", "**18** or **20**", False),
    ("18", "\\boxed{17} \\boxed{18}", False), ("7", "7 plus", False), ("2", "2 thirds", False),
    ("50", "50 per mille", False), ("1000", "1 thousand and 1", False), ("10", "10 score", False),
    ("8", "2 cubed plus 1", False), ("\\frac{1}{2}", "1 half dozen", False),
    ("3", "#### 3 or 4", False), ("25", "5^{20}", False), ("2", "2 tenths", False),
    ("11", "eleven hundred", False),
]  # fmt: skip


def _reference_check():
    logging.disable(logging.CRITICAL)
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    cfg = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]

    def ref(gold: str, pred: str) -> bool:
        try:
            g = parse("$\\boxed{" + gold + "}$", extraction_config=cfg, parsing_timeout=None)
            p = parse("$\\boxed{" + pred + "}$", extraction_config=cfg, parsing_timeout=None)
            return bool(verify(g, p, timeout_seconds=None))
        except Exception:
            return False

    return ref


def run(quick: bool = False) -> list[Row]:
    n_gen = 2000 if quick else 10_000
    n_ref = 300 if quick else 1000
    pairs = list(TRICKY_PAIRS) + generated_pairs(n_gen)
    check("1", "\\sqrt{1}")  # start the worker outside the timing
    t = time.perf_counter()
    ours = [check(g, p).correct for g, p, _ in pairs]
    ours_rate = len(pairs) / (time.perf_counter() - t)
    ref = _reference_check()
    sample = list(TRICKY_PAIRS) + generated_pairs(n_ref, seed=1)
    t = time.perf_counter()
    theirs = [ref(g, p) for g, p, _ in sample]
    ref_rate = len(sample) / (time.perf_counter() - t)
    acc = sum(o == e for o, (_, _, e) in zip(ours, pairs, strict=True)) / len(pairs)
    ref_acc = sum(o == e for o, (_, _, e) in zip(theirs, sample, strict=True)) / len(sample)
    tricky_ours = sum(check(g, p).correct == e for g, p, e in TRICKY_PAIRS)
    tricky_ref = sum(ref(g, p) == e for g, p, e in TRICKY_PAIRS)
    latex_rows = []
    for name, mix in (
        ("LaTeX-heavy, fresh numbers", latex_pairs(150 if quick else 600, seed=11, distinct=True)),
        ("LaTeX-heavy, groups of 8", latex_pairs(160 if quick else 640, seed=12, group=8, distinct=True)),
        ("varied (equations, matrices, separators, decimals, polynomials)", varied_pairs(150 if quick else 600, seed=13)),
        ("wider (mixed numbers, words, inequalities, units, vectors, powers, logs)", wide_pairs(150 if quick else 600, seed=14)),
        ("value words and free-form answers (issue 64)",
         golds_pairs(value_word_golds, 100 if quick else 400, seed=15)
         + golds_pairs(freeform_golds, 50 if quick else 200, seed=16)),
    ):  # fmt: skip
        t = time.perf_counter()
        got = [check(g, p).correct for g, p, _ in mix]
        rate = len(mix) / (time.perf_counter() - t)
        t = time.perf_counter()
        want = [ref(g, p) for g, p, _ in mix]
        r_rate = len(mix) / (time.perf_counter() - t)
        a = sum(o == e for o, (_, _, e) in zip(got, mix, strict=True)) / len(mix)
        ra = sum(o == e for o, (_, _, e) in zip(want, mix, strict=True)) / len(mix)
        uniq = len(set((g, p) for g, p, _ in mix))
        note = f"{len(mix)} pairs ({uniq} distinct); accuracy ours {a:.3f}, math_verify {ra:.3f}"
        latex_rows.append(
            Row(
                "verifier",
                f"checks/s, {name}",
                rate,
                r_rate,
                "math_verify per pair",
                "checks/s",
                target=3.0,
                note=note,
            )  # fmt: skip
        )
        latex_rows.append(
            Row(
                "verifier",
                f"accuracy, {name}",
                a,
                ra,
                "math_verify accuracy",
                "fraction",
                target=1.0,
            )  # fmt: skip
        )
    return [
        Row(
            "verifier",
            "checks/s, integer-heavy",
            ours_rate,
            ref_rate,
            "math_verify (gold boxed, LaTeX config)",
            "checks/s",
            target=10.0,
        ),
        Row(
            "verifier",
            "accuracy (tricky + generated)",
            acc,
            ref_acc,
            "math_verify accuracy",
            "fraction",
            target=1.0,
        ),
        Row(
            "verifier",
            f"tricky table correct of {len(TRICKY_PAIRS)}",
            tricky_ours,
            tricky_ref,
            "math_verify on the table",
            "pairs",
            target=1.0,
        ),
        Row(
            "verifier",
            f"held-out (issue 64) correct of {len(HELDOUT_64)}",
            sum(check(g, p).correct == e for g, p, e in HELDOUT_64),
            sum(ref(g, p) == e for g, p, e in HELDOUT_64),
            "math_verify on the held-out pairs",
            "pairs",
            target=1.0,
            note="false accepts: ours "
            f"{sum(check(g, p).correct and not e for g, p, e in HELDOUT_64)}, math_verify "
            f"{sum(ref(g, p) and not e for g, p, e in HELDOUT_64)}",
        ),
        *latex_rows,
    ]
