"""Red-team round on the final answer region, each class in variants of its own with fresh
numbers: (a) hedges (two values joined as alternatives, final marks that disagree) are no
answer, on the score path and the check path, and say so; (b) what follows the final box on
its line and changes its value is read or refused; (c) a word after a number that is neither
a known unit nor a word of the problem is refused, never dropped; (d) a box inside math
delimiters is read."""

import random

import pytest

from flowzoo.tasks.base import Task
from flowzoo.tasks.math import MathFamily, check, extract_answer, is_equivalent, read_answer
from tests.math_pairs import LOSSLESS_PAIRS, REDTEAM_PAIRS, TRICKY_PAIRS

FAM = MathFamily()
QUESTION = "Sam packs {n} flumps of zorbs and gives some away. How many zorbs are left?"


def _numbers(seed: int) -> tuple[int, int]:
    r = random.Random(seed)
    n = r.randint(2, 400)
    return n, n + r.randint(1, 60)


def _score(gold: str, text: str, question: str = "How many?"):
    return FAM.score(Task("t", question, gold), text)


def hedges(n: int, m: int) -> list[str]:
    """Completions whose final answer region names both ``n`` and ``m``."""
    return [
        f"Final answer: ${n}$ or ${m}$", f"The answer is **{n}** or **{m}**.",
        f"**{n}** or **{m}**", f"#### {n}\n#### {m}", f"#### {n} or {m}",
        f"Answer: {n}\n\nSo in the end \\boxed{{{m}}}.", f"\\boxed{{{n}}} or {m}",
        f"It could be {n} or \\boxed{{{m}}}", f"so it is {n} or maybe {m}.",
        f"Answer: ${n}$, ${m}$", f"Final Answer: $x = {n}$ or $x = {m}$",
        f"$\\boxed{{{n}}}$ (or ${m}$)", f"the answer is {n} dollars or {m} dollars",
        f"The answer is **{n}** / **{m}**", f"Answer: ${n}$ and ${m}$",
        f"The answer is {n}.\nThe answer is {m}.", f"\\({n}\\) or \\({m}\\)",
        f"**Final Answer:** {n}\n**Final Answer:** {m}", f"{n}, or perhaps {m}",
    ]  # fmt: skip


@pytest.mark.parametrize("seed", range(6))
def test_a_hedge_is_no_answer_and_says_so(seed):
    """Two values joined as alternatives where the answer stands, or final marks that
    disagree, earn neither value; the verdict's reason names the hedge."""
    n, m = _numbers(seed)
    for text in hedges(n, m):
        for gold in (str(n), str(m)):
            v = _score(gold, text)
            assert not v.correct and v.reason == "hedge", (gold, text, v)
            assert not check(gold, text).correct, (gold, text)
        assert read_answer(text) == (None, "hedge"), text
    for text in (f"#### {n} or {m}", f"**{n}** or **{m}**", f"The answer is **{n}** or **{m}**.",
                 f"#### {n}\n#### {m}", f"\\boxed{{{n}}} or {m}"):  # fmt: skip
        assert check(str(n), text).reason == "hedge", text  # the check path says it too


@pytest.mark.parametrize("seed", range(4))
def test_one_value_said_twice_or_beside_other_numbers_is_no_hedge(seed):
    """The same value marked twice (or written twice, ``$\\frac{2n}{2}$ or equivalently
    $n$``) is one answer; alternatives away from the final answer are prose."""
    n, m = _numbers(seed)
    for text in (
        f"#### {n}\nchecked again\n#### {n}", f"Answer: {n}\n\\boxed{{{n}}}",
        f"Final answer: $\\frac{{{2 * n}}}{{2}}$ or equivalently ${n}$", f"**{n}** or **{n}.0**",
        f"Either {m} or {m + 1} boxes were used, so the total is \\boxed{{{n}}}.",
        f"The answer is ${n}$. Since {m} or more were needed, it fits.", f"\\boxed{{{n}}}.",
        f"So \\boxed{{{n}}} and {m} is wrong",
    ):  # fmt: skip
        v = _score(str(n), text)
        assert v.correct, (text, v)


def test_a_list_for_a_gold_of_one_value_is_a_hedge_a_list_gold_takes_a_list():
    for gold, pred, ok in (("3", "3, 5", False), ("3, 5", "3, 5", True), ("3, 5", "5, 3", True),
                           ("\\{3, 5\\}", "Final answer: 3, 5", True)):  # fmt: skip
        v = check(gold, pred)
        assert v.correct is ok and (ok or v.reason == "hedge"), (gold, pred, v)


