"""Save / load / resume: everything a run needs to continue exactly, written atomically.

A checkpoint holds every policy (or adapter), the optimizers, PPO critics, the damper's EMA,
an estimator's running state (a per-role baseline), the step, the eval curve and the torch RNG, keyed by the config's identity. It may also hold
a *pending* metrics line: the step finished its update but was interrupted before its
evaluation or log line, so the resumed run evaluates (on the very same weights) and writes
it first — an interrupt loses nothing. Under FSDP each process writes its own shards.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import sys
from pathlib import Path
from typing import IO, Any, cast

import torch

from flowzoo.agents.models import threads
from flowzoo.agents.runs import rundir
from flowzoo.agents.runs.weights import stream_sha256
from flowzoo.agents.train import distributed, provenance

#: what every checkpoint holds (checked before anything of it is used)
KEYS = ("identity", "step", "router", "opts", "heads", "damper", "eval_curve", "torch_rng")
#: how a refused resume says to start over
RESTART = "restart with --resume false (resume=False: its checkpoint and metrics are removed)"
#: beside each checkpoint file: the sha256 of its bytes (a silently damaged file never resumes)
DIGEST_SUFFIX = ".sha256"


def digest_path(p: Path) -> Path:
    return p.with_name(p.name + DIGEST_SUFFIX)


def _digests(side: Path) -> list[str]:
    """The digests a sidecar accepts (none: absent or unreadable)."""
    try:
        got = json.loads(rundir.read_regular(side, 4096)).get("sha256", [])
    except (OSError, ValueError, AttributeError, RecursionError):
        return []
    return [d for d in got if isinstance(d, str)] if isinstance(got, list) else []


class _Hashing:
    """A binary file that hashes what is written to it (torch.save writes through it)."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.sha = f, hashlib.sha256()

    def write(self, b: bytes) -> int:
        self.sha.update(b)
        return self.f.write(b)

    def flush(self) -> None:
        self.f.flush()


