"""Tricky gold/prediction pairs with the verdict a careful grader gives, and a generator of
LaTeX-heavy pairs (shared by tests and benchmarks). Predictions are already-extracted answers."""

import random

TRICKY_PAIRS: list[tuple[str, str, bool]] = [
    # integers, signs, whitespace
    ("42", "42", True),
    ("42", " 42 ", True),
    ("42", "42.0", True),
    ("42", "43", False),
    ("-7", "-7", True),
    ("-7", "7", False),
    ("0", "-0", True),
    ("1000000", "1,000,000", True),
    ("1234", "1,234", True),
    ("12", "1,2", False),
    # decimals and fractions
    ("0.5", "1/2", True),
    ("0.5", "\\frac{1}{2}", True),
    ("\\frac{1}{2}", "\\dfrac{1}{2}", True),
    ("\\frac{1}{2}", "\\tfrac12", True),
    ("\\frac{3}{4}", "0.75", True),
    ("\\frac{2}{3}", "0.67", False),
    ("\\frac{1}{3}", "0.3333", False),
    ("-\\frac{1}{2}", "-0.5", True),
    ("\\frac{4}{6}", "\\frac{2}{3}", True),
    ("3.14", "3.140", True),
    (".5", "0.5", True),
    ("1e3", "1000", True),
    # mixed numbers and their false-positive guard
    ("\\frac{8}{3}", "2 2/3", True),
    ("2", "2 2/3", False),
    ("\\frac{7}{2}", "3\\frac{1}{2}", True),
    # percentages: "%" is a unit, one reading both ways ("25%" is 25 and never 0.25)
    ("50", "50\\%", True),
    ("0.5", "50%", False),
    ("25\\%", "25", True),
    ("25\\%", "30\\%", False),
    ("3", "3%", True),
    ("3", "300%", False),
    ("0.5", "0.5%", True),
    ("25\\%", "0.25", False),
    # hedges and relations the gold does not have earn nothing
    ("3", "3 \\approx 4", False),
    ("3", "3 \\text{ (or maybe 4)}", False),
    ("3", "x \\approx 3", False),
    ("5", "5 or 6", False),
    ("3", "either 3 or 4", False),
    ("5", "between 3 and 5", False),
    ("3", "3 < 4", False),
    ("x > 3", "x > 3", True),
    ("\\text{east}", "East", True),
    # padding cannot hide a second answer
    ("42", "42" + " " * 2100 + "43", False),
    ("42", "42" + " " * 500 + "43", False),
    # exponents far beyond any answer: decided exactly, without building the number
    ("3", "1e99999999", False),
    ("3", "7e-99999999", False),
    ("0", "0e99999999", True),
    ("1e500", "10e499", True),
    ("3000", "3e3", True),
    # units and wrappers
    ("18", "18 dollars", True),
    ("18", "\\$18", True),
    ("30", "30 \\text{ minutes}", True),
    ("5", "\\text{5}", True),
    ("90", "90^\\circ", True),
    ("7", "$7$", True),
    ("7", "\\mathbf{7}", True),
    ("2", "x = 2", True),
    ("2", "x=3", False),
    # radicals, pi, symbolic forms
    ("\\sqrt{2}", "\\sqrt{2}", True),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True),
    ("2\\sqrt{3}", "\\sqrt{12}", True),
    ("\\sqrt{2}", "1.41", False),
    ("2\\pi", "2 \\pi", True),
    ("\\pi", "3.14", False),
    ("\\frac{\\pi}{2}", "\\pi/2", True),
    ("x^2+2x+1", "(x+1)^2", True),
    ("x^2+2x+1", "(x-1)^2", False),
    ("2x", "x+x", True),
    ("3^{2}", "9", True),
    ("2^{10}", "1024", True),
    # sets, tuples, intervals
    ("(1, 2)", "(1,2)", True),
    ("(1, 2)", "(2, 1)", False),
    ("\\{1, 2\\}", "\\{2, 1\\}", True),
    ("[0, 1]", "[0,1]", True),
    ("(0, 1]", "[0, 1]", False),
    ("(-\\infty, 3)", "(-\\infty,3)", True),
    ("1, 2", "2, 1", True),
    # tiny magnitudes: float rounding must not make them equal
    ("\\frac{1}{2004!}", "\\frac{1}{2006!}", False),
    ("10^{-10}", "10^{-12}", False),
    ("10^{-10}", "0.0000000001", True),
    # text answers
    ("yes", "Yes", True),
    ("yes", "no", False),
    ("\\text{(B)}", "(B)", True),
    # garbage, empty, huge, non-ASCII, malformed LaTeX: a verdict, never an exception
    ("5", "", False),
    ("5", "five hundred", False),
    ("5", "\\frac{", False),
    ("5", "}{}{\\\\", False),
    ("5", "日本語", False),
    ("5", "9" * 5000, False),
    ("5", "5" * 300, False),
    ("\\frac{1}{2}", "\\frac{1}{0}", False),
    ("3", "\\sqrt{-9}", False),
]