@pytest.mark.parametrize("seed", range(6))
def test_what_follows_the_final_box_and_changes_its_value_is_read(seed):
    """Multiplier words, powers, operators, a mixed number's fraction, a sign before the box:
    the box's answer is the changed value (or refused), never the bare box."""
    n, _ = _numbers(seed)
    changed = [  # (completion, the value it states)
        (f"so \\boxed{{{n}}} thousand.", n * 1000), (f"\\boxed{{{n}}}\\text{{ million}}", n * 10**6),
        (f"\\boxed{{{n}}}^2", n**2), (f"so $\\boxed{{{n}}}^{{3}}$.", n**3),
        (f"\\boxed{{{n}}} \\times 10^{{3}}", n * 1000), (f"\\boxed{{{n}}} squared", n**2),
        (f"\\boxed{{{n}}} to the power of 2", n**2), (f"\\boxed{{{n}}}/2", f"{n}/2"),
        (f"The answer is $-\\boxed{{{n}}}$.", -n), (f"\\(\\boxed{{{n}}}\\) dozen", 12 * n),
        (f"\\boxed{{{n}}} \\cdot 3", 3 * n), (f"\\boxed{{{n}}} plus 1", n + 1),
    ]  # fmt: skip
    for text, value in changed:
        assert not _score(str(n), text).correct, text
        assert _score(str(value), text).correct, (text, value, read_answer(text))
    refused = [f"\\boxed{{{n}}} septillion", f"\\boxed{{{n}}}-fold", f"\\boxed{{{n}}} K",
               f"3 \\cdot \\boxed{{{n}}}", f"10^\\boxed{{{n}}}", f"2\\boxed{{{n}}}",
               f"\\frac{{1}}{{\\boxed{{{n}}}}}", f"\\boxed{{{n}}} tausend"]  # fmt: skip
    for text in refused:
        assert not _score(str(n), text).correct, text
    assert _score(f"\\frac{{{2 * n + 1}}}{{2}}", f"\\boxed{{{n}}} 1/2").correct
    assert not _score(str(n), f"\\boxed{{{n}}} 1/2").correct


@pytest.mark.parametrize("seed", range(4))
def test_punctuation_prose_and_a_unit_the_gold_allows_after_a_box_stay_fine(seed):
    n, _ = _numbers(seed)
    for text in (f"\\boxed{{{n}}}.", f"$\\boxed{{{n}}}$.", f"\\boxed{{{n}}} is the answer.",
                 f"\\boxed{{{n}}}, which is the total", f"\\boxed{{{n}}} (the total)",
                 f"\\boxed{{{n}}} dollars.", f"\\boxed{{{n}}} apples in total",
                 f"\\boxed{{{n}}} - done", f"\\boxed{{{n}}}\\%", f"\\boxed{{{n}}} ok",
                 f"Answer - \\boxed{{{n}}}"):  # fmt: skip
        assert _score(str(n), text).correct, (text, read_answer(text))
    cm = f"{n} \\text{{ cm}}"
    for text in (f"\\boxed{{{n}}} cm", f"\\boxed{{{n}}}\\text{{ cm}}", f"\\boxed{{{n}}}"):
        assert _score(cm, text).correct, text
    for text in (f"\\boxed{{{n}}} km", f"\\boxed{{{n}}}\\text{{ km}}", f"\\boxed{{{n}}} kg"):
        assert not _score(cm, text).correct, text  # a unit the gold does not allow


WORDS = ["septillion", "octillions", "tausend", "Milliarden", "mila", "miljoen", "lakhs",
         "duizend", "googolplex", "zorbs", "quux", "centillion", "bazillion"]  # fmt: skip


@pytest.mark.parametrize("word", WORDS)
def test_a_word_after_a_number_that_is_no_known_unit_is_refused(word):
    """Decided: a word after a number is dropped as the unit the question asked for only
    when it is a unit or counted noun of the lexicon, or a word of the problem statement;
    number and multiplier words (in the languages listed, or with a multiplier's ending) are
    refused even there. Anything else is refused, never read as the bare number."""
    for n in (3, 17, 250):
        for pred in (f"{n} {word}", f"{n} \\text{{ {word}}}", f"Answer: {n} {word}",
                     f"#### {n} {word}", f"\\boxed{{{n} {word}}}"):  # fmt: skip
            assert not check(str(n), pred).correct, pred
        for text in (f"He has {n} {word}.", f"So it is {n} {word}", f"\\boxed{{{n}}} {word}"):
            assert not _score(str(n), text).correct, text


