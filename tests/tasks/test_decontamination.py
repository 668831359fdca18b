"""Decontamination of a user's split: reworded and reordered copies (the same quantities and
the same gold in other words or order) are caught; problems that merely share a template
(the same words, other numbers or answer) are not; a file's split moves what the train side
already holds and says how many; the measurement's properties hold and are recorded."""

from __future__ import annotations

import json
import re
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from flowzoo.tasks.base import Task
from flowzoo.tasks.code.data import function_tasks
from flowzoo.tasks.code.stdio_data import stdio_tasks
from flowzoo.tasks.files import file_split, math_key
from flowzoo.tasks.math.data import arithmetic_tasks, load_hf_local, load_math_dataset
from flowzoo.tasks.overlap import gold_form, overlap, overlap_matches, quantities, tokens

ROOT = Path(__file__).resolve().parents[2]


def rows(*pairs: tuple[str, str], prefix: str = "r") -> list[Task]:
    return [Task(f"{prefix}{i}", q, a) for i, (q, a) in enumerate(pairs)]


def hit(train: tuple[str, str], test: tuple[str, str]) -> tuple[str, ...]:
    """The criteria by which one row holds the other."""
    return overlap_matches(rows(train, prefix="a"), rows(test, prefix="b")).get("b0", ())


def as_row(t: Task) -> Task:
    return Task(
        t.id, t.question, t.answer, t.family, {k: v for k, v in t.meta.items() if k != "key"}
    )


# ------------------------------------------------------------------ rewordings are caught

ORIGINAL = ("Lena buys 4 boxes of 6 pencils and loses 5 of them. How many pencils remain?", "19")
COPIES = {
    "reordered sentences": "Lena loses 5 pencils. She had bought 4 boxes of 6 pencils. How many remain?",
    "other words": "From four boxes holding six pencils each, Lena mislays five. Count what is left.",
    "number words": "Lena buys four boxes of six pencils and loses five of them. How many remain?",
    "question first": "How many pencils remain if Lena buys 6-pencil boxes, 4 of them, and loses 5?",
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(COPIES))
def test_a_reworded_or_reordered_copy_is_caught_by_what_it_solves(kind):
    assert "solved" in hit(ORIGINAL, (COPIES[kind], "19"))


@pytest.mark.parametrize(
    "train,test",
    [
        (("A shop sells 1,200 pens at $3 each. What is the revenue?", "3600"),
         ("At three dollars each, 1200 pens bring in how much?", "$3,600")),
        (("Half of 9 and 7 is what, as a fraction?", "\\frac{1}{2}"),
         ("What fraction: 7 and 9, half?", "0.5")),
        (("Ana has twice as many as Bo's 21 cards. Cards?", "42"),
         ("Bo has 21 cards and Ana 2 times as many. How many for Ana?", "42")),
        (("What is 12 + 30 + 8?", "50"), ("Add 8, 30 and 12.", "50")),
        (("A dozen eggs and 3 more: how many eggs?", "15"), ("3 eggs plus 12 eggs?", "15")),
    ],
)  # fmt: skip
def test_quantities_and_golds_are_read_in_one_form(train, test):
    """Commas, dollar signs, number words ("twice", "dozen"), fractions written three ways."""
    assert "solved" in hit(train, test)


def test_one_form_of_numbers_and_golds():
    assert quantities(tokens("Give 1,000.50 and twenty-one, or -3 ('x')")) == (
        "'x'",
        "-3",
        "1000.5",
        "21",
    )
    assert quantities(tokens("What is 8 - 3?")) == (
        "3",
        "8",
    )  # a minus between numbers: an operator
    assert quantities(tokens("Ana's 5 pens and Ben's 2")) == ("2", "5")  # an apostrophe, no literal
    assert gold_form("0.5") == gold_form("1/2") == gold_form("\\frac{1}{2}") == gold_form("$0.50")
    assert gold_form("18") != gold_form("-18") and gold_form("x = 3") == "x=3"


def test_a_near_copy_with_a_gold_written_otherwise_is_caught_by_ngrams():
    q = "In a garden there are 3 rows of tulips and every row has 8 tulips in it. Total tulips?"
    near = q.replace("Total tulips?", "How many tulips in total?")
    # "24 tulips" is the number 24 (the unit split off), so what is solved matches too
    assert hit((q, "24 tulips"), (near, "24")) == ("solved", "ngram")
    assert hit((q, "x = 24"), (near, "24")) == ("ngram",)  # a number and a text: no contradiction
    assert hit((q, "24"), (near, "25")) == ()  # two numbers of other values: another problem
    words = "Name the capital city of the country whose flag shows a red maple leaf on white"
    assert hit((words, "Ottawa"), (words.upper() + " please", "ottawa")) == ("ngram",)


