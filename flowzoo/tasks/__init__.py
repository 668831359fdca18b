"""What is solved and how it is scored. Imports no environment code and no torch."""

from flowzoo.tasks.base import Task, TaskFamily, TaskSet, Verdict
from flowzoo.tasks.families import FamilySpec, family_spec, get_family, register_family

__all__ = [
    "FamilySpec",
    "Task",
    "TaskFamily",
    "TaskSet",
    "Verdict",
    "family_spec",
    "get_family",
    "register_family",
]
