"""Every check of ``drl verify``, in the order it reports them, and the reader that requires
them: ``read_verified_checkpoint`` is what ``--resume``, ``drl play`` and ``drl export`` read, so
a file verify refuses is never used.

``run_checks(payload)`` runs independent checks on a loaded payload, each PASS, WARN or FAIL
with a reason, without making the env, starting Ray or importing custom code. A check that
cannot run because an earlier one failed is reported as FAIL with that reason rather than
skipped silently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from drlcli import __version__
from drlcli.actors.memory import describe_memory, format_bytes, tensor_bytes
from drlcli.actors.recurrent_layout import (
    STATE_PARTS,
    Core,
    core_of,
    core_of_kwargs,
    describe_core,
    state_shape,
)
from drlcli.actors.spec import BUILDER_PATTERN, RECURRENT_GAUSSIAN_BUILDER, ActorSpec
from drlcli.algos.registry import actor_kind
from drlcli.checkpoints.checks import (
    check_fits,
    non_finite_tensors,
    tensors_in,
    validate_actor_semantics,
    validate_learner_states,
)
from drlcli.checkpoints.files import CONTENT_HASH, check_content_hash, corrupted_error, load_payload
from drlcli.checkpoints.record import Checkpoint
from drlcli.checkpoints.semantics import builtin_tensor_shapes
from drlcli.envs import env_module
from drlcli.errors import CheckpointError, DrlError
from drlcli.observations import describe_layout

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


class _Failed(Exception):
    """A check's failure reason."""


class _Warned(Exception):
    """A check's warning."""


def run_checks(payload: dict) -> list[Check]:
    """Every check of ``drl verify`` on a loaded payload (``files.load_payload``), in order."""
    return [_outcome(name, check, payload) for name, check in _CHECKS]