@pytest.mark.parametrize(
    "written,other",
    [
        ("11", "\\$11"), ("11", "11 dollars"), ("11", "11 pens"), ("11", "\\text{11 pens}"),
        ("1/2", "\\tfrac{1}{2}"), ("1/2", "\\dfrac12"), ("-5", "\u22125"), ("5", "\uff15"),
        ("5", "\u0665"), ("2.5", "2,5"), ("1200", "1 200"), ("1200", "1\u202f200"),
        ("-4", "minus 4"), ("-4", "negative four"), ("12", "twelve"), ("11", "\\boxed{11}"),
    ],
)  # fmt: skip
def test_a_gold_written_another_way_is_one_value(written, other):
    """The gold read as the math verifier reads an answer: its normaliser, its unit split, its
    number words; digits of any script, any minus sign, a decimal comma, spaced thousands."""
    assert gold_form(written) == gold_form(other) == f"={Fraction(written)}"


@pytest.mark.parametrize("a,b", [("1,2,3", "123"), ("(1,2)", "1.2"), ("x=3", "3"), ("8", "2")])
def test_lists_pairs_and_other_values_stay_apart(a, b):
    assert gold_form(a) != gold_form(b)


@pytest.mark.parametrize(
    "train,test",
    [
        (("Ana has 5 pens and buys 3 more. How many pens?", "8"),
         ("After buying 3 pens, how many pens does Ana own if she began with 5?", "8 pens")),
        (("Tom pays 4 coins each for 3 cakes. What does he pay?", "12"),
         ("For 3 cakes at 4 coins each, what is the cost in dollars?", "\\$12")),
        (("Ana has \uff15 pens and buys \uff13 more. How many pens?", "\uff18"),
         ("After buying 3 pens, how many pens does Ana own if she began with 5?", "8")),
        (("\u0639\u0646\u062f\u0647 \u0665 \u0648 \u0663 pens. Total?", "\u0668"),
         ("Ana holds 5 pens and 3 pens. How many in all?", "8")),
        (("The sum of 2,5 kg and 1 200 g, in grams?", "3 700"),
         ("In grams, what do 1200 g and 2.5 kg weigh together?", "3700")),
        (("It is minus 4 degrees and drops 3 more. Temperature?", "minus 7"),
         ("From -4 degrees the temperature falls 3. What is it now?", "\u22127")),
    ],
)  # fmt: skip
def test_a_copy_stating_numbers_another_way_is_caught_by_what_it_solves(train, test):
    assert "solved" in hit(train, test)


def test_a_number_stated_in_a_unit_is_told_apart_from_another_number():
    """A gold with a unit and a bare gold of another value are two answers: the same words
    (the n-gram reading) asking for them are two problems, not a copy."""
    base = "Ana has 5 pens and her friend Bo brings 3 pens over to the table where they sit"
    train = (base + " and then Ana buys 3 more pens. How many pens does Ana have?", "8 pens")
    test = (base + " and then Ana gives 3 pens away. How many pens does Ana have?", "2")
    assert hit(train, test) == ()
    assert "ngram" in hit(train, (test[0], "8"))  # the same gold: a near copy


def test_a_files_split_keeps_reworded_twins_with_units_on_one_side(tmp_path):
    """60 problems, each with a rewording whose gold is "N pens" and a template sibling: no
    test row's twin is left in train."""
    lines = []
    for i in range(60):
        a, b = 10 + i, 3 + (i % 7)
        lines += [
            {"id": f"b{i}", "question": f"Ana has {a} pens and buys {b} more. How many pens does she have?", "answer": str(a + b)},
            {"id": f"r{i}", "question": f"After buying {b} pens, how many pens does Ana own if she began with {a}?", "answer": f"{a + b} pens"},
            {"id": f"s{i}", "question": f"Ana has {a + 1} pens and buys {b} more. How many pens does she have?", "answer": str(a + b + 1)},
        ]  # fmt: skip
    p = tmp_path / "one.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    train = {t.id for t in load_hf_local(p, split="train")}
    test = [t.id for t in load_hf_local(p, split="test")]
    assert test
    twin = {"b": "r", "r": "b"}
    assert [x for x in test if x[0] in twin and twin[x[0]] + x[1:] in train] == []


# ------------------------------------------------------------------ template siblings are not


