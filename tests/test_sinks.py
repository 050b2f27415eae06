"""Metrics sinks beside the CSV (the logging config section): TensorBoard event files read
back with TensorBoard's own reader, W&B offline run files read back record by record, MLflow
runs read back from a SQLite store, a missing extra, and sinks that fail."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drlcli.cli import app
from drlcli.config import config_from_dict, load_config
from drlcli.errors import UsageError
from drlcli.evaluation import EvaluationResult
from drlcli.sinks import check_sinks, open_sinks
from drlcli.sinks.dispatch import MetricsSinks
from drlcli.sinks.tensorboard_sink import TensorBoardSink

runner = CliRunner(env={"COLUMNS": "200"})


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory):
    """One SQLite store for the session's MLflow tests (creating its tables takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


class ListRecord:
    """The record of truth a MetricsSinks needs, keeping the rows in a list."""

    def __init__(self):
        self.rows = []

    def write(self, row):
        self.rows.append(row)

    def close(self):
        pass


def wandb_records(run_folder):
    """The records of an offline W&B run's ``.wandb`` file (a LevelDB-style log of protobuf
    records after a 7-byte header, in 32 KiB blocks): [(kind, record)]."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_folder.glob("run-*.wandb")
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    records, position, pending = [], 7, b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header: padding
            position += block - position % block
            continue
        length, part = (
            int.from_bytes(data[position + 4 : position + 6], "little"),
            data[position + 6],
        )
        if position + 7 + length > len(data):  # a record W&B is still writing
            break
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if part in (2, 3):  # first and middle pieces of a record split over blocks
            pending += chunk
            continue
        if part not in (1, 4):
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending + chunk)
        pending = b""
        records.append((record.WhichOneof("record_type"), record))
    return records


def wandb_run(output_dir):
    """(config, {metric: [(step, value)]}, summary, run ids) of the offline runs under a
    folder, all runs' records together in time order."""
    import json

    def values(items):
        return {
            item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items
        }

    config, history, summary, ids = {}, {}, {}, []
    for folder in sorted((output_dir / "wandb").glob("offline-run-*")):
        for kind, record in wandb_records(folder):
            if kind == "run":
                ids.append(record.run.run_id)
                config.update(values(record.run.config.update))
            elif kind == "config":
                config.update(values(record.config.update))
            elif kind == "history":
                row = values(record.history.item)
                for key, value in row.items():
                    if not key.startswith("_"):
                        history.setdefault(key, []).append((row["_step"], value))
            elif kind == "summary":
                summary.update(values(record.summary.update))
    return config, history, summary, ids


def mlflow_run(store, run_id):
    """(params, {metric: [(step, value)]}, status, artifact paths) of an MLflow run."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    run = client.get_run(run_id)
    metrics = {
        key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)]
        for key in run.data.metrics
    }
    artifacts = [
        entry.path
        for folder in client.list_artifacts(run_id)
        for entry in (client.list_artifacts(run_id, folder.path) if folder.is_dir else [folder])
    ]
    return run.data.params, metrics, run.info.status, sorted(artifacts)


def scalars_and_texts(folder):
    """TensorBoard's reader of a run folder: {tag: [(step, value)]} and {tag: text}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    scalars = {
        tag: [(event.step, event.value) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }
    texts = {
        tag: events.Tensors(tag)[0].tensor_proto.string_val[0].decode()
        for tag in events.Tags()["tensors"]
    }
    return scalars, texts


def test_tensorboard_gets_every_numeric_column_against_env_steps(tmp_path):
    config = config_from_dict(
        {"env": {"id": "InvertedPendulum-v5"}, "logging": {"tensorboard": str(tmp_path)}},
        default_name="pendulum",
    )
    sink = TensorBoardSink.for_run(config)
    sink.write({"round": 1, "env_steps": 256, "episode_return_mean": None, "Loss/value": 0.5})
    sink.write({"round": 2, "env_steps": 512, "episode_return_mean": 12.0, "Loss/value": 0.25})
    result = EvaluationResult(returns=(30.0, 50.0), lengths=(30, 50), env_steps=512)
    sink.final_evaluation(result, 512)
    sink.close()
    scalars, texts = scalars_and_texts(tmp_path / "pendulum")
    assert scalars["round"] == [(256, 1.0), (512, 2.0)]
    assert scalars["episode_return_mean"] == [(512, 12.0)]  # no point where the CSV is empty
    assert scalars["Loss/value"] == [(256, 0.5), (512, 0.25)]
    assert scalars["final/eval_return_mean"] == [(512, 40.0)]
    assert "env_steps" not in scalars  # the x axis
    assert "id: InvertedPendulum-v5" in texts["config/text_summary"]
    named = config_from_dict(
        {"logging": {"tensorboard": str(tmp_path), "run_name": "search_x/trial_003"}}
    )
    TensorBoardSink.for_run(named).close()  # the sinks' name for the run: its folder here
    assert (tmp_path / "search_x" / "trial_003").is_dir()


