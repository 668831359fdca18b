"""Run records that tell the truth, and configs refused at the boundary: a crash is
``failed`` (no ``final/``), Ctrl-C anywhere loses nothing, a run dir of another config is
refused before it is touched, ``resume=False`` starts over, a torn metrics line is skipped."""

import json
import pickle

import pytest

from flowzoo.analysis.records import read_metrics

torch = pytest.importorskip("torch")
from flowzoo.agents.train.trainer import Trainer  # noqa: E402
from tests.agents.train.test_training import _cfg as agents_cfg  # noqa: E402


def _cfg(tiny_model, out, **kw):
    """The agents tests' tiny run, resumable, evaluated and checkpointed every step."""
    base = dict(
        steps=3,
        group_size=2,
        eval_every=1,
        eval_episodes=4,
        eval_ood_episodes=3,
        save_every=1,
        max_new_tokens=24,
        out_dir=str(out),
        resume=True,
    )
    return agents_cfg(tiny_model, out, **{**base, **kw})


def test_a_crash_is_recorded_as_failed_without_final_weights(tiny_model, tmp_path):
    class Crashes(Trainer):
        def _rollout(self, step):
            if step == 1:
                raise RuntimeError("probability tensor contains inf")
            return super()._rollout(step)

    tr = Crashes(_cfg(tiny_model, tmp_path / "r"), progress=False)
    with pytest.raises(RuntimeError):
        tr.train()
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["status"].startswith("failed") and "inf" in s["error"]
    assert not (tmp_path / "r" / "final").exists()


@pytest.mark.parametrize("where", ["evaluate", "rollout"])
def test_ctrl_c_anywhere_loses_nothing(tiny_model, tmp_path, where):
    ref = Trainer(_cfg(tiny_model, tmp_path / "ref"), progress=False)
    ref.train()
    want = read_metrics(tmp_path / "ref" / "metrics.jsonl")

    class Interrupted(Trainer):
        def evaluate(self):
            if where == "evaluate" and self.step == 2:
                raise KeyboardInterrupt
            return super().evaluate()

        def _rollout(self, step):
            if where == "rollout" and step == 2:
                raise KeyboardInterrupt
            return super()._rollout(step)

    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        Interrupted(_cfg(tiny_model, out), progress=False).train()
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    s = Trainer(_cfg(tiny_model, out), progress=False).train()
    assert s["status"] == "completed" and s["resumed"]
    # the out-of-distribution split is evaluated beside the held-out one, resumed exactly
    assert s["ood"]["problems"] == 3 and 0.0 <= s["ood"]["final"] <= 1.0
    got = read_metrics(out / "metrics.jsonl")
    assert all(len(r["eval"]["ood"]["per_problem"]) == 3 for r in got if "eval" in r)
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for a, b in zip(got, want, strict=True):
        assert _no_cost(a.get("eval")) == _no_cost(b.get("eval"))
        assert a.get("reward") == b.get("reward")


def _no_cost(ev: dict | None) -> dict | None:
    """An evaluation without its wall-clock cost (the one figure a rerun may not repeat)."""
    if ev is None:
        return None
    out = {k: v for k, v in ev.items() if k != "cost"}
    for part in ("greedy", "ood"):
        if part in out:
            out[part] = _no_cost(out[part])
    return out


def test_another_config_is_refused_before_the_dir_is_touched(tiny_model, tmp_path):
    out = tmp_path / "r"
    Trainer(_cfg(tiny_model, out, steps=1), progress=False).train()
    before = (out / "config.json").read_text()
    with pytest.raises(ValueError, match="different configuration"):
        Trainer(_cfg(tiny_model, out, steps=1, lr=5e-4), progress=False).train()
    assert (out / "config.json").read_text() == before


def test_a_run_killed_before_its_first_checkpoint_is_not_taken_over(tiny_model, tmp_path):
    class Crashes(Trainer):
        def _rollout(self, step):
            raise RuntimeError("killed before any checkpoint")

    out = tmp_path / "r"
    with pytest.raises(RuntimeError):
        Crashes(_cfg(tiny_model, out, save_every=5), progress=False).train()
    assert not (out / "checkpoint").exists()
    with pytest.raises(ValueError, match="different configuration"):
        Trainer(_cfg(tiny_model, out, lr=5e-4), progress=False).train()


