"""What the two code generators (function tasks in ``data.py``, stdin/stdout tasks in
``stdio_data.py``) share: the word vocabulary their templates draw from and the draw rule (a
task keyed by template x constants whose tests tell a constant program apart). Its own module
so that both generators import it and neither imports the other."""

from __future__ import annotations

import ast
import random
from collections.abc import Callable

from flowzoo.tasks.base import Task, stable_hash

WORDS = ["apple", "banana", "kiwi", "plum", "fig", "cherry", "lime", "melon", "pear", "grape"]
#: every letter the words hold: a counted letter is in some word, so a count is not always 0
LETTERS = "".join(sorted(set("".join(WORDS))))


def template_name(template: Callable) -> str:
    """A template's name (``_t_add`` -> ``add``): with its constants, what a task solves."""
    return template.__name__.removeprefix("_t_")


def function_task(
    prefix: str, level: int, question: str, entry: str, param: str, solution: str, args, **meta
) -> Task:
    """A generated function task: ``question``, the canonical ``solution`` (our own trusted
    code, run here to compute what each argument expression's assert expects), one assert
    per distinct argument; ``meta`` adds to the task's meta."""
    env: dict = {}
    exec(compile(solution, "<canonical>", "exec"), env)  # our own trusted reference code
    tests = [
        f"assert {entry}({a}) == {env[entry](ast.literal_eval(a))!r}" for a in dict.fromkeys(args)
    ]
    signature = f"def {entry}({param}):"
    info = {"entry_point": entry, "tests": tests, "setup": "", "prompt_code": signature + "\n"}
    tid = f"{prefix}-{level}-{stable_hash(question) % 10**10:010d}"
    return Task(tid, question, solution, "code", {**info, "level": level, **meta})


def expected_outputs(task: Task) -> list[str]:
    """What a generated task's tests expect, one entry per case (``assert f(a) == E``'s E, a
    stdin/stdout case's output)."""
    if task.meta.get("format") == "stdio":
        return [out for _, out in task.meta["tests"]]
    return [t.rsplit(" == ", 1)[1] for t in task.meta["tests"]]


def strong_draw(
    r: random.Random, templates, make: Callable[[Callable], Task], ood: frozenset[str]
) -> Task:
    """A keyed task from one of ``templates`` whose tests expect at least two different
    outputs: a program printing one constant must not pass them. Templates centre their
    inputs on their constants, so this redraws rarely (measured in the tests)."""
    while True:
        tpl = r.choice(templates)
        task = make(tpl)
        if len(set(expected_outputs(task))) >= 2:
            return keyed(task, template_name(tpl), ood)


def keyed(task: Task, template: str, ood_templates: frozenset[str]) -> Task:
    """``task`` with its canonical key (template x constants: the canonical solution fixes
    both) and, for a held-out template, the ``ood`` mark."""
    task.meta["key"] = f"{template}:{stable_hash(task.answer):016x}"
    task.meta["template"] = template
    if template in ood_templates:
        task.meta["ood"] = True
    return task