@pytest.mark.parametrize("seed", range(4))
def test_known_units_and_the_problems_own_nouns_still_answer_the_bare_number(seed):
    n, _ = _numbers(seed)
    q = QUESTION.format(n=n)
    for pred in (f"{n} cookies", f"{n} eggs", f"{n} \\text{{ marbles}}", f"{n} apples",
                 f"{n} minutes", f"{n} square feet", f"{n} cups"):  # fmt: skip
        assert check(str(n), pred).correct, pred
    for text in (f"She has {n} zorbs left.", f"\\boxed{{{n}}} zorbs", f"Answer: {n} flumps",
                 f"#### {n} zorbs"):  # fmt: skip
        assert _score(str(n), text, q).correct, text
        assert not _score(str(n), text).correct, text  # zorbs: no unit without the problem
        assert not _score(str(n + 1), text, q).correct, text
    assert check(str(n), f"{n} zorbs", question=q).correct
    assert not check(str(n), f"{n} zorbs").correct
    assert not _score(str(n), f"{n} tausend zorbs", q.replace("flumps", "tausend")).correct


@pytest.mark.parametrize("seed", range(4))
def test_a_box_inside_math_delimiters_is_read(seed):
    n, m = _numbers(seed)
    for text in (f"\\(\\boxed{{{n}}}\\)", f"\\[\\boxed{{{n}}}\\]", f"$$\\boxed{{{n}}}$$",
                 f"The answer is \\(\\boxed{{{n}}}\\).", f"\\[ x = \\boxed{{{n}}} \\]",
                 f"$\\displaystyle \\boxed{{{n}}}$"):  # fmt: skip
        assert _score(str(n), text).correct, text
        assert not _score(str(m), text).correct, text
    for pred in (f"\\(\\boxed{{{n}}}\\)", f"\\[\\boxed{{{n}}}\\]", f"$$\\boxed{{{n}}}$$",
                 f"The answer is \\(\\boxed{{{n}}}\\)."):  # fmt: skip
        assert is_equivalent(str(n), pred) and not is_equivalent(str(m), pred), pred
    frac = f"\\(\\boxed{{\\frac{{{n}}}{{{m}}}}}\\)"
    assert is_equivalent(f"\\frac{{{2 * n}}}{{{2 * m}}}", frac)
    for hedge in (f"\\(\\boxed{{{n}}}\\) or \\(\\boxed{{{m}}}\\)", f"\\(\\boxed{{{n}}}\\) or {m}"):
        assert not is_equivalent(str(n), hedge) and not is_equivalent(str(m), hedge), hedge


@pytest.mark.parametrize(
    "text,want",
    [
        ("so \\boxed{3} thousand.", "3 thousand"),
        ("so \\boxed{5}^2", "5^2"),
        ("\\(\\boxed{7}\\)", "7"),
        ("x = -\\boxed{5}", "-5"),
        ("\\boxed{18} dollars and 50 cents", "18 dollars"),
        ("\\boxed{18} is the answer", "18"),
        ("\\boxed{18} (eighteen)", "18"),
        ("she has 7 apples in total.", "7"),
        ("so 3 septillion", "3 septillion"),
        ("so 3 zorbs.", "3 zorbs"),
    ],
)
def test_extraction_keeps_what_the_checker_must_judge(text, want):
    assert extract_answer(text) == want


WRAPS = ["\\(\\boxed{{{p}}}\\)", "$$\\boxed{{{p}}}$$", "The final answer is $\\boxed{{{p}}}$.",
         "\\[\\boxed{{{p}}}\\]"]  # fmt: skip


@pytest.mark.parametrize("wrap", WRAPS)
def test_math_delimiters_around_a_box_never_make_a_wrong_answer_right(wrap):
    pairs = TRICKY_PAIRS + LOSSLESS_PAIRS + REDTEAM_PAIRS
    accepted = [(g, p) for g, p, e in pairs if not e and is_equivalent(g, wrap.format(p=p))]
    assert accepted == []
