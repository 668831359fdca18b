"""The cliff early warning in real tiny training runs: a warning is printed and recorded on
its line and in the summary and changes nothing in warn mode; stop ends the run cleanly (and
again when run again); rollback restores the checkpoint before the warning, lowers the lr,
keeps the discarded steps out of metrics.jsonl and survives a resume.

The thresholds are set so the tiny model triggers them (its updates move it by ~1e-7)."""

import json

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file  # noqa: E402

from flowzoo.agents.train.trainer import Trainer  # noqa: E402
from flowzoo.agents.train.watch import MAX_ROLLBACKS, STOPPED  # noqa: E402
from flowzoo.analysis.records import read_metrics  # noqa: E402
from tests.agents.train.test_training import _cfg as agents_cfg  # noqa: E402

#: far under any update the tiny model makes: every step's update is past it
TRIGGER = 1e-12


def _cfg(tiny_model, out, **kw):
    base = dict(
        steps=2,
        group_size=2,
        minibatches=2,
        max_new_tokens=16,
        out_dir=str(out),
        resume=True,
        monitor_update_size=TRIGGER,
        monitor_reward_drop=0.0,
    )
    return agents_cfg(tiny_model, out, **{**base, **kw})


def _run(cfg):
    return Trainer(cfg, progress=False).train()


def _strip(rows):
    """Metrics lines without the monitor's record and the wall times."""
    return [{k: v for k, v in r.items() if k not in ("monitor", "time")} for r in rows]


def _weights(d):
    return {k: v for f in sorted(d.glob("**/*.safetensors")) for k, v in load_file(f).items()}


def test_a_warning_is_recorded_and_in_warn_mode_changes_nothing(tiny_model, tmp_path, capsys):
    s = _run(_cfg(tiny_model, tmp_path / "warned"))
    off = _run(_cfg(tiny_model, tmp_path / "off", monitor_update_size=0.0))
    lines = read_metrics(tmp_path / "warned" / "metrics.jsonl")
    (w,) = lines[0]["monitor"]["warnings"]  # step, signal, value and threshold, on its line
    assert w["step"] == 0 and w["signal"] == "update_size" and w["threshold"] == TRIGGER
    assert w["value"] > TRIGGER and w["role"] in lines[0]["roles"]
    assert lines[0]["monitor"]["response"] == "warn" and "monitor" not in lines[1]
    assert s["status"] == "completed" and s["monitor"]["warnings"] == [w]
    assert any("early warning at step 0: update_size" in x for x in s["warnings"])
    assert "EARLY WARNING: early warning at step 0" in capsys.readouterr().err
    assert off["monitor"]["warnings"] == []
    # warn only: the same run, bit for bit, as one with the monitor off
    a, b = _weights(tmp_path / "warned" / "final"), _weights(tmp_path / "off" / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _strip(lines) == _strip(read_metrics(tmp_path / "off" / "metrics.jsonl"))


def test_stop_ends_the_run_cleanly_at_the_warning_and_again_when_run_again(tiny_model, tmp_path):
    cfg = _cfg(tiny_model, tmp_path / "r", steps=3, monitor_response="stop")
    s = _run(cfg)
    assert s["status"] == STOPPED and s["steps_done"] == 1
    assert s["monitor"]["stopped_early"]["at_step"] == 1
    assert s["monitor"]["stopped_early"]["warning"]["signal"] == "update_size"
    assert (tmp_path / "r" / "final").is_dir() and s["weights"].endswith("final")
    lines = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert [x["step"] for x in lines] == [0] and lines[0]["monitor"]["response"] == "stop"
    again = _run(cfg)  # resumed at the stop: it stops there, without another step
    assert again["status"] == STOPPED and again["steps_done"] == 1
    assert read_metrics(tmp_path / "r" / "metrics.jsonl") == lines


def test_rollback_restores_the_checkpoint_before_the_warning_at_a_lower_lr(tiny_model, tmp_path):
    """Window 2: the first warning is at step 1 (steps done 2); the checkpoint before it is
    the one saved after step 0. Each re-done step 1 warns again, until the rollbacks are
    used up; then it only warns and the run goes on."""
    kw = dict(
        steps=3,
        monitor_response="rollback",
        monitor_update_window=2,
        monitor_rollback_lr=0.5,
        save_every=1,
        eval_every=2,
        eval_episodes=2,
        eval_samples=1,
        eval_greedy=False,
        eval_ood_episodes=0,
    )
    s = _run(_cfg(tiny_model, tmp_path / "r", **kw))
    lines = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert [x["step"] for x in lines] == [-1, 0, 1, 2]  # the discarded steps are gone
    assert s["status"] == "completed" and s["steps_done"] == 3
    rbs = s["monitor"]["rollbacks"]
    assert len(rbs) == MAX_ROLLBACKS
    for i, rb in enumerate(rbs):
        assert (rb["at_step"], rb["to_step"], rb["discarded_steps"]) == (2, 1, 1)
        assert rb["lr_scale"] == 0.5 ** (i + 1) and rb["warnings"][0]["step"] == 1
        assert [e[0] for e in rb["discarded_evals"]] == [2]  # the evaluation it threw away
    assert lines[2]["monitor"]["rollbacks"] == rbs  # recorded on the line written after them
    assert lines[2]["monitor"]["response"] == f"warn ({MAX_ROLLBACKS} rollbacks made)"
    assert len(s["monitor"]["warnings"]) == MAX_ROLLBACKS + 1
    lr = {x["step"]: next(iter(x["lr"].values())) for x in lines if x["step"] >= 0}
    assert lr[0] == pytest.approx(1e-3) and lr[1] == lr[2] == pytest.approx(1e-3 * 0.5**3)
    assert [s for s, _ in s["eval_curve"]] == [0, 2, 3]
    # a resume continues at the lowered lr, rollbacks counted from the kept lines
    more = _run(_cfg(tiny_model, tmp_path / "r", **{**kw, "steps": 4}))
    last = read_metrics(tmp_path / "r" / "metrics.jsonl")[-1]
    assert more["steps_done"] == 4 and len(more["monitor"]["rollbacks"]) == MAX_ROLLBACKS
    assert next(iter(last["lr"].values())) == pytest.approx(1e-3 * 0.5**3)


def test_a_fresh_rollback_run_rolls_back_to_step_0_without_a_periodic_save(tiny_model, tmp_path):
    s = _run(_cfg(tiny_model, tmp_path / "r", monitor_response="rollback", save_every=0))
    rbs = s["monitor"]["rollbacks"]
    assert [(rb["at_step"], rb["to_step"]) for rb in rbs] == [(1, 0)] * MAX_ROLLBACKS
    assert [x["step"] for x in read_metrics(tmp_path / "r" / "metrics.jsonl")] == [0, 1]
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["status"] == "completed"