@pytest.mark.subprocess  # W&B's own service process
def test_wandb_offline_gets_the_config_metrics_by_env_step_and_a_resumed_run(tmp_path):
    from drlcli.sinks.wandb_sink import WandbSink

    config = config_from_dict(
        {
            "env": {"id": "InvertedPendulum-v5"},
            "output_dir": str(tmp_path),
            "logging": {"wandb": {"project": "unit", "mode": "offline"}},
        },
        default_name="pendulum",
    )
    sink = WandbSink(config)
    sink.write({"round": 1, "env_steps": 256, "episode_return_mean": None, "Loss/value": 0.5})
    sink.write({"round": 2, "env_steps": 512, "episode_return_mean": 12.0, "Loss/value": 0.25})
    sink.final_evaluation(
        EvaluationResult(returns=(30.0, 50.0), lengths=(30, 50), env_steps=512), 512
    )
    sink.close()
    resumed = WandbSink(config, resumed=True)  # the same W&B run goes on
    resumed.write({"round": 3, "env_steps": 768, "episode_return_mean": 20.0, "Loss/value": 0.1})
    resumed.close()
    # W&B's service process may still be writing the resumed run's file as finish returns (a
    # CI run under load once read it without round 3): read until the row is there, 30 s at most.
    deadline = time.monotonic() + 30
    stored, history, summary, ids = wandb_run(tmp_path)
    while len(history.get("round", [])) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        stored, history, summary, ids = wandb_run(tmp_path)
    assert stored["env"]["id"] == "InvertedPendulum-v5" and stored["name"] == "pendulum"
    assert history["round"] == [(256, 1), (512, 2), (768, 3)]
    assert history["episode_return_mean"] == [(512, 12.0), (768, 20.0)]
    assert history["Loss/value"] == [(256, 0.5), (512, 0.25), (768, 0.1)]
    assert "env_steps" not in history
    assert summary["final/eval_return_mean"] == 40.0
    assert (
        len(set(ids)) == 1
        and ids[0] == (tmp_path / "metrics_pendulum.wandb-id").read_text().strip()
    )


@pytest.mark.subprocess  # MLflow runs git to tag its runs
def test_mlflow_gets_params_metrics_by_env_step_checkpoints_and_a_resumed_run(
    mlflow_store, tmp_path
):
    from drlcli.sinks.mlflow_sink import MlflowSink, log_export

    config = config_from_dict(
        {
            "env": {"id": "InvertedPendulum-v5", "kwargs": {"reset_noise_scale": 0.1}},
            "output_dir": str(tmp_path),
            "logging": {"mlflow": {"tracking_uri": mlflow_store, "experiment": "unit"}},
        },
        default_name="pendulum",
    )
    config.checkpoint_path.write_bytes(b"latest")  # stand-ins: artifacts are files
    sink = MlflowSink(config)
    sink.write({"round": 1, "env_steps": 256, "episode_return_mean": None, "Loss/value": 0.5})
    sink.write({"round": 2, "env_steps": 512, "episode_return_mean": 12.0, "Loss/value": 0.25})
    result = EvaluationResult(returns=(30.0, 50.0), lengths=(30, 50), env_steps=512)
    sink.final_evaluation(result, 512)
    sink.close()
    params, metrics, status, artifacts = mlflow_run(mlflow_store, sink.run_id)
    assert params["env.id"] == "InvertedPendulum-v5" and params["name"] == "pendulum"
    assert params["env.kwargs.reset_noise_scale"] == "0.1"
    assert metrics["round"] == [(256, 1.0), (512, 2.0)]
    assert metrics["episode_return_mean"] == [(512, 12.0)]
    assert metrics["Loss/value"] == [(256, 0.5), (512, 0.25)]
    assert metrics["final/eval_return_mean"] == [(512, 40.0)]
    assert "env_steps" not in metrics
    assert (status, artifacts) == ("FINISHED", ["checkpoints/model_pendulum.pt"])

    resumed = MlflowSink(config, resumed=True)  # the same run goes on
    assert resumed.run_id == sink.run_id
    resumed.write({"round": 3, "env_steps": 768, "episode_return_mean": 20.0, "Loss/value": 0.1})
    resumed.close()
    assert mlflow_run(mlflow_store, sink.run_id)[1]["round"][-1] == (768, 3.0)
    assert MlflowSink(config).run_id != sink.run_id  # a fresh run is a run of its own

    onnx = tmp_path / "policy.onnx"
    onnx.write_bytes(b"onnx")
    latest = log_export(config, onnx)  # into the latest MLflow run of these metrics
    assert mlflow_run(mlflow_store, latest)[3] == ["onnx/policy.onnx"]


