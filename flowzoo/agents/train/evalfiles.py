"""Where ``flowzoo eval`` writes its results and what they record: the model scored and its
build digest, each role override's, the settings; a results file is never written over or
through (numbered names, hard-linked into place). Apart from :mod:`provenance` (a training
run's inputs, read by the checkpoint) because it reads the checkpoint's weight hashing."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from flowzoo.agents.runs.safefile import _umask
from flowzoo.agents.runs.weights import weights_identity
from flowzoo.analysis.builds import SHORT, build_digest, run_build


def model_record(spec: str) -> dict[str, Any]:
    """What ``flowzoo eval`` scored for a model spec: the spec, and for local weights the
    folder, each file's sha256 and the build digest (a run dir: its ``final/`` weights and
    the base build it started from); a served model or the scripted expert: the spec alone
    (no weights here to hash)."""
    from flowzoo.agents.models.players import is_local_spec
    from flowzoo.agents.train.evaluate import is_run_dir

    rec: dict[str, Any] = {"spec": spec}
    if is_run_dir(spec):
        rec["weights"] = weights_identity(Path(spec) / "final")
        with contextlib.suppress(OSError, ValueError, RecursionError):
            summary = json.loads((Path(spec) / "summary.json").read_text(encoding="utf-8"))
            rec["base_build"] = run_build(summary)
    elif is_local_spec(spec):
        from flowzoo.tiny.build import resolve_model

        rec["weights"] = weights_identity(resolve_model(spec))
    else:
        rec["weights_digest"] = None
        return rec
    rec["weights_digest"] = build_digest(rec["weights"])
    return rec


def eval_record(model: str, role_models: dict[str, str], **settings: Any) -> dict[str, Any]:
    """The provenance every ``flowzoo eval`` results row carries: the model scored (and its
    build), each role override (``--role-model``: spec and build) and the settings."""
    from flowzoo import __version__

    return {
        "model": model_record(model),
        "role_models": {r: model_record(s) for r, s in sorted(role_models.items())},
        "settings": settings,
        "flowzoo": __version__,
        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _slug(text: str) -> str:
    """A file-name-safe short form of a model spec (its last path part)."""
    tail = text.rstrip("/").rsplit("/", 1)[-1].rsplit("#", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", tail).strip("._")[:40] or "model"


def eval_results_path(model: str, digest: str | None, folder: Path = Path("runs/eval")) -> Path:
    """The default name of an evaluation's results: ``eval-<time>-<model>[-<build>].json``
    (:func:`write_new` adds ``-2``, ``-3``, ... where the name is taken)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    build = f"-{digest[:SHORT]}" if digest else ""
    return folder / f"eval-{stamp}-{_slug(model)}{build}.json"


def eval_output(
    given: str | None, model: str, role_models: dict[str, str], **settings: Any
) -> tuple[Path, dict[str, Any]]:
    """Where ``flowzoo eval`` writes its results and the provenance they carry: ``given``
    (``--json``), refused now when anything is at that name (before a model plays), or a
    new name under ``runs/eval`` (:func:`eval_results_path`)."""
    record = eval_record(model, role_models, **settings)
    if not given:
        return eval_results_path(model, record["model"]["weights_digest"]), record
    out = Path(given)
    if os.path.lexists(out):
        what = "a link" if os.path.islink(out) else "a directory" if out.is_dir() else "a file"
        raise ValueError(
            f"--json {out} already exists ({what}); an evaluation never writes over or through "
            "one: name another file, or move it away"
        )
    return out, record


def write_new(path: Path, text: str, numbered: bool) -> Path:
    """Write ``text`` to a file that did not exist, whole or not at all, and return its
    path: written to a temp file, then hard-linked into place (a link never replaces a name).
    Anything at the name (a file, a link, a FIFO) is never written through or over: with
    ``numbered``, ``-2``, ``-3``, ... are tried before the suffix; otherwise it is a
    ValueError naming it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        for k in range(1, 1000 if numbered else 2):
            dest = path if k == 1 else path.with_name(f"{path.stem}-{k}{path.suffix}")
            try:
                _place(tmp, dest, text)
                return dest
            except FileExistsError:
                if not numbered:
                    what = "a link" if os.path.islink(dest) else "a file"
                    raise ValueError(
                        f"{dest} already exists ({what}); an evaluation never writes over or "
                        "through one: name another --json file, or move it away"
                    ) from None
        raise ValueError(f"{path}: 999 results of that name exist; name another --json file")
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _place(tmp: str, dest: Path, text: str) -> None:
    """``tmp`` linked to ``dest`` (FileExistsError when the name is taken, whatever it is);
    where the file system has no hard links, ``dest`` created new (``O_EXCL``, no link
    followed) and written."""
    try:
        os.link(tmp, dest)
        return
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(dest, flags, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