def test_save_every_zero_saves_at_the_end_and_the_run_extends(tiny_model, tmp_path):
    out = tmp_path / "r"
    Trainer(_cfg(tiny_model, out, steps=1, save_every=0, eval_every=0), progress=False).train()
    assert (out / "checkpoint").exists()
    s = Trainer(_cfg(tiny_model, out, steps=2, save_every=0, eval_every=0), progress=False).train()
    assert s["resumed"] and s["steps_done"] == 2


@pytest.mark.parametrize("damage", ["torn", "empty", "foreign"])
def test_a_corrupt_checkpoint_refuses_the_resume_and_changes_nothing(tiny_model, tmp_path, damage):
    out = tmp_path / "r"
    Trainer(_cfg(tiny_model, out, steps=1, eval_every=0), progress=False).train()
    (ckpt,) = (out / "checkpoint").glob("*.pt")
    data = {"torn": ckpt.read_bytes()[:100], "empty": b"", "foreign": pickle.dumps([1, 2])}
    ckpt.write_bytes(data[damage])
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"state.pt .*--resume false"):
        Trainer(_cfg(tiny_model, out, steps=2, eval_every=0), progress=False).train()
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # summary still completed, final/ and metrics as they were
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


def test_a_failing_tracker_is_recorded_as_failed(tiny_model, tmp_path, monkeypatch):
    from flowzoo.agents.runs import runlog

    def refuses(self, resumed_at):
        raise ConnectionError("tracker server unreachable")

    monkeypatch.setattr(runlog.RunLog, "start", refuses)
    out = tmp_path / "t"
    with pytest.raises(ConnectionError):
        Trainer(_cfg(tiny_model, out, steps=1, eval_every=0), progress=False).train()
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "failed: ConnectionError" and "unreachable" in s["error"]


def test_resume_false_starts_over_and_a_later_resume_continues_the_new_run(tiny_model, tmp_path):
    out = tmp_path / "r"
    Trainer(_cfg(tiny_model, out, steps=2, seed=1), progress=False).train()
    s = Trainer(_cfg(tiny_model, out, steps=1, seed=2, resume=False), progress=False).train()
    assert not s["resumed"] and s["steps_done"] == 1
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [-1, 0]
    s = Trainer(_cfg(tiny_model, out, steps=2, seed=2), progress=False).train()
    assert s["resumed"] and s["steps_done"] == 2


def test_a_torn_metrics_line_does_not_stop_resume_or_report(tiny_model, tmp_path):
    from flowzoo.analysis.report import load_runs

    out = tmp_path / "r"
    Trainer(_cfg(tiny_model, out, steps=1), progress=False).train()
    with (out / "metrics.jsonl").open("a") as f:
        f.write('{"step": 1, "rew')  # a kill in the middle of a write
    assert Trainer(_cfg(tiny_model, out, steps=2), progress=False).train()["steps_done"] == 2
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [-1, 0, 1]
    assert len(load_runs(tmp_path)) == 1


def test_kl_per_role_must_name_the_env_roles(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="does not have"):
        Trainer(_cfg(tiny_model, tmp_path, kl_per_role={"critic": 0.1}), progress=False)


@pytest.mark.parametrize("param", ["full", "lora"])
def test_eval_takes_a_run_dir_and_routes_its_policies(tiny_model, tmp_path, param):
    from flowzoo.agents.train.evaluate import evaluate_env, run_policies

    out = tmp_path / param
    cfg = _cfg(
        tiny_model,
        out,
        steps=1,
        eval_every=0,
        policy="isolated",
        param=param,
        lora_r=4,
        lora_alpha=8,
    )
    Trainer(cfg, progress=False).train()
    env_id, opts, policy_for = run_policies(out)
    assert env_id == "voting-math"
    names = {policy_for(r)[0] for r in ("solver", "aggregator")}
    assert names == {"solver", "aggregator"}
    res = evaluate_env(env_id, policy_for, n_episodes=4, env_options=opts)
    assert 0.0 <= res.accuracy <= 1.0 and set(res.parse_fail) == {"solver", "aggregator"}
    with pytest.raises(FileNotFoundError, match="no final weights"):
        (out / "final").rename(out / "gone")
        run_policies(out)


