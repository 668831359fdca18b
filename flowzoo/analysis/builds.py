"""Which build of a model a record measured: one digest over its weights files.

Why its own module, torch-free: a run records the sha256 of each weights file it started
from (``summary.json``'s ``base_model``), an evaluation the same of the model it scored, and
the report keeps runs of different builds apart (a recipe rebuilt under one name is another
model; pooled as seeds it would read as noise). Records older than the digest have none:
their build is unknown, never guessed.
"""

from __future__ import annotations

import hashlib
from typing import Any

#: how many hex digits of a build's digest name it in a report or a file name
SHORT = 12


def build_digest(identity: Any) -> str | None:
    """One sha256 over a weights identity's files (``{"sha256": {name: hex}}``, as
    :func:`flowzoo.agents.runs.weights.weights_identity` records it): each file's name
    and digest, in name order. None when the record holds no per-file digests (an older
    record, or weights past the hashing limit, recorded by size only)."""
    files = identity.get("sha256") if isinstance(identity, dict) else None
    if not isinstance(files, dict) or not files:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(f"{name}\0{files[name]}\n".encode())
    return h.hexdigest()


def run_build(summary: Any) -> str | None:
    """The build digest a run's ``summary.json`` names: its ``weights_digest``, else one
    computed from its ``base_model`` record (the build it *started* from), else None."""
    if not isinstance(summary, dict):
        return None
    got = summary.get("weights_digest")
    if isinstance(got, str) and got:
        return got
    return build_digest(summary.get("base_model"))


def build_label(digest: str | None) -> str:
    """A build as a report names it: ``build 1a2b3c4d5e6f`` (``build unknown`` when the
    record has no digest)."""
    return f"build {digest[:SHORT]}" if digest else "build unknown"
