"""``drl export``: the deterministic policy as one ONNX graph, parity-checked with onnxruntime.

The graph is the whole deployed policy: raw observation ``obs`` float32 ``[batch, obs_dim]`` in,
environment action ``action`` float32 ``[batch, action_dim]`` out. The frozen observation
normalisation and the actor's action transform (``as_export_module``) are inside, so it returns
exactly what deterministic ``drl play`` sends to ``env.step``.

A recurrent policy (ADR 0018) carries its state as explicit inputs and outputs: ``obs, h_in
[, c_in] -> action, h_out[, c_out]``, each state ``[layers, batch, size]`` (``c`` an LSTM's cell
state). The client feeds zeros at an episode's first observation and the previous step's
outputs after that; the graph's metadata ``drl.recurrent`` says so.
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
from drlcli.actors.recurrent_layout import core_of, state_record
from drlcli.atomic import atomic_output
from drlcli.checkpoints.policy import PlayPolicy, load_play_actor
from drlcli.errors import ExportError, UsageError
from drlcli.normalization import VARIANCE_EPSILON, RmsState
from drlcli.observations import layout_record

PARITY_TOLERANCE = 1e-5
DEFAULT_OPSET = 18


class NormalizedPolicy(nn.Module):
    """``obs -> policy(clip((obs - mean) / sqrt(var + 1e-8), -clip, clip))`` in float32."""

    state_names: tuple[str, ...] = ()
    """The recurrent state's parts, each an input ``{name}_in`` and an output ``{name}_out``."""

    def __init__(self, policy: nn.Module, obs_rms: RmsState | None, clip: float) -> None:
        super().__init__()
        self.policy = policy
        self.normalize = obs_rms is not None
        if obs_rms is not None:
            self.register_buffer("mean", torch.as_tensor(obs_rms.mean, dtype=torch.float32))
            inv_std = 1.0 / np.sqrt(obs_rms.var + VARIANCE_EPSILON)
            self.register_buffer("inv_std", torch.as_tensor(inv_std, dtype=torch.float32))
        self.clip = float(clip)

    def normalized(self, obs: torch.Tensor) -> torch.Tensor:
        if self.normalize:
            obs = torch.clamp((obs - self.mean) * self.inv_std, -self.clip, self.clip)
        return obs

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy(self.normalized(obs))


