"""Reading a user's task file, and splitting one file into disjoint train and test sides.

Why one reader for every family: a user's file fails in the same ways whatever it holds (a
truncated ``.gz``, a directory, bytes that are not UTF-8, a number JSON cannot hold, JSON
nested past the parser's stack), and each must be a ``ValueError`` that names the file, the
row and what to do, never a raw exception from ``gzip``, ``json`` or ``pyarrow``.

Why numbers are kept as written: a math gold stored as a JSON number (``0.1000000000000000055``,
``123456789012345678901``) must reach the verifier digit for digit; going through a float
loses digits, and ``NaN``/``Infinity`` are not answers at all. With ``numbers="text"`` every
JSON number is read as a :class:`JsonNumber` (a ``str`` holding its source text).

Why a file is split here: held-out means held out. A single file with no held-out partner is
split by what is solved (:func:`file_split`), so "test" never returns a training problem.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from flowzoo.tasks.base import (
    SURROGATE_RE,
    TEST_FRACTION_DEN,
    Task,
    TaskSet,
    normalise_statement,
    stable_hash,
)

#: the split that means "the whole file, unsplit" (a separate held-out file, ``eval_dataset``)
WHOLE = "all"
#: the splits a local file has: the two-way rule of :func:`file_split`, or the whole file
FILE_SPLITS = ("train", "test", WHOLE)
#: what a file's rows may be read as: JSON Lines (optionally gzipped) or one JSON list
SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".gz", ".parquet")
#: the most bytes a task file may hold, as stored (plain) or once gunzipped (``.gz``): the
#: whole file is read into memory and parsed; set this attribute to read a larger one
MAX_FILE_BYTES = 2 << 30
#: a ``.gz`` file may also inflate to no more than this many times its own size (or
#: :data:`GZIP_FLOOR_BYTES`, whichever is more): JSON text compresses 3-10x, a gzip bomb
#: 1000x (a 298 KB file of spaces once took a loader from 43 MB to 644 MB)
GZIP_MAX_RATIO = 100
GZIP_FLOOR_BYTES = 64 << 20
#: the most rows a task file may hold: a row costs a few hundred bytes built even when it is
#: ``{}`` (3 bytes in JSONL, less in parquet); the largest public sets are under 10^6 rows
#: (NuminaMath-CoT 860k, TACO 26k)
MAX_FILE_ROWS = 2 << 20
#: rows of a parquet file read (decoded, then built) at a time: its decoded size is counted
#: against :data:`MAX_FILE_BYTES` batch by batch, so the footer's own sizes are not trusted
PARQUET_BATCH_ROWS = 256
_CHUNK = 1 << 20


class JsonNumber(str):
    """A JSON number as its source text (``"1e999"``, ``"0.10"``): exact, never a float."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a task can hold")


def _checked_float(text: str) -> float:
    """A float that JSON wrote: finite, or an error (``1e999`` would become ``inf``)."""
    v = float(text)
    if v in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:40]} overflows a float")
    return v


class DuplicateKeyError(ValueError):
    """A JSON object naming one key twice (``json.loads`` would keep the last silently)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKeyError(
                f"the key {k!r} appears twice in one object (JSON keeps only the last, so one "
                "of its values would be dropped unseen); keep one"
            )
        out[k] = v
    return out


def parse_json(text: str, numbers: str = "text") -> Any:
    """``json.loads`` with numbers kept as written (``numbers="text"``: :class:`JsonNumber`)
    or as finite Python numbers (``"value"``); ``NaN``/``Infinity`` and an object naming one
    key twice (:class:`DuplicateKeyError`) refused either way."""
    if numbers == "text":
        return json.loads(
            text,
            parse_float=JsonNumber,
            parse_int=JsonNumber,
            parse_constant=_no_constant,
            object_pairs_hook=_unique_pairs,
        )
    return json.loads(
        text,
        parse_float=_checked_float,
        parse_constant=_no_constant,
        object_pairs_hook=_unique_pairs,
    )


def _field_name(path: str) -> str:
    """A key path as a row's field: ``'question'`` at the top, ``['x'][0]`` deeper."""
    if path.count("[") == 1 and path.startswith("['"):
        return path[1:-1]
    return path or "text"


def _lone_surrogate(v: Any, depth: int = 0) -> str | None:
    """The field (a key path) of the first text in ``v`` holding a lone surrogate, or None."""
    if isinstance(v, str):
        return "" if SURROGATE_RE.search(v) else None
    if depth > 64:
        return None
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, x in items:
        if isinstance(k, str) and SURROGATE_RE.search(k):
            return f"[{k.encode('utf-8', 'backslashreplace').decode()!r}]"
        sub = _lone_surrogate(x, depth + 1)
        if sub is not None:
            return f"[{k!r}]{sub}"
    return None


