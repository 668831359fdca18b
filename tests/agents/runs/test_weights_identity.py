"""Which weights a run started from, and weight files checked before anything loads: the
summary names the build (each file's sha256), a resume on another build is refused naming
both, and a planted, deep, broken or unreadable model folder is a clear error, never a hang
(:mod:`flowzoo.agents.runs.weights`)."""

import json

import pytest

torch = pytest.importorskip("torch")
from flowzoo.agents.train.trainer import Trainer  # noqa: E402
from tests.agents.runs.test_run_records import _cfg  # noqa: E402


def test_the_summary_names_the_build_of_the_weights_it_started_from(
    tiny_model, tmp_path, monkeypatch
):
    """A scale name names a recipe, and recipes are rebuilt: the summary records the folder
    and sha256 of the base weights the run loaded, and a different build reads differently;
    past ``HASH_LIMIT`` only the sizes are recorded."""
    import hashlib
    import shutil
    from pathlib import Path

    from flowzoo.agents.runs import weights

    out = tmp_path / "r"
    Trainer(_cfg(tiny_model, out, steps=1, eval_every=0), progress=False).train()
    got = json.loads((out / "summary.json").read_text())["base_model"]
    files = sorted(Path(tiny_model).rglob("*.safetensors"))
    assert got["path"] == str(tiny_model) and files
    assert got["sha256"] == {
        str(f.relative_to(tiny_model)): hashlib.sha256(f.read_bytes()).hexdigest() for f in files
    }
    other = tmp_path / "other-build"
    shutil.copytree(tiny_model, other)
    _nudge(other)  # another build of the same model
    other_digests = weights.weights_identity(other)["sha256"].values()
    assert other_digests and set(other_digests).isdisjoint(got["sha256"].values())
    monkeypatch.setattr(weights, "HASH_LIMIT", 0)
    sizes_only = weights.weights_identity(tiny_model)
    assert "sha256" not in sizes_only and sizes_only["sizes"] == got["sizes"]


def _nudge(folder) -> None:
    """Every weights file under ``folder`` rewritten with its first tensor changed."""
    from pathlib import Path

    from safetensors.torch import load_file, save_file

    for f in sorted(Path(folder).rglob("*.safetensors")):
        tensors = load_file(f)
        name = sorted(tensors)[0]
        tensors[name] = tensors[name] + 0.01
        save_file(tensors, f, metadata={"format": "pt"})


def test_a_resume_on_another_build_of_the_model_is_refused_naming_both_digests(
    tiny_model, tmp_path
):
    """The base weights swapped between sessions (a recipe rebuilt under the same name): a
    resume would make one curve of two models, so it is refused before anything in the run
    directory changes, naming the weights file and both digests; the build put back, the
    run resumes."""
    import hashlib
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    weights = sorted(model.rglob("*.safetensors"))
    first = {str(f.relative_to(model)): hashlib.sha256(f.read_bytes()).hexdigest() for f in weights}
    out = tmp_path / "r"
    cfg = dict(model=str(model), steps=1, eval_every=0)
    Trainer(_cfg(tiny_model, out, **cfg), progress=False).train()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    saved = tmp_path / "saved"
    shutil.copytree(model, saved)
    _nudge(model)  # another build of the same shapes, at the same path
    now = {str(f.relative_to(model)): hashlib.sha256(f.read_bytes()).hexdigest() for f in weights}
    with pytest.raises(ValueError) as e:
        Trainer(_cfg(tiny_model, out, **{**cfg, "steps": 2}), progress=False).train()
    msg = str(e.value)
    name = sorted(first)[0]
    assert "another build" in msg and name in msg and first[name] in msg and now[name] in msg
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    shutil.rmtree(model)
    shutil.copytree(saved, model)  # the build put back
    s = Trainer(_cfg(tiny_model, out, **{**cfg, "steps": 2}), progress=False).train()
    assert s["status"] == "completed" and s["resumed_at"] == 1
    assert s["base_model"]["sha256"] == first and "now" not in s["base_model"]


def test_a_checkpoints_base_model_record_that_is_not_plain_data_is_ignored(tiny_model, tmp_path):
    """What a checkpoint says about its base build goes into the summary as JSON: anything
    but small plain data there (a tensor, NaN, deep nesting, megabytes, keys that are not
    strings) is ignored, never a crash on resume or when the summary is written."""
    from flowzoo.agents.train import checkpoint

    tr = Trainer(_cfg(tiny_model, tmp_path / "r", steps=1, eval_every=0), progress=False)
    mine = dict(tr.base_model)
    deep: list = []
    inner = deep
    for _ in range(3000):  # nesting past json's recursion limit
        inner.append([])
        inner = inner[0]
    planted_records = (
        {"sha256": torch.zeros(2)},
        {"path": float("nan")},
        {"path": deep},
        {"path": "A" * 5_000_000},  # a warning and a summary of megabytes
        {1: "a", "1": "b"},  # two "1" keys once written as JSON
        "tiny-m",
        None,
    )
    for planted in planted_records:
        checkpoint.keep_base_model(tr, planted)
        assert tr.base_model == mine and not tr.warnings


def test_a_weights_name_that_is_not_a_regular_file_is_refused_not_waited_on(tiny_model, tmp_path):
    """A FIFO named like a weights file blocked the start for ever (its open waits for a
    writer): anything but a regular file is refused by name before it is opened."""
    import os
    import shutil

    from flowzoo.agents.runs import weights

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    os.mkfifo(model / "extra.safetensors")
    said = _refusal_within(lambda: weights.check_weights(model))
    assert "extra.safetensors" in said and "not a regular file" in said