def read_verified_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint at ``path`` once every check of ``drl verify`` passed (warnings allowed):
    what play, export and ``--resume`` read, so a file verify refuses is never used.

    Raises:
        CheckpointError: unreadable or corrupted, or naming the first failed check.
    """
    payload = load_payload(path)
    failed = [check for check in run_checks(payload) if check.status == FAIL]
    if any(check.name == "content hash" for check in failed):
        raise corrupted_error(path, payload)
    # The commonest faults first, with their own errors: fields, then the actor semantics.
    checkpoint = Checkpoint.from_payload(payload, source=str(path))
    validate_actor_semantics(checkpoint.actor_semantics, source=str(path))
    if failed:
        others = len(failed) - 1
        more = f" (and {others} more check{'s' if others > 1 else ''})" if others else ""
        raise CheckpointError(
            f"{path}: fails drl verify's '{failed[0].name}' check: {failed[0].detail}{more}; "
            f"drl verify {path} shows the full report"
        )
    return checkpoint


def _outcome(name: str, check: Callable[[dict], str], payload: dict) -> Check:
    try:
        return Check(name, PASS, check(payload))
    except _Warned as warning:
        return Check(name, WARN, str(warning))
    except (_Failed, DrlError) as failure:
        return Check(name, FAIL, " ".join(str(failure).split()))
    except Exception as error:  # any field of any type: a malformed file, never a crash
        reason = " ".join(str(error).split())[:200]
        return Check(name, FAIL, f"malformed: {type(error).__name__}: {reason}")


def _record(payload: dict) -> Checkpoint:
    try:
        return Checkpoint.from_payload(payload)
    except DrlError as error:
        raise _Failed(str(error).removeprefix("checkpoint: ")) from None


def _semantics(payload: dict) -> dict:
    try:
        return validate_actor_semantics(payload.get("actor_semantics"), source="checkpoint")
    except DrlError as error:
        raise _Failed(f"actor_semantics invalid: {error}") from None


# --- checks ---------------------------------------------------------------------------------


def _check_format(payload: dict) -> str:
    checkpoint = _record(payload)
    return f"{payload['format']} v{payload['format_version']}, algo {checkpoint.algo}"


def _check_semantics(payload: dict) -> str:
    semantics = _semantics(payload)
    return (
        f"schema v{semantics['schema_version']}, {semantics['kind']} actor, transform "
        f"{semantics['action_transform']}"
    )


def _check_builder(payload: dict) -> str:
    semantics = _semantics(payload)
    builder = semantics["builder"]
    if not BUILDER_PATTERN.match(builder):
        raise _Failed(f"builder {builder!r} is not of the form 'pkg.module:callable'")
    ActorSpec(builder, semantics["kwargs"])  # the kwargs too must make a spec
    kind = actor_kind(builder)
    if kind != semantics["kind"]:
        raise _Failed(f"kind is {semantics['kind']!r} but builder {builder} is {kind}")
    if kind == "custom":
        raise _Warned(f"custom builder {builder}: playing it imports that module (not done here)")
    return builder


def _check_env_module(payload: dict) -> str:
    env_id = payload["env"]["id"]
    module = env_module(env_id)
    if module is not None:
        raise _Warned(
            f"env id {env_id}: making the task imports module {module} (not done here); play "
            f"and export ask for --allow-env-module {module}"
        )
    return f"{env_id}: a registered id, no module to import"


def _check_kwargs(payload: dict) -> str:
    kwargs = _semantics(payload)["kwargs"]
    try:
        json.dumps(kwargs, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise _Failed(f"kwargs are not JSON-serialisable: {error}") from None
    return f"{len(kwargs)} JSON-serialisable kwargs"


def _check_dims(payload: dict) -> str:
    semantics = _semantics(payload)
    obs_dim, action_dim = semantics["obs_dim"], semantics["action_dim"]
    if obs_dim <= 0 or action_dim <= 0:
        raise _Failed(f"obs_dim {obs_dim} and action_dim {action_dim} must be positive")
    checkpoint = _record(payload)
    # The same fit check as --resume and play, against the checkpoint's own env record.
    check_fits(checkpoint, checkpoint.env.facts(), "checkpoint")
    actor = checkpoint.actor
    spec = ActorSpec(semantics["builder"], semantics["kwargs"])
    if actor_kind(spec.builder) != "builtin":  # by the builder string, never the stored kind
        raise _Warned("custom actor: tensor shapes cannot be checked without building it")
    # Built-in builders are drl's own code: rebuild on the meta device (shapes only, whatever
    # size the file's kwargs ask for) and compare every tensor's shape.
    expected = builtin_tensor_shapes(spec, obs_dim, action_dim)
    stored = {name: tuple(t.shape) for name, t in actor.items() if isinstance(t, torch.Tensor)}
    if set(stored) != set(expected) or len(stored) != len(actor):
        missing = sorted(set(expected) - set(stored))
        extra = sorted(set(actor) - set(expected))
        raise _Failed(f"actor tensors differ from the builder's: missing {missing}, extra {extra}")
    wrong = [f"{n} {stored[n]} != {expected[n]}" for n in expected if stored[n] != expected[n]]
    if wrong:
        raise _Failed("actor tensor shapes do not match obs_dim/action_dim: " + "; ".join(wrong))
    return f"obs_dim {obs_dim}, action_dim {action_dim} match {len(stored)} actor tensors"


def _check_recurrent(payload: dict) -> str:
    """A recurrent policy's record (ADR 0018) against its networks: the builder's kwargs, the
    config's ``algo_params.recurrent``, the actor's and every value network's core, and the
    rollout states in progress."""
    checkpoint = _record(payload)
    semantics = _semantics(payload)
    actor_core = core_of(checkpoint.actor)
    configured = _configured_core(checkpoint.config)
    if semantics["builder"] != RECURRENT_GAUSSIAN_BUILDER:
        if actor_core is not None and actor_kind(semantics["builder"]) == "builtin":
            raise _Failed(
                f"the one-step builder's actor holds a recurrent core ({describe_core(actor_core)})"
            )
        if configured is not None:
            raise _Failed(
                f"the config asks for a recurrent policy ({describe_core(configured)}) but the "
                f"actor is built by {semantics['builder']}"
            )
        return "none: the policy reads one observation at a time"
    core = core_of_kwargs(semantics["kwargs"])
    for what, other in (
        ("the actor's weights hold", actor_core),
        ("the config's algo_params.recurrent asks for", configured),
    ):
        if other != core:
            raise _Failed(
                f"actor_semantics.kwargs ask for {describe_core(core)}, but {what} "
                f"{describe_core(other)}"
            )
    resumable = _check_recurrent_learner_states(checkpoint.learner_states, core)
    parts = " and ".join(f"{part} [{core[2]}, batch, {core[1]}]" for part in STATE_PARTS[core[0]])
    return f"{describe_core(core)}; state {parts}, zeros at an episode's start; {resumable}"


def _configured_core(config: dict) -> Core | None:
    recurrent = (config.get("algo_params") or {}).get("recurrent")
    return None if recurrent is None else core_of_kwargs(recurrent)


def _check_recurrent_learner_states(states: list[dict], core: Core) -> str:
    """Each learner's value network holds ``core``, each rollout state in progress the state
    of ``core`` for its environments."""
    envs = 0
    for index, state in enumerate(states):
        value_core = core_of(state["value"])
        if value_core != core:
            raise _Failed(
                f"learner_states[{index}].value holds {describe_core(value_core)}, the policy "
                f"{describe_core(core)}"
            )
        for place, rollout in enumerate(state.get("rollout_actors") or []):
            where = f"learner_states[{index}].rollout_actors[{place}]"
            memory = rollout.get("recurrent")
            if not isinstance(memory, dict):
                raise _Failed(f"{where} holds no recurrent state to resume from")
            count = len(memory["episode_starts"])
            wanted = state_shape(core, count)
            for name in ("policy_state", "value_state"):
                stored = tuple(memory[name].shape)
                if stored != wanted:
                    raise _Failed(
                        f"{where}.recurrent.{name} is {list(stored)}, expected {list(wanted)}"
                    )
            envs += count
    return f"{len(states)} value networks alike, the states of {envs} environments in progress"


def _check_observation_layout(payload: dict) -> str:
    env = _record(payload).env
    layout = env.facts().observation_layout
    obs_dim = _semantics(payload)["obs_dim"]
    if layout is None:
        return f"a flat Box of {obs_dim}"
    if layout[-1].stop != obs_dim:  # the record's own shape is checked in "format and fields"
        raise _Failed(f"the parts end at {layout[-1].stop}, the policy reads {obs_dim}")
    parts = f"{len(layout)} part{'s' if len(layout) > 1 else ''}"
    described = f"the policy (and its export) reads {parts}: {describe_layout(layout)}"
    groups = env.training_groups()  # read and checked against the policy's by from_payload
    if groups is None:
        return described
    hidden = [key for key in groups.critic_only_keys if key in {f.key for f in layout}]
    if hidden:  # a damaged record can name a part twice
        raise _Failed(f"critic-only parts {hidden} are in the policy's input")
    only = ", ".join(groups.critic_only_keys) or "nothing more"
    return f"{described}; the critic reads {groups.critic_dim} entries, also {only}"


def _check_action_bounds(payload: dict) -> str:
    semantics = _semantics(payload)
    env = payload["env"]
    low, high = env.get("action_low"), env.get("action_high")
    if not isinstance(low, list) or not isinstance(high, list):
        raise _Failed("env action_low / action_high must be lists")
    if not (len(low) == len(high) == semantics["action_dim"]):
        raise _Failed(
            f"bounds have lengths {len(low)}/{len(high)}, action_dim {semantics['action_dim']}"
        )
    values = [float(x) for x in low + high]
    if not all(math.isfinite(x) for x in values):
        raise _Failed("action bounds are not finite")
    bad = [i for i, (lo, hi) in enumerate(zip(low, high, strict=True)) if not lo < hi]
    if bad:
        raise _Failed(f"action_low >= action_high at dimensions {bad}")
    return f"{len(low)} finite dimensions with low < high"


def _check_obs_rms(payload: dict) -> str:
    state = payload["obs_rms_state"]
    if state is None:
        return "none (observations used raw)"
    obs_dim = _semantics(payload)["obs_dim"]
    mean, var, count = state.get("mean"), state.get("var"), state.get("count")
    for name, tensor in (("mean", mean), ("var", var)):
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != (obs_dim,):
            raise _Failed(f"obs_rms_state.{name} must be a tensor of shape [{obs_dim}]")
        if not torch.isfinite(tensor).all():
            raise _Failed(f"obs_rms_state.{name} is not finite")
    if (var < 0).any():
        raise _Failed("obs_rms_state.var has negative entries")
    if not isinstance(count, (int, float)) or not math.isfinite(count) or count <= 0:
        raise _Failed(f"obs_rms_state.count must be positive, got {count!r}")
    described = f"shape [{obs_dim}], count {count:.0f}"
    groups = _record(payload).env.training_groups()
    if groups is None:
        return described
    training = payload.get("training_obs_rms_state")
    width = groups.layout[-1].stop
    if training is None:
        raise _Failed("a privileged critic's checkpoint lacks training_obs_rms_state")
    for name in ("mean", "var"):
        tensor = training.get(name)
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != (width,):
            raise _Failed(f"training_obs_rms_state.{name} must be a tensor of shape [{width}]")
        policy = state[name]
        if not torch.equal(tensor[:obs_dim].to(policy.dtype), policy):
            raise _Failed(f"obs_rms_state.{name} is not the policy's part of the training one")
    return f"{described}; training observation [{width}]"


def _check_finite(payload: dict) -> str:
    count = sum(1 for _ in tensors_in(payload))
    bad = non_finite_tensors(payload)
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise _Failed(f"non-finite values in {shown}")
    return f"{count} tensors, all finite"


def _check_progress(payload: dict) -> str:
    progress = payload["progress"]
    for key in ("round", "env_steps"):
        value = progress.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _Failed(f"progress.{key} must be a non-negative integer, got {value!r}")
    best = progress.get("best_return")
    if best is not None and not (isinstance(best, float) and math.isfinite(best)):
        raise _Failed(f"progress.best_return must be a finite number or null, got {best!r}")
    return f"round {progress['round']}, {progress['env_steps']} env steps"


def _check_learner_states(payload: dict) -> str:
    checkpoint = _record(payload)
    return validate_learner_states(
        checkpoint.learner_states, checkpoint.algorithm, source="checkpoint"
    )


def _check_inference_memory(payload: dict) -> str:
    checkpoint = _record(payload)
    declared = checkpoint.inference_memory
    stored = tensor_bytes(checkpoint.actor)
    if stored > sum(declared.values()):
        raise _Failed(
            f"the actor's tensors hold {format_bytes(stored)}, more than the "
            f"{format_bytes(sum(declared.values()))} its inference_startup_memory_categories() "
            "declared"
        )
    return describe_memory(declared) + f"; the stored actor holds {format_bytes(stored)}"


def _check_evaluation(payload: dict) -> str:
    evaluation = _record(payload).evaluation
    if evaluation is None:
        return "none recorded (a checkpoint written mid-run)"
    return (
        f"return {evaluation['return_mean']:.1f} ± {evaluation['return_std']:.1f} over "
        f"{evaluation['episodes']} deterministic episodes, weights of env step "
        f"{evaluation['env_steps']}"
    )


def _check_content_hash(payload: dict) -> str:
    if payload.get(CONTENT_HASH) is None:
        raise _Failed("no content hash; drl writes one into every checkpoint")
    if not check_content_hash(payload):
        raise _Failed(
            "contents do not match the content hash written with them: the file was corrupted "
            "after it was written"
        )
    return "contents match the hash written with them"


def _check_versions(payload: dict) -> str:
    versions = payload["versions"]
    written = versions.get("drl")
    if written != __version__:
        raise _Warned(f"written by drl {written}, this is drl {__version__}")
    return ", ".join(f"{k} {v}" for k, v in versions.items())


_CHECKS: list[tuple[str, Callable[[dict], str]]] = [
    ("format and fields", _check_format),
    ("content hash", _check_content_hash),
    ("actor_semantics schema", _check_semantics),
    ("builder", _check_builder),
    ("kwargs", _check_kwargs),
    ("env module", _check_env_module),
    ("dimensions", _check_dims),
    ("recurrent state", _check_recurrent),
    ("observation layout", _check_observation_layout),
    ("action bounds", _check_action_bounds),
    ("observation statistics", _check_obs_rms),
    ("finite tensors", _check_finite),
    ("progress counters", _check_progress),
    ("resume state", _check_learner_states),
    ("inference memory", _check_inference_memory),
    ("evaluation", _check_evaluation),
    ("library versions", _check_versions),
]
