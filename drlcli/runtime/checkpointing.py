"""The checkpoints of a run: the latest after every round, the best by the run's criterion, the
replay buffer beside the latest when asked, and the final evaluation recorded at the end.

Write order (Method.md, "Outputs"): each round decides its best offer first, then writes the
latest checkpoint (which records the new best), then the best file, then the replay buffer
(stamped with the latest checkpoint: ``drlcli/checkpoints/replay_file.py``). A run killed
between two writes keeps a latest checkpoint that a resume continues from, a best file no newer
than it, and a replay file that ``--resume-replay`` refuses unless it is that checkpoint's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drlcli.algos.entry_types import Algorithm
from drlcli.checkpoints.files import write_checkpoint
from drlcli.checkpoints.record import (
    BEST_BY_EVALUATION,
    BEST_BY_EVALUATION_SUCCESS,
    BEST_BY_TRAINING_RETURN,
    BEST_BY_TRAINING_SUCCESS,
    Checkpoint,
    EnvRecord,
    RunProgress,
)
from drlcli.checkpoints.replay_file import ReplayStamp, replay_path
from drlcli.config import Config
from drlcli.env_facts import EnvFacts
from drlcli.evaluation import EvaluationResult
from drlcli.normalization import DEFAULT_OBSERVATION_CLIP, RmsState
from drlcli.runtime.probe import ProbedActor


def build_checkpoint(
    algorithm: Algorithm,
    config: Config,
    actor: ProbedActor,
    facts: EnvFacts,
    progress: RunProgress,
    obs_rms_state: dict[str, Any] | None,
    learner_states: list[dict[str, Any]],
) -> Checkpoint:
    """The checkpoint of a run as it stands: the round loop's parts and the driver's counters.
    ``obs_rms_state``: the statistics of the training observation; the checkpoint's own are of
    the policy's part of it (the first ``policy_dim`` features)."""
    clip = algorithm.observation_clip(config.algo_params)
    training_rms = obs_rms_state if clip is not None else None
    policy_rms = training_rms
    if training_rms is not None and facts.observation_groups is not None:
        policy_rms = RmsState.from_dict(training_rms).first(facts.policy_dim).to_dict()
    return Checkpoint(
        algo=algorithm.name,
        actor=learner_states[0]["actor"],
        actor_semantics=actor.semantics,
        env=EnvRecord.of(config.env, facts),
        progress=dataclasses.replace(progress),
        config=config.to_dict(),
        learner_states=learner_states,
        obs_rms_state=policy_rms,
        observation_clip=clip if clip is not None else DEFAULT_OBSERVATION_CLIP,
        inference_memory=actor.inference_memory,
        training_obs_rms_state=training_rms if facts.observation_groups is not None else None,
    )


def with_progress(checkpoint: Checkpoint, progress: RunProgress) -> Checkpoint:
    """``checkpoint`` with the run's counters as they stand now (the best after an offer)."""
    return dataclasses.replace(checkpoint, progress=dataclasses.replace(progress))


def best_criterion(config: Config) -> str:
    """What a run's best checkpoint maximises: the evaluations' (periodic evaluation) or the
    rounds' mean return or success rate (``evaluation.best_by``)."""
    periodic = config.evaluation.interval_env_steps is not None
    if config.evaluation.best_by == "success_rate":
        return BEST_BY_EVALUATION_SUCCESS if periodic else BEST_BY_TRAINING_SUCCESS
    return BEST_BY_EVALUATION if periodic else BEST_BY_TRAINING_RETURN


