"""The tiny base models ship with the package; a rebuild stays safe (lock, resume)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flowzoo.tiny import build as tiny
from flowzoo.tiny.build import (
    RECIPE_VERSION,
    corpus_fingerprint,
    ensure_tiny,
    fast_config,
    pretrain,
    shipped_manifest,
)
from flowzoo.tiny.corpus import make_corpus
from flowzoo.tiny.recipe import named_config


def test_shipped_models_match_the_recipe_that_builds_them():
    """Fails when the recipe (config, version, or the code that makes the corpus) changes and
    the shipped files do not: rebuild with ``flowzoo pretrain-tiny --scale S --ship``."""
    manifest = shipped_manifest()
    assert "tiny-s" in manifest
    for scale, entry in manifest.items():  # each shipped under the name that asks for it
        cfg = named_config(scale)
        assert cfg is not None, scale
        flag = "--scale" if scale == cfg.scale else "--model"
        hint = f"rebuild: flowzoo pretrain-tiny {flag} {scale} --ship"
        assert entry["key"] == cfg.key(), hint
        assert entry["recipe_version"] == RECIPE_VERSION, hint
        assert entry["corpus_fingerprint"] == corpus_fingerprint(cfg), hint
        for name, digest in entry["files"].items():
            data = (tiny.SHIPPED / scale / name).read_bytes()
            assert hashlib.sha256(data).hexdigest() == digest, name


def test_first_use_loads_the_shipped_model_without_a_build(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("FLOWZOO_CACHE", str(tmp_path))
    monkeypatch.setattr(tiny, "pretrain", lambda *a, **k: pytest.fail("built instead of loaded"))
    path = ensure_tiny("tiny-s", progress=False)
    assert path == tiny.SHIPPED / "tiny-s"
    model = AutoModelForCausalLM.from_pretrained(path)
    assert sum(p.numel() for p in model.parameters()) == tiny.parameter_count("tiny-s")
    assert not any(tmp_path.iterdir())  # nothing built, nothing cached


def test_a_named_build_ships_under_its_name_beside_the_scale(tmp_path, monkeypatch):
    """``pretrain-tiny --model tiny-m-conflict --ship``: a scale's second build gets a slot of
    its own, found by its recipe key; the scale's default stays where it was, and a name that
    is not the recipe's is refused."""
    copy = tmp_path / "weights"
    shutil.copytree(tiny.SHIPPED, copy)
    monkeypatch.setattr(tiny, "SHIPPED", copy)
    built = tmp_path / "built"
    built.mkdir()
    (built / "config.json").write_text("{}")
    (built / "checkpoint.pt").write_text("not shipped")
    cfg = named_config("tiny-m-conflict")
    monkeypatch.setattr(tiny, "pretrain", lambda *a, **k: pytest.fail("built instead of loaded"))
    tiny._verified.cache_clear()
    try:
        with pytest.raises(ValueError, match="does not name the recipe"):
            tiny.ship(built, cfg, "tiny-m")
        entry = tiny.ship(built, cfg, "tiny-m-conflict")
        assert entry["key"] == cfg.key() and set(entry["files"]) == {"config.json"}
        assert shipped_manifest()["tiny-m-conflict"] == entry
        assert ensure_tiny(cfg, cache_dir=tmp_path / "cache") == copy / "tiny-m-conflict"
        assert ensure_tiny("tiny-s", cache_dir=tmp_path / "cache") == copy / "tiny-s"
    finally:
        tiny._verified.cache_clear()
    assert not (tmp_path / "cache").exists()


