"""The weight files of a model folder: which build a run started from (each file's sha256)
and whether its files load, checked before a model is built on them.

Why in run-keeping: what a run record says it measured, and what ``flowzoo eval`` refuses
to load, are questions about files on disk (links, FIFOs, planted trees, truncated or
unloadable tensors), not about learning; the checkpoint (``agents/train/checkpoint.py``)
and the evaluation files use them. Torch-free: safetensors' own loader probes a dtype.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
import struct
from pathlib import Path
from typing import IO, Any

#: base weights hashed at a run's start up to this size (a tiny model is MBs; a user's 8B
#: model would cost a minute of reading, so past this only its files' sizes are recorded)
HASH_LIMIT = 1 << 30
#: the longest header a weights file may have: safetensors' own limit (checked before any
#: of it is read)
HEADER_LIMIT = 100_000_000


#: how deep under a model folder weights are looked for, and how many entries it may hold
#: there: loaders read the top level and a shard folder or two, and a model is tens of files
#: (a planted 1,500-deep tree, or a root of ``/``, is refused, not walked)
WEIGHTS_DEPTH = 8
WEIGHTS_ENTRIES = 100_000


def weight_files(root: Path) -> list[Path]:
    """The ``*.safetensors`` names under ``root``, sorted, at most :data:`WEIGHTS_DEPTH`
    folders down, no folder link followed, and every file a ``*.safetensors.index.json`` among
    them names (the shards the loader opens by name, through links, at any depth, whatever
    they are called). Walked with a stack, not recursion (a deep tree once raised
    RecursionError from ``rglob`` at the start of a run); a folder holding more than
    :data:`WEIGHTS_ENTRIES` entries, or one it cannot list, is a ValueError naming it."""
    found: list[Path] = []
    indexes: list[Path] = []
    stack, seen = [(root, 0)], 0
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone since it was listed: nothing under it to load
        except OSError as err:  # a folder that cannot be listed may still hold loadable files
            raise ValueError(
                f"{folder} cannot be read ({err}): its weights cannot be checked"
            ) from None
        seen += len(entries)
        if seen > WEIGHTS_ENTRIES:
            raise ValueError(
                f"{root} holds more than {WEIGHTS_ENTRIES:,} entries within "
                f"{WEIGHTS_DEPTH} folders: not a model folder (name the folder of the weights)"
            )
        for e in entries:
            if e.name.endswith(".safetensors"):
                found.append(Path(e.path))
            elif e.name.endswith(".safetensors.index.json"):
                indexes.append(Path(e.path))
            elif depth < WEIGHTS_DEPTH and e.is_dir(follow_symlinks=False):
                stack.append((Path(e.path), depth + 1))
    for index in indexes:
        found += _indexed(root, index)
    return sorted(set(found))


def _indexed(root: Path, index: Path) -> list[Path]:
    """The shard files ``index`` maps tensors to, inside ``root`` (a name leaving it the
    loader refuses itself); a corrupt index is a ValueError naming it."""
    try:
        fh, size = open_sized(index)
        with fh:
            if size > HEADER_LIMIT:
                raise ValueError(f"{size:,} bytes")
            shards = set(json.loads(fh.read(size))["weight_map"].values())
        bad = [x for x in shards if not isinstance(x, str) or _not_a_file_name(x)]
        if bad:
            raise ValueError(f"a shard name that names no file: {bad[0]!r}")
    except OSError as e:
        raise ValueError(f"{index} cannot be read ({e})") from None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise ValueError(f"{index} is not a weights index ({type(e).__name__}: {e})") from None
    # compared as the system resolves names: the root normalised too (a `..` in the folder the
    # user named must not drop every shard); strings, not Paths, for a large index's sake
    top = os.path.normpath(root) + os.sep
    inside = (os.path.normpath(os.path.join(index.parent, x)) for x in sorted(shards))
    return [root / p[len(top) :] for p in inside if p.startswith(top)]  # named from root


def _not_a_file_name(name: str) -> bool:
    """A shard name the loader cannot open as a file but normalising would make one of:
    empty, ``.``, or ending in a separator (``a.bin/`` is "not a directory" to the system)."""
    return not name or name.endswith(("/", os.sep)) or os.path.normpath(name) == "."


def _is_folder(root: Path) -> bool:
    """Whether ``root`` is a folder, as ``Path.is_dir`` says where the answer is "no such
    folder"; a path that cannot be examined (a name too long, a parent this process may not
    search) is a ValueError naming it, not a raw OSError."""
    try:
        return stat.S_ISDIR(os.stat(root).st_mode)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return False
        raise ValueError(f"{root} cannot be read ({e})") from None


def open_sized(path: Path) -> tuple[IO[bytes], int]:
    """``path`` opened once, read-only, and its size from that open; links are followed (a
    model folder may be one, a hub cache's files are). Why: a FIFO blocks an
    open for ever and a device never ends, so the open never waits (``O_NONBLOCK``), anything
    but a regular file is refused by what was opened (not by a check a swap can pass), and a
    reader never reads past the size (a ``/proc`` file says 0 and may block)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ValueError("not a regular file")
    return os.fdopen(fd, "rb"), st.st_size


def weights_identity(folder: str | Path) -> dict:
    """Which weights a run started from: the folder and the sha256 of each ``*.safetensors``
    in it. Why: a scale name (``tiny-m``) names a recipe, and recipes are rebuilt, so a run
    record must say which build it measured (compare with ``MANIFEST.json`` or a rebuild).
    One file is open at a time; a hashed file's size and digest come from the same open."""
    root = Path(folder)
    files = weight_files(root) if _is_folder(root) else []
    sizes = {str(f.relative_to(root)): _read_regular(f, None) for f in files}
    out: dict[str, Any] = {"path": str(root), "sizes": sizes}
    if files and sum(sizes.values()) <= HASH_LIMIT:
        out["sha256"] = {}
        for f in files:
            name = str(f.relative_to(root))
            sizes[name], out["sha256"][name] = _read_regular(f, stream_sha256)
    return out


def _read_regular(path: Path, read: Any) -> Any:
    """``read(file, size)`` on ``path`` opened by :func:`open_sized` (the size alone when
    ``read`` is None; ``(size, result)`` otherwise), closed after; a file that is not regular
    or cannot be opened is a ValueError naming it."""
    try:
        fh, size = open_sized(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None
    with fh:
        return size if read is None else (size, read(fh, size))


def stream_sha256(fh: IO[bytes], size: int | None = None) -> str:
    """The sha256 of what is left in ``fh`` (at most ``size`` bytes), read in 1 MiB chunks
    (weights are not held whole; a file still growing is not read past its size)."""
    h = hashlib.sha256()
    left = size
    while left is None or left > 0:
        chunk = fh.read(1 << 20 if left is None else min(left, 1 << 20))
        if not chunk:
            break
        h.update(chunk)
        if left is not None:
            left -= len(chunk)
    return h.hexdigest()


def check_weights(folder: str | Path) -> None:
    """Every ``*.safetensors`` under ``folder`` whole: a regular file whose header
    safetensors' own reader accepts (which covers the file's length). A broken weights file
    is a ValueError naming it (a raw safetensors error names no file), an unreadable one
    says so, both before any model is built from it; nothing here blocks or reads past a
    size."""
    root = Path(folder)
    if not _is_folder(root):
        return
    from safetensors import safe_open

    for f in weight_files(root):
        try:
            fh, size = open_sized(f)
            with fh:
                (n,) = struct.unpack("<Q", fh.read(8) if size >= 8 else b"")
                if n > min(HEADER_LIMIT, size - 8):
                    raise ValueError(f"a header of {n:,} bytes in {size:,}")
                # safetensors' own reader, on the file this open holds (a path opened again
                # could be a FIFO by then): offsets, dtypes, shapes and the file's length, as
                # the loader reads them, parsed typed (junk is refused before it is built)
                with safe_open(_held(fh, f), "pt") as w:
                    header = json.loads(fh.read(n))  # what safe_open just accepted
                    unloadable = _unloadable(w, header)
        except OSError as e:
            raise ValueError(f"{f} cannot be read ({e})") from None
        except Exception as e:  # noqa: BLE001 - any fault in a file's format is that file's
            raise ValueError(
                f"{f} is truncated or corrupt ({type(e).__name__}: {str(e)[:200]}); copy the "
                "weights again, or train them again (a run's final/ is rewritten when it "
                "completes)"
            ) from None
        if unloadable:
            raise ValueError(f"{f} holds a tensor this torch cannot load: {unloadable}")


#: a tensor up to this many bytes is made exactly as the loader makes it (read whole), up to
#: this many bytes a file; a larger one is judged by a small copy of it (:func:`_probe`)
EXACT_TENSOR_BYTES = 64 << 10
EXACT_FILE_BYTES = 64 << 20


def _unloadable(w: Any, header: dict) -> str:
    """The first tensor of an open safetensors file that torch cannot make (its name, dtype
    and why), or "": a header the parser accepts can still name a dtype torch lacks
    (``F6_E2M3``), a packed dtype with an odd last dimension (``F4``), or an empty tensor
    whose shape overflows the reshape — all failing only in the loader. A small tensor
    (empty ones included) is made by the loader itself; a large one (its shape's product
    then fits its bytes) by :func:`_probe`, once per kind. Slicing (``[:0]``) is not the
    loader: it refuses packed dtypes the loader reads."""
    budget, probed = EXACT_FILE_BYTES, set()
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = spec["dtype"], list(spec["shape"])
        start, end = spec["data_offsets"]
        try:
            if not shape or end - start <= min(EXACT_TENSOR_BYTES, budget):  # a scalar: exact
                budget -= end - start
                w.get_tensor(name)
            elif (kind := (dtype, len(shape), shape[-1] % 8 if shape else -1)) not in probed:
                probed.add(kind)
                _probe(dtype, shape, end - start)
        except Exception as e:  # noqa: BLE001 - whatever the loader would raise is the reason
            return f"{name!r} of dtype {dtype} ({type(e).__name__}: {str(e)[:120]})"
    return ""


def _probe(dtype: str, shape: list[int], nbytes: int) -> None:
    """Load, with safetensors' own loader, a one-tensor file of ``dtype`` shaped like
    ``shape`` but small: leading dimensions 1, the last kept modulo 8 (the packing rules of
    sub-byte dtypes are on the last dimension), its bytes in the same ratio to its values."""
    import tempfile

    from safetensors import safe_open

    last = shape[-1] % 8 + 8
    small = [1] * (len(shape) - 1) + [last]
    size = -(-nbytes * last // math.prod(shape))
    blob = json.dumps({"t": {"dtype": dtype, "shape": small, "data_offsets": [0, size]}})
    # a file, as the loader reads files (``safetensors.torch.load`` from bytes knows fewer
    # dtypes than ``safe_open``)
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as tmp:
        tmp.write(struct.pack("<Q", len(blob)) + blob.encode() + bytes(size))
        tmp.flush()
        with safe_open(tmp.name, "pt") as w:
            w.get_tensor("t")


def _held(fh: IO[bytes], path: Path) -> str:
    """A path that names the file ``fh`` holds (``/proc/self/fd``), or ``path`` (where it
    was opened from) where the system has no such directory: a file opened with
    ``os.fdopen`` is named by its descriptor number, not a path."""
    fd_path = f"/proc/self/fd/{fh.fileno()}"
    return fd_path if os.path.exists(fd_path) else str(path)
