"""Provenance: a run records the digest of its model build and of every data file it reads,
a resume on changed inputs is refused naming the file and both digests, and an evaluation's
results are named uniquely, never written over or through anything, and say what produced
them (the model, its build, the role overrides)."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from flowzoo.agents.train import evalfiles, provenance
from flowzoo.analysis.builds import build_digest, build_label, run_build

torch = pytest.importorskip("torch")
from flowzoo.agents.train.trainer import Trainer  # noqa: E402
from tests.agents.runs.test_run_records import _cfg, _math_file  # noqa: E402


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(out) -> dict:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def _edits(train, held):
    """Edits made between two sessions, each keeping the file loadable and its rows' count
    or form close: (file, what, new bytes)."""
    t, h = train.read_bytes(), held.read_bytes()
    rows = t.decode().splitlines(keepends=True)
    return [
        (train, "an answer changed", "".join([rows[0].replace('"2"', '"3"'), *rows[1:]]).encode()),
        (train, "a row appended", t + b'{"question": "What is 9 + 9?", "answer": "18"}\n'),
        (train, "a blank line only", t + b"\n"),
        (train, "two rows swapped", "".join([rows[1], rows[0], *rows[2:]]).encode()),
        (held, "a held-out row changed", h.replace(b"What is 50", b"What is 60")),
    ]


def test_a_run_records_its_data_and_build_and_refuses_to_resume_on_changed_data(
    tiny_model, tmp_path
):
    """The summary names the sha256 of the training file and the held-out file and the build
    of the weights; each edit of either between two sessions (an answer, a row added, a
    blank line, rows reordered, the held-out file) refuses the resume before the run
    directory changes, naming the file and both digests; the file put back, it resumes."""
    train = _math_file(tmp_path / "train.jsonl", 24)
    rows = [{"question": f"What is {i} + {i + 2}?", "answer": str(2 * i + 2)} for i in (50, 51)]
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "r"
    opts = dict(
        env_options={"dataset": f"jsonl:{train}"},
        eval_dataset=f"jsonl:{held}",
        eval_ood_episodes=0,
        eval_episodes=2,
    )
    s = Trainer(_cfg(tiny_model, out, steps=1, **opts), progress=False).train()
    assert s["data"]["train"] == {"spec": f"jsonl:{train}", "files": {str(train): _sha(train)}}
    assert s["data"]["eval"] == {"spec": f"jsonl:{held}", "files": {str(held): _sha(held)}}
    assert s["weights_digest"] == build_digest(s["base_model"]) == run_build(s)
    assert len(s["weights_digest"]) == 64
    meta = json.loads((Path(tiny_model) / "flowzoo_tiny.json").read_text())
    assert s["build_recipe"] == {"key": meta["key"], "version": meta["recipe_version"]}
    before = _files(out)
    for path, what, data in _edits(train, held):
        kept, old = path.read_bytes(), _sha(path)
        path.write_bytes(data)
        with pytest.raises(ValueError) as e:
            Trainer(_cfg(tiny_model, out, steps=2, **opts), progress=False).train()
        msg = str(e.value)
        assert str(path) in msg and old in msg and _sha(path) in msg, what
        assert "other data" in msg and "--resume false" in msg, what
        assert _files(out) == before, what  # refused before anything changed
        path.write_bytes(kept)
    s = Trainer(_cfg(tiny_model, out, steps=2, **opts), progress=False).train()
    assert s["status"] == "completed" and s["resumed_at"] == 1
    assert s["data"]["train"]["files"] == {str(train): _sha(train)}


def test_the_running_summary_names_the_inputs_from_the_claim_on(tmp_path):
    """A run killed with no time for its record (kill -9, OOM) leaves the running summary:
    it names the build and the data files too."""
    from flowzoo.agents.runs.rundir import prepare_dir
    from flowzoo.config import TrainConfig

    out = tmp_path / "r"
    inputs = {"weights_digest": "ab" * 32, "data": {"train": {"spec": "arith", "files": {}}}}
    prepare_dir(out, TrainConfig(out_dir=str(out)), 0, inputs).release()
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "running" and s["weights_digest"] == "ab" * 32
    assert s["data"] == inputs["data"]


def test_the_files_a_dataset_spec_reads(tmp_path):
    """Every way a spec names local data: a file by style, a saved dataset folder (its files,
    nested ones too, no folder link followed), ``hf:STYLE:DIR``; generators, task sets
    held in memory and missing paths read no file."""
    from flowzoo.tasks import Task, TaskSet

    f = _math_file(tmp_path / "m.jsonl", 3)
    ds = tmp_path / "saved"
    (ds / "train").mkdir(parents=True)
    (ds / "dataset_dict.json").write_text("{}")
    (ds / "train" / "data-00000-of-00001.arrow").write_bytes(b"x" * 10)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "big.arrow").write_bytes(b"y")
    os.symlink(elsewhere, ds / "linked")
    inside = [ds / "dataset_dict.json", ds / "train" / "data-00000-of-00001.arrow"]
    for spec, want in (
        (f"jsonl:{f}", [f]),
        (f"gsm8k:{f}", [f]),
        (f"file:{f}", [f]),
        (f"mbpp:{f}", [f]),
        (f"hf:{f}", [f]),
        (f"hf:{ds}", inside),
        (f"hf:gsm8k:{ds}", inside),
        (f"hf:auto:{ds}", inside),
        ("arith", []),
        ("arith:1-2", []),
        ("funcs", []),
        ("stdio:1-3", []),
        (f"jsonl:{tmp_path / 'missing.jsonl'}", []),
        (TaskSet([Task("a", "1+1?", "2")]), []),
    ):
        assert provenance.spec_files(spec) == want, spec
    (ds / "train" / "data-00000-of-00001.arrow").write_bytes(b"z" * 10)  # same size
    assert provenance.file_digest(inside[1]) == hashlib.sha256(b"z" * 10).hexdigest()


def test_data_and_weights_changes_name_each_file_and_both_digests():
    was = {"train": {"spec": "jsonl:a", "files": {"a": "1" * 64, "gone": "2" * 64}}}
    now = {"train": {"spec": "jsonl:a", "files": {"a": "3" * 64, "new": "4" * 64}}}
    got = provenance.data_changes(was, now)
    assert got == [
        f"a: sha256 {'1' * 64} when the run started, sha256 {'3' * 64} now",
        f"gone: sha256 {'2' * 64} when the run started, gone now",
        f"new: not read when the run started, sha256 {'4' * 64} now",
    ]
    assert provenance.data_changes(was, was) == []
    base = {"path": "/m", "sizes": {"model.safetensors": 10}, "sha256": {"model.safetensors": "a"}}
    other = {**base, "sha256": {"model.safetensors": "b"}}
    (line,) = provenance.weights_changes(base, other)
    assert "model.safetensors" in line and "sha256 a" in line and "sha256 b" in line
    moved = {**base, "path": "/elsewhere"}  # the same build in another folder
    assert provenance.weights_changes(base, moved) == []
    sizes_only = {"path": "/m", "sizes": {"model.safetensors": 11}}  # past the hash limit
    (line,) = provenance.weights_changes(base, sizes_only)
    assert "bytes 10" in line and "bytes 11" in line
    for not_a_record in (None, "tiny-m", {"path": "/m"}, {"sizes": "x"}):
        assert provenance.weights_changes(not_a_record, base) == []
    with pytest.raises(ValueError, match="another build"):
        provenance.check_resume({"base_model": base, "data": was}, other, was, "ck")
    with pytest.raises(ValueError, match="other data"):
        provenance.check_resume({"base_model": base, "data": was}, base, now, "ck")
    assert provenance.check_resume({"base_model": base, "data": was}, base, was, "ck") == []
    (warn,) = provenance.check_resume({"base_model": base}, base, now, "ck")  # an older one
    assert "records no digest of its data" in warn


def test_a_build_digest_is_one_sha256_over_the_files_and_unknown_without_them():
    one = {"sha256": {"model.safetensors": "a" * 64}}
    two = {"sha256": {"model.safetensors": "a" * 64, "extra.safetensors": "b" * 64}}
    assert build_digest(one) != build_digest(two) and len(build_digest(one)) == 64
    assert build_digest({"sha256": dict(reversed(two["sha256"].items()))}) == build_digest(two)
    for unknown in (None, {}, {"sizes": {"a": 1}}, {"sha256": {}}, {"sha256": {"a": 1}}, "x"):
        assert build_digest(unknown) is None
    assert run_build({"weights_digest": "c" * 64, "base_model": one}) == "c" * 64
    assert run_build({"base_model": one}) == build_digest(one)
    assert run_build({}) is None and run_build(None) is None
    assert build_label(None) == "build unknown"
    assert build_label("0123456789abcdef") == "build 0123456789ab"


# ------------------------------------------------------------------ evaluation records


def test_results_files_are_new_never_over_or_through_anything(tmp_path):
    """Default names: two results in the same second are two files (``-2``), and a name
    taken by a file, a link (dangling or not) or a FIFO is passed over, what it points to
    untouched; a given name that exists is refused before anything is evaluated."""
    path = evalfiles.eval_results_path("tiny-s", "f" * 64, tmp_path / "runs" / "eval")
    assert path.name.startswith("eval-") and path.name.endswith("-tiny-s-ffffffffffff.json")
    first = evalfiles.write_new(path, "[1]", numbered=True)
    second = evalfiles.write_new(path, "[2]", numbered=True)
    assert first == path and second.name == path.stem + "-2.json"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    os.symlink(victim, path.with_name(path.stem + "-3.json"))
    os.symlink(tmp_path / "nowhere", path.with_name(path.stem + "-4.json"))
    os.mkfifo(path.with_name(path.stem + "-5.json"))
    third = evalfiles.write_new(path, "[3]", numbered=True)
    assert third.name == path.stem + "-6.json" and third.read_text() == "[3]"
    assert victim.read_text() == "keep" and not (tmp_path / "nowhere").exists()
    assert [first.read_text(), second.read_text()] == ["[1]", "[2]"]
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    (tmp_path / "dir.json").mkdir()
    links = [path.with_name(f"{path.stem}-{k}.json") for k in (3, 4)]
    for taken in (first, *links, tmp_path / "dir.json"):
        with pytest.raises(ValueError, match="already exists"):
            evalfiles.eval_output(str(taken), "scripted", {})
        with pytest.raises(ValueError, match="already exists"):
            evalfiles.write_new(taken, "x", numbered=False)
    assert victim.read_text() == "keep" and first.read_text() == "[1]"
    got, rec = evalfiles.eval_output(str(tmp_path / "new.json"), "scripted", {})
    assert got == tmp_path / "new.json" and rec["model"] == {
        "spec": "scripted",
        "weights_digest": None,
    }
    for spec in ("openai:http://localhost:1/v1#m", "a/b/c#d", "../..", ""):
        name = evalfiles.eval_results_path(spec, None).name
        assert "/" not in name and name.startswith("eval-") and ".." not in name


def test_an_evaluation_names_its_model_build_and_role_overrides_and_never_overwrites(
    tiny_model, tmp_path, monkeypatch
):
    """``flowzoo eval`` twice in the same second writes two files; each row records the
    model, its weights digest (the build's, as a run records it), each ``--role-model``
    override with its own build, and the settings; ``--json`` naming an existing file is
    refused and the file kept."""
    from flowzoo.agents.runs.weights import weights_identity
    from flowzoo.cli import main

    monkeypatch.chdir(tmp_path)
    args = ["eval", "--model", str(tiny_model), "--env", "voting-math", "--episodes", "2",
            "--samples", "1", "--split", "test", "--role-model", "aggregator=scripted:0.5"]  # fmt: skip
    assert main(args) == 0 and main([*args, "--role-model", f"solver={tiny_model}"]) == 0
    files = sorted((tmp_path / "runs" / "eval").iterdir())
    assert len(files) == 2
    digest = build_digest(weights_identity(tiny_model))
    assert all(digest[:12] in f.name for f in files)
    recs = [json.loads(f.read_text())[0]["provenance"] for f in files]
    for rec in recs:
        assert rec["model"]["spec"] == str(tiny_model) and rec["model"]["weights_digest"] == digest
        assert rec["role_models"]["aggregator"]["spec"] == "scripted:0.5"
        assert rec["settings"]["samples"] == 1 and rec["settings"]["envs"] == ["voting-math"]
    solver = [r["role_models"].get("solver") for r in recs]
    assert None in solver and {"spec": str(tiny_model)}.items() <= (solver[0] or solver[1]).items()
    assert (solver[0] or solver[1])["weights_digest"] == digest
    kept = files[0].read_text()
    assert main([*args, "--json", str(files[0])]) != 0
    assert files[0].read_text() == kept and len(list(files[0].parent.iterdir())) == 2


@pytest.mark.parametrize(
    "name", ["chat_template.jinja", "generation_config.json", "tokenizer.json"]
)
def test_a_model_file_beside_the_weights_edited_in_place_refuses_the_resume(
    tiny_model, tmp_path, name
):
    """A red-team round edited the model's chat template in place between two sessions and
    the resume went on silently: the folder's other files (config, tokenizer, template,
    generation settings) are among the run's inputs, so an edit is refused naming the file
    and both digests, before the run directory changes; put back, it resumes."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    out = tmp_path / "r"
    s = Trainer(_cfg(str(model), out, steps=1), progress=False).train()
    target = model / name
    assert s["data"]["model"]["files"][str(target)] == _sha(target)
    before, kept = _files(out), target.read_bytes()
    target.write_bytes(kept + b" ")
    with pytest.raises(ValueError) as e:
        Trainer(_cfg(str(model), out, steps=2), progress=False).train()
    assert str(target) in str(e.value) and _sha(target) in str(e.value)
    assert _files(out) == before
    target.write_bytes(kept)
    s = Trainer(_cfg(str(model), out, steps=2), progress=False).train()
    assert s["status"] == "completed" and s["resumed_at"] == 1


