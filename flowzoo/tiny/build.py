"""The project's own base models: character-level Qwen3-architecture policies, pretrained on
transcripts of the workflows themselves.

Real checkpoints cannot be downloaded here, so flowzoo makes small ones that can play every
role: a character tokenizer (``tokenizers``, saved as a ``transformers`` fast tokenizer) and
``Qwen3ForCausalLM`` at three scales mirroring the study's 0.6B/1.7B/4B spread. The corpus
comes from running the math and code workflow envs (functions and stdin/stdout programs) with
*noisy* scripted experts, so every role sees its real prompt format and answers in its real
output format, and the pretrained models are imperfect: RL has room to help and room to hurt.
Everything downstream loads them with ``from_pretrained(path)``, exactly like a real
checkpoint. Embeddings are untied (vLLM's weight reload mishandles a tied ``lm_head``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import math
import os
import shutil
import string
import sys
import time
from pathlib import Path

import torch

from flowzoo.agents.models.chat import CHAT_TEMPLATE, add_chat_template, has_chat_template
from flowzoo.agents.models.threads import apply_threads
from flowzoo.tiny.corpus import corpus_digest, corpus_fingerprint, make_corpus
from flowzoo.tiny.pretrain import train_loop
from flowzoo.tiny.recipe import (
    RECIPE_VERSION,
    RECIPES,
    SCALES,
    PretrainConfig,
    fast_config,
    named_config,
)

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
CHARSET = [c for c in string.printable if c not in "\x0b\x0c\r"]


def cache_root() -> Path:
    """``$FLOWZOO_CACHE`` or ``~/.cache/flowzoo``."""
    return Path(os.environ.get("FLOWZOO_CACHE", Path.home() / ".cache" / "flowzoo"))


# ------------------------------------------------------------------------------ tokenizer


def build_tokenizer():
    """A character-level fast tokenizer (printable ASCII + specials; others -> ``<unk>``).
    ``tok(text)`` prepends BOS, so libraries that tokenise plain prompts themselves (TRL)
    feed the models the BOS + text they were pretrained on."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + CHARSET)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
        chat_template=CHAT_TEMPLATE,  # served tiny models answer chat requests (models/chat.py)
    )


def build_model(scale: str, vocab_size: int, max_len: int = 1024, seed: int = 0, tie: bool = False):
    """A randomly initialised ``Qwen3ForCausalLM`` of the given tiny scale (``tie``: the
    output head shares the input embedding, as Qwen3 0.6B-4B do)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if scale in SCALES:
        dims = SCALES[scale]
    else:
        raise ValueError(f"unknown tiny scale {scale!r}; valid: {', '.join(SCALES)}")
    cfg = Qwen3Config(
        vocab_size=vocab_size,
        max_position_embeddings=max_len,
        head_dim=dims["hidden_size"] // dims["num_attention_heads"],
        tie_word_embeddings=tie,
        rope_theta=10000.0,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        **dims,
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(cfg)


def save_random_model(
    out_dir: str | os.PathLike,
    scale: str = "tiny-s",
    tie: bool = False,
    seed: int = 0,
    chat_template: str | None = None,
) -> Path:
    """A randomly initialised tiny Qwen3 model + the char tokenizer, saved where
    ``from_pretrained`` (and vLLM) load it: the stand-in for an architecture test (tied
    embeddings, a chat template) that needs no pretraining."""
    tok = build_tokenizer()
    if chat_template is not None:
        tok.chat_template = chat_template
    model = build_model(scale, len(SPECIALS) + len(CHARSET), seed=seed, tie=tie)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return Path(out_dir)


def parameter_count(scale: str) -> int:
    """Exact parameter count of a tiny scale."""
    return sum(p.numel() for p in build_model(scale, len(SPECIALS) + len(CHARSET)).parameters())


# ------------------------------------------------------------------------------ encoding


def _encode(tok, rows, max_len: int) -> list[tuple[list[int], int]]:
    """(ids, number of prompt tokens) per row; prompts are cut from the left to fit."""
    out = []
    for _, prompt, completion in rows:
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        c = tok(completion, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        c = c[: max_len // 2]
        room = max_len - 1 - len(c)
        p = [tok.bos_token_id] + p[-room:]
        out.append((p + c, len(p)))
    return out


# ------------------------------------------------------------------------------ training


def pretrain(cfg: PretrainConfig, out_dir: str | os.PathLike, progress: bool = True) -> Path:
    """Generate the corpus, train, and save model + tokenizer + ``flowzoo_tiny.json``; with
    ``midtrain_steps`` the pretrained base (``cfg.base()``, cached) continues on the
    behaviour mix instead (:func:`training_stage`).

    Resumable: a ``checkpoint.pt`` (model, optimizer, step, RNG) is written as it goes and
    picked up by the next call with the same ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    apply_threads(0, announce=progress, keep=True)  # the count this process set, or the cores
    t0 = time.time()
    rows, digest = _corpus(cfg, out, progress)
    corpus_s = time.time() - t0
    tok = build_tokenizer()
    examples = _encode(tok, rows, cfg.max_len)
    model, steps, lr, lr_at, name, extra = training_stage(cfg, len(tok), progress, out.parent)
    opt = torch.optim.AdamW(
        model.parameters(), lr=lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98)
    )
    losses = train_loop(
        model,
        opt,
        examples,
        tok.pad_token_id,
        cfg,
        steps,
        lr_at,
        out / "checkpoint.pt",
        progress,
        f"{name} {cfg.scale}",
    )
    total_s = time.time() - t0
    extra["corpus_sha256"] = digest
    built = save_build(out, model, tok, cfg, len(examples), corpus_s, total_s, losses, **extra)
    (out / CORPUS_FILE).unlink(missing_ok=True)  # kept only while the build may resume
    return built


