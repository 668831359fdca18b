"""How well the library's decontamination reads a user's split: its false-positive rate on
template siblings and its recall on planted rewordings and reorderings.

    python baselines/decontamination.py --record

Every task here is read as a user's row would be (no generator key: the key decides alone
between two generated tasks, so the readings under test would never run). Three measures:

- **template siblings**: pairs from the shipped generators (arith levels 1-4, funcs, guarded,
  stdio) that share a template (the same wording once numbers are masked; code: the same
  template) but state other quantities or have another answer. Each pair is one train row
  and one test row; a flag is a false positive. Beside it, what a plain harness n-gram check
  (no quantity condition) would flag on the same pairs.
- **planted copies**: test rows made from train rows in other words or another order (the
  same quantities and the same answer), of kinds written here; recall by kind, by each
  criterion, and by the criteria before this round (key-less: statement and tests only).
- **the generator's own splits as rows**: the arith test split against its train split, both
  read as rows: how many test problems state the numbers and answer of a train problem that
  the generator's computation key keeps apart (the readings' cost on real disjoint data).

Writes ``baselines/results/decontamination.json`` with ``--record`` (else prints it).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

from flowzoo.tasks.base import Task
from flowzoo.tasks.code.data import function_tasks
from flowzoo.tasks.code.guarded import guarded_tasks
from flowzoo.tasks.code.stdio_data import stdio_tasks
from flowzoo.tasks.math.data import arithmetic_tasks
from flowzoo.tasks.overlap import CRITERIA, NGRAM, overlap_matches, quantities, tokens

OUT = Path(__file__).parent / "results" / "decontamination.json"
COMMAND = "python baselines/decontamination.py --record"
_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def as_row(t: Task, tid: str | None = None) -> Task:
    """``t`` as a user's row holds it: no generator key (what a loader cannot know)."""
    meta = {k: v for k, v in t.meta.items() if k not in ("key", "key_source")}
    return Task(tid or t.id, t.question, t.answer, t.family, meta)


def template_of(t: Task) -> str:
    """The wording with its numbers masked (code: the generator's template name)."""
    if t.family == "code":
        return str(t.meta["template"])
    return re.sub(r"\d+", "#", t.question)


def _plain_ngram(a: Task, b: Task) -> tuple[bool, bool]:
    """What harness n-gram checks flag: (half of b's 8-grams in a, any 13-gram shared)."""
    ta, tb = tokens(a.question), tokens(b.question)

    def grams(t: list[str], n: int) -> set[tuple[str, ...]]:
        return {tuple(t[i : i + n]) for i in range(max(1, len(t) - n + 1))}

    g8b = grams(tb, NGRAM)
    cover = len(g8b & grams(ta, NGRAM)) >= 0.5 * len(g8b)
    return cover, bool(grams(ta, 13) & grams(tb, 13)) and len(tb) >= 13


def siblings(n: int) -> dict:
    """False positives on template-sibling pairs, per generator."""
    gens = {
        "arith": lambda sp: arithmetic_tasks(n, split=sp, levels=(1, 2, 3, 4), exhaust=True),
        "funcs": lambda sp: function_tasks(n, split=sp, exhaust=True),
        "guarded": lambda sp: guarded_tasks(n, split=sp, exhaust=True),
        "stdio": lambda sp: stdio_tasks(n, split=sp, exhaust=True),
    }
    out = {}
    for name, gen in gens.items():
        tasks = [t for sp in ("pretrain", "train", "test") for t in gen(sp)]
        groups: dict[str, list[Task]] = defaultdict(list)
        for t in tasks:
            groups[template_of(t)].append(t)
        pairs = flagged = cover = any13 = 0
        by: Counter[str] = Counter()
        examples = []
        for members in groups.values():
            first = members[0]
            q0 = quantities(tokens(first.question))
            for m in members[1:]:
                if quantities(tokens(m.question)) == q0 and m.answer == first.answer:
                    continue  # the same quantities and answer: a copy, not a sibling
                pairs += 1
                hit = overlap_matches([as_row(first, "a")], [as_row(m, "b")]).get("b", ())
                flagged += bool(hit)
                by.update(hit)
                if hit and len(examples) < 3:
                    examples.append([first.question, m.question, list(hit)])
                c, g = _plain_ngram(first, m)
                cover += c
                any13 += g
        out[name] = {
            "templates": len(groups),
            "sibling_pairs": pairs,
            "flagged": flagged,
            "false_positive_rate": flagged / pairs if pairs else 0.0,
            "flagged_by": dict(by),
            "examples": examples,
            "plain_8gram_half_coverage_flags": cover,
            "plain_any_13gram_flags": any13,
        }
    return out