def _where(path: Path, line: int | None) -> str:
    return f"{path}" + (f":{line}" if line is not None else "")


def _parse(text: str, path: Path, line: int | None, numbers: str) -> Any:
    """One JSON document, or a ValueError naming the file, the line and the fix."""
    try:
        return parse_json(text, numbers)
    except DuplicateKeyError as e:
        raise ValueError(f"{_where(path, line)}: {e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{_where(path, line)}: not valid JSON ({e.msg} at column {e.colno}); fix that row "
            "or remove it"
        ) from None
    except RecursionError:
        raise ValueError(
            f"{_where(path, line)}: JSON nested too deeply to read; a task row is a flat object "
            "of text fields"
        ) from None
    except ValueError as e:  # NaN/Infinity, an overflowing float, an int past Python's digits
        raise ValueError(
            f'{_where(path, line)}: {e}; write the value as a JSON string ("1e999") or fix it'
        ) from None


def _decoded(raw: bytes | bytearray, path: Path) -> str:
    """``raw`` as UTF-8, or a ValueError naming the line the first bad byte is on."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ValueError(
            f"{path}:{line}: not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}); "
            "save the file as UTF-8"
        ) from None


def check_file(path: Path) -> int:
    """``path``'s size if it is a readable file, else the error saying what is wrong."""
    if not path.exists():
        raise FileNotFoundError(f"task file not found: {path} (flowzoo never downloads)")
    if path.is_dir():
        raise ValueError(
            f"{path} is a directory, not a task file; give a .jsonl, .json or .parquet file "
            "(a saved Hugging Face dataset directory: hf:PATH)"
        )
    try:
        with path.open("rb"):
            return path.stat().st_size
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror}); check its permissions") from None


def _too_big(path: Path, what: str, limit: int, gz: bool = False) -> ValueError:
    knob = "MAX_FILE_BYTES or GZIP_MAX_RATIO" if gz else "MAX_FILE_BYTES"
    hint = "; a .gz that truly inflates so much: gunzip it and give the plain file" if gz else ""
    return ValueError(
        f"{path}: {what} past the limit of {limit:,} bytes; split it into smaller files, or "
        f"raise flowzoo.tasks.files.{knob}{hint}"
    )


def check_size(path: Path) -> int:
    """``path``'s size if it is a readable file of at most :data:`MAX_FILE_BYTES` as stored,
    else the error naming it (and the limit)."""
    size = check_file(path)
    if size > MAX_FILE_BYTES:
        raise _too_big(path, f"holds {size:,} bytes,", MAX_FILE_BYTES)
    return size


def read_bytes(path: Path) -> bytes | bytearray:
    """The file's bytes (gunzipped for ``.gz``, a chunk at a time and no further than its
    cap: :data:`MAX_FILE_BYTES`, :data:`GZIP_MAX_RATIO`), or a ValueError saying what is
    wrong, naming the file and the limit."""
    if path.suffix != ".gz":
        check_size(path)
        try:
            return path.read_bytes()
        except OSError as e:
            raise ValueError(f"{path}: cannot be read ({e.strerror})") from None
    size = check_file(path)
    limit = min(MAX_FILE_BYTES, max(GZIP_FLOOR_BYTES, GZIP_MAX_RATIO * size))
    out = bytearray()
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                out += chunk
                if len(out) > limit:
                    raise _too_big(path, f"inflates ({size:,} bytes gzipped)", limit, gz=True)
    except (gzip.BadGzipFile, EOFError, zlib.error, OSError) as e:
        raise ValueError(
            f"{path}: not a complete gzip file ({type(e).__name__}: {e}); the file is "
            "truncated or not gzipped: download it again, or drop the .gz suffix"
        ) from None
    return out  # not copied: the caller decodes it


def read_rows(path: str | os.PathLike, numbers: str = "text") -> list[dict]:
    """Every row of a local JSONL(.gz) or JSON (a list of objects) file, each a dict; any
    problem is a ValueError naming the file, the row (line) and the fix."""
    return [row for _, row in read_located(path, numbers)]