# ------------------------------------------------------------------ LaTeX-heavy mixes


def latex_golds(r: random.Random | None = None):
    """MATH-style LaTeX answers with equivalent rewrites and near misses: (gold, [right],
    [wrong]). With ``r``, freshly drawn numbers (every call new strings); else a fixed pool."""
    out = []
    for a, b in (
        [(r.randint(1, 40), r.randint(2, 41)) for _ in range(8)]
        if r
        else [(3, 4), (5, 8), (7, 12), (2, 9), (11, 6), (13, 20), (1, 7), (9, 16)]
    ):
        out.append(
            (
                f"\\frac{{{a}}}{{{b}}}",
                [f"\\dfrac{{{a}}}{{{b}}}", f"\\frac{{{2 * a}}}{{{2 * b}}}", f"{a}/{b}"],
                [f"\\frac{{{a + 1}}}{{{b}}}", f"\\frac{{{b}}}{{{a}}}"],
            )
        )
    for k, n in (
        [(r.randint(2, 9), r.choice([2, 3, 5, 6, 7, 10, 11])) for _ in range(6)]
        if r
        else [(2, 2), (3, 5), (2, 3), (5, 2), (4, 7), (6, 3)]
    ):
        out.append(
            (
                f"{k}\\sqrt{{{n}}}",
                [f"\\sqrt{{{k * k * n}}}", f"{k} \\sqrt{{{n}}}", f"\\sqrt{{{n}}} \\cdot {k}"],
                [f"{k + 1}\\sqrt{{{n}}}", f"\\sqrt{{{k * n}}}"],
            )
        )
    for a, b in [(1, 2), (3, 4), (5, 3)]:
        out.append(
            (
                f"\\frac{{\\sqrt{{{a}}}}}{{{b}}}",
                [f"\\frac{{1}}{{{b}}}\\sqrt{{{a}}}", f"\\sqrt{{{a}}}/{b}"],
                [f"\\frac{{\\sqrt{{{a + 1}}}}}{{{b}}}"],
            )
        )
    for k in [r.randint(2, 30) for _ in range(4)] if r else (2, 3, 4, 6):
        out.append(
            (
                f"{k}\\pi",
                [f"{k} \\pi", f"\\pi \\cdot {k}", f"\\frac{{{2 * k}\\pi}}{{2}}"],
                [f"{k + 1}\\pi", f"\\frac{{\\pi}}{{{k}}}"],
            )
        )
    for lo, hi in (
        [(a, a + r.randint(1, 20)) for a in (r.randint(-20, 20) for _ in range(3))]
        if r
        else [(1, 5), (-2, 3), (0, 4)]
    ):
        out.append(
            (
                f"[{lo}, {hi})",
                [f"[{lo},{hi})", f"\\left[{lo}, {hi}\\right)"],
                [f"({lo}, {hi})", f"[{lo}, {hi}]"],
            )
        )
    for xs in [(1, 2, 3), (-1, 4), (2, 5, 7)]:
        s = ", ".join(map(str, xs))
        out.append(
            (
                f"\\{{{s}\\}}",
                [f"\\{{{', '.join(map(str, reversed(xs)))}\\}}"],
                [f"\\{{{', '.join(str(x + 1) for x in xs)}\\}}"],
            )
        )
    for a, b in [(1, 2), (3, -1)]:
        out.append((f"({a}, {b})", [f"({a},{b})"], [f"({b}, {a})"]))
    for c in [r.randint(1, 12) for _ in range(3)] if r else (1, 2, 3):
        out.append(
            (
                f"x^2 + {2 * c}x + {c * c}",
                [f"(x+{c})^2", f"x^{{2}}+{2 * c}x+{c * c}"],
                [f"(x+{c + 1})^2", f"x^2 + {c * c}"],
            )
        )
    return out