def _plain(x: Any) -> Any:
    """A metrics line as plain JSON data (numpy scalars made numbers): a checkpoint holds
    only what ``torch.load(weights_only=True)`` reads, tensors and plain data."""
    if x is None:
        return None
    return json.loads(
        json.dumps(x, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
    )


def path(out: Path, dist: distributed.DistInfo, fsdp: bool) -> Path:
    """FSDP: one file per process (its shards); else one file, written by process 0."""
    return out / "checkpoint" / (f"state.rank{dist.rank}.pt" if fsdp else "state.pt")


def save(tr, pending: dict | None = None) -> None:
    """Write trainer ``tr``'s state (with an unwritten metrics line ``pending``)."""
    if not (tr.cfg.fsdp or tr.dist.main):
        return
    ln = tr.learner
    state = {
        "identity": tr.cfg.identity(),
        "world": tr.dist.world,
        "step": tr.step,
        "router": tr.router.state_dict(),
        "opts": {n: o.state_dict() for n, o in ln.opts.items()},
        "heads": {n: h.state_dict() for n, h in ln.heads.items()},
        "damper": ln.damper.state_dict() if ln.damper else None,
        # what the advantage estimator carries between steps (a per-role running baseline)
        "estimator": ln.estimator_state.state_dict() if ln.estimator_state else None,
        "eval_curve": [(int(s), float(a)) for s, a in tr.eval_curve],
        "torch_rng": torch.get_rng_state(),
        "pending": _plain(pending),
        # results depend on the thread count in the last bits: a resume reuses it
        "threads": torch.get_num_threads(),
        # the build the run started from, which a resume keeps (the scale may be rebuilt)
        "base_model": {k: v for k, v in tr.base_model.items() if k != "now"},
        # the sha256 of every data file the run reads: a resume on edited data is refused
        "data": tr.data_files,
    }
    p = tr.ckpt_path
    rundir.check_entry(p.parent, directory=True)  # checkpoint/ a real directory, not a link
    side, done = digest_path(p), []
    # every digest the sidecar accepts now: after a kill between the sidecar's write and the
    # rename below, the file there is the *older* one, so its digest is not always the first
    # (two such kills in a row once called a good checkpoint damaged)
    kept = _digests(side)

    def write(f: IO[bytes]) -> None:
        h = _Hashing(f)
        torch.save(state, cast(IO[bytes], h))
        done.append(h.sha.hexdigest())
        # before the new file replaces the old: a kill between leaves a sidecar that
        # accepts either, so the file there always passes its digest
        rundir.atomic_write(side, json.dumps({"sha256": done + kept}))

    rundir.atomic_write(p, write)
    rundir.atomic_write(side, json.dumps({"sha256": done}))


def open_verified(p: Path) -> IO[bytes]:
    """Checkpoint file ``p`` opened (a regular file, no link followed) after its bytes
    passed the sha256 its sidecar holds; else a ValueError naming it and how to restart."""
    f = rundir.open_regular(p)
    try:
        accepted = _digests(digest_path(p))
        if not accepted:
            raise ValueError(
                f"{p} has no digest beside it ({digest_path(p).name}: written by an older "
                f"version, or removed), so it cannot be checked; {RESTART}"
            )
        got = stream_sha256(f)
        if got not in accepted:
            raise ValueError(
                f"{p} fails its digest check (sha256 {got[:12]}..., written as "
                f"{accepted[0][:12]}...): it was damaged after it was written; {RESTART}"
            )
        f.seek(0)
        return f
    except BaseException:
        f.close()
        raise


def last_good(out: Path) -> str:
    """Where a stopped run's message may point: its checkpoint, only when every file of it
    passes its digest (a damaged one is never called good)."""
    files = sorted((out / "checkpoint").glob("state*.pt")) if (out / "checkpoint").is_dir() else []
    for f in files:
        try:
            open_verified(f).close()
        except (OSError, ValueError) as e:
            return f"no good checkpoint: {str(e).split(';')[0]}"
    if not files:
        return f"no checkpoint in {out}"
    return f"the last good checkpoint is in {out / 'checkpoint'}"


def save_final(tr) -> str | None:
    """Write ``final/`` whole or not at all, before a summary may say completed: into a
    staging directory, then renamed into place (an old final/ is moved aside and removed
    after). A failure (a full disk, a path the weights' files cannot record) returns the
    run's error, the staging removed and an old final/ left as it was."""
    cfg, dist, out = tr.cfg, tr.dist, tr.out
    if not (dist.main or cfg.fsdp):
        return None
    final, part, old = out / "final", out / rundir.FINAL_PARTIAL, out / rundir.FINAL_OLD
    try:
        if dist.main:
            rundir.check_entries(out)  # no link among final/ and its staging
            for d in (part, old):
                if d.is_dir():
                    shutil.rmtree(d)
        tr.router.save_pretrained(part, sharded=cfg.fsdp, write=dist.main)
        if dist.main:  # safetensors writes 0600; the umask decides, as for any file
            rundir.umask_modes(part)
            for f in part.rglob("*"):
                if f.is_file() and not f.is_symlink():
                    with f.open("rb+") as fh:
                        os.fsync(fh.fileno())
            if final.is_dir():
                os.rename(final, old)
            os.rename(part, final)
            shutil.rmtree(old, ignore_errors=True)
    except Exception as e:
        if dist.main:
            shutil.rmtree(part, ignore_errors=True)
        return (
            f"{type(e).__name__}: {str(e)[:200]} (writing {final}; the checkpoint is kept: "
            "free space or fix the cause, then run the same command again to write final/)"
        )
    return None


def load(tr) -> tuple[bool, dict | None]:
    """Restore ``tr`` from its checkpoint: (found, the pending metrics line if any)."""
    cfg, dist, p = tr.cfg, tr.dist, tr.ckpt_path
    found = os.path.lexists(p)  # a dangling link is refused when read, not skipped
    if cfg.fsdp:  # every process resumes, or none does
        n = int(distributed.sum_floats([float(found)], dist)[0])
        if 0 < n < dist.world:
            raise ValueError(
                f"{p.parent} holds shards for {n} of {dist.world} processes; resume with the "
                "world size that wrote it, or resume=False"
            )
    if not found:
        return False, None
    state = read(p, cfg.identity(), tr.learner)
    # the inputs it started on, before anything of it is used (a changed file: refused)
    tr.warnings += provenance.check_resume(state, tr.base_model, tr.data_files, p)
    if cfg.fsdp:
        if state.get("world") != dist.world:
            raise ValueError(
                f"{p} was written by {state.get('world')} FSDP processes, this run has "
                f"{dist.world}; resume with the same number"
            )
        lo = -distributed.max_int(-state["step"], dist)
        hi = distributed.max_int(state["step"], dist)
        if lo != hi:
            raise ValueError(f"FSDP shards in {p.parent} are of steps {lo}..{hi}")
    ln = tr.learner
    try:  # names were checked by read(); a mismatch left (a shape) is still this file's
        tr.router.load_state_dict(state["router"])
        for pol in tr.router.policies.values():
            pol.sync_backend()
        for n, o in ln.opts.items():
            o.load_state_dict(state["opts"][n])
        for n, h in ln.heads.items():
            h.load_state_dict(state["heads"][n])
        if ln.damper and state["damper"]:
            ln.damper.load_state_dict(state["damper"])
        if ln.estimator_state is not None:
            ln.estimator_state.load_state_dict(state.get("estimator"))
        torch.set_rng_state(state["torch_rng"])
    except (RuntimeError, KeyError, ValueError, TypeError) as e:
        raise ValueError(
            f"{p} does not fit this run's model ({type(e).__name__}: {str(e)[:160]}); {RESTART}"
        ) from None
    if state.get("threads") and threads.automatic(cfg.threads):  # else the user pinned it
        threads.restore(state["threads"], announce=dist.main)
    tr.step = state["step"]
    tr.eval_curve = [tuple(x) for x in state["eval_curve"]]
    keep_base_model(tr, state.get("base_model"))
    return True, state.get("pending")


#: the most JSON a checkpoint's base-build record may hold (a real one is well under 1 KiB)
RECORD_LIMIT = 1 << 16


def keep_base_model(tr, started: Any) -> None:
    """A resumed run's records name the build it *started* from (its base readings are that
    build's): other weights were refused before (:func:`provenance.check_resume`), so what
    may differ is where the same build now lies (a cache moved). A record that cannot be
    compared file by file (not a weights identity) is kept beside this session's with a
    warning. A checkpoint from before this record has none to keep."""
    try:  # small plain JSON data only, the same after a round trip (the summary writes it)
        text = json.dumps(started, allow_nan=False)
        plain = len(text) <= RECORD_LIMIT and json.loads(text) == started
    except (TypeError, ValueError, RecursionError):  # a tensor, NaN, nesting past the stack
        plain = False
    if not plain or not isinstance(started, dict):
        return
    now = tr.base_model
    same = (
        started.get("sha256") == now.get("sha256")
        if started.get("sha256") and now.get("sha256")
        else started.get("sizes") == now.get("sizes")
    )
    if same:
        tr.base_model = started
        return
    tr.base_model = {**started, "now": now}
    said = (
        f"resumed on other base weights than the run started from ({started.get('path')!r} "
        f"then, {now.get('path')!r} now): its base readings are the first build's"
    )
    tr.warnings.append(said)
    if tr.dist.main:
        print(f"flowzoo: WARNING: {said}", file=sys.stderr)


def read(p: Path, identity: str, learner: Any) -> dict[str, Any]:
    """A checkpoint file, checked whole before anything of it is used: readable, every key
    there, this configuration's, one state per optimizer and head. Any failure is a
    ValueError naming the file and how to start over (never a raw torch error)."""
    with open_verified(p) as f:  # the digest first: a damaged file is never unpickled
        try:  # tensors and plain data only: a pickle planted there cannot run code
            state = torch.load(f, weights_only=True, map_location="cpu")
        except pickle.UnpicklingError as e:
            raise ValueError(
                f"{p} is not a checkpoint this version can read safely (it holds objects "
                f"other than tensors and plain data: {str(e).splitlines()[-1][:120]}); "
                f"{RESTART}, or use another out_dir"
            ) from None
        except Exception as e:  # a torn or foreign file: zip and torch errors alike
            raise ValueError(
                f"{p} is not a readable checkpoint ({type(e).__name__}: {str(e)[:120]}); it "
                f"is corrupt or truncated: {RESTART}, or use another out_dir"
            ) from None
    missing = [k for k in KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(f"{p} is not a flowzoo checkpoint (it lacks {missing}); {RESTART}")
    if state["identity"] != identity:
        raise ValueError(
            f"{p} belongs to a different configuration; use another out_dir or {RESTART}"
        )
    step = state["step"]
    curve = state["eval_curve"]
    pairs = isinstance(curve, list) and all(
        isinstance(x, (list, tuple))
        and len(x) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x)
        for x in curve
    )
    if not isinstance(step, int) or step < 0 or not pairs:
        raise ValueError(f"{p} holds a bad step {step!r} or eval curve; {RESTART}")
    router = state["router"] if isinstance(state["router"], dict) else {}
    bad = [
        f"{n}/{k}"
        for n, sd in router.items()
        for k, t in (sd.items() if isinstance(sd, dict) else ())
        if torch.is_tensor(t) and t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]
    if bad:  # never a state to continue from (a run saves only finite weights)
        raise ValueError(f"{p} holds non-finite weights ({', '.join(bad[:3])}); {RESTART}")
    for what, have in (("opts", learner.opts), ("heads", learner.heads)):
        got = state[what]
        if not isinstance(got, dict) or set(got) != set(have):
            shown = sorted(got) if isinstance(got, dict) else type(got).__name__
            raise ValueError(
                f"{p} holds {what} for {shown}, this run has {sorted(have)}; {RESTART}"
            )
    return state