#: a build's corpus, kept beside its checkpoint until the build is saved
CORPUS_FILE = "corpus.json.gz"


def _corpus(cfg: PretrainConfig, out: Path, progress: bool) -> tuple[list, str]:
    """The build's corpus and its sha256 (what a build records: a rebuild whose weights differ
    says which input moved, the corpus or the stage's base). Why a file: making a large
    corpus takes most of an hour on 2 cores, and a killed build would make it again on every
    resume; the file is written whole (a temp name, renamed) and read back only when its
    rows hash to the digest stored with them."""
    import gzip

    path = out / CORPUS_FILE
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            kept = json.load(f)
        rows = [tuple(r) for r in kept["rows"]]
        if corpus_digest(rows) == kept["sha256"]:
            if progress:
                print(f"flowzoo: the {cfg.scale} corpus read back from {path}", file=sys.stderr)
            return rows, kept["sha256"]
    except (OSError, ValueError, KeyError, TypeError, EOFError):
        pass
    rows = make_corpus(cfg, progress=progress)
    digest = corpus_digest(rows)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=1) as f:
        json.dump({"sha256": digest, "rows": rows}, f)
    os.replace(tmp, path)
    return rows, digest


#: warmup steps of the mid-training stage (its learning rate is otherwise constant)
MIDTRAIN_WARMUP = 20


def training_stage(
    cfg: PretrainConfig, vocab_size: int, progress: bool, cache_dir: Path | None = None
):
    """(model, steps, lr, lr schedule, stage name, extra metadata) of a build: pretraining a
    fresh model (warmup, then cosine to a tenth of ``lr``) or, with ``midtrain_steps``, the
    behaviour mid-training stage (recipe 8, docs/testbed.md): ``cfg.base()`` (shipped,
    cached in the default cache or in ``cache_dir`` beside the stage's own build, else
    built there now) continues at ``midtrain_lr`` (constant, or decayed to 0 with
    ``midtrain_decay``) on ``make_corpus(cfg)``,
    the corpus re-written with per-role shortcut rates and coordination drills.

    Why a stage: a from-scratch build on the behaviour mix learned every step fact (0.998)
    but not to chain them (worked accuracy 0.9 -> 0.2), a late, sharp transition of
    pretraining; the behaviour priors move in a few hundred steps of a model that chains."""
    if cfg.midtrain_steps:
        from transformers import AutoModelForCausalLM

        parent = cfg.parent()
        home = cache_root() / "tiny" / f"{cfg.scale}-{parent.key()}"
        where = None if cache_dir is None or _built(home) else cache_dir  # the default cache first
        base = ensure_tiny(parent, cache_dir=where, progress=progress)
        model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
        lr = cfg.midtrain_lr

        def schedule(step: int) -> float:
            warm = min(1.0, (step + 1) / MIDTRAIN_WARMUP)
            if not cfg.midtrain_decay:
                return lr * warm
            left = (cfg.midtrain_steps - step) / max(1, cfg.midtrain_steps - MIDTRAIN_WARMUP)
            return lr * min(warm, max(0.0, left))

        extra = {
            "base_key": parent.key(),
            "base_sha256": _sha256(Path(base) / "model.safetensors"),
        }
        return model, cfg.midtrain_steps, lr, schedule, "mid-train", extra

    def warmup_then_cosine(step: int) -> float:
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    model = build_model(cfg.scale, vocab_size, cfg.max_len, cfg.seed)
    return model, cfg.steps, cfg.lr, warmup_then_cosine, "pretrain", {}