def read_located(path: str | os.PathLike, numbers: str = "text") -> list[tuple[str, dict]]:
    """Every row of a local JSONL(.gz) or JSON file with where it is, counted as an editor
    counts: ``":7"`` (JSON Lines: the file's line 7) or ``" row 3"`` (a JSON list: its third
    row), so a row's error reads ``data.jsonl:7: ...``. Lines end at ``\n`` alone (``\r\n``
    too: Windows files load alike), never at the other characters ``str.splitlines`` breaks
    on (a raw U+2028 is legal inside a JSON string); a leading UTF-8 byte-order mark is
    skipped."""
    p = Path(path)
    text = _decoded(read_bytes(p), p).removeprefix("\ufeff")
    json_list = p.name.endswith((".json", ".json.gz"))
    if json_list:
        data = _parse(text, p, None, numbers)
        if not isinstance(data, list):
            raise ValueError(
                f"{p}: a .json task file must hold a list of row objects, got "
                f"{type(data).__name__}; use a list, or JSON Lines (.jsonl: one object a line)"
            )
        check_rows(p, len(data))
        rows = [(f" row {i}", row) for i, row in enumerate(data, 1)]
    else:
        check_rows(p, text.count("\n") + 1)  # counted before any row is built
        rows = [
            (f":{ln}", _parse(line, p, ln, numbers))
            for ln, line in enumerate(text.split("\n"), 1)
            if line.strip()
        ]
    for where, row in rows:
        if not isinstance(row, dict):
            raise ValueError(
                f"{p}{where}: expected a JSON object of fields, got {type(row).__name__} "
                f"({str(row)[:40]}); every row is one {{...}} object"
            )
        bad = _lone_surrogate(row)
        if bad is not None:
            raise ValueError(
                f"{p}{where}: field {_field_name(bad)} holds a lone UTF-16 surrogate (a \\ud800-"
                "\\udfff escape with no pair), which is no character; fix or remove the row"
            )
    return rows


def row_place(i: int) -> str:
    """Where the ``i``-th row (from 0) of a table is, counted from 1 as people count:
    ``" row 3"`` (for rows with no line of their own: parquet, a saved dataset)."""
    return f" row {i + 1}"


def text_field(row: dict, names: Iterable[str], where: str) -> str | None:
    """The first of ``names`` that ``row`` holds as non-empty text (None: none does); a
    field of ``names`` holding anything but text (a number, a list, true) is a ValueError
    naming the row and the field, never read as text: a statement that is a number is a
    broken row (a JSON number is kept as its source text, so it must be told apart). Two of
    ``names`` holding different text (``question`` and ``problem``: two statements) is a
    ValueError naming both: which one the row means cannot be told."""
    found = None
    found_name = ""
    for name in names:
        v = row.get(name)
        if v is None:
            continue
        if isinstance(v, JsonNumber) or not isinstance(v, str):
            kind = (
                "true/false"
                if isinstance(v, bool)
                else "a JSON number"
                if isinstance(v, (JsonNumber, int, float))
                else type(v).__name__
            )
            raise ValueError(
                f"{where}: field {name!r} must be text (a JSON string), got {kind} "
                f"({str(v)[:40]}); quote it or fix the row"
            )
        if not v.strip():
            continue
        if found is None:
            found, found_name = v, name
        elif v.strip() != found.strip():
            raise ValueError(
                f"{where}: fields {found_name!r} and {name!r} both hold a statement, and they "
                "differ; keep one of them"
            )
    return found


def check_rows(path: Path, n: int) -> None:
    """A ValueError naming ``path`` and the limit when it holds over :data:`MAX_FILE_ROWS`."""
    if n > MAX_FILE_ROWS:
        raise ValueError(
            f"{path}: holds {n:,} rows, past the limit of {MAX_FILE_ROWS:,} rows; split it into "
            "smaller files, or raise flowzoo.tasks.files.MAX_FILE_ROWS"
        )


def read_parquet(path: str | os.PathLike) -> list[dict]:
    """Rows of a parquet file, or a ValueError naming it: past :data:`MAX_FILE_BYTES` as
    stored, :data:`MAX_FILE_ROWS` rows, or :data:`MAX_FILE_BYTES` decoded (as its footer says,
    then as counted while it is read, :data:`PARQUET_BATCH_ROWS` rows at a time)."""
    p = Path(path)
    size = check_size(p)  # not found, a directory, unreadable, too big: said the same way
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ImportError("reading parquet needs pyarrow: pip install 'flowzoo[tasks]'") from e
    try:
        pf = pq.ParquetFile(p)
        meta = pf.metadata
        check_rows(p, meta.num_rows)
        declared = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if declared > MAX_FILE_BYTES:
            raise _too_big(p, f"decodes to {declared:,} bytes ({size:,} stored),", MAX_FILE_BYTES)
        rows: list[dict] = []
        decoded = 0
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            decoded += batch.nbytes
            if decoded > MAX_FILE_BYTES:  # a footer that understates its sizes
                raise _too_big(p, f"decodes to over {decoded:,} bytes,", MAX_FILE_BYTES)
            rows += batch.to_pylist()
            check_rows(p, len(rows))
        return rows
    except ValueError as e:
        if str(e).startswith(f"{p}: "):  # a cap above, already naming the file
            raise
        raise _unreadable(p, e) from None
    except Exception as e:  # pyarrow's own error types: ArrowInvalid, OSError, ...
        raise _unreadable(p, e) from None


