"""The candidate side of the code judge: runs *inside* the sandbox (stdlib only; its source
is sent as ``main.py``).

Why a separate side: the verdict on a program must be decided where the program cannot
reach. This process holds the candidate's program and the calls the judge asked for
(``calls.json``: names and arguments, nothing else) — no expected values, no test source,
no marker. It loads the program, makes each call under a per-call alarm, and writes one JSON
line per call to the fd that was stdout when it started; the program's own prints go to
stderr. Whatever arrives on that channel is only *data*: the judge decodes it strictly and
compares it with values this process never saw, so a forged line can at most claim a
return value, which is what solving the problem means anyway.

Wire format of a value (shared with ``flowzoo.tasks.code.wire``): JSON null/bool/int/
float/str/array for ``None``/``bool``/``int``/``float``/``str``/``list``; one-key objects for
the rest: ``{"T": [...]}`` tuple, ``{"S": [...]}`` set, ``{"F": [...]}`` frozenset,
``{"D": [[k, v], ...]}`` dict, ``{"B": "base64"}`` bytes, ``{"C": [re, im]}`` complex and
``{"R": n}`` an opaque handle to an object that is not plain data (it can be passed back as
an argument, never compared). Only exact builtin types encode; a subclass is a handle.
"""

import base64
import json
import os
import signal

MAX_DEPTH = 64
MAX_NODES = 200_000
MAX_LINE = 1 << 19


class _Unencodable(Exception):
    pass


class _CallTimeout(BaseException):
    pass


def _encode(x, depth, budget):
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise _Unencodable()
    t = type(x)
    if x is None or t is bool or t is str or t is float:
        return x
    if t is int:
        if x.bit_length() > 4000:
            raise _Unencodable()
        return x
    if t is list:
        return [_encode(v, depth + 1, budget) for v in list.__iter__(x)]
    if t is tuple:
        return {"T": [_encode(v, depth + 1, budget) for v in tuple.__iter__(x)]}
    if t is set or t is frozenset:
        return {"S" if t is set else "F": [_encode(v, depth + 1, budget) for v in t.__iter__(x)]}
    if t is dict:
        return {
            "D": [
                [_encode(k, depth + 1, budget), _encode(v, depth + 1, budget)]
                for k, v in dict.items(x)
            ]
        }
    if t is bytes:
        return {"B": base64.b64encode(x).decode("ascii")}
    if t is complex:
        return {"C": [x.real, x.imag]}
    raise _Unencodable()


def _decode(x, refs):
    """Arguments from the judge (trusted input)."""
    if isinstance(x, list):
        return [_decode(v, refs) for v in x]
    if not isinstance(x, dict):
        return x
    ((tag, v),) = x.items()
    if tag == "T":
        return tuple(_decode(e, refs) for e in v)
    if tag == "S":
        return {_decode(e, refs) for e in v}
    if tag == "F":
        return frozenset(_decode(e, refs) for e in v)
    if tag == "D":
        return {_decode(k, refs): _decode(e, refs) for k, e in v}
    if tag == "B":
        return base64.b64decode(v)
    if tag == "C":
        return complex(v[0], v[1])
    if tag == "R":
        return refs[v]
    raise ValueError(tag)


def main():
    with open("calls.json", encoding="utf-8") as f:
        spec = json.load(f)
    with open("solution.py", encoding="utf-8", errors="surrogatepass") as f:
        program = f.read()
    # the judge's channel: the fd that was stdout; the program's own prints go to stderr
    chan = os.dup(1)
    os.dup2(2, 1)
    dumps = json.dumps

    def send(obj):
        data = (dumps(obj) + "\n").encode("utf-8", "surrogatepass")
        view = memoryview(data)
        while view:
            view = view[os.write(chan, view) :]

    def alarm(*_a):
        raise _CallTimeout()

    signal.signal(signal.SIGALRM, alarm)
    setitimer, REAL = signal.setitimer, signal.ITIMER_REAL
    g = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        setitimer(REAL, spec["load_timeout"])
        exec(compile(program, "solution.py", "exec"), g)
        setitimer(REAL, 0)
    except BaseException as e:  # the program did not load: every call fails
        setitimer(REAL, 0)
        send({"load": type(e).__name__})
        return
    refs = []
    for i, (name, args, kwargs) in enumerate(spec["calls"]):
        reply = {"i": i}
        try:
            setitimer(REAL, spec["call_timeout"])
            fn = g.get(name)
            if fn is None:
                raise NameError(name)
            a = _decode(args, refs)
            k = {key: _decode(v, refs) for key, v in kwargs.items()}
            value = fn(*a, **k)
            try:
                reply["v"] = _encode(value, 0, [MAX_NODES])
            except (_Unencodable, RecursionError, TypeError, ValueError):
                refs.append(value)
                reply["r"] = len(refs) - 1
                reply["t"] = type(value).__name__[:100]
            setitimer(REAL, 0)
        except _CallTimeout:
            reply = {"i": i, "x": "timeout"}
        except BaseException as e:  # the candidate's exception: only its class name travels
            setitimer(REAL, 0)
            reply = {"i": i, "e": type(e).__name__}
        if len(dumps(reply)) > MAX_LINE:
            reply = {"i": i, "x": "too_big"}
        send(reply)
    send({"done": len(spec["calls"])})


if __name__ == "__main__":
    main()
