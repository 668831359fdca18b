"""Second red-team round on the math verifier, each class in variants of its own with fresh
numbers and words: LaTeX- and markdown-wrapped alternatives, a sign before the box, words
after a math span, powers as ordinals, the lines after the final answer, trailing-sentence
hedges and lists (all no answer, or the changed value); answers stated in a sentence with a
unit, a remark or a restatement (correct); and a bound on the digits a number may have."""

import random
import time

import pytest

from flowzoo.tasks.base import Task
from flowzoo.tasks.math import MathFamily, check, read_answer
from flowzoo.tasks.math.verify import MAX_NUMBER_DIGITS

FAM = MathFamily()
QUESTION = "Ada bakes {n} muffins and sells some. How many muffins does she have?"
SEEDS = range(5)


def _numbers(seed: int) -> tuple[int, int]:
    r = random.Random(1000 + seed)
    n = r.randint(2, 900)
    return n, n + r.randint(1, 40)


def _score(gold: str, text: str):
    return FAM.score(Task("t", QUESTION.format(n=3), gold), text)


def _wrong_for_both(n: int, m: int, text: str) -> None:
    """Neither value of a hedge is rewarded, on the score path or the check path."""
    for gold in (str(n), str(m)):
        v = _score(gold, text)
        assert not v.correct, (gold, text, v)
        assert not check(gold, text).correct, (gold, text)


@pytest.mark.parametrize("seed", SEEDS)
def test_latex_and_markdown_wrapped_or_is_a_hedge_on_both_paths(seed):
    n, m = _numbers(seed)
    for text in [
        f"\\boxed{{{n}}}\\ \\text{{or}}\\ {m}", f"\\boxed{{{n}}}~or~{m}",
        f"\\boxed{{{n}}}\\text{{ or }}{m}", f"\\boxed{{{n}}}\\qquad\\text{{or}}\\qquad {m}",
        f"\\boxed{{{n}}}\\,\\textrm{{ or }}\\,{m}", f"\\boxed{{{n}}}\\ or\\ {m}",
        f"$\\boxed{{{n}}} \\mathrm{{or}} {m}$", f"\\boxed{{{n}}} \\textit{{or perhaps}} {m}",
        f"**{n}** *or* **{m}**", f"*{n}* or *{m}*", f"**{n}** _or_ **{m}**", f"**{n} or {m}**",
        f"\\boxed{{{n}}}\\enspace or\\enspace {m}",
        f"\\boxed{{{n}}}\\hspace{{1em}}\\text{{or}}\\hspace{{1em}}{m}",
        f"so {n} — or {m}",
        f"The answer is __{n} or {m}__.", f"So it is ${n} \\text{{ or }} {m}$.",
    ]:  # fmt: skip
        _wrong_for_both(n, m, text)
        assert _score(str(n), text).reason == "hedge", text


@pytest.mark.parametrize("seed", SEEDS)
def test_a_sign_before_the_box_is_read(seed):
    n, _ = _numbers(seed)
    for text in [
        f"- \\boxed{{{n}}}", f"-\\,\\boxed{{{n}}}", f"\\text{{-}}\\boxed{{{n}}}",
        f"\u2212\\boxed{{{n}}}", f"minus \\boxed{{{n}}}", f"Negative \\boxed{{{n}}}",
        f"The answer is -\\;\\boxed{{{n}}}.", f"So $x = -~\\boxed{{{n}}}$",
        f"Answer: \\mathrm{{-}}\\boxed{{{n}}}",
        f"-\\enspace\\boxed{{{n}}}",
    ]:  # fmt: skip
        assert not _score(str(n), text).correct, text
        assert not check(str(n), text).correct, text
        assert _score(str(-n), text).correct, (text, read_answer(text))
    # a dash after a word is prose, an operand before it makes an expression
    assert _score(str(n), f"Answer - \\boxed{{{n}}}").correct
    assert not _score(str(n), f"y - \\boxed{{{n}}}").correct


@pytest.mark.parametrize("seed", SEEDS)
def test_words_after_a_math_span_change_its_value(seed):
    n, _ = _numbers(seed)
    for text, value in [
        (f"The answer is ${n}$ thousand.", n * 1000), (f"Answer: ${n}$ million", n * 10**6),
        (f"#### ${n}$ thousand", n * 1000), (f"The final answer is \\({n}\\) dozen.", 12 * n),
        (f"So she has ${n}$ squared muffins.", n * n), (f"Answer: ${n}$^2", n * n),
        (f"The answer is ${n}$ hundred.", n * 100),
    ]:  # fmt: skip
        assert not _score(str(n), text).correct, text
        assert not check(str(n), text).correct, text
        assert _score(str(value), text).correct, (text, value, read_answer(text))
    for text in [f"${n}$k", f"The answer is ${n}$ grand.", f"Answer: ${n}$ tausend"]:
        assert not _score(str(n), text).correct, text


