"""The candidate side of a stdin/stdout judge run: runs *inside* the sandbox (stdlib only;
its source is sent as ``main.py``).

It holds the candidate's program and the test *inputs* (``cases.json``) - never the
expected outputs, which stay with the judge (``stdio.py``) in the trusted process. Each case
runs in a forked child whose fd 0 is a pipe carrying that case's input and whose fd 1 is a
pipe this process reads with a time limit and a size cap; children share no Python state
(a case cannot poison the next one) and a runaway one is killed alone. One JSON line per
case goes to the fd that was stdout when this process started:
``{"i": i, "s": status, "o": output, "e": exception class}`` with status ``ok`` | ``error``
| ``timeout`` | ``too_big``; then ``{"done": cases run}`` (with ``stop_on_error`` it stops
after the first case that crashed or timed out: that case fails whatever it printed; and
before a case whose line would take the channel past ``channel_bytes``). A program that does not compile gives one
``{"load": class}`` line. A forged line can at most claim an output for a case, which is
what printing it would do anyway.
"""

import json
import os
import select
import signal
import sys
import time

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def _child(code, in_r, out_w, err_w):
    """Run the program once as ``__main__`` with its stdin/stdout on the case's pipes."""
    import io

    os.dup2(in_r, 0)
    os.dup2(out_w, 1)
    for fd in (in_r, out_w):
        os.close(fd)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    status, name = 0, b""
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as e:
        if e.code not in (None, 0):
            status, name = 1, b"SystemExit"
    except BaseException as e:  # the candidate's exception: only its class name travels
        status, name = 1, type(e).__name__.encode("utf-8", "replace")[:100]
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    if name:
        os.write(err_w, name)
    os._exit(status)


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _prctl(option, value):
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError):
        return False


def _children(me):
    """Direct children of ``me``: /proc's children list, or (kernels without it) every process
    whose parent is ``me`` (this file runs alone in the sandbox: it cannot import the
    fork-server's twin)."""
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        pass
    kids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        kids.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def _kill_descendants():
    """SIGKILL every process this runner still has below it: orphans (a case's ``setsid``
    daemon) are re-parented here (child subreaper), so none outlives its case."""
    me = os.getpid()
    for _ in range(100):
        kids = _children(me)
        if not kids:
            return
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in kids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _exited_by(pid, deadline):
    """Whether ``pid`` exits before ``deadline`` (it is not reaped here): a pidfd wakes at the
    exit itself; without one (old kernels), a poll every millisecond."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        while True:
            left = deadline - time.monotonic()
            if fd is not None:
                return bool(select.select([fd], [], [], max(0.0, left))[0])
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            if left <= 0:
                return False
            time.sleep(0.001)
    finally:
        if fd is not None:
            os.close(fd)


def _run_case(code, data, timeout, cap, chan):
    """(status, output bytes, exception class) of one case."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)  # its own group: whatever it starts is killed with it
        for fd in (in_w, out_r, err_r, chan):
            os.close(fd)
        _child(code, in_r, out_w, err_w)
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    os.set_blocking(in_w, False)
    view = memoryview(data)
    out, status = bytearray(), None
    deadline = time.monotonic() + timeout
    readers, writers = [out_r], [in_w] if view else []
    if not view:
        os.close(in_w)
    while readers:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        r, w, _ = select.select(readers, writers, [], left)
        if w:
            try:
                sent = os.write(in_w, view[: 1 << 16])
            except BlockingIOError:
                sent = 0
            except BrokenPipeError:  # the program stopped reading: the rest is dropped
                sent = len(view)
            view = view[sent:]
            if not view:
                writers = []
                os.close(in_w)
        if r:
            chunk = os.read(out_r, 1 << 16)
            if not chunk:
                readers = []
            else:
                out += chunk
                if len(out) > cap:
                    status = "too_big"
                    break
    if writers:
        os.close(in_w)
    if status is not None:
        _kill_group(pid)
    os.close(out_r)
    # a case that closed its stdout and went on running is still held to its deadline
    if not _exited_by(pid, deadline):
        status = status or "timeout"
        _kill_group(pid)
    _, code_ = os.waitpid(pid, 0)
    _kill_group(pid)  # anything the case left running in its group
    _kill_descendants()  # and anything that left the group (setsid): we are its subreaper
    err = os.read(err_r, 200).decode("utf-8", "replace")
    os.close(err_r)
    if status is None:
        status = "ok" if code_ == 0 else "error"
        if status == "error" and not err:
            err = "signal" if os.WIFSIGNALED(code_) else "exit"
    return status, bytes(out[:cap]), err


def main():
    # not dumpable: a case (same uid) cannot open /proc/<this>/fd/<channel> to forge lines,
    # nor read this process's memory; a subreaper: a case's orphans come back here to be killed
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    with open("cases.json", encoding="utf-8") as f:
        spec = json.load(f)
    with open("solution.py", encoding="utf-8", errors="surrogatepass") as f:
        program = f.read()
    chan = os.dup(1)
    os.dup2(2, 1)

    def send(obj):
        data = (json.dumps(obj) + "\n").encode("utf-8", "surrogatepass")
        view = memoryview(data)
        while view:
            view = view[os.write(chan, view) :]

    try:
        code = compile(program, "solution.py", "exec")
    except BaseException as e:
        send({"load": type(e).__name__})
        return
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    ran = sent = 0
    for i, text in enumerate(spec["inputs"]):
        status, out, err = _run_case(
            code,
            text.encode("utf-8", "surrogatepass"),
            spec["case_timeout"],
            spec["max_output"],
            chan,
        )
        text = out.decode("utf-8", "replace") if status != "too_big" else ""
        line = {"i": i, "s": status, "o": text, "e": err}
        size = len(json.dumps(line))
        if sent + size > spec["channel_bytes"]:
            if ran:
                break  # the channel is full: the judge asks for the rest in its next run
            line.update(s="too_big", o="")
        send(line)
        sent += size
        ran += 1
        if status != "ok" and spec["stop_on_error"]:
            break
    send({"done": ran})


if __name__ == "__main__":
    main()
