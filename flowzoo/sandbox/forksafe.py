"""What a forked child must not inherit: locks held by threads it does not have, and sandbox
servers that belong to its parent.

Why: a code env judged in a parent process and used again in a child made by ``os.fork`` (or
``multiprocessing`` with the ``fork`` start method) shared the parent's warm fork-servers: the
child wrote its program into a server the parent also talks to, both read one reply pipe, the
child hung, and at its exit the child's finalizers killed the parent's servers, so the
parent's next correct program scored 0. A lock another thread held at the fork stays held in
the child forever. So every lock the judge path takes is a :class:`ForkLock` (a child starts
with it free), and every object that owns servers or containers is :func:`track`-ed: right
after a fork, in the child, its ``_forked()`` forgets what the parent owns (closing only the
child's copies of the pipes, never killing anything) and the child starts fresh servers of its
own on first use. The parent's servers are never touched by the child.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Protocol


class _Forkable(Protocol):
    def _forked(self) -> None: ...


_LOCKS: weakref.WeakSet[ForkLock] = weakref.WeakSet()
_TRACKED: weakref.WeakSet[Any] = weakref.WeakSet()


class ForkLock:
    """A ``threading.Lock`` that a forked child gets unlocked (a thread of the parent that
    held it at the fork does not exist in the child, so it would never be released)."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _LOCKS.add(self)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def _renew(self) -> None:
        self._lock = threading.Lock()


def track(obj: _Forkable) -> None:
    """Call ``obj._forked()`` in every child forked while ``obj`` is alive (held weakly)."""
    _TRACKED.add(obj)


def _after_fork_in_child() -> None:
    """Runs in the child right after ``os.fork`` (only the forking thread exists): locks
    first, so that the objects' ``_forked`` may take them."""
    for lock in list(_LOCKS):
        lock._renew()
    for obj in list(_TRACKED):
        try:
            obj._forked()
        except Exception:  # a hook must never break the child's fork; the pid checks remain
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["ForkLock", "track"]