def test_the_build_recipe_is_read_only_from_a_tiny_builds_metadata(tmp_path):
    """A tiny build's recipe key and version; nothing for another model folder, a missing
    folder, unreadable metadata or metadata without a key (never an error: a run on a
    user's own model records its digest alone)."""
    from flowzoo.agents.train.provenance import build_recipe

    assert build_recipe(None) is None and build_recipe(tmp_path / "nope") is None
    assert build_recipe(tmp_path) is None
    meta = tmp_path / "flowzoo_tiny.json"
    for text in ("{", "[]", '{"key": 3}', '{"recipe_version": 2}'):
        meta.write_text(text)
        assert build_recipe(tmp_path) is None, text
    meta.write_text('{"key": "3517b26cb5e0", "recipe_version": 12}')
    assert build_recipe(tmp_path) == {"key": "3517b26cb5e0", "version": 12}


@pytest.mark.parametrize(
    "record,why",
    [
        (None, "records no identity"),
        ("tiny-m", "records no identity"),
        ({"path": "/m"}, "records no identity"),
        ({"path": "/m", "sizes": "x"}, "records no identity"),
        ({"path": "/m", "sizes": {"model.safetensors": 10}, "sha256": "a"}, "not a file"),
        ({"path": "/m", "sizes": {"model.safetensors": 10}}, "only the sizes"),
    ],
)
def test_a_checkpoint_without_its_build_identity_is_refused(record, why):
    """A checkpoint whose ``base_model`` record was removed or cut down by hand (or never
    written) could continue on any build: the resume is refused, saying so and how to start
    over, never compared as "nothing to compare"."""
    base = {"path": "/m", "sizes": {"model.safetensors": 10}, "sha256": {"model.safetensors": "a"}}
    data = {"train": {"spec": "jsonl:a", "files": {"a": "1" * 64}}}
    state = {"data": data} if record is None else {"base_model": record, "data": data}
    with pytest.raises(ValueError) as e:
        provenance.check_resume(state, base, data, "ck/state.pt")
    msg = str(e.value)
    assert why in msg and "ck/state.pt" in msg and "base_model" in msg and "--resume false" in msg
    assert provenance.check_resume({"base_model": base, "data": data}, base, data, "ck") == []
    sizes_only = {"path": "/m", "sizes": {"model.safetensors": 10}}  # a build past the limit
    assert (
        provenance.check_resume({"base_model": sizes_only, "data": data}, sizes_only, data, "ck")
        == []
    )


