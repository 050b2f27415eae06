"""``drl export``: the deterministic policy as one ONNX graph, parity-checked with onnxruntime.

The graph is the whole deployed policy: raw observation ``obs`` float32 ``[batch, obs_dim]`` in,
environment action ``action`` float32 ``[batch, action_dim]`` out. The frozen observation
normalisation and the actor's action transform (``as_export_module``) are inside, so it returns
exactly what deterministic ``drl play`` sends to ``env.step``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from drlcli import __version__
from drlcli.actors.memory import format_bytes, module_memory_bytes
from drlcli.atomic import atomic_output
from drlcli.checkpoints.policy import PlayPolicy, load_play_actor
from drlcli.errors import ExportError, UsageError
from drlcli.normalization import VARIANCE_EPSILON, RmsState
from drlcli.observations import layout_record

PARITY_TOLERANCE = 1e-5
DEFAULT_OPSET = 18


class NormalizedPolicy(nn.Module):
    """``obs -> policy(clip((obs - mean) / sqrt(var + 1e-8), -clip, clip))`` in float32."""

    def __init__(self, policy: nn.Module, obs_rms: RmsState | None, clip: float) -> None:
        super().__init__()
        self.policy = policy
        self.normalize = obs_rms is not None
        if obs_rms is not None:
            self.register_buffer("mean", torch.as_tensor(obs_rms.mean, dtype=torch.float32))
            inv_std = 1.0 / np.sqrt(obs_rms.var + VARIANCE_EPSILON)
            self.register_buffer("inv_std", torch.as_tensor(inv_std, dtype=torch.float32))
        self.clip = float(clip)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.normalize:
            obs = torch.clamp((obs - self.mean) * self.inv_std, -self.clip, self.clip)
        return self.policy(obs)


@dataclass(frozen=True)
class ExportSummary:
    path: Path
    file_size_bytes: int
    opset: int
    max_abs_error: float
    latency_batch1_ms: float
    parity_samples: int
    normalization: str
    inference_memory: dict[str, int]  # declared by the actor, bytes per category
    export_module_bytes: int  # parameters and buffers of its export module


def export_onnx(
    checkpoint: str | Path,
    output: str | Path,
    *,
    opset: int = DEFAULT_OPSET,
    allow_builders: tuple[str, ...] | list[str] = (),
    allow_env_modules: tuple[str, ...] | list[str] = (),
    parity_steps: int = 200,
) -> ExportSummary:
    """Export, check with ``onnx.checker``, gate on parity; the file appears only if all pass.

    Raises:
        UsageError: output name or opset unusable.
        ExportError: the export fails, the checker fails, or the max absolute difference
            between onnxruntime and torch exceeds 1e-5 (no file is written).
    """
    import onnx
    import onnxruntime

    output = Path(output)
    if output.suffix != ".onnx":
        raise UsageError(f"{output}: the output file name must end in .onnx")
    if not 17 <= opset <= 23:
        raise UsageError(f"--opset {opset}: supported opsets are 17 to 23")
    policy = load_play_actor(
        checkpoint, allow_builders=allow_builders, allow_env_modules=allow_env_modules
    )
    export_module = policy.actor.as_export_module()
    export_bytes = sum(module_memory_bytes(export_module).values())
    declared = sum(policy.inference_memory.values())
    if export_bytes > declared:
        raise ExportError(
            f"the export module holds {format_bytes(export_bytes)} of parameters and buffers, "
            f"more than the {format_bytes(declared)} the actor declares in "
            "inference_startup_memory_categories(); a deployment sized by it would fail"
        )
    module = NormalizedPolicy(export_module, policy.obs_rms, policy.observation_clip)
    module.eval()
    obs_dim = policy.facts.obs_dim
    observations = _parity_observations(policy, parity_steps)

    with atomic_output(output) as temp:
        external_weights = Path(f"{temp}.data")  # the exporter may write one
        try:
            example = torch.as_tensor(observations[:2])
            try:
                _quiet_export(module, example, temp, opset)
            except Exception as error:  # the exporter raises many types; all mean "cannot export"
                reason = " ".join(str(error).split())[:300]
                raise ExportError(
                    f"torch.onnx.export failed: {type(error).__name__}: {reason}"
                ) from error
            model = onnx.load(str(temp))  # pulls in any external weight file the exporter wrote
            external_weights.unlink(missing_ok=True)
            _add_metadata(model, policy)
            onnx.save(model, str(temp))  # one self-contained file
            try:
                onnx.checker.check_model(str(temp))
            except onnx.checker.ValidationError as error:
                raise ExportError(f"onnx.checker rejected the graph: {error}") from error
            session = onnxruntime.InferenceSession(str(temp), providers=["CPUExecutionProvider"])
            max_error = _parity(module, session, observations, obs_dim)
            if not max_error <= PARITY_TOLERANCE:
                raise ExportError(
                    f"parity check failed: onnxruntime differs from torch by {max_error:.3g} "
                    f"(tolerance {PARITY_TOLERANCE:g}); no file written"
                )
            latency = _latency_ms(session, observations[:1])
        finally:
            external_weights.unlink(missing_ok=True)
    return ExportSummary(
        path=output,
        file_size_bytes=output.stat().st_size,
        opset=opset,
        max_abs_error=max_error,
        latency_batch1_ms=latency,
        parity_samples=len(observations),
        normalization=_normalization(policy),
        inference_memory=policy.inference_memory,
        export_module_bytes=export_bytes,
    )


def _quiet_export(module: nn.Module, example: torch.Tensor, path: Path, opset: int) -> None:
    """torch.onnx's dynamo exporter with a dynamic batch axis, without its progress chatter."""
    import contextlib
    import io
    import logging
    import warnings

    torch_logger = logging.getLogger("torch")
    previous = torch_logger.level
    torch_logger.setLevel(logging.ERROR)
    chatter = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(chatter):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                (example,),
                str(path),
                input_names=["obs"],
                output_names=["action"],
                opset_version=opset,
                dynamic_shapes={"obs": {0: torch.export.Dim("batch")}},
                dynamo=True,
                verbose=False,
            )
    finally:
        torch_logger.setLevel(previous)


