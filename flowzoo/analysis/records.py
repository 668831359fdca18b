"""Reading a run directory's records (torch-free: the report and the trainer share it)."""

from __future__ import annotations

import json
from pathlib import Path

from flowzoo.config import TrainConfig

#: every setting's default, from the one definition of a run's settings: a run recorded
#: before a setting existed ran with what is now its default
DEFAULTS = dict(vars(TrainConfig()))


def read_metrics(path: Path) -> list[dict]:
    """Every well-formed line of a ``metrics.jsonl`` (a line torn by a kill is skipped, so a
    killed run can still be resumed and reported)."""
    if not path.is_file():
        return []
    try:
        return parse_metrics(path.read_bytes())
    except OSError:
        return []


def parse_metrics(data: bytes) -> list[dict]:
    """The well-formed step lines of a ``metrics.jsonl``'s bytes (a byte torn into something
    not UTF-8 spoils its line only)."""
    text = data.decode("utf-8", errors="replace")
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(row, dict) and "step" in row:
            rows.append(row)
    return rows