# ------------------------------------------------------------------ planted copies

_VERBS = ("What is {e}?", "Compute {e}.", "Find {e}.", "Calculate {e}.")


def _word(n: int, r: random.Random) -> str:
    """``n`` as a word now and then (two to twelve: 'one' is not read as a number)."""
    return _WORDS[n] if 2 <= n <= 12 and r.random() < 0.5 else str(n)


def _expr_variants(steps: list, r: random.Random) -> list[tuple[str, str]]:
    """Other wordings and orders of an expression problem's computation."""
    (a, op, b), rest = steps[0], steps[1:]
    out = []
    if op in "+*":
        e = f"{b} {op} {a}" + "".join(f" {o} {y}" for _, o, y in rest)
        out.append(("reorder", r.choice(_VERBS).format(e=e)))
    name = {"+": "the sum of", "-": "the difference of", "*": "the product of"}[op]
    words = f"{name} {_word(a, r)} and {_word(b, r)}"
    for _, o, y in rest:
        words = {"+": f"{_word(y, r)} more than {words}", "-": f"{words}, minus {_word(y, r)}"}[o]
    out.append(("reword", f"Work out {words}. Give the number."))
    return out


def _word_variants(t: Task, r: random.Random) -> list[tuple[str, str]]:
    """Other wordings and orders of the generator's word problems (levels 3 and 4)."""
    q = t.question
    m = re.match(r"(\w+) has (\d+) bags with (\d+) (\w+) in each bag\. \1 gives away (\d+) \4\.", q)
    if m:
        who, bags, each, thing, gone = m.groups()
        return [
            ("reorder", f"{who} gives away {gone} {thing}. Before that, {who} had {bags} bags "
             f"with {each} {thing} in each bag. How many {thing} are left?"),
            ("reword", f"There are {_word(int(each), r)} {thing} in every one of {who}'s "
             f"{_word(int(bags), r)} bags. After handing out {gone}, how many remain?"),
        ]  # fmt: skip
    m = re.match(r"(\w+) has (\d+) (\w+) and gets (\d+) more, then gives away (\d+)\.", q)
    if m:
        who, a, thing, b, c = m.groups()
        return [
            ("reorder", f"{who} gets {b} more {thing}, then gives away {c}. At first {who} "
             f"had {a} {thing}. How many {thing} does {who} have now?"),
            ("reword", f"Starting from {_word(int(a), r)} {thing}, {who} receives "
             f"{_word(int(b), r)} and then hands {c} to a friend. What is the count now?"),
        ]  # fmt: skip
    m = re.match(r"(\w+) has (\d+) (\w+)\. (\w+) has (\d+) times as many \3 as \1, then finds (\d+)", q)  # fmt: skip
    if m:
        a, x, thing, b, k, y = m.groups()
        return [
            ("reorder", f"{b} finds {y} more {thing} after having {k} times as many {thing} "
             f"as {a}. {a} has {x} {thing}. How many {thing} do they have together?"),
            ("reword", f"{a} owns {_word(int(x), r)} {thing}; {b} owns {k} times that many and "
             f"later picks up {y} more. What is their combined total?"),
        ]  # fmt: skip
    return []


