"""`drl export`: the ONNX graph, its metadata, the parity gate and atomic output."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime
import pytest
from typer.testing import CliRunner

import drlcli.export
from drlcli.checkpoints.policy import load_play_actor
from drlcli.cli import app
from drlcli.envs import make_env
from drlcli.errors import ExportError, SemanticsError, UsageError
from drlcli.export import export_onnx

runner = CliRunner()


def test_export_writes_a_checked_graph_with_metadata(checkpoint_file, tmp_path):
    out = tmp_path / "policy.onnx"
    summary = export_onnx(checkpoint_file(), out)
    assert summary.max_abs_error <= 1e-5 and summary.opset == 18
    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    metadata = {prop.key: prop.value for prop in model.metadata_props}
    assert json.loads(metadata["drl.actor_semantics"])["action_transform"] == "clip"
    assert metadata["drl.env_id"] == "InvertedPendulum-v5"
    assert metadata["drl.algo"] == "ppo"
    assert metadata["drl.normalization"] == "frozen observation statistics"
    assert summary.inference_memory == {
        "parameters": 8 * 4 * 4 + 8 * 4 + 8 * 8 * 4 + 8 * 4 + 8 * 4 + 4 + 4,
        "buffers": 8,
    }
    assert summary.export_module_bytes <= sum(summary.inference_memory.values())
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs"]
    for batch in (1, 64):
        (actions,) = session.run(None, {"obs": np.zeros((batch, 4), dtype=np.float32)})
        assert actions.shape == (batch, 1) and actions.dtype == np.float32


def test_onnx_alone_drives_an_episode_like_deterministic_play(checkpoint_file, tmp_path):
    path = checkpoint_file()
    out = tmp_path / "policy.onnx"
    export_onnx(path, out)
    policy = load_play_actor(path)
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    env = make_env("InvertedPendulum-v5")
    obs, _ = env.reset(seed=3)
    steps = 0
    while steps < 100:
        (onnx_action,) = session.run(None, {"obs": obs[None].astype(np.float32)})
        np.testing.assert_allclose(onnx_action, policy.act(obs[None]), atol=1e-5, rtol=0)
        obs, _, terminated, truncated, _ = env.step(onnx_action[0])  # ONNX drives the env
        steps += 1
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()


def test_failed_parity_gate_leaves_no_file_and_keeps_the_old_one(
    checkpoint_file, tmp_path, monkeypatch
):
    out = tmp_path / "policy.onnx"
    out.write_bytes(b"previous export")
    monkeypatch.setattr(drlcli.export, "PARITY_TOLERANCE", -1.0)  # nothing can pass
    with pytest.raises(ExportError, match="parity check failed"):
        export_onnx(checkpoint_file(), out)
    assert out.read_bytes() == b"previous export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "policy.onnx"]


def test_refused_checkpoint_writes_nothing(checkpoint_file, tmp_path):
    def no_semantics(payload):
        payload["actor_semantics"] = None

    out = tmp_path / "refused.onnx"
    with pytest.raises(SemanticsError):
        export_onnx(checkpoint_file(no_semantics), out)
    assert not out.exists()


def test_bad_arguments(checkpoint_file, tmp_path):
    with pytest.raises(UsageError, match="must end in .onnx"):
        export_onnx(checkpoint_file(), tmp_path / "policy.txt")
    with pytest.raises(UsageError, match="supported opsets are 17 to 23"):
        export_onnx(checkpoint_file(), tmp_path / "policy.onnx", opset=9)


def test_export_command_summary_and_exit_codes(checkpoint_file, tmp_path):
    out = tmp_path / "cli.onnx"
    result = runner.invoke(
        app, ["export", str(checkpoint_file()), str(out), "--opset", "17"], env={"COLUMNS": "150"}
    )
    assert result.exit_code == 0, result.output
    assert "parity max" in result.output and "[batch, obs_dim]" in result.output
    assert onnx.load(str(out)).opset_import[0].version == 17
    missing = runner.invoke(app, ["export", str(tmp_path / "none.pt"), str(out)])
    assert missing.exit_code == 1 and "checkpoint not found" in missing.output
    bad = runner.invoke(app, ["export", str(checkpoint_file()), str(tmp_path / "x.bin")])
    assert bad.exit_code == 2


def test_an_actor_that_understates_its_inference_memory_is_not_exported(
    checkpoint_file, tmp_path, monkeypatch
):
    from drlcli.actors.gaussian import GaussianPolicyActor

    path = checkpoint_file()
    monkeypatch.setattr(
        GaussianPolicyActor, "inference_startup_memory_categories", lambda self: {"weights": 64}
    )
    out = tmp_path / "policy.onnx"
    with pytest.raises(ExportError, match=r"holds .* more than the 64 B the actor declares"):
        export_onnx(path, out)
    assert not out.exists()
