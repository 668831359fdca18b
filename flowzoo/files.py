"""Writing one file without going through what was planted at its name: never through a
symbolic link, never into a FIFO, a file replaced whole or not at all.

Why its own module, torch-free: a run's records (:mod:`flowzoo.agents.runs.safefile`,
which adds the run's stop-signal guard and its appends) and the report's outputs
(:mod:`flowzoo.analysis.report`) refuse the same things with the same code; the analysis
side may not import the training side.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


class UnsafePath(ValueError):
    """A name written is a link, a FIFO, a device or a directory of another kind."""


def _kind(st: os.stat_result) -> str:
    m = st.st_mode
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(m):
            return name
    return "a regular file" if stat.S_ISREG(m) else "not a regular file"


def check_entry(
    p: Path,
    directory: bool,
    single_link: bool = True,
    writer: str = "a run",
    elsewhere: str = "another out_dir",
) -> bool:
    """Whether ``p`` exists (without following a link), refusing, named, anything that is
    not what ``writer`` writes there: a real directory, or a regular file (with one link
    where it is written in place). Nothing is ever written through a link or into a FIFO;
    ``elsewhere`` is the way around the refusal the message offers."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return False
    want = stat.S_ISDIR if directory else stat.S_ISREG
    what = _kind(st)
    if not want(st.st_mode):
        what += f", not a {'directory' if directory else 'regular file'}"
    elif not directory and single_link and st.st_nlink != 1:
        what = f"a file with {st.st_nlink} hard links"
    else:
        return True
    raise UnsafePath(
        f"{p} is {what}; {writer} writes only its own files and directories there, never "
        f"through a link or into a FIFO, so nothing was written: move it away or use {elsewhere}"
    )


def write_whole(
    path: Path,
    data: str | bytes | Callable[[IO[bytes]], None],
    mode: int | None = None,
    writer: str = "a run",
    elsewhere: str = "another out_dir",
) -> None:
    """Write ``path`` whole or not at all: a temp file in the same directory, flushed to
    disk, then ``os.replace``d over ``path`` (a kill mid-write leaves the old file, never a
    torn one). ``data``: text, bytes, or a function writing to the open binary file. A
    link, FIFO or directory at ``path`` is refused, named (:func:`check_entry`: the rename
    would replace a link, never write through it, but it is not a file of ours to replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    check_entry(path, directory=False, single_link=False, writer=writer, elsewhere=elsewhere)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes 0600; a file written here is as any new file (or keeps its mode)
        os.chmod(tmp, (0o666 & ~_umask()) if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (os.umask sets it:
    a file another thread creates meanwhile would get mode 0666)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
