"""The downstream-package example (examples/twin_encoder_actor, installed by `make setup`):
trained by FlashSAC through Ray, then verified, played and exported with consent."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drlcli.cli import app
from drlcli.config import load_config
from drlcli.metrics.csv_file import read_metrics
from drlcli.runtime.training import train
from drlcli.topology import AvailableDevices

pytestmark = pytest.mark.usefixtures("ray_cluster")
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "twin_encoder_actor"
runner = CliRunner()


def test_the_example_actor_trains_and_its_checkpoint_verifies_plays_and_exports(tmp_path):
    config = load_config(EXAMPLE / "inverted_pendulum.yaml")
    params = dataclasses.replace(config.algo_params, warmup_steps=100, batch_size=32)
    config = dataclasses.replace(
        config,
        total_env_steps=400,
        rollout_length=200,
        output_dir=str(tmp_path),
        metrics_path=str(tmp_path / "metrics.csv"),
        algo_params=params,
    )
    summary = train(config, quiet=True, devices=AvailableDevices(cuda_devices=0, mps=False))
    rows = read_metrics(summary.metrics_path)
    assert len(rows) == 2 and "Loss/aux_mean_l2" in rows[0]
    assert float(rows[-1]["Loss/aux_mean_l2"]) > 0  # updates ran, the aux loss was logged

    checkpoint = str(summary.checkpoint_path)
    verified = runner.invoke(app, ["verify", "--json", checkpoint])
    assert verified.exit_code == 0, verified.output
    report = json.loads(verified.output)
    checks = {check["name"]: check for check in report["checks"]}
    assert checks["builder"]["status"] == "WARN"  # custom code, not imported by verify
    assert checks["inference memory"]["status"] == "PASS"

    refused = runner.invoke(app, ["play", checkpoint, "--episodes", "1"])
    assert refused.exit_code == 1 and "--allow-builder twin_encoder_actor.actor" in refused.output
    allow = ["--allow-builder", "twin_encoder_actor.actor"]
    played = runner.invoke(app, ["play", checkpoint, "--episodes", "1", *allow])
    assert played.exit_code == 0, played.output
    assert "inference memory: parameters" in played.output
    onnx_path = tmp_path / "policy.onnx"
    exported = runner.invoke(app, ["export", checkpoint, str(onnx_path), *allow])
    assert exported.exit_code == 0, exported.output
    assert onnx_path.stat().st_size > 0
