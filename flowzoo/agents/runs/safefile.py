"""Reading and writing one file of a run's directory so that nothing else is touched: never
through a symbolic link, never into a FIFO (a FIFO without a reader blocks its writer),
never through a hard link's other names, and every replaced record whole or not at all.

Why its own module: these are the primitives :mod:`rundir` (what a run directory may hold),
:mod:`flowzoo.agents.runs.runlog`, :mod:`flowzoo.agents.train.checkpoint` and sweeps build on; each says, named, what it refused.
The refusal itself (:func:`check_entry`) and the whole-or-nothing write are
:mod:`flowzoo.files`', shared with the report, which may not import the training side.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from flowzoo.agents.runs.signals import critical
from flowzoo.files import UnsafePath, _umask, check_entry, write_whole
from flowzoo.files import _kind as _kind  # rundir's, from the one place it is defined

#: a name the run writes is a link, a FIFO, a device or a directory of another kind (the
#: one refusal :mod:`flowzoo.files` makes for every writer: runs, sweeps, the report)
UnsafeRunPath = UnsafePath


def atomic_write(
    path: Path, data: str | bytes | Callable[[IO[bytes]], None], mode: int | None = None
) -> None:
    """Write ``path`` whole or not at all: a temp file in the same directory, flushed to
    disk, then ``os.replace``d over ``path`` (a kill mid-write leaves the old file, never a
    torn one). ``data``: text, bytes, or a function writing to the open binary file. Every
    record a run writes (config, summary, metrics rewrite, checkpoint) goes through here.
    A link, FIFO or directory at ``path`` is refused, named (the rename would replace a
    link, never write through it, but it is not a record of ours to replace)."""
    with critical():  # a stop signal waits until the file is whole (or not there)
        _atomic_write(path, data, mode)


def _atomic_write(
    path: Path, data: str | bytes | Callable[[IO[bytes]], None], mode: int | None
) -> None:
    write_whole(path, data, mode)


def write_json(path: Path, obj: Any) -> None:
    """``obj`` as indented JSON, written atomically (:func:`atomic_write`)."""
    atomic_write(path, json.dumps(obj, indent=1, default=str))


def open_regular(p: Path) -> IO[bytes]:
    """``p`` opened for reading when it is a regular file: a link is not followed and a
    FIFO never blocks the run (both refused, named)."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            check_entry(p, directory=False, single_link=False)  # raises, naming the link
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        check_entry(p, directory=False, single_link=False)
        raise UnsafeRunPath(f"{p} is not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def open_append(p: Path) -> int:
    """``p`` opened to append (created when absent), never through a link or into a FIFO (a
    FIFO without a reader blocks its writer: it hung a sweep): refused, named
    (:class:`UnsafeRunPath`). A file that has other names too (a hard-linked backup such as
    ``cp -al``'s, or a name planted to point at another file) is never written through: the
    run's name gets a copy of its own first (:func:`_own_copy`), so the other names keep the
    bytes they had and the run goes on. A blocking descriptor. Looked at (``lstat``) before
    it is opened: a device is refused, never opened."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    check_entry(p, directory=False, single_link=False)
    for attempt in range(2):
        try:
            fd = os.open(p, flags, 0o666)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a link, FIFO, dir
                check_entry(p, directory=False)
            raise
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            os.set_blocking(fd, True)
            return fd
        os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            check_entry(p, directory=False)
            break
        if attempt == 0:
            _own_copy(p, st)
    raise UnsafeRunPath(f"{p} is not a regular file of one link; nothing was written to it")


def append(p: Path, data: bytes) -> None:
    """``data`` appended whole to ``p``, opened for this write alone (:func:`open_append`):
    a name made for the file meanwhile (a backup's hard link) never receives it."""
    with os.fdopen(open_append(p), "ab") as f:
        f.write(data)


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two stats are of one file (device and inode)."""
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


#: the largest file :func:`_own_copy` copies (a run's metrics or a sweep's log are far less)
OWN_COPY_LIMIT = 256 << 20


def _own_copy(p: Path, st: os.stat_result) -> None:
    """Give ``p`` an inode of its own holding the same bytes (written whole, then renamed
    over ``p`` alone): the file's other names are left exactly as they were."""
    if st.st_size > OWN_COPY_LIMIT:
        raise UnsafeRunPath(
            f"{p} has {st.st_nlink} hard links and {st.st_size:,} bytes (over "
            f"{OWN_COPY_LIMIT:,}); a run appends only to a file of its own, so nothing was "
            "written: move it away or use another out_dir"
        )
    with open_regular(p) as src:
        if not same_file(os.fstat(src.fileno()), st):
            return  # replaced meanwhile: the caller looks again
        # the copy keeps the file's mode: a private log stays private
        atomic_write(p, lambda f: _copy_bytes(src, f, st.st_size), stat.S_IMODE(st.st_mode))


def _copy_bytes(src: IO[bytes], dst: IO[bytes], n: int) -> None:
    """The first ``n`` bytes of ``src`` (what was counted: a file another name keeps
    growing is not followed past it)."""
    while n > 0:
        chunk = src.read(min(n, 1 << 20))
        if not chunk:
            break
        dst.write(chunk)
        n -= len(chunk)


def read_regular(p: Path, limit: int = 64 << 20) -> bytes:
    """The bytes of regular file ``p`` (:func:`open_regular`), at most ``limit``."""
    with open_regular(p) as f:
        return f.read(limit)


def umask_modes(root: Path) -> None:
    """Give files under ``root`` written 0600 the mode the umask gives any new file:
    safetensors writes its weights 0600, which the other users of a shared results
    directory (or a model server under another account) cannot read."""
    want = 0o666 & ~_umask()
    if want == 0o600:
        return
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink() and p.stat().st_mode & 0o777 == 0o600:
            p.chmod(want)
