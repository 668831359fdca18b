"""Plain data between the judge and the candidate process, and type-strict equality.

Why strict: the candidate's objects must never reach ``==`` (a class whose ``__eq__`` returns
True, an ``int`` subclass). Values cross the sandbox boundary as JSON in the tagged format
described in ``runner.py``; :func:`decode` rebuilds exact builtins only and refuses anything
else (wrong tags, too deep, too many nodes), so what the judge compares is data it built.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # this module is shipped into every sandboxed replay: imports cost per run
    from typing import Any

MAX_DEPTH = 64
MAX_NODES = 200_000
#: what building one set, frozenset or dict may cost, in hash-table probes past one per
#: member: members that share a hash value cost the square of their number (40,000 multiples
#: of 2**61 - 1 took 10 s to decode), so a value whose groups of equal hashes sum, squared,
#: past 4 per member plus this is refused. Honest members share hashes in pairs at most
#: (``hash(-1) == hash(-2)``: lattice points around the origin pair up), which costs 2 per member
HASH_PROBE_BUDGET = 1 << 16


class WireError(ValueError):
    """A value from the candidate side that is not well-formed plain data."""


class RemoteRef:
    """An opaque handle to an object living in the candidate process (not plain data): it can
    be passed back as an argument; comparing or using it is a failure."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<candidate object #{self.index}>"

    def __eq__(self, other: object) -> bool:
        return other is self

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError("a candidate object that is not plain data has no truth value here")


def encode(x: Any, depth: int = 0) -> Any:
    """Judge -> candidate: a test's argument in the wire format (TypeError if not plain)."""
    if depth > MAX_DEPTH:
        raise TypeError("argument nested too deeply")
    t = type(x)
    if x is None or t in (bool, str, float):
        return x
    if t is int:
        return x
    if t is list:
        return [encode(v, depth + 1) for v in x]
    if t is tuple:
        return {"T": [encode(v, depth + 1) for v in x]}
    if t is set or t is frozenset:
        return {"S" if t is set else "F": [encode(v, depth + 1) for v in x]}
    if t is dict:
        return {"D": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]}
    if t is bytes:
        return {"B": base64.b64encode(x).decode("ascii")}
    if t is complex:
        return {"C": [x.real, x.imag]}
    if t is RemoteRef:
        return {"R": x.index}
    raise TypeError(f"argument of type {t.__name__} cannot be sent to the candidate")


def decode(x: Any) -> Any:
    """Candidate -> judge: exact builtins from the wire format, or :class:`WireError`."""
    budget = [MAX_NODES]
    return _decode(x, 0, budget)