def latex_pairs(n: int, seed: int = 0, group: int = 0, distinct: bool = False):
    """``n`` (gold, prediction, expected) pairs. ``distinct``: golds drawn with fresh numbers
    (no string repeats to cache); ``group > 0``: rollout-like groups of ``group`` predictions
    per gold drawn with repeats (a few forms dominate, as G samples of one model do)."""
    r = random.Random(seed)
    golds = latex_golds() if distinct is False else None
    out = []
    while len(out) < n:
        g, right, wrong = r.choice(golds if golds is not None else latex_golds(r))
        forms = [(p, True) for p in right] + [(p, False) for p in wrong] + [(g, True)]
        if group:
            weights = [r.random() ** 3 for _ in forms]
            for p, e in r.choices(forms, weights=weights, k=group):
                out.append((g, p, e))
        else:
            p, e = r.choice(forms)
            out.append((g, p, e))
    return out[:n]


def varied_golds(r: random.Random):
    """The other shapes MATH answers take, with fresh numbers: equations, matrices, numbers
    with thousands separators, decimals of fractions, mixed with the closed forms of
    :func:`latex_golds`. (gold, [right], [wrong])."""
    out = []
    for _ in range(3):
        v, c = r.randint(-30, 30), r.randint(2, 9)
        out.append((f"x = {v}", [f"{v}", f"x={v}"], [f"x = {v + 1}", f"{-v - 1}"]))
        out.append((f"y = {c}x + {v}", [f"y={c}x+{v}", f"y = {v} + {c}x"], [f"y = {c}x - {v + 1}"]))
    for _ in range(3):
        a, b, c, d = (r.randint(-9, 9) for _ in range(4))
        m = f"\\begin{{pmatrix}} {a} & {b} \\\\ {c} & {d} \\end{{pmatrix}}"
        out.append(
            (
                m,
                [f"\\begin{{bmatrix}}{a}&{b}\\\\{c}&{d}\\end{{bmatrix}}",
                 f"\\begin{{pmatrix}} \\frac{{{2 * a}}}{{2}} & {b} \\\\ {c} & {d} \\end{{pmatrix}}"],
                [f"\\begin{{pmatrix}} {a} & {b} \\\\ {d} & {c + 1} \\end{{pmatrix}}"],
            )
        )  # fmt: skip
    for _ in range(3):
        n = r.randint(1000, 999_999)
        out.append(
            (str(n), [f"{n:,}", f"{n:,}".replace(",", "{,}"), f"{n:,}".replace(",", "\\,")],
             [f"{n + 9:,}"])
        )  # fmt: skip
    for a, b in [(1, 4), (3, 8), (1, 5)]:
        out.append((f"\\frac{{{a}}}{{{b}}}", [str(a / b)], [str(a / b + 0.01)]))
    return out + latex_golds(r)[::3]


def varied_pairs(n: int, seed: int = 0):
    """``n`` (gold, prediction, expected) pairs from :func:`varied_golds`, every gold fresh."""
    r = random.Random(seed)
    out = []
    while len(out) < n:
        g, right, wrong = r.choice(varied_golds(r))
        p, e = r.choice([(p, True) for p in right] + [(p, False) for p in wrong] + [(g, True)])
        out.append((g, p, e))
    return out


# ------------------------------------------------ issue 40: what a verifier may not drop