def test_a_run_with_no_learning_signal_says_so(tiny_model, tmp_path):
    """The test model never writes passing code: every GRPO group has one reward for all its
    members, every gradient is 0, and after 5 such steps the run warns (console and summary)."""
    cfg = _cfg(
        tiny_model,
        tmp_path / "r",
        env="voting-code",
        steps=6,
        eval_every=0,
        save_every=0,
        max_new_tokens=16,
    )
    s = Trainer(cfg, progress=False).train()
    assert s["no_signal_steps"] == 6
    assert sum("no learning signal" in w for w in s["warnings"]) == 1


def test_eval_rebuilds_a_runs_frozen_roles_and_takes_per_role_models(tiny_model, tmp_path):
    """A run whose aggregator was the scripted expert is evaluated with it again; the CLI
    takes per-role models and says where it wrote the results."""
    import json
    import subprocess
    import sys

    from flowzoo.agents.models.players import ScriptedRole
    from flowzoo.agents.train.evaluate import run_policies

    out = tmp_path / "run"
    cfg = _cfg(tiny_model, out, steps=1, eval_every=0, role_models={"aggregator": "scripted"})
    Trainer(cfg, progress=False).train()
    _, _, policy_for = run_policies(out)
    assert isinstance(policy_for("aggregator")[1], ScriptedRole)
    assert policy_for("solver")[0] == "shared"
    res = tmp_path / "eval.json"
    r = subprocess.run(
        [sys.executable, "-m", "flowzoo.cli", "eval", "--model", str(tiny_model),
         "--role-model", "aggregator=scripted:0.5", "--env", "voting-math", "--episodes", "3",
         "--samples", "1", "--json", str(res)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "aggregator: scripted:0.5" in r.stdout and str(res) in r.stdout
    rows = json.loads(res.read_text())
    assert rows[0]["env"] == "voting-math" and rows[0]["episodes"] == 3
    # held-out and out-of-distribution side by side (--split both, the default)
    assert rows[0]["split"] == "test" and rows[0]["ood"]["episodes"] == 3
    assert "voting-math          ood " in r.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "flowzoo.cli", "eval", "--model", "openai:ftp://x#m"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode != 0 and "endpoint spec" in bad.stderr


# ------------------------------------------------------------------ records you can trust


def test_records_are_written_whole_or_not_at_all(tmp_path):
    from flowzoo.agents.runs import rundir

    p = tmp_path / "summary.json"
    rundir.write_json(p, {"status": "completed"})

    def dies(f):
        f.write(b'{"status": "fai')
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rundir.atomic_write(p, dies)
    assert json.loads(p.read_text()) == {"status": "completed"}
    assert [x.name for x in tmp_path.iterdir()] == ["summary.json"]  # no temp file left


@pytest.mark.parametrize("torn", ["summary.json", "config.json"])
def test_a_torn_record_is_skipped_and_named_by_the_report(tiny_model, tmp_path, capsys, torn):
    import shutil

    from flowzoo.analysis.report import load_runs

    Trainer(_cfg(tiny_model, tmp_path / "a", steps=1), progress=False).train()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b" / torn).write_bytes((tmp_path / "b" / torn).read_bytes()[:40])
    assert [r.path.name for r in load_runs(tmp_path)] == ["a"]
    assert f"{tmp_path / 'b' / torn}: unreadable" in capsys.readouterr().err


@pytest.mark.parametrize("cut", [4, 100, -50])
def test_a_truncated_weights_file_is_named_before_anything_loads(tiny_model, tmp_path, cut):
    import shutil

    from flowzoo.cli import main

    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    w = model / "model.safetensors"
    w.write_bytes(w.read_bytes()[:cut])
    with pytest.raises(ValueError, match="model.safetensors is truncated or corrupt"):
        Trainer(_cfg(tiny_model, tmp_path / "r", model=str(model)), progress=False)
    assert main(["eval", "--model", str(model), "--episodes", "1", "--env", "voting-math"]) == 2


def _math_file(path, n=40):
    rows = [{"question": f"What is {i} + {i + 2}?", "answer": str(2 * i + 2)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _mbpp_file(path, n=30):
    rows = [
        {
            "task_id": i,
            "text": f"Write a function that adds {i} to x.",
            "code": f"def add_{i}(x):\n    return x + {i}\n",
            "test_list": [f"assert add_{i}(1) == {i + 1}"],
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("family", ["math", "code"])
def test_a_run_on_a_users_file_reports_held_out_accuracy_on_disjoint_problems(
    tiny_model, tmp_path, capsys, family
):
    from flowzoo.cli import main
    from flowzoo.tasks import TaskSet
    from flowzoo.tasks.overlap import overlap

    if family == "math":
        spec, env = f"jsonl:{_math_file(tmp_path / 'mine.jsonl')}", "voting-math"
    else:
        spec, env = f"mbpp:{_mbpp_file(tmp_path / 'mine.jsonl')}", "voting-code"
    out = tmp_path / "r"
    rc = main(
        [
            "train", "--env", env, "--env-options", json.dumps({"dataset": spec}),
            "--model", str(tiny_model), "--steps", "1", "--problems-per-step", "2",
            "--group-size", "2", "--eval-every", "1", "--eval-samples", "1",
            "--eval-ood-episodes", "0", "--max-new-tokens", "24", "--save-every", "0",
            "--out-dir", str(out), "--resume", "false",
        ]
    )  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    assert "held-out set: dataset " in err and "overlap with the" in err
    s = json.loads((out / "summary.json").read_text())
    h = s["held_out"]
    assert spec in h["source"] and "split from the training file" in h["source"]
    assert h["overlap"]["any"] == 0 and h["dropped_as_overlapping"] == 0
    from flowzoo.envs import make_env

    train = make_env(env, dataset=spec, split="train").tasks
    test = make_env(env, dataset=spec, split="test").tasks
    assert overlap(train, test).any == 0 and not set(train.ids()) & set(test.ids())
    assert h["problems"] == len(test) == s["eval"]["problems"]
    assert isinstance(test, TaskSet) and len(train) + len(test) == (40 if family == "math" else 30)


def test_a_separate_held_out_file_is_measured_and_cut_to_what_is_held_out(tiny_model, tmp_path):
    train_file = _math_file(tmp_path / "train.jsonl", 20)
    rows = [{"question": f"What is {i} + {i + 2}?", "answer": str(2 * i + 2)} for i in (3, 50, 51)]
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps(r) + "\n" for r in rows))  # row 3 is a training row
    cfg = _cfg(
        tiny_model,
        tmp_path / "r",
        steps=1,
        eval_ood_episodes=0,
        eval_episodes=0,
        env_options={"dataset": f"jsonl:{train_file}"},
        eval_dataset=f"jsonl:{held}",
    )
    tr = Trainer(cfg, progress=False)
    assert len(tr.train_tasks) == 20  # a held-out file given: the training file is used whole
    s = tr.train()
    h = s["held_out"]
    assert "eval_dataset" in h["source"] and "whole file" in h["source"]
    assert h["overlap"]["any"] == 1 and h["dropped_as_overlapping"] == 1 and h["problems"] == 2
    assert s["eval"]["problems"] == 2


def test_a_resume_restores_the_thread_count_the_run_started_with(tiny_model, tmp_path, monkeypatch):
    """Results depend on torch's thread count in the last bits: a run whose count was picked
    automatically (from the load when it started) resumes with that count, whatever the load
    picks now; a count the user pinned is left as pinned."""
    from flowzoo.agents.models import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    out = tmp_path / "r"
    try:
        monkeypatch.setattr(threads, "_auto", (1, "the test's start"))
        s = Trainer(_cfg(tiny_model, out, steps=1), progress=False).train()
        assert s["threads"] == 1 == torch.get_num_threads()
        monkeypatch.setattr(threads, "_auto", (2, "the test's resume"))
        s = Trainer(_cfg(tiny_model, out, steps=2), progress=False).train()
        assert s["resumed"] and s["threads"] == 1 == torch.get_num_threads()
        s = Trainer(_cfg(tiny_model, out, steps=3, threads=2), progress=False).train()
        assert s["resumed"] and s["threads"] == 2 == torch.get_num_threads()  # pinned
    finally:
        torch.set_num_threads(before)


# ------------------------------------------------------------------ final weights and checkpoints


class _DiskFills(Trainer):
    """The disk fills while final/ is written: the weights' files are half there."""

    def _build_policies(self, probe):
        super()._build_policies(probe)
        save = self.router.save_pretrained

        def fills(out, **kw):
            save(out, **kw)
            import errno

            (out / "shared" / "model.safetensors").write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")

        self.router.save_pretrained = fills


def test_final_is_whole_before_the_summary_says_completed(tiny_model, tmp_path):
    """final/ is written to a staging directory and renamed into place, then the summary:
    a run whose save fails (a full disk) is ``failed`` with the error, never ``completed``;
    it leaves no final/ (or the previous one, intact), and the same command then finishes."""
    out = tmp_path / "r"
    cfg = _cfg(tiny_model, out, steps=1, eval_every=0)
    with pytest.raises(ValueError, match="No space left on device"):
        _DiskFills(cfg, progress=False).train()
    s = json.loads((out / "summary.json").read_text())
    assert s["status"].startswith("failed") and "No space" in s["error"] and "weights" not in s
    assert not (out / "final").exists() and not (out / ".final.partial").exists()
    s = Trainer(cfg, progress=False).train()  # the checkpoint was kept: it resumes, writes
    assert s["status"] == "completed" and (out / "final" / "shared" / "tokenizer.json").exists()
    before = {p: p.read_bytes() for p in (out / "final").rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match="No space"):
        _DiskFills(_cfg(tiny_model, out, steps=2, eval_every=0), progress=False).train()
    assert {p: p.read_bytes() for p in (out / "final").rglob("*") if p.is_file()} == before
    assert json.loads((out / "summary.json").read_text())["status"].startswith("failed")


class _Planted:
    """Unpickling this runs code (writes a file): what a planted checkpoint would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


@pytest.mark.parametrize("digest", ["planted too", "none"])
def test_a_planted_pickle_in_the_checkpoint_never_runs(tiny_model, tmp_path, digest):
    """Checkpoints load with ``weights_only=True``: a pickle that would run code is refused
    as not a checkpoint this version can read safely (even with a digest that matches,
    which whoever planted it can write too), and nothing of it runs."""
    import hashlib

    from flowzoo.agents.train.checkpoint import digest_path

    out = tmp_path / "r"
    Trainer(_cfg(tiny_model, out, steps=1, eval_every=0), progress=False).train()
    (ckpt,) = (out / "checkpoint").glob("*.pt")
    marker = tmp_path / "PWNED"
    torch.save({"identity": _Planted(marker)}, ckpt)
    if digest == "none":
        digest_path(ckpt).unlink()
        want = "has no digest"
    else:
        digest_path(ckpt).write_text(
            json.dumps({"sha256": [hashlib.sha256(ckpt.read_bytes()).hexdigest()]})
        )
        want = "not a checkpoint this version can read safely"
    with pytest.raises(ValueError, match=rf"state.pt .*{want}.*--resume false|{want}"):
        Trainer(_cfg(tiny_model, out, steps=2, eval_every=0), progress=False).train()
    assert not marker.exists()
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


def test_a_silently_damaged_checkpoint_fails_its_digest_and_is_never_called_good(
    tiny_model, tmp_path
):
    """One flipped byte inside a weight tensor still loads as a checkpoint: the digest
    stored beside it refuses the resume, and the message of a stopped run never points at
    it as the last good checkpoint."""
    import zipfile

    from flowzoo.agents.train.checkpoint import last_good

    out = tmp_path / "r"
    Trainer(_cfg(tiny_model, out, steps=1, eval_every=0), progress=False).train()
    assert last_good(out) == f"the last good checkpoint is in {out / 'checkpoint'}"
    (ckpt,) = (out / "checkpoint").glob("*.pt")
    with zipfile.ZipFile(ckpt) as z:  # the largest tensor's bytes, where a flip loads fine
        info = max(z.infolist(), key=lambda i: i.file_size)
        raw = bytearray(ckpt.read_bytes())
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    raw[start + info.file_size // 2] ^= 0x10
    ckpt.write_bytes(bytes(raw))
    torch.load(ckpt, weights_only=True)  # still a loadable checkpoint: only the digest knows
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"state.pt fails its digest check.*--resume false"):
        Trainer(_cfg(tiny_model, out, steps=2, eval_every=0), progress=False).train()
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert "last good" not in last_good(out) and "digest" in last_good(out)


def test_kills_between_a_checkpoints_digest_and_its_rename_never_condemn_it(
    tiny_model, tmp_path, monkeypatch
):
    """A kill after the sidecar names the new state but before the new file replaces the
    old leaves the old file there; twice in a row (a scheduler's SIGKILL after a held
    SIGTERM, then again on the resumed run) it must still pass its digest and resume."""
    import io

    from flowzoo.agents.runs import rundir
    from flowzoo.agents.train import checkpoint

    out = tmp_path / "r"
    tr = Trainer(_cfg(tiny_model, out, steps=1, eval_every=0), progress=False)
    tr.train()
    real = rundir.atomic_write

    class Killed(Exception):
        pass

    def killed_before_the_rename(path, data):
        if path.name.endswith(".pt"):
            data(io.BytesIO())  # the new state is written and its digest recorded...
            raise Killed  # ...and the process dies before the rename
        return real(path, data)

    monkeypatch.setattr(rundir, "atomic_write", killed_before_the_rename)
    for _ in range(2):
        tr.step += 1  # a different state each time, so a different digest
        with pytest.raises(Killed):
            checkpoint.save(tr)
    monkeypatch.setattr(rundir, "atomic_write", real)
    with checkpoint.open_verified(tr.ckpt_path):
        pass  # the file there (step 1's) passes its digest
    s = Trainer(_cfg(tiny_model, out, steps=2, eval_every=0), progress=False).train()
    assert s["status"] == "completed" and s["resumed"] and s["steps_done"] == 2


def test_an_extended_run_says_running_until_it_ends(tiny_model, tmp_path):
    """A completed run resumed for more steps says ``running`` from its start: a kill that
    leaves no time for a record (OOM, ``kill -9``) never leaves the earlier, shorter run's
    ``completed`` (which a report and a sweep would count as finished)."""
    out = tmp_path / "r"
    Trainer(_cfg(tiny_model, out, steps=1, eval_every=0), progress=False).train()
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    seen = []

    class Killed(Trainer):
        def _rollout(self, step):
            seen.append(json.loads((out / "summary.json").read_text()))
            raise SystemExit(137)  # no record written after this: what a kill -9 leaves

    with pytest.raises(SystemExit):
        Killed(_cfg(tiny_model, out, steps=3, eval_every=0), progress=False).train()
    assert seen[0]["status"] == "running" and seen[0]["steps_done"] == 1


def test_the_summary_never_reads_metrics_through_a_link(tiny_model, tmp_path):
    """A metrics.jsonl swapped for a link mid-run is not the run's record: the summary reads
    no metrics through it (it used to report the link target's numbers)."""
    from flowzoo.agents.runs import runlog

    out = tmp_path / "r"
    out.mkdir()
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"step": -1, "eval": {"accuracy": 0.99}}) + "\n")
    (out / "metrics.jsonl").symlink_to(other)
    assert runlog.own_metrics(out / "metrics.jsonl") == []
    assert read_metrics(other) != []  # the reader of committed records still reads a file