def _refusal_within(call, wait_s: float = 120) -> str:
    """The ValueError ``call`` raises, read in a thread so that a call that blocks (an open
    of a FIFO waits for a writer) fails the test instead of hanging it."""
    import threading

    said: list[str] = []

    def run() -> None:
        try:
            call()
        except ValueError as e:
            said.append(str(e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(wait_s)
    assert not t.is_alive(), "blocked"
    assert said, "no ValueError"
    return said[0]


def test_a_deep_model_folder_is_walked_without_recursion(tiny_model, tmp_path):
    """A 1,500-deep tree under a model folder raised RecursionError from ``rglob`` when a
    run recorded its weights: the walk is a bounded loop; the model's own weights are still
    found and checked, one planted past the bound is not looked for."""
    import os
    import shutil

    from flowzoo.agents.runs import weights

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    deep = str(model)
    for _ in range(1500):  # os.makedirs recurses too
        deep = os.path.join(deep, "d")
        os.mkdir(deep)
    with open(os.path.join(deep, "x.safetensors"), "wb") as fh:
        fh.write(b"not a weights file")
    near = model / "shard" / "y.safetensors"
    near.parent.mkdir()
    shutil.copy(model / "model.safetensors", near)
    weights.check_weights(model)  # the planted deep file is past the bound: not read
    got = weights.weights_identity(model)
    assert set(got["sizes"]) == {"model.safetensors", "shard/y.safetensors"}
    assert got["sha256"]["model.safetensors"] == got["sha256"]["shard/y.safetensors"]
    near.write_bytes(b"short")  # a broken one within the bound is still named
    with pytest.raises(ValueError, match="y.safetensors"):
        weights.check_weights(model)
    os.remove(os.path.join(deep, "x.safetensors"))
    while deep != str(model):  # pytest's own clean-up of tmp dirs recurses: empty it here
        os.rmdir(deep)
        deep = os.path.dirname(deep)


def _weights_file(p, header: bytes, data: int = 8) -> None:
    import struct

    p.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data)


@pytest.mark.parametrize(
    "header",
    [
        b"[1, 2]",  # not an object: an AttributeError once escaped the check
        b'{"a": {"data_offsets": [0, Infinity]}}',  # an OverflowError once escaped
        b"[" * 100_000 + b"]" * 100_000,  # a RecursionError once escaped
        b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, -8]}}',  # passed, then
        b'{"a": {"dtype": "ZZ", "shape": [2], "data_offsets": [0, 8]}}',  # the loader
        b'{"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}',  # failed unnamed
    ],
)
def test_any_broken_weights_header_is_a_clear_error_naming_the_file(tmp_path, header):
    """Whatever is wrong with a header (its JSON, its types, what safetensors' own reader
    refuses) is a ValueError naming the file, raised before a model is built from it."""
    from flowzoo.agents.runs import weights

    _weights_file(tmp_path / "model.safetensors", header)
    with pytest.raises(ValueError, match="model.safetensors is truncated or corrupt"):
        weights.check_weights(tmp_path)


def test_recording_weights_never_blocks_nor_reads_past_a_size(tmp_path, monkeypatch):
    """The run's record of its weights opens each file once and reads only its size: a FIFO
    (which blocked ``weights_identity``'s open) is refused by name; a folder holding more
    entries than a model folder could is refused, not walked."""
    import os

    from flowzoo.agents.runs import weights

    os.mkfifo(tmp_path / "model.safetensors")
    said = _refusal_within(lambda: weights.weights_identity(tmp_path))
    assert "model.safetensors" in said and "not a regular file" in said
    wide = tmp_path / "wide"
    wide.mkdir()
    for i in range(60):
        (wide / f"f{i}").touch()
    monkeypatch.setattr(weights, "WEIGHTS_ENTRIES", 50)
    with pytest.raises(ValueError, match="not a model folder"):
        weights.check_weights(wide)
    with open(tmp_path / "a.safetensors", "wb") as fh:
        fh.write(b"x" * 10)
    fh = open(tmp_path / "a.safetensors", "rb")
    with fh:  # a file that grew after its size was taken is hashed to that size
        assert weights.stream_sha256(fh, 4) == weights.stream_sha256(
            __import__("io").BytesIO(b"xxxx")
        )


def test_a_model_folder_that_cannot_be_examined_is_named_not_passed(tmp_path):
    """A folder path the system cannot examine (a name too long) raised a raw OSError from
    ``is_dir``, and a folder this process may enter but not list was skipped, so a corrupt
    file in it passed the check while a loader opening it by name still reached it: both
    are a ValueError naming the folder."""
    import os
    import shutil
    import subprocess
    import sys

    from flowzoo.agents.runs import weights

    too_long = tmp_path / ("a" * 300)
    for call in (weights.check_weights, weights.weights_identity):
        with pytest.raises(ValueError, match="cannot be read"):
            call(too_long)

    locked = tmp_path / "locked"
    locked.mkdir()
    _weights_file(locked / "model.safetensors", b'{"a": 1}')  # corrupt, reachable by name
    locked.chmod(0o111)  # enter, not list
    code = (
        "import sys\nfrom flowzoo.agents.runs import weights\n"
        "for call in (weights.check_weights, weights.weights_identity):\n"
        "    try:\n        call(sys.argv[1])\n    except ValueError as e:\n"
        "        print('ValueError', e)\n    else:\n        print('passed')\n"
    )
    cmd = [sys.executable, "-c", code, str(locked)]
    if os.geteuid() == 0:  # root reads any folder: drop the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv to drop its file capabilities")
        drop = "-dac_override,-dac_read_search"
        cmd = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", *cmd]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    finally:
        locked.chmod(0o755)
    lines = out.splitlines()
    assert len(lines) == 2 and all(f"ValueError {locked} cannot be read" in ln for ln in lines)
