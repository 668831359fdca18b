"""Reading a run directory's records (torch-free: the report and the trainer share it)."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(path: Path) -> list[dict]:
    """Every well-formed line of a ``metrics.jsonl`` (a line torn by a kill is skipped, so a
    killed run can still be resumed and reported)."""
    if not path.is_file():
        return []
    try:  # a byte torn into something not UTF-8 spoils its line only
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(row, dict) and "step" in row:
            rows.append(row)
    return rows
