"""Tolerant parsers for the structured parts of role outputs: verdicts, plans, choices.

Each returns None when nothing usable is found; the workflow then applies its documented
fallback and flags it. Case, whitespace, markdown emphasis and missing tags are tolerated.
"""

from __future__ import annotations

import re

from flowzoo.tasks.math.extract import MAX_SCAN_CHARS, extract_answer, find_boxed

ACCEPT_WORDS = ("accept", "accepted", "correct", "approve", "approved", "pass", "lgtm")
REVISE_WORDS = ("revise", "reject", "rejected", "incorrect", "wrong", "fail", "retry")
_VERDICT_TAG_RE = re.compile(r"verdict\s*[:=\-]?\s*[*_`\"']*\s*([a-z]+)", re.IGNORECASE)
_WORD_RE = re.compile(r"\b(" + "|".join(ACCEPT_WORDS + REVISE_WORDS) + r")\b", re.IGNORECASE)
_FEEDBACK_RE = re.compile(r"feedback\s*[:=\-]\s*(.*)", re.IGNORECASE | re.DOTALL)


def parse_verdict(text: str) -> str | None:
    """``"accept"`` / ``"revise"`` from an evaluator's reply, or None."""
    head = text[:MAX_SCAN_CHARS]
    m = _VERDICT_TAG_RE.search(head)
    if m:
        w = m.group(1).lower()
        if w in ACCEPT_WORDS:
            return "accept"
        if w in REVISE_WORDS:
            return "revise"
    m = _WORD_RE.search(head)
    if m:
        return "accept" if m.group(1).lower() in ACCEPT_WORDS else "revise"
    return None


def parse_feedback(text: str, limit: int = 600) -> str:
    """The feedback part of an evaluator's reply (after ``Feedback:``, else all of it)."""
    m = _FEEDBACK_RE.search(text[:MAX_SCAN_CHARS])
    fb = m.group(1) if m else _VERDICT_TAG_RE.sub("", text[:MAX_SCAN_CHARS])
    fb = fb.strip()
    return fb[:limit]


_ITEM_RE = re.compile(
    r"^\s*(?:[*_#]*\s*)?(?:(?:strategy|approach|step|sub-?question|question|task|plan|item|method)"
    r"\s*#?\s*)?(\d{1,2})\s*[:.)\-]\s*[*_]*\s*(.+?)\s*$",
    re.IGNORECASE,
)
_BULLET_RE = re.compile(r"^\s*[-*•]\s+(.+?)\s*$")


def parse_plan(text: str, max_items: int) -> list[str] | None:
    """Up to ``max_items`` plan items: ``Strategy 1: ...``, ``1. ...``, ``- ...`` lines.

    Duplicate items are dropped (case-insensitively); None when no item is found."""
    items: list[str] = []
    seen: set[str] = set()
    for line in text[:MAX_SCAN_CHARS].splitlines():
        m = _ITEM_RE.match(line) or _BULLET_RE.match(line)
        if not m:
            continue
        item = m.group(m.lastindex).strip()
        key = item.lower()
        if len(item) < 2 or key in seen:
            continue
        seen.add(key)
        items.append(item[:400])
        if len(items) >= max_items:
            break
    return items or None


def parse_choice(text: str, n: int) -> int | None:
    """A 1-based candidate number in ``1..n`` (``\\boxed{2}``, ``Candidate 2``, ``2``) as a
    0-based index, or None."""
    tail = text[-MAX_SCAN_CHARS:]
    boxed = find_boxed(tail)
    if boxed:
        ans: str | None = boxed[-1]
    else:
        named = _CANDIDATE_RE.findall(tail)
        ans = named[-1] if named else extract_answer(tail)
    if ans is None:
        return None
    m = re.search(r"-?\d+", ans)
    # a number longer than any candidate count is no candidate (and int() of thousands of
    # digits raises): refused as unparsed, never a crash
    if not m or len(m.group(0).lstrip("-0")) > len(str(n)):
        return None
    k = int(m.group(0))
    return k - 1 if 1 <= k <= n else None


_CANDIDATE_RE = re.compile(r"candidate\s*#?\s*(\d+)", re.IGNORECASE)