def test_an_mlflow_server_that_does_not_answer_warns_once_and_training_goes_on(tmp_path):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = config_from_dict(
        {"logging": {"mlflow": {"tracking_uri": f"http://127.0.0.1:{port}"}}},
        default_name="run",
    )
    warnings = []
    assert open_sinks(config, warnings.append) == []
    assert len(warnings) == 1 and warnings[0].startswith("warning: metrics sink mlflow failed")
    assert warnings[0].endswith("training goes on without it, the metrics CSV has every row")


@pytest.mark.subprocess  # W&B's own service process
def test_a_wandb_server_that_does_not_answer_never_holds_up_the_rounds(monkeypatch, tmp_path):
    """wandb.init retries for its init_timeout (90 s by default) against a server that does
    not answer: the W&B sink opens on its own thread, so the rows go on meanwhile, and the
    failure is one warning."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "3")
    import wandb

    wandb.teardown()  # W&B reads its environment at its setup, once per process
    config = config_from_dict(
        {"output_dir": str(tmp_path), "logging": {"wandb": {"project": "p", "mode": "online"}}},
        default_name="run",
    )

    record, warnings = ListRecord(), []
    sinks = MetricsSinks(record, open_sinks(config, warnings.append), warn=warnings.append)
    for index in range(3):
        sinks.write({"round": index, "env_steps": 64 * index, "episode_return_mean": 1.0})
    assert warnings == [] and len(record.rows) == 3  # the rows did not wait for wandb.init
    sinks.close()  # waits for the init to give up
    wandb.teardown()  # the next test's W&B sets up again from its own environment
    assert len(warnings) == 1 and warnings[0].startswith("warning: metrics sink wandb failed")
    assert warnings[0].endswith("training goes on without it, the metrics CSV has every row")


def test_background_calls_run_in_order_and_the_first_failure_ends_them():
    import threading

    from drlcli.sinks.background import BackgroundCalls

    done, release = [], threading.Event()
    calls = BackgroundCalls("unit")
    calls.submit(release.wait)
    calls.submit(done.append, 1)
    calls.submit(done.append, 2)
    with pytest.raises(TimeoutError, match="calls still running after 0.05 s"):
        calls.close(0.05)  # the first call still waits
    release.set()
    calls.thread.join(5)
    assert done == [1, 2] and not calls.thread.is_alive()

    failing = BackgroundCalls("unit")
    failing.submit(release.wait)
    failing.submit(done.append, 3)
    failing.submit(lambda: 1 / 0)
    failing.submit(done.append, 4)
    failing.thread.join(5)  # a sink left out keeps no thread behind
    assert not failing.thread.is_alive() and done == [1, 2, 3]
    with pytest.raises(ZeroDivisionError):
        failing.submit(done.append, 5)
    with pytest.raises(ZeroDivisionError):
        failing.close(1)
    assert done == [1, 2, 3]


def test_a_missing_extra_is_refused_before_anything_starts(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "tensorboard" else real_find_spec(name, *args),
    )
    config = config_from_dict({"logging": {"tensorboard": str(tmp_path)}})
    with pytest.raises(UsageError, match=r"pip install 'drlcli\[tensorboard\]'"):
        check_sinks(config)
    check_sinks(config_from_dict({}))  # nothing asked, nothing needed
    path = tmp_path / "run.yaml"
    path.write_text("env: {id: InvertedPendulum-v5}\n")
    result = runner.invoke(app, ["train", str(path), "--tensorboard", str(tmp_path), "--dry-run"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: logging.tensorboard (--tensorboard DIR) needs the tensorboard package, not "
        "installed here: pip install 'drlcli[tensorboard]'"
    ]


def test_a_sink_that_cannot_open_or_write_warns_once_and_the_csv_goes_on(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    warnings = []
    config = config_from_dict({"logging": {"tensorboard": str(blocked)}}, default_name="run")
    assert open_sinks(config, warnings.append) == []
    assert len(warnings) == 1 and warnings[0].startswith("warning: metrics sink tensorboard fail")

    class Broken:
        name = "broken"

        def write(self, row):
            raise OSError("No space left on device")

        def final_evaluation(self, result, env_steps):
            raise AssertionError("left out after its first failure")

        def close(self):
            raise AssertionError("left out after its first failure")

    record, warned = ListRecord(), []
    sinks = MetricsSinks(record, [Broken()], warn=warned.append)
    for index in range(3):
        sinks.write({"round": index})
    sinks.final_evaluation(None, 0)
    sinks.close()
    assert len(record.rows) == 3 and len(warned) == 1
    assert "metrics sink broken failed (OSError: No space left on device)" in warned[0]


@pytest.mark.usefixtures("ray_cluster")
def test_a_run_with_logging_sinks_writes_every_csv_column(tiny_config, tmp_path, mlflow_store):
    from drlcli.metrics.csv_file import read_metrics
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    boards = tmp_path / "boards"
    config = load_config(
        tiny_config(
            "boarded",
            total=256,
            extra=f"logging: {{tensorboard: {boards}, mlflow: {{tracking_uri: '{mlflow_store}',"
            " experiment: run}, wandb: {project: run, mode: offline}}\n"
            "evaluation: {episodes: 2}\n",
        )
    )
    summary = train(config, quiet=True, devices=AvailableDevices(cuda_devices=0, mps=False))
    rows = read_metrics(config.metrics_path)
    scalars, texts = scalars_and_texts(boards / "boarded")
    for column in rows[0]:
        written = [(int(row["env_steps"]), float(row[column])) for row in rows if row[column]]
        if column != "env_steps" and written:
            assert [(step, pytest.approx(value)) for step, value in written] == scalars[column]
    final = summary.final_evaluation
    assert scalars["final/eval_return_mean"] == [(256, pytest.approx(final.return_mean))]
    assert "name: boarded" in texts["config/text_summary"]

    from drlcli.sinks.mlflow_sink import client_for, find_run

    params, metrics, status, artifacts = mlflow_run(
        mlflow_store, find_run(client_for(config), config)
    )
    assert {column for column in scalars if not column.startswith("final/")} <= set(metrics)
    for column, points in scalars.items():
        assert [(step, pytest.approx(value)) for step, value in metrics[column]] == points
    assert params["algo_params.num_epochs"] == "2" and status == "FINISHED"
    assert artifacts == ["checkpoints/model_boarded.pt", "checkpoints/model_boarded_best.pt"]
    # drl export adds its ONNX file to the run of the checkpoint it exports.
    onnx = tmp_path / "boarded.onnx"
    exported = runner.invoke(app, ["export", str(config.checkpoint_path), str(onnx)])
    assert exported.exit_code == 0, exported.output
    assert "mlflow run" in exported.output and "boarded.onnx" in exported.output
    assert "onnx/boarded.onnx" in mlflow_run(mlflow_store, find_run(client_for(config), config))[3]

    _, history, summary, _ = wandb_run(Path(config.output_dir))
    for column, points in scalars.items():
        if not column.startswith("final/"):
            assert [(step, pytest.approx(value)) for step, value in history[column]] == points
    assert summary["final/eval_return_mean"] == pytest.approx(final.return_mean)
    # drl play --video adds its video to the run of the checkpoint it plays.
    video = tmp_path / "boarded.mp4"
    played = runner.invoke(
        app,
        [
            "play",
            str(config.checkpoint_path),
            "--video",
            str(video),
            "--episodes",
            "1",
            "--width",
            "64",
            "--height",
            "64",
        ],
    )
    assert played.exit_code == 0, played.output
    assert "wandb run" in played.output, played.output
    # W&B's service may write the record to the run file just after finish() returns.
    deadline = time.monotonic() + 30
    while "video/_type" not in (history := wandb_run(Path(config.output_dir))[1]):
        assert time.monotonic() < deadline, "no video in the W&B run files"
        time.sleep(0.2)
    assert history["video/_type"] == [(256, "video-file")]