#: (gold, prediction, expected) in the classes of issue 40, each in several variants:
#: spaces between digits, variable names, units, false chains and operators the checker does
#: not evaluate, and the forms that must be judged right exactly (intervals as inequalities,
#: column vectors as tuples, number words, mixed numbers). Not in TRICKY_PAIRS: math-verify
#: disagrees with several of these, and the differential test holds exact verdicts to it.
LOSSLESS_PAIRS: list[tuple[str, str, bool]] = [
    # a space between digits can change the value: never removed before reading
    ("21/2", "2 1/2", False),
    ("\\frac{21}{2}", "2 1/2", False),
    ("10", "1 0", False),
    ("0", "1 0", False),
    ("123", "1 23", False),
    ("1000", "1 000", False),
    ("10", "1\\,0", False),
    ("\\frac{5}{2}", "2 1/2", True),
    ("\\frac{71}{6}", "11 5/6", True),
    ("\\frac{71}{6}", "11\\frac{5}{6}", True),
    ("-\\frac{7}{3}", "-2 1/3", True),
    ("2\\pi", "2 \\pi", True),
    ("12345", "12\\,345", True),
    # a variable's name is part of the answer where both sides name one
    ("y = 2x + 3", "x = 2x + 3", False),
    ("y = 2x + 3", "z = 2x + 3", False),
    ("x = 5", "y = 5", False),
    ("x = 5", "x = 6", False),
    ("5", "x = 2x - 5", False),
    ("y = 2x + 3", "y = 3 + 2x", True),
    ("y = 2x + 3", "2x + 3", True),
    ("x = 5", "5", True),
    ("5", "x = 5", True),
    ("f(x) = 2x + 3", "2x + 3", True),
    # units: compared by name, never dropped; one-letter "units" are variables
    ("5 cm", "5 km", False),
    ("5 \\text{ cm}", "5 \\text{ km}", False),
    ("3 hours", "3 minutes", False),
    ("2m", "2", False),
    ("2 m", "2", False),
    ("2", "2 m", False),
    ("4", "4 g", False),
    ("5 cm", "5cm", True),
    ("5 cm", "5 \\text{centimeters}", True),
    ("5 cm", "5", True),
    ("18", "18 dollars", True),
    ("90", "90^\\circ", True),
    ("90^\\circ", "90 degrees", True),
    # a false statement, or values joined by an operator the checker does not evaluate
    ("3", "4 = 3", False),
    ("3", "3 = 4", False),
    ("7", "2 + 2 = 7", False),
    ("4", "3 \\cap 4", False),
    ("4", "3 \\cup 4", False),
    ("4", "3 \\to 4", False),
    ("4", "3 \\Rightarrow 4", False),
    ("4", "3 \\oplus 4", False),
    ("4", "3 \\quad 4", False),
    ("4", "3 | 4", False),
    ("4", "3 ∩ 4", False),
    ("4", "f(3) = 4", False),
    ("2", "2ab", False),
    ("2", "x = 2, 3 = 2", False),
    ("3", "2 + 1 = 3", True),
    ("\\{1, 2\\} \\cup \\{3\\}", "\\{1, 2\\} \\cup \\{3\\}", True),
    # intervals and inequalities denoting the same set
    ("(2, \\infty)", "x > 2", True),
    ("x > 2", "(2, \\infty)", True),
    ("[2, \\infty)", "x \\ge 2", True),
    ("(-\\infty, 5)", "x < 5", True),
    ("(-\\infty, 5]", "5 \\geq x", True),
    ("[1, 4)", "1 \\le x < 4", True),
    ("[1, 4)", "x \\in [1, 4)", True),
    ("(\\frac{1}{2}, \\infty)", "x > \\frac{1}{2}", True),
    ("(2, \\infty)", "x \\ge 2", False),
    ("(2, \\infty)", "x < 2", False),
    ("(2, \\infty)", "x > 3", False),
    ("[1, 4)", "1 < x < 4", False),
    ("x > 2", "y > 2", False),
    # column vectors and tuples
    ("(1, 2)", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", True),
    ("\\begin{pmatrix} 3 \\\\ -1 \\\\ \\frac{1}{2} \\end{pmatrix}", "(3, -1, 1/2)", True),
    ("(2, 1)", "\\begin{bmatrix}2\\\\1\\end{bmatrix}", True),
    ("(1, 2)", "\\begin{pmatrix}2\\\\1\\end{pmatrix}", False),
    ("(1, 2, 3)", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", False),
    ("(1, 2)", "\\begin{pmatrix}1 & 2\\end{pmatrix}", False),
    # number words
    ("6", "six", True),
    ("21", "twenty-one", True),
    ("21", "Twenty One", True),
    ("305", "three hundred and five", True),
    ("1200", "one thousand two hundred", True),
    ("-2", "minus two", True),
    ("6", "seven", False),
    ("5", "five five", False),
    ("5", "five hundred", False),
    ("20", "twenty thirty", False),
]


# ------------------------------------- red team (math_report.md): classes, in own variants


def _breakers(wrong: str, gold: str) -> list[str]:
    """``wrong`` and ``gold`` joined by something LaTeX cannot read whole: a parser that
    falls back to free text would read ``gold`` out of it."""
    joins = ["(", "[", "{", ")", "]", "\\{", "\\}", "\\left(", "\\left[", "\\lfloor", "\\rceil",
             "\\lceil", "\\langle", "\\binom", "\\sqrt (", "^ (", "_ [", "||", ".", "\\(", "\\]",
             "\\begin{foo}", "\\end{bar}", "\\begin{}", "\\begin{pmatrix}"]  # fmt: skip
    out = [f"{wrong} {j} {gold}" for j in joins]
    out += [
        f"\\begin{{q}}{wrong} \\\\ {gold}\\end{{q}}",
        f"\\begin{{zz}}{wrong} & {gold}\\end{{zz}}",
    ]
    out += [
        f"{gold} }} {wrong}",
        f"{gold} ]",
        f"{{{wrong} [ {gold}}}",
        f"\\frac{{{wrong} ( {gold}}}{{1}}",
    ]
    return out


#: (gold, prediction, expected): each class of the red-team report in variants of its own
REDTEAM_PAIRS: list[tuple[str, str, bool]] = [
    # A: what LaTeX cannot read whole is wrong, never one of its pieces
    *[
        (g, p, False)
        for g, w in [("7", "6"), ("-5", "5"), ("0.125", "0.5"), ("2.5", "3.5")]
        for p in _breakers(w, g)
    ],
    ("y = 7", "y = 6 ( 7", False),
    ("110_2", "111_2 [ 110_2", False),
    *[(g, f"{g} }} 99", False) for g in ("\\frac{5}{6}", "3\\sqrt{2}", "[1, \\infty)", "4x-1")],
    # B: a decimal inside any wrapper is an exact decimal
    ("\\frac{2}{3}", "(0.666667)", False),
    ("\\frac{2}{3}", "{0.666667}", False),
    ("\\frac{2}{3}", "\\left(0.6666667\\right)", False),
    ("\\frac{2}{3}", "[0.666667]", False),
    ("0.25", "(0.2500003)", False),
    ("0.25", "{0.2500003}", False),
    ("0.25", "0.2500003^{1}", False),
    ("0.25", "\\{0.2500003\\}", False),
    ("\\sqrt{2}", "{1.414214}", False),
    ("\\sqrt{2}", "(1.4142136)", False),
    ("3\\pi", "{9.424778}", False),
    ("0.000002", "{0.000001}", False),
    ("0.000002", "\\{0.0000021\\}", False),
    ("0.000002", "{10^{-8}}", False),
    ("0.000002", "{0.0000000}", False),
    ("0.25", "(0.25)", True),
    ("0.25", "{0.250}", True),
    ("\\frac{2}{3}", "{\\frac{2}{3}}", True),
    # C: case, bases, primes, currency, percent and words are part of the answer
    ("\\Theta", "\\theta", False),
    ("\\lambda", "\\Lambda", False),
    ("\\Sigma + 1", "\\sigma + 1", False),
    ("\\frac{M}{3}", "\\frac{m}{3}", False),
    ("3Y", "3y", False),
    ("21", "21_{4}", False),
    ("21_3", "21_4", False),
    ("21_3", "21_{10}", False),
    ("101_2", "101", False),
    ("101_2", "101_{2}", True),
    ("9", "9'", False),
    ("2x", "2x'", False),
    ("\\$7", "7 \\text{ pence}", False),
    ("7 \\text{ euros}", "\\$7", False),
    ("\\$7", "7 \\text{ dollars}", True),
    ("9 \\text{ kg}", "9\\%", False),
    ("9\\%", "9 \\text{ kg}", False),
    ("\\text{odd}", "\\text{dod}", False),
    ("\\text{up}", "\\text{pu}", False),
    ("\\text{Bob}", "\\text{obB}", False),
    ("\\text{left}", "\\text{felt}", False),
    ("\\text{Tuesday}", "\\frac{Tuesdayz}{z}", False),
    ("\\text{odd}", "\\text{Odd}", True),
    ("\\Theta", "\\Theta", True),
    # D: a pair is not a set or an interval; e and i are constants
    ("(5, 6)", "\\{5, 6\\}", False),
    ("\\{5, 6\\}", "(5, 6)", False),
    ("(5, 6)", "5 < t < 6", False),
    ("(5, 6)", "t \\in (5, 6)", False),
    ("(3, \\infty)", "e > 3", False),
    ("(-\\infty, 1)", "i < 1", False),
    ("(3, \\infty)", "t > 3", True),
    # E: one reading of a percent sign, both ways
    ("0.4", "40\\%", False),
    ("40\\%", "0.4", False),
    ("40", "40\\%", True),
    ("40\\%", "40", True),
    ("40\\%", "40\\%", True),
    # false rejects: a unit word asked for, spacing, other minus signs, a trailing comma
    ("9", "9 \\text{ marbles}", True),
    ("9", "9\\text{ pages}", True),
    ("9", "9 \\text{ (oranges)}", True),
    ("9", "9~\\text{kg}", True),
    ("9", "9\\ \\text{boxes}", True),
    ("-8", "\u22128", True),
    ("9", "9 \\qquad", True),
    ("9", "\\scriptstyle 9", True),
    ("9", "9,", True),
    ("y = -4", "-4 = y", True),
    ("9 \\text{ kg}", "9 \\text{ marbles}", False),
    ("9", "9 \\quad 8", False),
]


# ------------------------------- issue 64: words that change a value, free-form answers

#: (word, multiplier) in the case, plural and spelling variants a completion writes
MULTIPLIER_WORDS = [("thousand", 1000), ("Thousand", 1000), ("THOUSAND", 1000), ("hundred", 100),
                    ("hundreds", 100), ("million", 10**6), ("millions", 10**6), ("billion", 10**9),
                    ("dozen", 12), ("dozens", 12), ("score", 20), ("lakh", 10**5),
                    ("crore", 10**7), ("trillion", 10**12), ("quintillion", 10**18)]  # fmt: skip
FRACTION_WORDS = {2: "halves", 3: "thirds", 4: "quarters", 5: "fifths", 6: "sixths", 8: "eighths",
                  10: "tenths", 30: "thirtieths", 100: "hundredths"}  # fmt: skip


def value_word_golds(r: random.Random) -> list[tuple[str, list[str], list[str]]]:
    """(gold, [right], [wrong]) with fresh numbers for issue 64's class: multipliers, powers,
    fractions, percent and operator words after a number, in case, plural, hyphen, LaTeX-text
    and Unicode variants. A wrong form is never the bare number's answer (``3 thousand`` is not
    3); a right one is the value the words give (``3 thousand`` is 3000); unit words, percent (a
    unit the question asked for) and area words still answer the bare number."""
    n, e, p = r.randint(2, 60), r.randint(2, 6), r.randint(2, 9)
    a, b = r.randint(2, 40), r.randint(2, 40)
    w, m = r.choice(MULTIPLIER_WORDS)
    d = r.choice(sorted(FRACTION_WORDS))
    dw = FRACTION_WORDS[d]
    return [
        (str(n), [f"{n}"], [f"{n} {w}", f"{n}-{w}", f"{n} \\text{{ {w}}}", f"{n}\\text{{{w}}}",
                            f"\\${n} {w}", f"{n} {w} dollars"]),
        (str(n * m), [f"{n} {w}", f"{n} \\text{{ {w}}}", f"{n}-{w}", f"{n} {w} apples"],
         [f"{n}", f"{n + 1} {w}"]),
        (str(p), [f"{p}"], [f"{p} squared", f"{p} cubed", f"{p} to the power of {e}", f"{p}²",
                            f"{p} raised to the {e}th power", f"{p} Squared", f"{p + 1} factorial"]),
        (str(p**e), [f"{p} to the power of {e}", f"{p} raised to the {e}th power", f"{p}^{{{e}}}"],
         [f"{p} to the power of {e + 1}", f"{p}", f"{p} to the power of"]),
        (str(p * p), [f"{p} squared", f"{p}²", f"{p} Squared"], [f"{p}", f"{p} cubed"]),
        (str(n), [f"{n}"], [f"{n} and a half", f"{n} {dw}", f"{n}½", f"{n} and 1/2",
                            f"{n}-and-a-half", f"{n} percent of 50", f"half of {n}"]),
        (f"\\frac{{{2 * n + 1}}}{{2}}", [f"{n} and a half", f"{n}½", f"{n} and 1/2",
                                         f"{n}-and-a-half"], [f"{n}", f"{n} halves"]),
        (f"\\frac{{{n}}}{{{d}}}", [f"{n} {dw}", f"{n}-{dw}"], [f"{n}", f"{n + 1} {dw}"]),
        (str(a + b), [f"{a} plus {b}", f"{a} Plus {b}"], [f"{a}", f"{b}", f"{a} minus {b}"]),
        (str(a), [f"{a}"], [f"{a} plus", f"{a} times", f"{a} divided by", f"{a} over",
                            f"{a} minus", f"{a} plus {b}", f"{a} times {b}", f"{a} over {b}",
                            f"{a} times {b} times 2"]),
        (str(n), [f"{n}"], [f"{n} fold", f"{n}-fold", f"{n} threefold", f"{n} gazillion",
                            f"{n} grand", f"about {n}", f"{n} approximately",
                            f"{n} per mille", f"{n} ppm", f"{n} square", f"{n} root 2"]),
        (str(n), [f"{n} percent", f"{n} per cent", f"{n} Percent", f"{n}\\%"], [f"{n + 1} percent"]),
        (f"{n} \\text{{ cm}}", [f"{n} cm", f"{n}"], [f"{n} thousand cm", f"{n} km"]),
        (str(n), [f"{n} apples", f"{n} \\text{{ square units}}", f"{n} meters squared",
                  f"{n} seconds", f"{n}\\text{{ eggs}}"], [f"{n + 1} apples"]),
        (str(n * 6), [f"half of {n * 12}", f"half a dozen times {n}", f"{n} half dozens"],
         [f"half of {n}", f"{n * 12}"]),
    ]  # fmt: skip


def freeform_golds(r: random.Random) -> list[tuple[str, list[str], list[str]]]:
    """(gold, [right], [wrong]) for answers written as a completion writes them: GSM8K's
    ``#### 18``, markdown bold, an answer boxed twice (nested, or two boxes with one answer),
    a mixed number written plain or with ``\\frac``; the wrong ones are the hedges these
    wrappers could hide (two answers boxed or bold, an unclosed box, another number)."""
    n = r.randint(2, 999)
    b = r.randint(2, 9)
    a, w = r.randint(1, b - 1), r.randint(1, 9)
    mixed = f"\\frac{{{w * b + a}}}{{{b}}}"
    return [
        (str(n), [f"#### {n}", f"**{n}**", f"The answer is **{n}**.", f"__{n}__",
                  f"\\boxed{{\\boxed{{{n}}}}}", f"\\boxed{{{n}}} \\boxed{{{n}}}",
                  f"The final answer is $\\boxed{{{n}}}$.", f"Answer: {n}", f"**\\boxed{{{n}}}**"],
         [f"#### {n + 1}", f"**{n}** or **{n + 1}**", f"\\boxed{{{n}}} \\boxed{{{n + 1}}}",
          f"\\boxed{{\\boxed{{{n + 1}}}}}", f"#### {n} or {n + 1}", f"\\boxed{{{n}",
          f"\\boxed{{{n} \\boxed{{{n + 1}}}}}", f"**{n + 1}**"]),
        (mixed, [f"{w} {a}/{b}", f"{w}\\frac{{{a}}}{{{b}}}", f"**{w} {a}/{b}**",
                 f"#### {w} {a}/{b}", f"\\boxed{{{w}\\frac{{{a}}}{{{b}}}}}"],
         [f"{w}{a}/{b}", f"{w}", f"{a}/{b}", f"{w + 1} {a}/{b}"]),
    ]  # fmt: skip


def golds_pairs(make, n: int, seed: int = 0) -> list[tuple[str, str, bool]]:
    """``n`` (gold, prediction, expected) pairs from a ``make(r)`` of (gold, [right],
    [wrong]) lists, every gold with fresh numbers, half right where both kinds exist."""
    r = random.Random(seed)
    out: list[tuple[str, str, bool]] = []
    while len(out) < n:
        g, right, wrong = r.choice(make(r))
        forms = right if (r.random() < 0.5 or not wrong) and right else wrong
        out.append((g, r.choice(forms), forms is right))
    return out
