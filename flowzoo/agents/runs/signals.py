"""Stop signals during a run: SIGINT, SIGTERM and SIGHUP taken the one way Ctrl-C always
was (a KeyboardInterrupt where the run is: checkpoint, ``interrupted`` summary), and writes
no signal may cut in the middle (:func:`critical`).

Why its own module: the run directory's writes (:mod:`rundir`) and the run's records
(:mod:`runlog`) both need it, and neither owns the other.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, taken as Ctrl-C is (``signum`` says which: exit 128 + it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """While a run is live, SIGINT, SIGTERM and SIGHUP stop it the one way Ctrl-C always
    did: a KeyboardInterrupt where the run is, so it saves its checkpoint and writes its
    summary as ``interrupted`` (a scheduler's kill, a closed terminal, ``| tee`` in a
    process group). Once the run handles one, or writes its last records (:meth:`hold`),
    later ones are noted and wait, so a second signal cannot cut the records short (one
    swallowed on the way, say in a ``__del__``, is not: the next raises again). A signal
    ignored when the run starts (``nohup``, a background job) stays ignored.
    Handlers are set in the main thread only; :meth:`restore` puts the old ones back."""

    NAMES = ("SIGINT", "SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        self.held = False
        self.received: int | None = None
        self._old: dict[int, Any] = {}
        self._depth, self._pending = 0, 0  # inside :func:`critical` writes; a signal there

    def install(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for name in self.NAMES:
                sig = getattr(signal, name, None)
                old = signal.getsignal(sig) if sig is not None else None
                if sig is not None and old is not signal.SIG_IGN:
                    self._old[sig] = signal.SIG_DFL if old is None else old
                    signal.signal(sig, self._handle)
        _ACTIVE.append(self)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = self.received or signum
        if self._depth:
            self._pending = self._pending or signum
        elif not self.held:
            _raise(signum)

    def hold(self) -> None:
        """From here on a signal waits: the run is saving and writing its last records."""
        self.held = True

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}
        if self in _ACTIVE:
            _ACTIVE.remove(self)


#: the live runs' handlers (one per training in this process; the last one is current)
_ACTIVE: list[StopSignals] = []


def _raise(signum: int) -> None:
    raise KeyboardInterrupt if signum == signal.SIGINT else Stopped(signum)


@contextlib.contextmanager
def critical() -> Any:
    """A write no signal may cut in the middle (an interrupt inside ``torch.save`` leaves a
    torn zip and a RuntimeError, not a KeyboardInterrupt): a stop signal that arrives in it
    is raised when it ends, the file whole."""
    s = _ACTIVE[-1] if _ACTIVE else None
    if s is None:
        yield
        return
    s._depth += 1
    try:
        yield
    finally:
        s._depth -= 1
        if not s._depth and s._pending:
            signum, s._pending = s._pending, 0
            if not s.held:
                _raise(signum)