def test_a_resume_from_a_checkpoint_whose_build_record_was_removed_is_refused(tiny_model, tmp_path):
    """End to end: the ``base_model`` key taken out of a real checkpoint (its digest sidecar
    rewritten to match) refuses the resume before the run directory changes; the record put
    back, the run resumes."""
    from flowzoo.agents.runs import weights
    from flowzoo.agents.train import checkpoint

    out = tmp_path / "r"
    Trainer(_cfg(tiny_model, out, steps=1, eval_every=0), progress=False).train()
    ckpt = out / "checkpoint" / "state.pt"

    def rewrite(state: dict) -> None:
        torch.save(state, ckpt)
        with open(ckpt, "rb") as f:
            sha = weights.stream_sha256(f)
        checkpoint.digest_path(ckpt).write_text(json.dumps({"sha256": [sha]}))

    state = torch.load(ckpt, weights_only=True)
    record = state.pop("base_model")
    rewrite(state)
    before = _files(out)
    with pytest.raises(ValueError) as e:
        Trainer(_cfg(tiny_model, out, steps=2, eval_every=0), progress=False).train()
    msg = str(e.value)
    assert "records no identity of the model build" in msg and str(ckpt) in msg
    assert "--resume false" in msg
    assert _files(out) == before
    rewrite({**state, "base_model": record})
    s = Trainer(_cfg(tiny_model, out, steps=2, eval_every=0), progress=False).train()
    assert s["status"] == "completed" and s["resumed_at"] == 1