class BestCheckpoint:
    """Keeps ``model_<name>_best.pt`` by ``progress.best_criterion`` (``best_criterion``): the
    best deterministic evaluation (only evaluations are offers) or the best training round (only
    rounds are), by mean return or by success rate (an equal rate with a higher mean return
    wins: ``progress.best_tiebreak``). ``progress.best_return`` (which the checkpoints store)
    follows it.

    An offer that wins raises ``progress.best_return`` at once and holds the candidate until
    ``write_pending``: the latest checkpoint, which records the new best, is written first. A run
    killed between the two writes then has a best file no newer than its latest checkpoint, whose
    record a resume must beat: the best file is never replaced by a worse policy.
    """

    def __init__(self, path: Path, progress: RunProgress) -> None:
        self.path = path
        self.progress = progress
        self.pending: list[Checkpoint] = []

    def _beats(self, value: float | None, tiebreak: float | None) -> bool:
        best = self.progress.best_return
        if value is None:
            return False
        if best is None or value > best:
            return True
        stored = self.progress.best_tiebreak
        return value == best and tiebreak is not None and (stored is None or tiebreak > stored)

    def _offer(
        self, criterion: str, value: float | None, tiebreak: float | None, checkpoint: Checkpoint
    ) -> None:
        if self.progress.best_criterion == criterion and self._beats(value, tiebreak):
            self.progress.best_return, self.progress.best_tiebreak = value, tiebreak
            self._hold(checkpoint)

    def offer_training_round(
        self, return_mean: float | None, success_rate: float | None, checkpoint: Checkpoint
    ) -> None:
        """A round's mean training return and success rate (None: no episode finished, or
        none reported success) and its checkpoint."""
        self._offer(BEST_BY_TRAINING_RETURN, return_mean, None, checkpoint)
        self._offer(BEST_BY_TRAINING_SUCCESS, success_rate, return_mean, checkpoint)

    def offer_evaluated(self, result: EvaluationResult, checkpoint: Checkpoint) -> None:
        """The weights ``checkpoint`` holds were evaluated: keep them if they are the best."""
        if self.progress.best_criterion not in (BEST_BY_EVALUATION, BEST_BY_EVALUATION_SUCCESS):
            return  # the best follows the training rounds
        evaluated = dataclasses.replace(checkpoint, evaluation=result.to_dict())
        self._offer(BEST_BY_EVALUATION, result.return_mean, None, evaluated)
        self._offer(BEST_BY_EVALUATION_SUCCESS, result.success_rate, result.return_mean, evaluated)

    def _hold(self, checkpoint: Checkpoint) -> None:
        counters = dataclasses.replace(
            checkpoint.progress,
            best_return=self.progress.best_return,
            best_criterion=self.progress.best_criterion,
            best_tiebreak=self.progress.best_tiebreak,
        )
        self.pending.append(dataclasses.replace(checkpoint, progress=counters))

    def write_pending(self) -> None:
        """Write the winning candidates held since the last call (the best one last)."""
        for checkpoint in self.pending:
            write_checkpoint(self.path, checkpoint)
        self.pending.clear()


class Checkpointing:
    """A run's checkpoint files, in the module's write order.

    Args:
        algorithm, config, actor, facts: what every checkpoint records of the run.
        progress: the run's counters, shared with the run loop (which advances them).
        save_replay: writes the replay buffer to a path with the stamp of the checkpoint it
            belongs to (``ReplaySaving.save_replay``), or None when the run does not save it.
        resumed: the checkpoint the run resumed from: the latest until a round ends (a run
            stopped during its final evaluation resumes to that evaluation alone).
        resumed_path: where ``resumed`` was read from.
    """

    def __init__(
        self,
        algorithm: Algorithm,
        config: Config,
        actor: ProbedActor,
        facts: EnvFacts,
        progress: RunProgress,
        save_replay: Callable[[Path, ReplayStamp], None] | None = None,
        resumed: Checkpoint | None = None,
        resumed_path: Path | None = None,
    ) -> None:
        self.algorithm, self.config, self.actor, self.facts = algorithm, config, actor, facts
        self.progress = progress
        self.save_replay = save_replay
        self.best = BestCheckpoint(config.best_checkpoint_path, progress)
        self.latest: Checkpoint | None = resumed  # as last written
        self.latest_path: Path | None = resumed_path if resumed is not None else None

    def round_ended(
        self,
        obs_rms_state: dict[str, Any] | None,
        learner_states: list[dict[str, Any]],
        training_return: float | None,
        evaluated: tuple[EvaluationResult, Checkpoint] | None = None,
        training_success: float | None = None,
    ) -> Checkpoint:
        """Write the round's checkpoints (``progress`` already counts the round); returns the
        latest. ``training_return``, ``training_success``: the round's mean return and success
        rate (None: none). ``evaluated``: an evaluation of an earlier round's weights that
        finished during this round."""
        checkpoint = build_checkpoint(
            self.algorithm,
            self.config,
            self.actor,
            self.facts,
            self.progress,
            obs_rms_state,
            learner_states,
        )
        if evaluated is not None:
            self.best.offer_evaluated(*evaluated)
        self.best.offer_training_round(training_return, training_success, checkpoint)
        self._write(checkpoint)
        if self.save_replay is not None:
            assert self.latest is not None
            self.save_replay(replay_path(self.config.checkpoint_path), ReplayStamp.of(self.latest))
        return self.latest

    def run_ended(self, final_evaluation: EvaluationResult) -> Checkpoint:
        """Record the final policy's evaluation in the latest checkpoint (and offer it as a
        best); returns that checkpoint."""
        assert self.latest is not None, "run_ended before any round ended"
        checkpoint = dataclasses.replace(self.latest, evaluation=final_evaluation.to_dict())
        self.best.offer_evaluated(final_evaluation, checkpoint)
        self._write(checkpoint)
        return self.latest

    def _write(self, checkpoint: Checkpoint) -> None:
        """The latest checkpoint with the counters after this round's offers, then the best.
        ``latest`` changes once the file is written: a write that fails or is interrupted
        leaves the previous one the last good checkpoint."""
        latest = with_progress(checkpoint, self.progress)
        write_checkpoint(self.config.checkpoint_path, latest)
        self.latest, self.latest_path = latest, self.config.checkpoint_path
        self.best.write_pending()
