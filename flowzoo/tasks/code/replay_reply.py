"""A replay's reply, read on the host: the one line the replay's sandbox run writes
(``replay_worker.main``), checked as untrusted data. The row's test code ran there, so the
reply's size, values and nesting are bounded before any of it is built, and it is never
unpickled or executed. Kept apart from :mod:`replay_worker`, which is shipped into the run:
none of this runs there.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from typing import NamedTuple

from flowzoo.tasks.code.replay_worker import CaseResult, call_key
from flowzoo.tasks.code.wire import MAX_DEPTH, shortened

#: what a reply may hold once decompressed, checked before any of it is built: bytes and
#: JSON values, a base plus so much per character of the row's test source (its literal
#: arguments are what make an honest reply large; a tuple is ``{"T": [...]}`` on the wire).
#: Honest replies measured: at most 4.6 KB and 1,084 values (HumanEval's 164 rows, with the
#: canonical answers, every round) and 0.45 KB, 116 values (generated ``funcs`` tasks), so
#: the bases are over 200x and 90x that. A 16 MB reply of nested lists (a few KB on the wire)
#: once took the trainer from 42 MB to 964 MB; now it is refused (``judge_limit``).
REPLY_BASE_BYTES = 1 << 20
#: (a character outside the BMP is 12 bytes JSON-escaped, so 8 refused honest rows of them)
REPLY_BYTES_PER_CHAR = 16
REPLY_BASE_VALUES = 100_000
REPLY_VALUES_PER_CHAR = 1
#: the deepest nesting of a reply: its own three levels, a call's argument list, and wire
#: values as deep as ``wire.encode`` sends them (a tuple or set is two JSON levels, a dict
#: three: ``{"D": [[key, value], ...]}``; two refused honest rows of dicts 45 deep)
MAX_REPLY_DEPTH = 3 * (MAX_DEPTH + 2) + 6
#: what one JSON value costs the judge at most once built (a list, a one-key dict: ~64 bytes
#: measured), for the first-pass cache's byte budget
REPLY_VALUE_BYTES = 64
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


class ReplyTooBig(ValueError):
    """A replay's reply past the judge's caps (decompressed bytes, values or nesting)."""


class Reply(NamedTuple):
    """A replay's reply, checked: its cases, the calls to ask, their keys, and ``cost``, a
    bound on the bytes it holds built (what the first-pass cache counts)."""

    cases: list[CaseResult | None]
    calls: list[list]
    keys: list[str]
    cost: int


def reply_limits(source: tuple, sent: int = 0) -> tuple[int, int]:
    """(bytes, JSON values) a reply to a replay of ``source`` (entry point, prompt code,
    setup, tests) may hold once decompressed: a wide margin over what an honest reply needs.
    ``sent``: the characters of the replay request the judge sent (``replay.json``: the row's
    source and compiled spec again, and the answers it knows, which a nested call,
    ``f(f(1))``, sends back out as an argument)."""
    chars = len(source[1]) + len(source[2]) + sum(len(t) for t in source[3]) if source else 0
    chars += sent
    return (
        REPLY_BASE_BYTES + REPLY_BYTES_PER_CHAR * chars,
        REPLY_BASE_VALUES + REPLY_VALUES_PER_CHAR * chars,
    )


def _inflate(stdout: str, max_bytes: int) -> bytes:
    """The reply's JSON bytes, inflated no further than ``max_bytes`` (:class:`ReplyTooBig`)."""
    z = zlib.decompressobj()
    data = z.decompress(base64.b64decode(stdout.strip(), validate=True), max_bytes)
    if z.unconsumed_tail or (len(data) == max_bytes and z.decompress(b"", 1)):
        raise ReplyTooBig(f"the reply inflates past {max_bytes:,} bytes")
    if not z.eof:
        raise ValueError("a truncated reply")
    return data


def _values(data: bytes, max_values: int) -> int:
    """How many JSON values ``data`` builds at most, counted before it is built: with strings
    blanked, every value is the first of the document or follows ``[``, ``{``, ``,`` or
    ``:``. Past ``max_values`` or :data:`MAX_REPLY_DEPTH` levels: :class:`ReplyTooBig`."""
    if not data.isascii():  # the worker writes ASCII JSON: anything else is not its reply
        raise ValueError("a reply that is not ASCII")
    flat = re.sub(rb'"[^"]*"', b'""', re.sub(rb"\\.", b"", data, flags=re.S))
    n = 1 + sum(flat.count(c) for c in (b"[", b"{", b",", b":"))
    if n > max_values:
        raise ReplyTooBig(f"the reply holds over {max_values:,} values")
    nest = flat.translate(_BRACKETS, _NOT_BRACKETS)
    for _ in range(MAX_REPLY_DEPTH):  # one level of the innermost pairs per pass
        if not nest:
            return n
        shorter = nest.replace(b"[]", b"")
        if len(shorter) == len(nest):
            raise ValueError("unbalanced brackets")
        nest = shorter
    if nest:
        raise ReplyTooBig(f"the reply nests deeper than {MAX_REPLY_DEPTH} levels")
    return n


def read_reply(
    stdout: str, n_cases: int, max_calls: int, source: tuple = (), sent: int = 0
) -> Reply | None:
    """A replay run's reply (cases, calls, call keys, cost), checked as untrusted data (the
    row's code ran there): None when it is not a well-formed reply, :class:`ReplyTooBig` when
    it is past the caps for ``source`` (:func:`reply_limits`, :data:`MAX_REPLY_DEPTH`), found
    while inflating and before parsing, so an oversized reply is never built."""
    max_bytes, max_values = reply_limits(source, sent)
    try:
        data = _inflate(stdout, max_bytes)
        n_values = _values(data, max_values)
        reply = json.loads(data.decode("ascii"))
        if type(reply) is not dict or set(reply) != {"cases", "calls"}:
            return None
        cases, calls = reply["cases"], reply["calls"]
        if type(cases) is not list or len(cases) != n_cases:
            return None
        if type(calls) is not list or len(calls) > max_calls:
            return None
        out: list[CaseResult | None] = []
        for c in cases:
            if c is None:
                out.append(None)
                continue
            if type(c) is not list or len(c) != 3 or type(c[0]) is not bool:
                return None
            if any(v is not None and type(v) is not str for v in c[1:]):
                return None
            out.append(CaseResult(c[0], *(None if v is None else shortened(v, 200) for v in c[1:])))
        for call in calls:
            if type(call) is not list or len(call) != 3 or type(call[0]) is not str:
                return None
            if type(call[1]) is not list or type(call[2]) is not dict:
                return None
        # the keys the replay looked answers up by (``_Session.call``), computed here
        keys = [call_key(c) for c in calls]
        # built: the values, their strings (4 bytes a character at most) and the keys
        return Reply(out, calls, keys, REPLY_VALUE_BYTES * n_values + 5 * len(data))
    except ReplyTooBig:
        raise
    except (ValueError, TypeError, RecursionError, zlib.error, binascii.Error):
        return None
