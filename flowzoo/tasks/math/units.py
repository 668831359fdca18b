"""Words after a number: which are units (compared by name, never converted), which are the
things a question counts, and which are prose.

Why: a unit on the prediction's side only is the one the question asked for (GSM8K golds are
bare numbers: ``14 eggs`` answers 14), so a word taken for a unit is dropped from the value.
Any word dropped that way could be one that changes the value in a language or spelling no
list holds (``3 septillion``, ``3 tausend``), so a word is dropped only when it is known: a
unit or counted noun of the lexicon here, or a word of the problem statement (``3 marbles``
where the problem counts marbles). Anything else is refused, never silently dropped.
"""

from __future__ import annotations

import functools
import re

from flowzoo.tasks.math import words as value_words

#: unit words by canonical name. No one-letter unit: ``2m`` may be ``2 * m``. Units are
#: compared by name (``5 cm`` is not ``5 km``), never converted
_UNIT_WORDS = {
    "dollar": "dollars dollar usd",
    "cent": "cents cent",
    "unit": "units unit",
    "meter": "meters meter metres metre",
    "centimeter": "cm centimeters centimeter centimetres centimetre",
    "millimeter": "mm millimeters millimeter millimetres millimetre",
    "kilometer": "km kilometers kilometer kilometres kilometre",
    "kilogram": "kg kilograms kilogram",
    "gram": "grams gram",
    "liter": "liters liter litres litre",
    "pound": "pounds pound lbs lb",
    "hour": "hours hour hrs hr",
    "minute": "minutes minute mins min",
    "second": "seconds second secs",
    "day": "days day",
    "week": "weeks week",
    "month": "months month",
    "year": "years year",
    "mile": "miles mile",
    "foot": "feet foot ft",
    "inch": "inches inch",
    "apple": "apples apple",
    "person": "people persons person",
    "point": "points point",
    "degree": "degrees degree",
    "mph": "mph",
}
UNIT_OF = {w: name for name, words in _UNIT_WORDS.items() for w in words.split()}
UNITS = "|".join(sorted(UNIT_OF, key=len, reverse=True))
_UNIT_RE = re.compile(
    rf"^(.*?(?:[\d}}%]\s*|[a-zA-Z]\s+))((?:square\s+|sq\.?\s+|cubic\s+)?(?:{UNITS})"
    rf"(?:\s+per\s+(?:{UNITS}))?)\s*\.?$",
    re.IGNORECASE,
)
#: a word the question may have asked for after a number (``14 \\text{ eggs}``): three or more
#: letters after a space, not a function name (``2 m`` and ``2ab`` stay variables)
_WORD_UNIT_RE = re.compile(r"^(.*?[\d}%])\s+\(?([a-zA-Z]{3,}(?:\s+[a-zA-Z]{3,}){0,2})\)?\s*\.?$")
_NOT_UNITS = frozenset(
    "sqrt frac sin cos tan cot sec csc log exp max gcd lcm mod inf infty".split()
)


def canonical(word: str) -> str:
    """A unit word's name: the lexicon's for a unit (``km`` -> ``kilometer``), else the
    lowercase word without trailing ``s`` (``eggs`` -> ``egg``)."""
    w = word.lower()
    if w not in UNIT_OF and w.endswith("s") and w[:-1] in UNIT_OF:
        return UNIT_OF[w[:-1]]  # a plural abbreviation: "kms", "hrs"
    return UNIT_OF.get(w, w.rstrip("s"))


def split_unit(s: str) -> tuple[str, str]:
    """(value, canonical unit) of a normalised answer: ``5 cm`` -> ``("5", "centimeter")``,
    ``2 miles per hour`` -> ``("2", "mile per hour")``, ``14 eggs`` -> ``("14", "egg")`` (a
    word not in the list is named by :func:`canonical`); ``(s, "")`` without one."""
    m = _UNIT_RE.match(s)
    if m is None or not m.group(1).strip():
        w = _WORD_UNIT_RE.match(s)
        words = w.group(2).lower().split() if w else []
        if w is None or not words or not w.group(1).strip() or _NOT_UNITS & set(words):
            return s, ""
        return w.group(1).strip(), " ".join(canonical(x) for x in words)
    words = re.split(r"\s+", m.group(2).lower().replace("sq.", "square").replace("sq ", "square "))
    return m.group(1).strip(), " ".join(UNIT_OF.get(w, w) for w in words)