SIBLINGS = [
    ("Lena buys 4 boxes of 6 pencils and loses 5 of them. How many pencils remain?", "19"),
    ("Lena buys 3 boxes of 6 pencils and loses 5 of them. How many pencils remain?", "13"),
    ("Lena buys 4 boxes of 6 pencils and loses 2 of them. How many pencils remain?", "22"),
    ("Lena buys 5 boxes of 6 pencils and loses 4 of them. How many pencils remain?", "26"),  # same numbers, other answer
    ("Lena buys 6 boxes of 4 pencils and loses 5 of them. How many pencils remain?", "19"),  # same numbers and answer: a copy
]  # fmt: skip


def test_template_siblings_of_our_own_are_not_flagged_and_a_true_copy_is():
    found = overlap_matches(rows(SIBLINGS[0], prefix="a"), rows(*SIBLINGS[1:], prefix="b"))
    assert found == {"b3": ("solved",)}  # 6 boxes of 4 is 4 boxes of 6: the same problem


@pytest.mark.parametrize("gen", ["arith", "funcs", "stdio"])
def test_the_generators_template_siblings_are_not_flagged(gen):
    """Pairs sharing a generator's template (numbers masked; code: its template name) with
    other quantities or another answer, read as a user's rows (no key): none flagged, where
    a plain harness n-gram check flags most of the code pairs."""
    make = {"arith": arithmetic_tasks, "funcs": function_tasks, "stdio": stdio_tasks}[gen]
    tasks = list(make(400, split="train", seed=3))
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        tpl = t.meta.get("template") or re.sub(r"\d+", "#", t.question)
        groups.setdefault(str(tpl), []).append(t)
    pairs = flagged = 0
    for members in groups.values():
        first, q0 = members[0], quantities(tokens(members[0].question))
        for m in members[1:]:
            if quantities(tokens(m.question)) == q0 and m.answer == first.answer:
                continue
            pairs += 1
            flagged += bool(overlap_matches([as_row(first)], [as_row(m)]))
    assert pairs >= 100 and flagged == 0


def test_swapped_literals_and_signs_are_other_problems():
    a = Task(
        "a",
        "Write f(s) that replaces every 'i' by 'o'.",
        "",
        "code",
        {"tests": ["assert f('i') == 'o'"]},
    )
    b = Task(
        "b",
        "Write f(s) that replaces every 'o' by 'i'.",
        "",
        "code",
        {"tests": ["assert f('o') == 'i'"]},
    )
    c = Task(
        "c", "Write g(xs) returning min(xs), or -7 if xs is empty.", "", "code", {"tests": ["x"]}
    )
    d = Task(
        "d", "Write g(xs) returning min(xs), or 7 if xs is empty.", "", "code", {"tests": ["y"]}
    )
    assert overlap_matches([a, c], [b, d]) == {}
    same = Task("e", "Write f(s) that replaces every 'i' by 'o', please.", "", "code", {})
    assert overlap_matches([a], [same]) == {"e": ("ngram",)}  # no tests to tell them apart
    # fmt: skip


def test_generated_tasks_are_decided_by_their_key_alone():
    """Between two generated tasks the computation key is what is solved: "4 * 3 - 2 + 2"
    and "3 * 4 + 2 - 2" have two keys and stay apart; read as rows they are flagged."""
    a = Task("a", "Compute 4 * 3 - 2 + 2.", "12", meta={"key": "3*4|_-2|_+2"})
    b = Task("b", "What is 3 * 4 + 2 - 2?", "12", meta={"key": "3*4|_+2|_-2"})
    assert overlap_matches([a], [b]) == {}
    assert overlap_matches([as_row(a)], [b]) == {"b": ("solved",)}
    assert overlap_matches([a], [as_row(b)]) == {"b": ("solved",)}


def test_overlap_counts_each_criterion():
    train = rows(ORIGINAL, ("Compute 7 * 8.", "56"))
    test = rows(
        (COPIES["other words"], "19"),
        ("compute 7 * 8", "56"),
        ("What is 9 - 4?", "5"),
        prefix="t",
    )
    o = overlap(train, test)
    assert (o.any, o.by_solved, o.by_statement, o.by_ngram) == (2, 2, 1, 0)
    assert "solved (quantities + gold) 2" in o.counts() and o.examples == ["t0", "t1"]


# ------------------------------------------------------------------ a file's split