@pytest.mark.parametrize("seed", SEEDS)
def test_a_power_as_an_ordinal_is_read_or_refused(seed):
    n, _ = _numbers(seed)
    for text, value in [
        (f"\\boxed{{{n}}} to the second power", n**2), (f"\\boxed{{{n}}} to the third power", n**3),
        (f"\\boxed{{{n}}} to the 3rd power", n**3),
    ]:  # fmt: skip
        assert not _score(str(n), text).correct, text
        assert _score(str(value), text).correct, (text, read_answer(text))
    for text in [f"\\boxed{{{n}}} to the 2nd", f"\\boxed{{{n}}} to the 4th", f"{n} to the 5th."]:
        assert not _score(str(n), text).correct, text
        assert not check(str(n), text).correct, text


@pytest.mark.parametrize("seed", SEEDS)
def test_the_lines_after_the_final_answer_may_take_it_back(seed):
    n, m = _numbers(seed)
    changed = [
        f"\\boxed{{{n}}}\nthousand",
        f"\\boxed{{{n}}}\n\n\\times 1000",
        f"\\boxed{{{n}}}\n^3",
        f"\\boxed{{{n}}}.\n\nsquared",
        f"The answer is ${n}$\nmillion",
    ]
    hedged = [
        f"\\boxed{{{n}}}\nOr {m}.",
        f"\\boxed{{{n}}}\n\nor maybe {m}",
        f"\\boxed{{{n}}}\nWait, actually it's {m}.",
        f"\\boxed{{{n}}}\n\nHmm, so the total is {m}.",
        f"The answer is ${n}$\n\nor {m}",
        f"\\boxed{{{n}}}\n\n{m}",
        f"\\boxed{{{n}}}\n**{m}**",
        f"#### {n}\n*or* {m}",
        f"Answer: {n}\nOops, it should be {m}",
    ]
    for text in changed:
        assert not _score(str(n), text).correct, text
        assert not check(str(n), text).correct, text
    for text in hedged:
        _wrong_for_both(n, m, text)
        assert _score(str(n), text).reason == "hedge", text
    # prose after the answer, or working that ends on the same value, changes nothing
    for text in [
        f"\\boxed{{{n}}}\n\nI hope this helps.", f"\\boxed{{{n}}}\n\nCheck: {n} - 1 + 1 = {n}.",
        f"The answer is {n}.\n\nLet me know if you want step 2.", f"#### {n}\nDone.",
    ]:  # fmt: skip
        assert _score(str(n), text).correct, (text, _score(str(n), text))


@pytest.mark.parametrize("seed", SEEDS)
def test_trailing_sentences_ranges_and_lists_are_hedges(seed):
    n, m = _numbers(seed)
    for text in [
        f"It is {n}. Or {m}.", f"It is {n}? Or {m}?", f"I get {n}! Or {m}.", f"{n}, {m}",
        f"{n}; {m}", f"Between {n} and {m}.", f"It is between ${n}$ and ${m}$.",
    ]:  # fmt: skip
        _wrong_for_both(n, m, text)
    assert _score(f"{n}, {m}", f"{n}, {m}").correct  # a pair for a pair is its answer


@pytest.mark.parametrize("seed", SEEDS)
def test_an_answer_stated_in_a_sentence_is_read(seed):
    n, _ = _numbers(seed)
    for text in [
        f"Ada has ${n}$ muffins.", f"So she has ${n}$ muffins in total.",
        f"The total is ${n}$ muffins.", f"Thus Ada has \\({n}\\) muffins.",
        f"$3+{n - 3}={n}$ muffins.", f"The answer is {n} muffins total.",
        f"Answer: {n} muffins in total", f"The answer is {n} muffins in all.",
        f"The answer is {n} muffins ({n - 1} + 1).", f"The answer is {n}, i.e. {n}.0.",
        f"The answer is {n} muffins, or {n} in all.", f"The answer is {n} (one more than {n - 1}).",
        f"The answer is {n}. (Check: {n - 2} + 2 = {n}.)", f"\\boxed{{{n}}} ✅",
        f"Answer: {n} 🧁", f"\\boxed{{\\underline{{{n}}}}}", f"\\boxed{{\\color{{blue}}{n}}}",
        f"\\boxed{{\\textcolor{{red}}{{{n}}}}}", f"The answer is {n} kms.", f"It took {n} hrs.",
    ]:  # fmt: skip
        assert _score(str(n), text).correct, (text, _score(str(n), text))
    for text in ["The answer is eighteen (18).", "The answer is 18, i.e. eighteen."]:
        assert _score("18", text).correct, text
    # a remark that states another value, or a parenthesis that may be a product, is not one
    for text in [
        f"The answer is {n}, i.e. {n + 1}.", f"Answer: {n} (x+1)", f"The answer is {n} (in thousands).",
        f"The answer is {n} + 1.", f"The answer is {n}, {n + 1}",
    ]:  # fmt: skip
        assert not _score(str(n), text).correct, text


def test_numbers_with_too_many_digits_are_refused_fast():
    big = "7" * (MAX_NUMBER_DIGITS + 1)
    ok = "7" * MAX_NUMBER_DIGITS
    t = time.perf_counter()
    for gold, pred in [(big, "\\boxed{18}"), ("18", big), ("1" * 3_000_000, "18"), (big, big)]:
        v = check(gold, pred)
        assert not v.correct and v.reason == "too_many_digits", v
    assert _score("5" * 50_000, "\\boxed{18}").reason == "too_many_digits"
    assert time.perf_counter() - t < 2.0
    assert check(ok, ok).correct