def _unreadable(p: Path, e: Exception) -> ValueError:
    return ValueError(
        f"{p}: not a readable parquet file ({type(e).__name__}: {str(e)[:120]}); "
        "write it again or convert it to JSONL"
    )


# ------------------------------------------------------------------------------ held out


def saved_dataset(path: str, split: str, instead: str = "") -> tuple[Any, bool]:
    """A Hugging Face dataset written by ``save_to_disk`` and whether it held ``split`` itself
    (a ``DatasetDict``: its own ``split``, ``test`` for ``all``); a ValueError naming the path
    and the fix otherwise (``instead``: what else the loader takes)."""
    import datasets

    try:
        ds = datasets.load_from_disk(path)
    except (FileNotFoundError, ValueError, OSError) as e:
        raise ValueError(
            f"{path}: not a saved Hugging Face dataset ({str(e)[:120]}); give a directory "
            f"written by save_to_disk{instead}"
        ) from None
    if isinstance(ds, datasets.DatasetDict):
        want = "test" if split == WHOLE else split
        if want not in ds:
            raise ValueError(f"{path} has no split {want!r}; it has {', '.join(ds)}")
        return ds[want], True
    return ds, False


def math_key(task: Task) -> str:
    """What a loaded math row solves: its normalised question and its answer."""
    return f"{normalise_statement(task.question)}=>{' '.join(task.answer.split())}"


def code_key(task: Task) -> str:
    """What a loaded code row solves: its entry point and its tests (the behaviour checked),
    or, for a row without tests, its statement."""
    tests = task.meta.get("tests") or ()
    cases = sorted(" ".join(str(t).split()) for t in tests)
    if not cases:
        return normalise_statement(task.question)
    return f"{task.meta.get('entry_point', '')}|" + "\n".join(cases)


def side_of(key: str) -> str:
    """The two-way rule for a user's file: one key in ``TEST_FRACTION_DEN`` is held out."""
    return "test" if stable_hash(key) % TEST_FRACTION_DEN == 0 else "train"


def file_split(
    tasks: Iterable[Task], split: str, key: Callable[[Task], str], name: str, own: bool = False
) -> TaskSet:
    """The ``split`` side of one file's tasks: ``all`` is the whole file; otherwise each task
    gets ``meta["key"]`` (what it solves, read from its row: ``key_source`` says so) and goes
    by :func:`side_of` its key, so two rows solving one thing land on one side. A test-side
    task that a train-side one already holds by any criterion of
    :func:`flowzoo.tasks.overlap.overlap` (its statement, its tests, the quantities it states
    with its gold, its n-grams: a reworded or reordered copy the key missed) is moved to
    train, until none is left: the sides are disjoint by every criterion measured, and how
    many moved, by which criterion, is kept in the set's ``decontamination``. ``own``: the
    tasks are a dataset's own split (a saved ``DatasetDict``'s), used whole as they are."""
    from flowzoo.tasks.overlap import CRITERIA, overlap_matches

    if split not in FILE_SPLITS:
        hint = " (a file is not a pretraining corpus)" if split == "pretrain" else ""
        raise ValueError(
            f"{name} has no {split!r} split{hint}; a local file has: {', '.join(FILE_SPLITS)}"
        )
    tasks = list(tasks)
    for t in tasks:
        t.meta["key"] = key(t)
        t.meta["key_source"] = "row"  # read from the row's text, not a generator's computation
    if own or split == WHOLE:
        whole = TaskSet(tasks, name=name, split=WHOLE)
        whole.origin = "own split" if own else "whole file"
        return whole
    first = [side_of(t.meta["key"]) for t in tasks]
    sides = list(first)
    moved: dict[str, int] = dict.fromkeys(CRITERIA, 0)
    train = [t for t, s in zip(tasks, sides, strict=True) if s == "train"]
    while train:  # a moved task is a training task: what repeats it moves too
        test = {i: t for i, t in enumerate(tasks) if sides[i] == "test"}
        found = overlap_matches(train, test.values())
        train = []  # the next round checks what is left against what moved in this one
        for i, t in test.items():
            hit = found.get(t.id, ())
            if hit:
                sides[i] = "train"
                train.append(t)
                for c in hit:
                    moved[c] += 1
    side = [t for t, s in zip(tasks, sides, strict=True) if s == split]
    if not side:
        raise ValueError(
            f"{name}: its {split} side is empty ({len(tasks)} rows; one in {TEST_FRACTION_DEN} "
            "goes to test by what it solves); add rows, or give a separate held-out file "
            "(eval_dataset)"
        )
    out = TaskSet(side, name=name, split=split)
    out.origin = "split by what is solved"
    out.decontamination = {
        "moved_to_train": sum(a != b for a, b in zip(first, sides, strict=True)),
        **{f"by_{c}": n for c, n in moved.items() if c != "key"},
    }
    return out