def test_an_altered_shipped_file_is_not_used(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "weights"
    shutil.copytree(tiny.SHIPPED, copy)
    blob = copy / "tiny-s" / "model.safetensors"
    blob.write_bytes(blob.read_bytes()[:-1] + b"\0")
    monkeypatch.setattr(tiny, "SHIPPED", copy)
    tiny._verified.cache_clear()
    built = tmp_path / "built"
    monkeypatch.setattr(tiny, "pretrain", lambda cfg, path, progress=True: built)
    try:
        assert ensure_tiny("tiny-s", cache_dir=tmp_path / "cache") == built
    finally:
        tiny._verified.cache_clear()
    assert "altered" in capsys.readouterr().err


def test_one_build_per_cache_dir_at_a_time(tmp_path, monkeypatch):
    calls = []

    def fake_pretrain(cfg, path, progress=True):
        calls.append(path)
        time.sleep(1.0)  # long enough for the second caller to arrive while it runs
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")
        (path / "flowzoo_tiny.json").write_text("{}")
        return path

    monkeypatch.setattr(tiny, "pretrain", fake_pretrain)
    cfg = fast_config("tiny-s", seed=123)
    got = []
    threads = [
        threading.Thread(target=lambda: got.append(ensure_tiny(cfg, cache_dir=tmp_path)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and got[0] == got[1] == calls[0]


# builds models inside the test: no per-test timeout (a busy machine took over 300 s)
@pytest.mark.timeout(0)
def test_a_killed_build_resumes_from_its_checkpoint_and_says_so(tmp_path, capsys):
    cfg = fast_config("tiny-s", episodes_per_env=3, steps=230, batch_size=2, max_len=256)
    path = tmp_path / f"tiny-s-{cfg.key()}"
    # the build is killed the moment its first checkpoint is in place (by itself: a test that
    # polled for the file could, on a busy machine, see it only after the build had ended)
    code = (
        "import os, sys; from flowzoo.tiny.build import fast_config, pretrain\n"
        "_replace = os.replace\n"
        "def _killed_after(a, b):\n"
        "    _replace(a, b)\n"
        "    if str(b).endswith('checkpoint.pt'):\n"
        "        os._exit(9)\n"
        "os.replace = _killed_after\n"
        "cfg = fast_config('tiny-s', episodes_per_env=3, steps=230, batch_size=2, max_len=256)\n"
        f"pretrain(cfg, {str(path)!r}, progress=False)\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    assert (path / "checkpoint.pt").exists()
    assert not (path / "flowzoo_tiny.json").exists()
    out = ensure_tiny(cfg, cache_dir=tmp_path, shipped=False)
    assert out == path and (path / "flowzoo_tiny.json").exists()
    err = capsys.readouterr().err
    assert "resuming the tiny-s build from its checkpoint at step 200" in err
    # the killed build's corpus was kept and read back, not made again; gone once built
    assert "the tiny-s corpus read back from" in err and not (path / "corpus.json.gz").exists()
    # the resumed build is the uninterrupted one, bit for bit, and names its corpus
    whole = pretrain(cfg, tmp_path / "whole" / path.name, progress=False)
    assert (whole / "model.safetensors").read_bytes() == (path / "model.safetensors").read_bytes()
    rows = json.dumps(make_corpus(cfg), ensure_ascii=True).encode()
    for build in (path, whole):
        meta = json.loads((build / "flowzoo_tiny.json").read_text())
        assert meta["corpus_sha256"] == hashlib.sha256(rows).hexdigest()


def test_a_chat_renders_as_the_prompt_the_model_was_pretrained_on(tmp_path):
    """The tiny models' chat template (thinking off): a chat request's tokens are exactly
    the completion prompt's (BOS + the role's prompt), for the shipped model and for a build
    from before the template (which gets it on first use)."""
    from transformers import AutoTokenizer

    from flowzoo.agents.models.chat import add_chat_template, has_chat_template
    from flowzoo.agents.models.policy import Policy

    path = ensure_tiny("tiny-s")
    tok = AutoTokenizer.from_pretrained(path)
    prompt = "Problem: What is 2 + 3?\nRole: solver. End with \\boxed{ANSWER}.\n"
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "old"},
            {"role": "assistant", "content": "x"}, {"role": "user", "content": prompt}]  # fmt: skip
    text = tok.apply_chat_template(
        chat[-1:], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert text == "<s>" + prompt
    assert tok(text, add_special_tokens=False)["input_ids"] == tok(prompt)["input_ids"]
    assert tok.apply_chat_template(chat, tokenize=False) == "<s>Be brief.\n" + prompt
    pol = Policy(str(path))
    assert pol.use_chat_template and pol.encode_prompt(prompt) == tok(prompt)["input_ids"]
    old = tmp_path / "old"
    shutil.copytree(path, old)
    (old / "chat_template.jinja").unlink()
    assert not has_chat_template(old) and add_chat_template(old) and has_chat_template(old)
    assert not add_chat_template(old)  # idempotent


@pytest.mark.parametrize("damage", ["truncate", "garbage", "remove"])
def test_a_damaged_cached_build_names_its_file_and_the_rebuild(tmp_path, tiny_model, damage):
    """A cached build whose weights are cut short, overwritten or gone is a clear error naming
    the file and the command that rebuilds it, not a raw loader error."""
    cfg = fast_config("tiny-s")
    path = tmp_path / f"tiny-s-{cfg.key()}"
    shutil.copytree(tiny_model, path)
    blob = path / "model.safetensors"
    if damage == "truncate":
        blob.write_bytes(blob.read_bytes()[:-100])
    elif damage == "garbage":
        blob.write_bytes(b"\x00" * 64)
    else:
        blob.unlink()
    with pytest.raises((ValueError, FileNotFoundError)) as err:
        ensure_tiny(cfg, cache_dir=tmp_path, shipped=False, progress=False)
    assert str(blob) in str(err.value) and "flowzoo pretrain-tiny --scale tiny-s" in str(err.value)


def test_a_loaded_policy_keeps_its_weights_when_the_file_is_rewritten(tmp_path, tiny_model):
    """safetensors maps the weight file; a tensor never written stayed a view of it, so a
    file rewritten in place (a model re-shipped, a ``final/`` saved again) changed a running
    policy's weights. Every parameter and buffer now has memory of its own, and shipping
    writes a new file instead of rewriting the old one."""
    import shutil

    import torch

    from flowzoo.agents.models.policy import Policy

    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    pol = Policy(model)
    before = {k: v.clone() for k, v in pol.model.state_dict().items()}
    weights = model / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:  # in place: the same inode, every byte after the header
        f.seek(4096)
        f.write(b"\x7f" * (size - 4096))
    after = pol.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_models_lists_every_name_with_its_key_and_status(capsys):
    """``flowzoo models``: each name a user can type, resolved through its recipe (the key a
    run record's build is checked against), what it continues and whether it is shipped."""
    import json

    from flowzoo.cli import main
    from flowzoo.tiny.recipe import named_config

    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["tiny-s"]["status"] == "shipped" and rows["tiny-s"]["key"] == "ca9ead3f2d06"
    for name in ("tiny-m", "tiny-s-code12", "tiny-s-conflict", "tiny-m-conflict"):
        assert rows[name]["key"] == named_config(name).key()
    assert rows["tiny-s-conflict"]["parent"] == rows["tiny-s"]["key"]
    # the registry is the one table: every row's number, status and page reach the listing
    assert rows["tiny-s"]["recipe"] == "10" and rows["tiny-s-code12"]["recipe"] == "12"
    assert rows["tiny-s-code"]["recipe_status"].startswith("superseded by -code12")
    assert all((Path(__file__).parents[2] / r["docs"]).is_file() for r in rows.values())
    assert main(["models"]) == 0
    assert "docs/testbed-conflict.md" in capsys.readouterr().out


def test_every_recipe_suffix_is_named_where_a_model_is_asked_for():
    """The help of ``train``/``eval --model`` and of the config's ``model`` field list the
    registry's suffixes by hand; this keeps them in step with :data:`RECIPES`."""
    import dataclasses

    from flowzoo.cli import build_parser
    from flowzoo.config import TrainConfig
    from flowzoo.tiny.recipe import RECIPES

    field = next(f for f in dataclasses.fields(TrainConfig) if f.name == "model")
    helps = {"TrainConfig.model": str(field.metadata)}
    parser = build_parser()
    for cmd in ("train", "eval"):
        sub = parser._subparsers._group_actions[0].choices[cmd]  # noqa: SLF001
        helps[cmd] = " ".join(a.help or "" for a in sub._actions if "--model" in a.option_strings)
    for where, text in helps.items():
        missing = [x for x in RECIPES if x and x not in text]
        assert not missing, f"{where}'s help does not name {missing}"