#: what a word problem counts or measures, beside the units above (both forms where the
#: plural is not the singular and an ``s``): a word here after a number is the thing counted
_COUNTED = """
cups cup tablespoons teaspoons ounces ounce oz gallons quarts pints tons tonnes milliliters ml
yards acres hectares calories servings slices pieces scoops bottles cans jars bags boxes box
packs packages packets cartons crates baskets buckets trays batches batch rolls sheets pages
books chapters words letters stamps cards tickets coins bills nickels dimes pennies penny euros
rupees yen items objects things toys dolls cars trucks bikes bicycles wheels tires seats rooms
floors houses homes buildings windows doors tables chairs beds desks shelves shelf students
children child kids boys girls men man women woman adults teachers friends players teams
members workers employees customers guests visitors passengers animals dogs cats birds chickens
cows pigs sheep horses goats ducks fish fishes eggs legs eyes bananas pears peaches peach grapes
cherries cherry strawberries strawberry berries berry lemons limes melons watermelons
pineapples mangoes mango tomatoes tomato potatoes potato carrots vegetables fruits flowers roses
trees plants seeds leaves leaf cookies cupcakes cakes pies muffins candies candy chocolates
sweets donuts doughnuts sandwiches sandwich pizzas burgers meals drinks glasses glass plates
bowls marbles balls balloons beads buttons pencils pens crayons markers erasers notebooks
bracelets necklaces rings shirts pants socks shoes hats dresses dress jackets songs games movies
videos photos pictures paintings problems questions goals votes steps laps rounds blocks bricks
tiles triangles sides edges faces vertices vertex angles lines digits integers ways trips
visits stickers shells stones rocks nuts bolts screws nails gifts presents envelopes emails
messages posts followers boats ships planes trains buses bus rides pets puppies puppy kittens
rabbits frogs bees ants spiders insects butterflies wings tails hands fingers toes teeth tooth
feathers petals loaves loaf bagels crackers chips fries nuggets mice mouse geese goose lollipops
oranges pizza slices squares cubes dots stars gems jewels sticks straws cans bars packs gumballs
""".split()
#: words that may follow a unit word in a unit: areas, volumes, rates
_UNIT_GLUE = frozenset({"square", "cubic", "squared", "cubed", "sq", "per"})
#: every canonical name a dropped unit word may have without the problem saying it
KNOWN = frozenset(_UNIT_WORDS) | _UNIT_GLUE | frozenset(canonical(w) for w in _COUNTED)
#: words that follow a number in a sentence and are never its unit (``\\boxed{18} is the
#: answer``, ``7 apples in total``): the end of what belongs to the value
PROSE = frozenset(
    """is are was were be been being will would can could should shall must may might do does
    did has have had which who whom whose that this these those it its as because since so thus
    hence therefore then than and or but nor if when where while for in on at to from with
    without by of about after before into onto over under the an we you he she they there here
    now not no yes also just only exactly total altogether overall each every all both either
    neither left remaining more less fewer respectively instead again too as well which means
    meaning using given i a ok okay done yay hmm right correct indeed final answer note check
    checked verified please thanks so""".split()
)


@functools.lru_cache(maxsize=4096)
def problem_words(question: str) -> frozenset[str]:
    """The canonical names of the words of a problem statement (the things it counts): a
    word after a number that the problem uses is the unit the question asked for."""
    return frozenset(canonical(w) for w in re.findall(r"[a-z]{2,}", question.lower()))


def known_unit(unit: str, question: str | None = None) -> bool:
    """Whether a (canonical) unit on the prediction's side only may be dropped: every word a
    unit or counted noun of the lexicon, or a word of ``question`` that is neither prose nor a
    value word."""
    vocab = problem_words(question) if question else frozenset()
    return all(
        w in KNOWN or (w in vocab and w not in PROSE and not value_words.is_value_word(w))
        for w in unit.split()
    )
