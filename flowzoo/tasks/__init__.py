"""What is solved and how it is scored. Imports no environment code and no torch."""

from flowzoo.tasks.base import Task, TaskFamily, TaskSet, Verdict

__all__ = ["Task", "TaskFamily", "TaskSet", "Verdict", "get_family"]


def get_family(name: str, **options) -> TaskFamily:
    """The task family called ``name`` (``math`` or ``code``)."""
    if name == "math":
        from flowzoo.tasks.math import MathFamily

        if options:
            raise ValueError(f"math family takes no options; got {sorted(options)}")
        return MathFamily()
    if name == "code":
        from flowzoo.tasks.code import CodeFamily

        return CodeFamily(**options)
    raise ValueError(f"unknown task family {name!r}; valid: math, code")