def test_a_files_split_moves_reworded_copies_to_train_and_says_how_many(tmp_path):
    base = [(f"Omar packs {i} crates of {i + 2} jars and drops 1. Jars left?", str(i * (i + 2) - 1)) for i in range(3, 60)]  # fmt: skip
    copies = [(f"{i + 2} jars per crate, {i} crates, 1 dropped: how many jars are left?", a) for (q, a), i in zip(base, range(3, 60), strict=True)]  # fmt: skip
    path = tmp_path / "mine.jsonl"
    path.write_text(
        "".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in base + copies)
    )
    train = load_math_dataset(f"jsonl:{path}", "train")
    test = load_math_dataset(f"jsonl:{path}", "test")
    assert overlap(train, test).any == 0 and len(train) + len(test) == 2 * len(base)
    moved = test.decontamination
    assert moved["moved_to_train"] >= 5 and moved["by_solved"] == moved["moved_to_train"]
    assert test.origin == "split by what is solved" and train.decontamination == moved
    # without the new readings the copies would be held out: the hash alone splits them
    keys = {t.id: t.meta["key"] for t in list(train) + list(test)}
    assert len(set(keys.values())) == 2 * len(base)


_LONG = (
    "the old keeper of the lighthouse counts every ship that passes the rocky northern cape at "
    "night and his daughter copies the careful tally into a small green notebook that she keeps "
    "on a shelf by the door"
).split()


def _drift(i: int, changed: list[int]) -> str:
    w = list(_LONG)
    for p in changed:
        w[p] = "other" + "abcdefghij"[p % 10]
    return " ".join([*w[:36], str(100 + i), *w[36:]])


def test_a_chain_of_copies_moves_whole():
    """A near-copies B, B near-copies C, C is no copy of A (n-grams: one number, text golds,
    the solved reading silent): when A is on the train side, C moves with B, in a second
    round; the sides end disjoint by every criterion."""
    from flowzoo.tasks.files import side_of

    a, b, c = (
        Task(f"{k}", _drift(0, d), "ans") for k, d in (("a", []), ("b", [30]), ("c", [5, 20, 30]))
    )
    assert overlap_matches([a], [b, c]) == {"b": ("ngram",)} and overlap_matches([b], [c])
    tasks = [Task(f"{k}{i}", _drift(i, d), f"ans{i}") for i in range(40) for k, d in (("a", []), ("b", [30]), ("c", [5, 20, 30]))]  # fmt: skip
    tasks += [Task(f"f{i}", f"What is {i} + {2 * i + 1000}?", str(3 * i + 1000)) for i in range(60)]
    test = file_split(tasks, "test", math_key, "chain")
    train = file_split(tasks, "train", math_key, "chain")
    assert overlap(train, test).any == 0 and len(test) > 0
    first = [side_of(math_key(t)) for t in tasks]
    one_round = overlap_matches(
        [t for t, s in zip(tasks, first, strict=True) if s == "train"],
        [t for t, s in zip(tasks, first, strict=True) if s == "test"],
    )
    assert test.decontamination["moved_to_train"] > len(one_round) > 0


# ------------------------------------------------------------------ the measurement


def test_the_committed_measurement_says_its_command_and_its_properties():
    d = json.loads((ROOT / "baselines/results/decontamination.json").read_text())
    assert d["command"] == "python baselines/decontamination.py --record"
    sib = d["template_siblings"]
    assert sum(v["sibling_pairs"] for v in sib.values()) > 10_000
    assert sum(v["flagged"] for v in sib.values()) == 0
    assert sum(v["plain_8gram_half_coverage_flags"] for v in sib.values()) > 1000
    kinds = d["planted"]["kinds"]
    for kind in ("reword", "reorder", "own-reworded"):
        assert kinds[kind]["recall"] == 1.0 and kinds[kind]["recall_before"] < 0.5
    assert kinds["implied-quantity"]["recall"] < 1.0  # the reading's stated limit


def test_the_measurement_reruns_with_the_same_properties():
    sys.path.insert(0, str(ROOT))
    try:
        from baselines.decontamination import planted, siblings
    finally:
        sys.path.remove(str(ROOT))
    sib = siblings(150)
    assert all(v["flagged"] == 0 for v in sib.values()) and sib["arith"]["sibling_pairs"] > 50
    p = planted(60, seed=5)
    assert p["kinds"]["reword"]["recall"] == p["kinds"]["reorder"]["recall"] == 1.0
    assert p["recall_before"] < 0.5


def test_a_users_row_rewording_a_generated_problem_is_found():
    """A user's row (no key) against a generated set: the rows reading applies, so an eval
    file holding a generated training problem in other words is found."""
    t = arithmetic_tasks(50, split="train", levels=(3,), seed=1)[0]
    nums = re.findall(r"\d+", t.question)
    mine = Task(
        "mine", f"Given {', '.join(reversed(nums))} as in the story: how many now?", t.answer
    )
    assert overlap_matches(arithmetic_tasks(50, split="train", levels=(3,), seed=1), [mine]) == {
        "mine": ("solved",)
    }
