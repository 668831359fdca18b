# ruff: noqa: E402
"""Each tracker of ``report_to`` with its real library in its offline/local mode: a two-step
run's scalars are read back from what the tracker wrote, under the metric names of
``metrics.jsonl``. Skipped with the reason where a tracker's library is absent (the
``trackers`` extra installs them; CI does). Deterministic under load: nothing waits on a
clock; what a tracker wrote is read after its writer has finished (wandb: after its service
process exited)."""

import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")

from flowzoo.agents.train.trainer import Trainer
from tests.agents.train.test_training import _cfg

LIBS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio"}


def _run(tiny_model, tmp_path, tracker):
    cfg = _cfg(tiny_model, tmp_path, steps=2, report_to=tracker)
    summary = Trainer(cfg, progress=False).train()
    assert summary["status"] == "completed"
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return tmp_path / "run", [m["reward"] for m in lines]


def _wandb_records(data: bytes, block: int = 32768):
    """The records of a ``.wandb`` file: a 7-byte W&B header, then a LevelDB log (32 KiB
    blocks of chunks: crc32, length, type FULL=1 FIRST=2 MIDDLE=3 LAST=4)."""
    import struct

    pos, buf = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + n], pos + 7 + n
        if kind in (1, 2):
            buf = chunk
        elif kind in (3, 4):
            buf += chunk
        if kind in (1, 4):
            yield buf


@pytest.mark.parametrize("tracker", list(LIBS))
def test_a_tracker_gets_the_runs_scalars(tiny_model, tmp_path, monkeypatch, tracker):
    if importlib.util.find_spec(LIBS[tracker]) is None:
        pytest.skip(f"{LIBS[tracker]} is not installed (pip install 'flowzoo[trackers]')")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    if tracker == "wandb":  # no clock decides the outcome: a busy machine only waits longer
        for var in ("WANDB_INIT_TIMEOUT", "WANDB_X_SERVICE_WAIT"):
            monkeypatch.setenv(var, "3600")
        monkeypatch.setenv("WANDB_X_DISABLE_STATS", "true")  # no sampler thread competing
        monkeypatch.setenv("WANDB_X_DISABLE_MACHINE_INFO", "true")
    out, rewards = _run(tiny_model, tmp_path, tracker)
    if tracker == "tensorboard":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(out / "tensorboard"))
        acc.Reload()
        got = [e.value for e in acc.Scalars("reward")]
        assert "roles/solver/grad_share" in acc.Tags()["scalars"]
    elif tracker == "wandb":
        import wandb

        # the service process writes the run's .wandb file; read it once that process has
        # exited (every record flushed and the file closed), not after some delay
        wandb.teardown()
        runs = list((out / "wandb").glob("offline-run-*"))
        assert len(runs) == 1  # offline: no network, a local run to `wandb sync` later
        from wandb.proto import wandb_internal_pb2

        got = []
        for raw in _wandb_records(next(runs[0].glob("*.wandb")).read_bytes()):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(raw)
            if rec.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): i.value_json for i in rec.history.item}
                if "reward" in items:
                    got.append(float(items["reward"]))
    elif tracker == "mlflow":
        import mlflow

        client = mlflow.MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
        (run,) = client.search_runs([client.get_experiment_by_name("flowzoo").experiment_id])
        got = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "reward"),
                                       key=lambda m: m.step)]  # fmt: skip
        assert run.info.status == "FINISHED"
        assert "roles/solver/grad_share" in run.data.metrics
    else:
        import trackio

        from flowzoo.agents.runs.trackers import trackio_name

        name = trackio_name(out, out.name)  # the run dir's own run, whatever the store holds
        got = [r["reward"] for r in trackio.SQLiteStorage.get_logs("flowzoo", name)]
    assert got == pytest.approx(rewards)


def test_a_missing_tracker_library_says_what_to_install(tiny_model, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(RuntimeError, match=r"flowzoo\[trackers\]"):
        Trainer(_cfg(tiny_model, tmp_path, report_to="wandb"), progress=False).train()