def save_build(
    out: Path,
    model,
    tok,
    cfg: PretrainConfig,
    n_examples: int,
    corpus_s: float,
    total_s: float,
    losses: list[float],
    **extra,
) -> Path:
    """Save a finished build (model, tokenizer, ``flowzoo_tiny.json``) and drop its
    checkpoint; ``extra`` goes into the metadata."""
    model.save_pretrained(out)
    tok.save_pretrained(out)
    meta = {
        "config": dataclasses.asdict(cfg),
        "key": cfg.key(),
        "recipe_version": RECIPE_VERSION,
        "parameters": sum(p.numel() for p in model.parameters()),
        "corpus_examples": n_examples,
        "corpus_seconds": round(corpus_s, 2),
        "train_seconds": round(total_s - corpus_s, 2),
        "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
        **extra,
    }
    (out / "flowzoo_tiny.json").write_text(json.dumps(meta, indent=1, default=str))
    (out / "checkpoint.pt").unlink(missing_ok=True)
    return out


def _sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes (a build's files are at most a few MB)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


#: measured first-build times on 2 idle cores (README: Tiny base models)
FIRST_BUILD_ESTIMATE = {
    "tiny-s": "9 minutes; a conflict stage about 30 more",
    "tiny-m": "40-45 minutes",
    "tiny-l": "85-90 minutes",
}


#: where the shipped base models live inside the package, with MANIFEST.json
SHIPPED = Path(__file__).parent / "weights"


def shipped_manifest() -> dict:
    """scale -> what was shipped (recipe key, recipe version, corpus fingerprint, sha256 of
    every file); empty when the package ships none."""
    path = SHIPPED / "MANIFEST.json"
    return json.loads(path.read_text()) if path.exists() else {}


@functools.lru_cache(maxsize=16)
def _verified(key: str) -> Path | None:
    """The shipped model built by the recipe with ``key`` (whatever name it is shipped
    under) if every file matches its sha256 (checked once per process); None otherwise."""
    for slot, entry in shipped_manifest().items():
        if entry.get("key") != key:
            continue
        path = SHIPPED / slot
        for name, digest in entry["files"].items():
            f = path / name
            if not f.exists() or _sha256(f) != digest:
                print(
                    f"flowzoo: shipped {slot} file {name} is missing or altered; building instead",
                    file=sys.stderr,
                )
                return None
        return path
    return None


def ship(path: str | os.PathLike, cfg: PretrainConfig, name: str | None = None) -> dict:
    """Copy a built model into the package (``weights/<name>``: the model name it is asked
    for by, the scale for a scale's default build) and record it in the manifest under that
    name: the recipe key and version, the corpus fingerprint and each file's sha256. Why by
    name: a named build (``tiny-m-conflict``) is a scale's second model, not its default."""
    name = name or cfg.scale
    if (named := named_config(name)) is None or named.key() != cfg.key():
        raise ValueError(f"{name!r} does not name the recipe being shipped (key {cfg.key()})")
    src, dst = Path(path), SHIPPED / name
    dst.mkdir(parents=True, exist_ok=True)
    names = sorted(f.name for f in src.iterdir() if f.is_file() and f.name != "checkpoint.pt")
    for old in dst.iterdir():
        if old.name not in names:
            old.unlink()
    for file in names:  # a new file, renamed over the old: a process that maps it keeps it
        tmp = dst / f".{file}.tmp"
        shutil.copyfile(src / file, tmp)
        os.replace(tmp, dst / file)
    entry = {
        "key": cfg.key(),
        "recipe_version": RECIPE_VERSION,
        "corpus_fingerprint": corpus_fingerprint(cfg),
        "files": {n: _sha256(dst / n) for n in names},
        "bytes": sum((dst / n).stat().st_size for n in names),
    }
    manifest = {**shipped_manifest(), name: entry}
    (SHIPPED / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    _verified.cache_clear()
    return entry


@contextlib.contextmanager
def build_lock(path: Path, progress: bool = True):
    """One build per cache dir at a time: a second process waits here (and says so), then
    finds the finished model instead of writing the same files at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress:
                print(f"flowzoo: another process is building {path}; waiting", file=sys.stderr)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _built(path: Path) -> bool:
    return (path / "flowzoo_tiny.json").exists() and (path / "config.json").exists()


def check_weights(path: Path, scale: str) -> Path:
    """``path`` if its weight file is present and whole (its safetensors header and every
    tensor it names fit in the file); else a clear error naming the file and the command that
    rebuilds it, instead of a raw loader error deep inside ``from_pretrained``."""
    from safetensors import safe_open

    f = path / "model.safetensors"
    fix = f"remove {path} and run `flowzoo pretrain-tiny --scale {scale}` to rebuild it"
    if not f.is_file():
        raise FileNotFoundError(f"tiny model weights missing: {f}; {fix}")
    try:
        with safe_open(str(f), framework="pt") as w:
            for name in w.keys():
                w.get_slice(name)
    except Exception as e:
        raise ValueError(f"tiny model weights {f} are corrupt ({e}); {fix}") from None
    return path


def ensure_tiny(
    name_or_cfg: str | PretrainConfig = "tiny-m",
    fast: bool = False,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
    shipped: bool = True,
) -> Path:
    """The path of a pretrained tiny model: the one shipped in the package when its recipe
    matches (no build), else the cached build, else built now (cached by config hash).

    ``name_or_cfg``: ``tiny-s`` | ``tiny-m`` | ``tiny-l`` or a :class:`PretrainConfig`;
    ``shipped=False`` ignores the shipped files (``flowzoo pretrain-tiny`` rebuilds)."""
    if isinstance(name_or_cfg, PretrainConfig):
        cfg = name_or_cfg
    else:
        cfg = fast_config(name_or_cfg) if fast else PretrainConfig(scale=name_or_cfg)
    if shipped and (found := _verified(cfg.key())) is not None:
        return found
    root = Path(cache_dir) if cache_dir is not None else cache_root() / "tiny"
    path = root / f"{cfg.scale}-{cfg.key()}"
    if _built(path):
        if not has_chat_template(path):  # a build from before the chat template
            with build_lock(path, progress):
                add_chat_template(path)
        return check_weights(path, cfg.scale)
    with build_lock(path, progress):
        if _built(path):  # another process finished it while this one waited
            return path
        if progress:
            slow = cfg.steps is None or cfg.steps > 300
            est = FIRST_BUILD_ESTIMATE.get(cfg.scale, "a while") if slow else "seconds"
            print(
                f"flowzoo: building the {cfg.scale} model (about {est} on 2 idle cores); "
                f"cached in {path} (set FLOWZOO_CACHE to move the cache)",
                file=sys.stderr,
            )
        return pretrain(cfg, path, progress=progress)


def resolve_model(model: str, fast: bool = False) -> str:
    """A model argument as the CLI takes it: a tiny scale name (built on first use), a
    scale's code testbed (``tiny-s-code``, built on first use), either with ``-stageN`` (another
    behaviour stage of its recipe) or a local checkpoint path."""
    if model in SCALES:
        return str(ensure_tiny(model, fast=fast))
    cfg = None if fast else named_config(model)
    if cfg is not None:
        return str(ensure_tiny(cfg))
    if not Path(model).exists():
        raise FileNotFoundError(
            f"model {model!r} is neither a tiny scale ({', '.join(SCALES)}), a scale's code "
            f"testbed or role-conflict build ({', '.join(s + x for x in RECIPES if x for s in SCALES)}), either with "
            "-stageN, nor a local path"
        )
    return model


def model_table() -> list[dict[str, str]]:
    """Every tiny model name a user can type (each scale, each with each recipe suffix of the
    registry, :data:`~flowzoo.tiny.recipe.RECIPES`): its recipe key, what it continues (its
    parent build's key), the study's recipe number, what it is for, whether it is current,
    and whether it is shipped, built in the cache, or built on first use. Why: a name is a
    recipe, and a run record's name says which build only through this key."""
    rows = []
    for suffix, recipe in RECIPES.items():
        for scale in SCALES:
            cfg = named_config(scale + suffix)
            if cfg is None:
                continue
            key = cfg.key()
            cached = cache_root() / "tiny" / f"{scale}-{key}"
            if _verified(key) is not None:
                status = "shipped"
            elif _built(cached):
                status = f"built: {cached}"
            else:
                status = "built on first use"
            parent = cfg.parent().key() if cfg.midtrain_steps else "-"
            rows.append(
                {
                    "name": scale + suffix,
                    "key": key,
                    "parent": parent,
                    "recipe": recipe.number,
                    "recipe_status": recipe.status,
                    "status": status,
                    "what": recipe.what,
                    "docs": recipe.docs,
                }
            )
    return rows
