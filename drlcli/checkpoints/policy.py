"""A checkpoint's policy, ready to run: ``load_play_actor`` reads a checkpoint safely, validates
its actor_semantics against the environment it will run in and against the rebuilt actor, and
only then loads the weights (``drl play``, ``drl export`` and the learning benchmarks load
policies with it; ADR 0017).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drlcli.actors.contract import declared_inference_memory
from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.algos.registry import actor_kind
from drlcli.checkpoints.checks import check_fits, validate_actor_semantics
from drlcli.checkpoints.record import Checkpoint
from drlcli.checkpoints.semantics import actor_semantics
from drlcli.checkpoints.verified import read_verified_checkpoint
from drlcli.env_facts import EnvFacts
from drlcli.envs import env_facts, env_module, make_env
from drlcli.errors import CheckpointError, EnvironmentSpecError, SemanticsError
from drlcli.evaluation import FrozenPolicy
from drlcli.normalization import RmsState
from drlcli.observations import describe_layout
from drlcli.success import ANY_STEP, FINAL_STEP


@dataclass
class PlayPolicy(FrozenPolicy):
    """A checkpoint's policy with its frozen observation statistics and its environment.

    Attributes:
        env_id: the environment the checkpoint was trained on (or the validated override).
        env_kwargs: the ``gymnasium.make`` keyword arguments training used ({} for an override).
        facts: that environment's spaces.
        max_episode_steps: the time limit training used (None: the task's own).
        observation_keys: a Dict task's parts the policy reads, in order (the checkpoint's
            layout); None for a flat Box observation.
        success: ``(env.success_key, env.success_when)`` of the training config: how an
            episode's success is read (``drlcli.success``).
        wrappers: the Gymnasium wrappers training put around the task (the checkpoint's).
        checkpoint: the whole checkpoint.
        inference_memory: bytes per category the rebuilt actor declares it needs for inference.
    """

    env_id: str
    env_kwargs: dict[str, Any]
    facts: EnvFacts
    max_episode_steps: int | None
    observation_keys: tuple[str, ...] | None
    success: tuple[str | None, str]
    wrappers: list[dict[str, Any]]
    checkpoint: Checkpoint
    inference_memory: dict[str, int]

    def make_env(self, **overrides: Any) -> Any:
        """The policy's environment as training made it; ``overrides`` (render_mode, width,
        height) take precedence over the stored kwargs."""
        return make_env(
            self.env_id,
            max_episode_steps=self.max_episode_steps,
            observation_keys=self.observation_keys,
            wrappers=self.wrappers,
            **{**self.env_kwargs, **overrides},
        )


def load_play_actor(
    path: str | Path,
    *,
    env_id: str | None = None,
    allow_builders: Iterable[str] = (),
    allow_env_modules: Iterable[str] = (),
) -> PlayPolicy:
    """Load a checkpoint's policy after every semantics check passes.

    Args:
        path: the checkpoint.
        env_id: run in this environment instead of the checkpoint's; its spaces must match.
        allow_builders: modules whose builders may be imported (custom actors only; the
            built-in ``drlcli.*`` builders need no consent).
        allow_env_modules: modules that the checkpoint's env id ``module:Task-v0`` may import
            (an ``env_id`` the caller gives is its own choice and needs none).

    Raises:
        CheckpointError: unreadable file.
        SemanticsError: missing/unsupported semantics, a custom builder without consent,
            or a mismatch with the environment or the rebuilt actor.
    """
    checkpoint = read_verified_checkpoint(path)
    source = str(path)
    semantics = validate_actor_semantics(checkpoint.actor_semantics, source=source)
    spec = ActorSpec(semantics["builder"], semantics["kwargs"])
    kind = actor_kind(spec.builder)
    if kind != semantics["kind"]:
        raise SemanticsError(
            f"{source}: actor_semantics.kind is {semantics['kind']!r} but builder "
            f"{spec.builder} is {kind}"
        )
    if kind == "custom" and spec.module not in set(allow_builders):
        raise SemanticsError(
            f"{source}: the policy is built by custom code {spec.builder}; importing it runs "
            f"that module. If you trust it, pass --allow-builder {spec.module}"
        )
    module = env_module(checkpoint.env.id)
    if env_id is None and module is not None and module not in set(allow_env_modules):
        raise SemanticsError(
            f"{source}: the task {checkpoint.env.id} is registered by module {module}; making "
            f"it imports that module. If you trust it, pass --allow-env-module {module}"
        )
    run_env_id = env_id or checkpoint.env.id
    # Another task does not take the trained task's kwargs (an xml_file, say).
    env_kwargs = checkpoint.env.kwargs if run_env_id == checkpoint.env.id else {}
    stored_layout = checkpoint.env.facts().observation_layout
    keys = None if stored_layout is None else tuple(field.key for field in stored_layout)
    try:
        env = make_env(
            run_env_id, observation_keys=keys, wrappers=checkpoint.env.wrappers, **env_kwargs
        )
    except EnvironmentSpecError as error:
        if keys is None:
            raise
        raise SemanticsError(
            f"{source}: checkpoint does not fit environment {run_env_id}: the policy reads "
            f"observation {describe_layout(stored_layout)} ({error})"
        ) from None
    facts = env_facts(env)
    env.close()
    check_fits(checkpoint, facts, source)

    actor = build_policy_actor(
        spec, facts.obs_dim, facts.action_dim, "cpu", facts.action_low, facts.action_high
    )
    rebuilt = actor_semantics(spec, facts.obs_dim, facts.action_dim, actor.action_transform_id)
    validate_actor_semantics(semantics, rebuilt, source=source)
    try:
        actor.load_state_dict(checkpoint.actor)
    except (KeyError, RuntimeError) as error:
        reason = " ".join(str(error).split())[:300]
        raise CheckpointError(f"{source}: actor weights do not fit the actor: {reason}") from error
    actor.eval()
    obs_rms = None
    if checkpoint.obs_rms_state is not None:
        obs_rms = RmsState.from_dict(checkpoint.obs_rms_state)
    return PlayPolicy(
        actor=actor,
        obs_rms=obs_rms,
        observation_clip=checkpoint.observation_clip,
        env_id=run_env_id,
        env_kwargs=dict(env_kwargs),
        facts=facts,
        max_episode_steps=checkpoint.env.max_episode_steps,
        observation_keys=keys,
        success=_success_settings(checkpoint),
        wrappers=checkpoint.env.wrappers,
        checkpoint=checkpoint,
        inference_memory=declared_inference_memory(actor),
    )


def _success_settings(checkpoint: Checkpoint) -> tuple[str | None, str]:
    """How the training config read success (a checkpoint from before it: the defaults)."""
    env = checkpoint.config.get("env")
    env = env if isinstance(env, dict) else {}
    key, when = env.get("success_key"), env.get("success_when", ANY_STEP)
    return (key if isinstance(key, str) else None), (when if when == FINAL_STEP else ANY_STEP)