class NormalizedGruPolicy(NormalizedPolicy):
    """``obs, h_in -> action, h_out``: a recurrent export module whose state is one tensor."""

    state_names = ("h",)

    def forward(  # type: ignore[override]
        self, obs: torch.Tensor, h_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(self.normalized(obs), h_in)


class NormalizedLstmPolicy(NormalizedPolicy):
    """``obs, h_in, c_in -> action, h_out, c_out``: the LSTM's stacked state ``[2, ...]``
    (ADR 0018 decision 2) split into its hidden and cell parts, as deployments name them."""

    state_names = ("h", "c")

    def forward(  # type: ignore[override]
        self, obs: torch.Tensor, h_in: torch.Tensor, c_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        action, state = self.policy(self.normalized(obs), torch.stack((h_in, c_in)))
        return action, state[0], state[1]


def exported_policy(policy: PlayPolicy, export_module: nn.Module) -> NormalizedPolicy:
    """The graph's module: normalisation, then the actor's export module, with the recurrent
    state split into named inputs and outputs when the actor has one."""
    arguments = (export_module, policy.obs_rms, policy.observation_clip)
    shape = recurrent_state_shape(policy.actor, 1)
    if shape is None:
        return NormalizedPolicy(*arguments)
    return NormalizedLstmPolicy(*arguments) if len(shape) == 4 else NormalizedGruPolicy(*arguments)


def recurrent_state_shape(actor: Any, batch: int) -> tuple[int, ...] | None:
    """The actor's state of ``batch`` environments (ADR 0018), None for a one-step actor."""
    if not hasattr(actor, "recurrent_state_shape"):
        return None
    return tuple(actor.recurrent_state_shape(batch))


@dataclass(frozen=True)
class ExportSummary:
    path: Path
    file_size_bytes: int
    opset: int
    max_abs_error: float
    latency_batch1_ms: float
    parity_samples: int  # observations compared (a recurrent policy's: steps of sequences)
    normalization: str
    inference_memory: dict[str, int]  # declared by the actor, bytes per category
    export_module_bytes: int  # parameters and buffers of its export module
    state_names: tuple[str, ...] = ()  # a recurrent graph's state inputs and outputs


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
    module = exported_policy(policy, export_module)
    module.eval()
    observations, episode_starts = _parity_observations(policy, parity_steps)
    runs = _parity_runs(module, observations, episode_starts)

    with atomic_output(output) as temp:
        external_weights = Path(f"{temp}.data")  # the exporter may write one
        try:
            example = _inputs(torch.as_tensor(observations[:2]), _zero_states(policy, 2))
            try:
                _quiet_export(module, example, temp, opset)
            except Exception as error:  # the exporter raises many types; all mean "cannot export"
                reason = " ".join(str(error).split())[:300]
                raise ExportError(
                    f"torch.onnx.export failed: {type(error).__name__}: {reason}"
                ) from error
            model = onnx.load(str(temp))  # pulls in any external weight file the exporter wrote
            external_weights.unlink(missing_ok=True)
            _add_metadata(model, policy, module.state_names)
            onnx.save(model, str(temp))  # one self-contained file
            try:
                onnx.checker.check_model(str(temp))
            except onnx.checker.ValidationError as error:
                raise ExportError(f"onnx.checker rejected the graph: {error}") from error
            session = onnxruntime.InferenceSession(str(temp), providers=["CPUExecutionProvider"])
            max_error = _parity(module, session, runs, policy)
            if not max_error <= PARITY_TOLERANCE:
                raise ExportError(
                    f"parity check failed: onnxruntime differs from torch by {max_error:.3g} "
                    f"(tolerance {PARITY_TOLERANCE:g}); no file written"
                )
            latency = _latency_ms(session, _feed(module, observations[:1], _zero_states(policy, 1)))
        finally:
            external_weights.unlink(missing_ok=True)
    return ExportSummary(
        path=output,
        file_size_bytes=output.stat().st_size,
        opset=opset,
        max_abs_error=max_error,
        latency_batch1_ms=latency,
        parity_samples=sum(len(run) for run in runs),
        normalization=_normalization(policy),
        inference_memory=policy.inference_memory,
        export_module_bytes=export_bytes,
        state_names=module.state_names,
    )


def _quiet_export(
    module: NormalizedPolicy, example: tuple[torch.Tensor, ...], path: Path, opset: int
) -> None:
    """torch.onnx's dynamo exporter with a dynamic batch axis (a state's axis 1), without its
    progress chatter."""
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
            batch = torch.export.Dim("batch")
            torch.onnx.export(
                module,
                example,
                str(path),
                input_names=_input_names(module),
                output_names=_output_names(module),
                opset_version=opset,
                dynamic_shapes=({0: batch}, *({1: batch} for _ in module.state_names)),
                dynamo=True,
                verbose=False,
            )
    finally:
        torch_logger.setLevel(previous)


def _input_names(module: NormalizedPolicy) -> list[str]:
    return ["obs", *(f"{name}_in" for name in module.state_names)]


def _output_names(module: NormalizedPolicy) -> list[str]:
    return ["action", *(f"{name}_out" for name in module.state_names)]


def _zero_states(policy: PlayPolicy, batch: int) -> list[np.ndarray]:
    """Each state part of ``batch`` environments at an episode's start: ``[layers, batch,
    size]`` zeros (none for a one-step policy)."""
    shape = recurrent_state_shape(policy.actor, batch)
    if shape is None:
        return []
    parts = shape[0] if len(shape) == 4 else 1
    return [np.zeros(shape[-3:], np.float32) for _ in range(parts)]


def _inputs(obs: torch.Tensor, states: list[np.ndarray]) -> tuple[torch.Tensor, ...]:
    return (obs, *(torch.from_numpy(state) for state in states))


def _feed(module: NormalizedPolicy, obs: np.ndarray, states: list[np.ndarray]) -> dict:
    return dict(zip(_input_names(module), [obs, *states], strict=True))


def _parity_observations(policy: PlayPolicy, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """64 random observations around the training statistics, then ``steps`` real ones from
    deterministic play in order, with whether each starts an episode ``[64 + steps]`` (the
    random ones each start their own)."""
    rng = np.random.default_rng(0)
    obs_dim = policy.facts.obs_dim
    if policy.obs_rms is not None:
        scale = np.sqrt(policy.obs_rms.var + VARIANCE_EPSILON)
        random = policy.obs_rms.mean + scale * rng.normal(size=(64, obs_dim)) * 2.0
    else:
        random = rng.normal(size=(64, obs_dim)) * 2.0
    env = policy.make_env()
    real, starts = [], []
    obs, _ = env.reset(seed=0)
    start = True
    for _ in range(steps):  # the observations deterministic play actually meets
        real.append(obs)
        starts.append(start)
        action = policy.act(obs[None], dones=torch.tensor([start]))[0]
        obs, _, terminated, truncated, _ = env.step(action)
        start = bool(terminated or truncated)
        if start:
            obs, _ = env.reset()
    env.close()
    observations = np.concatenate([random, np.array(real)]).astype(np.float32)
    return observations, np.concatenate([np.ones(len(random), bool), np.array(starts, bool)])


Run = list[tuple[np.ndarray, np.ndarray]]
"""Steps of one batch of environments, each ``(obs [B, O], episode starts [B])``: the state
starts at zeros and is carried from step to step, zeroed where an episode starts."""


def _parity_runs(
    module: NormalizedPolicy, observations: np.ndarray, episode_starts: np.ndarray
) -> list[Run]:
    """What the parity gate compares. A one-step graph: batches of 1, 64, the rest and all.
    A recurrent one: the 64 random observations as a batch for four steps (the batch axis of
    the state), then the real observations as one sequence, episode after episode."""
    if not module.state_names:
        batches = [observations[:1], observations[:64], observations[64:], observations]
        return [[(batch, np.ones(len(batch), bool))] for batch in batches if len(batch)]
    random = observations[:64]
    batch = [(random, np.ones(64, bool))] + [(random, np.zeros(64, bool))] * 3
    sequence = [
        (observations[t : t + 1], episode_starts[t : t + 1]) for t in range(64, len(observations))
    ]
    return [run for run in (batch, sequence) if run]


def _parity(module: NormalizedPolicy, session: Any, runs: list[Run], policy: PlayPolicy) -> float:
    """The largest absolute difference between onnxruntime and torch, actions and states,
    over every step of every run, each side feeding its own state back."""
    worst = 0.0
    names = _output_names(module)
    for run in runs:
        expected_states = _zero_states(policy, len(run[0][0]))
        actual_states = [state.copy() for state in expected_states]
        for obs, starts in run:
            keep = (~starts).astype(np.float32)[None, :, None]
            expected_states = [state * keep for state in expected_states]
            actual_states = [state * keep for state in actual_states]
            with torch.no_grad():
                expected = module(*_inputs(torch.from_numpy(obs), expected_states))
            expected = [
                tensor.numpy() for tensor in (expected if module.state_names else (expected,))
            ]
            actual = session.run(names, _feed(module, obs, actual_states))
            for name, got, want in zip(names, actual, expected, strict=True):
                _check_output(name, got, want)
                worst = max(worst, float(np.max(np.abs(got - want))))
            expected_states, actual_states = expected[1:], list(actual[1:])
    return worst


def _check_output(name: str, actual: np.ndarray, expected: np.ndarray) -> None:
    if not (np.isfinite(actual).all() and np.isfinite(expected).all()):
        what = "actions" if name == "action" else f"state {name}"
        raise ExportError(
            f"parity check failed: the policy outputs non-finite {what}; no file written"
        )
    if actual.shape != expected.shape or actual.dtype != np.float32:
        raise ExportError(
            f"onnxruntime returned {name} {actual.dtype}{list(actual.shape)}, expected "
            f"float32{list(expected.shape)}"
        )


def _latency_ms(session: Any, feed: dict, repeats: int = 200) -> float:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        session.run(["action"], feed)
        timings.append(time.perf_counter() - started)
    return float(np.median(timings) * 1000.0)


def _normalization(policy: PlayPolicy) -> str:
    """How the exported graph normalises observations."""
    if policy.obs_rms is not None:
        return "frozen observation statistics"
    return policy.checkpoint.algorithm.normalization_inside_actor or "none"


def _add_metadata(model: Any, policy: PlayPolicy, state_names: tuple[str, ...]) -> None:
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
    if state_names:
        entries["drl.recurrent"] = json.dumps(_recurrent_record(policy, state_names))
    del model.metadata_props[:]
    for key, value in entries.items():
        prop = model.metadata_props.add()
        prop.key, prop.value = key, value
    model.producer_name = "drl"
    model.producer_version = __version__


def _recurrent_record(policy: PlayPolicy, state_names: tuple[str, ...]) -> dict[str, Any]:
    """The ``drl.recurrent`` metadata: the core, its state's tensors and shape, the reset rule."""
    core = core_of(policy.checkpoint.actor)
    return {
        **state_record(core),
        "inputs": [f"{name}_in" for name in state_names],
        "outputs": [f"{name}_out" for name in state_names],
        "dtype": "float32",
    }