#: problems of our own in a GSM8K style, each with its answer and a reworded, reordered copy
OWN = [
    ("A baker makes 24 muffins and sells 15 of them. She bakes 12 more. How many muffins does "
     "she have?", "21",
     "After selling fifteen of the twenty-four muffins she made, a baker bakes twelve more. "
     "Count her muffins."),
    ("Tickets cost $8 each. A family buys 5 tickets and pays with a $50 bill. How much change "
     "do they get?", "10",
     "A family pays with a $50 bill for five tickets at $8 apiece. What change comes back?"),
    ("A train travels 60 miles per hour for 3 hours, then 40 miles per hour for 2 hours. How "
     "far does it go?", "260",
     "For 2 hours a train runs at 40 mph, after 3 hours at 60 mph. Total distance?"),
    ("Mia reads 12 pages a day. How many days does she need for a 180 page book?", "15",
     "A 180 page book, read at 12 pages daily: how many days until Mia finishes?"),
    ("A shop had 1,200 pencils. It sold 450 on Monday and 300 on Tuesday. How many are left?",
     "450",
     "On Tuesday 300 pencils were sold and on Monday 450, from a stock of 1200. What remains?"),
    ("Each box holds 6 eggs. How many boxes are needed for 75 eggs?", "13",
     "To pack 75 eggs, six to a box, what is the fewest number of boxes?"),
    ("Sam saves $15 a week. After 8 weeks he spends $40. How much does he have?", "80",
     "Sam spends $40 once he has saved $15 weekly for eight weeks. How much is left?"),
    ("A rectangle is 14 cm long and 9 cm wide. What is its perimeter?", "46",
     "Find the perimeter of a rectangle whose width is 9 cm and whose length is 14 cm."),
    ("There are 32 students and 4 teachers. Each van seats 9 people. How many vans are "
     "needed?", "4",
     "Nine people fit in a van. With four teachers and thirty-two students, how many vans?"),
    ("A recipe uses 3 cups of flour per cake. How much flour do 7 cakes need?", "21",
     "For seven cakes, at three cups of flour each, how many cups of flour are needed?"),
]  # fmt: skip


#: copies that state a quantity another way (implied by a word, in other units): the
#: reading reads digits and number words, so some of these are caught and some are not
IMPLIED = [
    ("Ben has 2 times as many stamps as Ana, who has 14. How many stamps does Ben have?", "28",
     "Ana has 14 stamps and Ben has twice as many. How many stamps does Ben have?"),
    ("Eggs come in boxes of 12. How many eggs are in 7 boxes?", "84",
     "How many eggs are in seven boxes if a box holds a dozen?"),
    ("A class of 30 splits into teams of 6. How many teams are there?", "5",
     "Thirty pupils form teams of six each. How many teams?"),
    ("A jar holds 40 sweets and Cleo eats half of them. How many are left?", "20",
     "A jar holds 40 sweets; Cleo eats 40 / 2 of them. How many are left?"),
    ("Dev walks for 3 hours at 4 km per hour. How far does he walk?", "12",
     "Dev walks at 4 km per hour for 180 minutes. How far does he walk?"),
    ("A coat costs $80 and is sold at 50% off. What is the price?", "40",
     "An $80 coat is sold at half price. What is the price?"),
    ("Fay buys 2 socks for each of her 9 dolls. How many socks does she buy?", "18",
     "Fay buys a pair of socks for each of her 9 dolls. How many socks does she buy?"),
    ("Gus has 1 apple and buys 5 more. How many apples does he have?", "6",
     "Gus buys 5 apples, and he already had one. How many apples does he have?"),
]  # fmt: skip


def planted(n: int, seed: int = 0) -> dict:
    """Recall on planted copies: train = the originals, test = their copies in other words
    or order plus as many of the generator's held-out problems (controls: a flagged one
    either reorders a train computation, which the generator's key misses, or shares only
    its numbers and answer, a coincidence)."""
    r = random.Random(seed)
    base = list(arithmetic_tasks(n, split="train", levels=(1, 2, 3, 4), seed=seed))
    train = [as_row(t) for t in base]
    test: list[tuple[str, Task]] = []
    for t in base:
        steps = t.meta["steps"]
        variants = _word_variants(t, r) or _expr_variants(steps, r)
        for kind, q in variants:
            test.append((kind, Task(f"{kind}-{len(test)}", q, t.answer)))
    for kind, own in (("own-reworded", OWN), ("implied-quantity", IMPLIED)):
        for i, (q, a, copy) in enumerate(own):
            train.append(Task(f"{kind}-{i}", q, a))
            test.append((kind, Task(f"{kind}-copy-{i}", copy, a)))
    held = list(arithmetic_tasks(len(test), split="test", seed=seed))
    controls = [as_row(t) for t in held]
    found = overlap_matches(train, [t for _, t in test] + controls)
    ctrl = _kinds(found, held, base)
    before = {"statement", "tests"}  # what a key-less row was caught by before this round
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    for kind, t in test:
        hit = found.get(t.id, ())
        c = kinds[kind]
        c["planted"] += 1
        c["caught"] += bool(hit)
        c["caught_before"] += bool(set(hit) & before)
        c.update(f"by_{h}" for h in hit)
    rows = {
        k: {**c, "recall": c["caught"] / c["planted"], "recall_before": c["caught_before"] / c["planted"]}
        for k, c in sorted(kinds.items())
    }  # fmt: skip
    total = sum(c["planted"] for c in kinds.values())
    caught = sum(c["caught"] for c in kinds.values())
    return {
        "kinds": rows,
        "planted": total,
        "caught": caught,
        "recall": caught / total,
        "recall_before": sum(c["caught_before"] for c in kinds.values()) / total,
        "controls": len(controls),
        "controls_flagged": sum(ctrl.values()),
        "controls_flagged_reorderings": ctrl["reorderings"],
        "controls_flagged_coincidences": ctrl["coincidences"],
    }