def _decode(x: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise WireError("value has too many parts")
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    t = type(x)
    if x is None or t in (bool, int, float, str):
        return x
    if t is list:
        return [_decode(v, depth + 1, budget) for v in x]
    if t is not dict or len(x) != 1:
        raise WireError(f"not a wire value: {t.__name__}")
    ((tag, v),) = x.items()
    try:
        if tag in ("T", "S", "F"):
            if type(v) is not list:
                raise WireError(f"tag {tag} needs a list")
            items = [_decode(e, depth + 1, budget) for e in v]
            if tag == "T":
                return tuple(items)
            _few_shared_hashes(items)
            return set(items) if tag == "S" else frozenset(items)
        if tag == "D":
            if type(v) is not list or any(type(p) is not list or len(p) != 2 for p in v):
                raise WireError("tag D needs [key, value] pairs")
            pairs = [(_decode(k, depth + 1, budget), _decode(e, depth + 1, budget)) for k, e in v]
            _few_shared_hashes([k for k, _ in pairs])
            return dict(pairs)
        if tag == "B" and type(v) is str:
            return base64.b64decode(v, validate=True)
        if tag == "C" and type(v) is list and len(v) == 2:
            if not all(type(e) in (int, float) for e in v):
                raise WireError("tag C needs two numbers")
            return complex(v[0], v[1])
    except (TypeError, binascii.Error, OverflowError) as e:
        # an unhashable set member or dict key, bad base64, a complex part past a float
        raise WireError(f"malformed {tag}: {e}") from None
    raise WireError(f"unknown wire tag {tag!r}")


def _few_shared_hashes(members: list) -> None:
    """Refuse members of one set or dict whose groups of equal hash values cost past
    :data:`HASH_PROBE_BUDGET` to build (a collision attack on the judge's time), counted
    after a sort (no hash table: the count itself must not be quadratic). TypeError: an
    unhashable one."""
    if len(members) * len(members) <= HASH_PROBE_BUDGET:
        return
    cost = probe_cost(sorted(map(hash, members)))
    if cost > 4 * len(members) + HASH_PROBE_BUDGET:
        raise WireError(f"value: members of one set or dict share hash values (cost {cost:,})")


def probe_cost(hashes: list[int]) -> int:
    """What building one hash table of distinct keys with these (sorted) hash values costs in
    probes, about: each group of equal hashes, squared, summed."""
    cost, run = 0, 1
    for a, b in zip(hashes, hashes[1:], strict=False):
        if a == b:
            run += 1
        else:
            cost, run = cost + run * run, 1
    return cost + run * run if hashes else 0


def strict_eq(a: Any, b: Any, depth: int = 0) -> bool:
    """``a == b`` for plain data, type by type: a bool equals only a bool, a str only a str, a
    list only a list (not a tuple); ints and floats compare by value (``2 == 2.0``); NaN is
    unequal to itself as in Python. Anything that is not plain data is unequal to all."""
    if depth > MAX_DEPTH:
        return False
    ta, tb = type(a), type(b)
    num = (int, float)
    if ta in num and tb in num:
        return a == b
    if ta is not tb:
        return False
    if a is None or ta in (bool, str, bytes, complex):
        return a == b
    if ta in (list, tuple):
        return len(a) == len(b) and all(
            strict_eq(x, y, depth + 1) for x, y in zip(a, b, strict=False)
        )
    if ta in (set, frozenset):
        return len(a) == len(b) and {_key(x) for x in a} == {_key(y) for y in b}
    if ta is dict:
        if len(a) != len(b):
            return False
        kb = {_key(k): v for k, v in b.items()}
        return all(_key(k) in kb and strict_eq(v, kb[_key(k)], depth + 1) for k, v in a.items())
    if ta is RemoteRef:
        return a is b
    return a == b  # two objects of the trusted test code's own type


def _key(x: Any) -> tuple:
    """A hashable stand-in for a set member or dict key under :func:`strict_eq` (a bool and
    the int 1 get different keys; 1 and 1.0 the same)."""
    t = type(x)
    if t in (int, float):
        return ("n", x)
    if t is tuple:
        return ("t", tuple(_key(v) for v in x))
    if t is frozenset:
        return ("f", frozenset(_key(v) for v in x))
    return (t.__name__, x)


def strict_in(item: Any, container: Any) -> bool:
    """``item in container`` with :func:`strict_eq` (substring test for two strings)."""
    if type(container) is str or type(container) is bytes:
        if type(item) is not type(container):
            raise TypeError(f"'in <{type(container).__name__}>' needs the same type on the left")
        return item in container
    if type(container) is dict:
        container = list(container)
    if type(container) not in (list, tuple, set, frozenset, range):
        return item in container
    return any(strict_eq(item, c) for c in container)


def canonical_repr(v: Any, depth: int = 0) -> str:
    """``repr`` of plain data with set members in a fixed order (by their own text): a set's
    iteration order follows its hashes and history, so the same answer's record (and the
    behaviour class Voting reads from it) would differ between processes and replays."""
    t = type(v)
    if depth > MAX_DEPTH or t not in (list, tuple, set, frozenset, dict):
        return repr(v)
    if t is dict:
        inner = (
            f"{canonical_repr(k, depth + 1)}: {canonical_repr(e, depth + 1)}" for k, e in v.items()
        )
        return "{" + ", ".join(inner) + "}"
    parts = [canonical_repr(e, depth + 1) for e in v]
    if t is list:
        return "[" + ", ".join(parts) + "]"
    if t is tuple:
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    body = "{" + ", ".join(sorted(parts)) + "}"
    if t is set:
        return body if parts else "set()"
    return f"frozenset({body})" if parts else "frozenset()"


def shortened(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters for a record, with a digest of the whole when cut:
    two outputs that differ past the cut never read as one behaviour."""
    if len(text) <= limit:
        return text
    import hashlib

    digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
    return f"{text[: limit - 20]}...#{digest}"