def _parity_observations(policy: PlayPolicy, steps: int) -> np.ndarray:
    """Random observations around the training statistics plus real ones from a rollout."""
    rng = np.random.default_rng(0)
    obs_dim = policy.facts.obs_dim
    if policy.obs_rms is not None:
        scale = np.sqrt(policy.obs_rms.var + VARIANCE_EPSILON)
        random = policy.obs_rms.mean + scale * rng.normal(size=(64, obs_dim)) * 2.0
    else:
        random = rng.normal(size=(64, obs_dim)) * 2.0
    env = policy.make_env()
    real = []
    obs, _ = env.reset(seed=0)
    for _ in range(steps):  # the observations deterministic play actually meets
        real.append(obs)
        obs, _, terminated, truncated, _ = env.step(policy.act(obs[None])[0])
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.concatenate([random, np.array(real)]).astype(np.float32)


def _parity(module: nn.Module, session: Any, observations: np.ndarray, obs_dim: int) -> float:
    worst = 0.0
    batches = [observations[:1], observations[:64], observations[64:], observations]
    for batch in batches:
        if len(batch) == 0:
            continue
        with torch.no_grad():
            expected = module(torch.from_numpy(batch)).numpy()
        (actual,) = session.run(["action"], {"obs": batch})
        if not (np.isfinite(actual).all() and np.isfinite(expected).all()):
            raise ExportError(
                "parity check failed: the policy outputs non-finite actions; no file written"
            )
        if actual.shape != expected.shape or actual.dtype != np.float32:
            raise ExportError(
                f"onnxruntime returned {actual.dtype}{list(actual.shape)}, expected "
                f"float32{list(expected.shape)}"
            )
        worst = max(worst, float(np.max(np.abs(actual - expected))))
    return worst


def _latency_ms(session: Any, single: np.ndarray, repeats: int = 200) -> float:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        session.run(["action"], {"obs": single})
        timings.append(time.perf_counter() - started)
    return float(np.median(timings) * 1000.0)


def _normalization(policy: PlayPolicy) -> str:
    """How the exported graph normalises observations."""
    if policy.obs_rms is not None:
        return "frozen observation statistics"
    return policy.checkpoint.algorithm.normalization_inside_actor or "none"


def _add_metadata(model: Any, policy: PlayPolicy) -> None:
    checkpoint = policy.checkpoint
    entries = {
        "drl.actor_semantics": json.dumps(checkpoint.actor_semantics, sort_keys=True),
        "drl.env_id": policy.env_id,
        "drl.algo": checkpoint.algo,
        "drl.version": __version__,
        "drl.normalization": _normalization(policy),
        "drl.action_low": json.dumps(policy.facts.action_low.tolist()),
        "drl.action_high": json.dumps(policy.facts.action_high.tolist()),
        # A Dict task's parts: flat[start:stop] is part key raveled (C order); null: a flat Box.
        "drl.observation_layout": json.dumps(layout_record(policy.facts.observation_layout)),
    }
    del model.metadata_props[:]
    for key, value in entries.items():
        prop = model.metadata_props.add()
        prop.key, prop.value = key, value
    model.producer_name = "drl"
    model.producer_version = __version__