def terms(steps: list) -> tuple:
    """A generated problem's computation as a multiset of signed terms (a product as its
    sorted factors): two problems with one value are one computation up to order when these
    agree, which the generator's key (``computation_key``) does not read: "a + b + c - d"
    and "c + a + b - d" get two keys. (The generator's products come first, on two numbers.)"""
    out = []
    for a, op, b in steps:
        if op == "*":
            out.append(("+", "*".join(sorted(map(str, (a, b))))))
            continue
        if a is not None:
            out.append(("+", str(a)))
        if b is not None:
            out.append((op, str(b)))
    return tuple(sorted(out))


def _kinds(found: dict, test: list[Task], train: list[Task]) -> Counter[str]:
    """Flagged test problems that reorder a train computation, and those that only share
    its numbers and answer (a coincidence: another computation)."""
    seen = {(terms(t.meta["steps"]), t.answer) for t in train}
    return Counter(
        "reorderings" if (terms(t.meta["steps"]), t.answer) in seen else "coincidences"
        for t in test
        if t.id in found
    )


def generator_splits(n: int) -> dict:
    """The arith test split against its train split, both as rows: what the readings flag
    on data the generator's computation key calls disjoint."""
    train = list(arithmetic_tasks(n, split="train", exhaust=True))
    test = list(arithmetic_tasks(n, split="test", exhaust=True))
    found = overlap_matches([as_row(t) for t in train], [as_row(t) for t in test])
    by: Counter[str] = Counter(h for hit in found.values() for h in hit)
    kinds = _kinds(found, test, train)
    return {
        "train": len(train),
        "test": len(test),
        "flagged": len(found),
        "flag_rate": len(found) / len(test),
        "flagged_by": dict(by),
        "flagged_reorderings_of_a_train_computation": kinds["reorderings"],
        "flagged_coincidences": kinds["coincidences"],
        "coincidence_rate": kinds["coincidences"] / len(test),
        "examples": [t.question for t in test if t.id in found][:5],
    }


def measure(n_siblings: int = 3000, n_planted: int = 400, n_splits: int = 3000) -> dict:
    """The three measures (see the module doc)."""
    from flowzoo.tasks import overlap

    return {
        "command": COMMAND,
        "settings": {
            "ngram": overlap.NGRAM,
            "ngram_coverage": overlap.NGRAM_COVERAGE,
            "min_quantities": overlap.MIN_QUANTITIES,
            "criteria": list(CRITERIA),
            "sizes": {"siblings": n_siblings, "planted": n_planted, "splits": n_splits},
        },
        "template_siblings": siblings(n_siblings),
        "planted": planted(n_planted),
        "generator_splits_as_rows": generator_splits(n_splits),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--record", action="store_true", help=f"write {OUT}")
    args = ap.parse_args(argv)
    res = measure()
    text = json.dumps(res, indent=1, sort_keys=False) + "\n"
    if args.record:
        OUT.write_text(text)
        print(f"wrote {OUT}")
    sib = res["template_siblings"]
    pairs = sum(v["sibling_pairs"] for v in sib.values())
    fp = sum(v["flagged"] for v in sib.values())
    p = res["planted"]
    print(
        f"template siblings: {fp}/{pairs} flagged; planted copies: {p['caught']}/{p['planted']} "
        f"caught (before: {p['recall_before']:.2f}); controls flagged {p['controls_flagged']}/"
        f"{p['controls']}",
        file=sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
