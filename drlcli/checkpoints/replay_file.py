"""The replay buffer file beside a checkpoint (``<stem>_replay.npz``), stamped with the
checkpoint it belongs to.

A round writes its checkpoint, then its replay file: a run killed between the two writes (a
learner lost while it saves, ``kill -9`` during a multi-second ``np.savez``) leaves round N's
checkpoint beside round N-1's buffer. The stamp (``ReplayStamp``: the round, the env steps and
a hash of the checkpoint's learner states) tells them apart, so ``--resume-replay`` refuses a
buffer that is not its checkpoint's instead of continuing from a state no run ever had. The
learner states are hashed rather than the whole file: the final evaluation rewrites the
checkpoint with its result, and the buffer still belongs to it.

The file holds plain arrays only (read with ``allow_pickle=False``): ``learner<i>_<field>``
per learner, and the stamp as ``drl_round``, ``drl_env_steps``, ``drl_learner_states_hash``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from drlcli.atomic import atomic_output
from drlcli.checkpoints.files import content_hash
from drlcli.checkpoints.record import Checkpoint
from drlcli.errors import CheckpointError, UsageError

STAMP_PREFIX = "drl_"


def replay_path(checkpoint_path: Path) -> Path:
    """Where a replay buffer is saved beside a checkpoint: ``<stem>_replay.npz``."""
    return checkpoint_path.with_name(f"{checkpoint_path.stem}_replay.npz")


@dataclass(frozen=True)
class ReplayStamp:
    """Which checkpoint a replay file belongs to."""

    round: int
    env_steps: int
    learner_states_hash: str  # ``content_hash`` of the checkpoint's saved learner states

    @staticmethod
    def of(checkpoint: Checkpoint) -> ReplayStamp:
        learner_states = checkpoint.to_payload()["learner_states"]  # as saved: tensors
        return ReplayStamp(
            checkpoint.progress.round,
            checkpoint.progress.env_steps,
            content_hash({"learner_states": learner_states}),
        )

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            f"{STAMP_PREFIX}round": np.asarray(self.round, dtype=np.int64),
            f"{STAMP_PREFIX}env_steps": np.asarray(self.env_steps, dtype=np.int64),
            f"{STAMP_PREFIX}learner_states_hash": np.asarray(self.learner_states_hash),
        }

    def describe(self) -> str:
        return f"round {self.round} ({self.env_steps} env steps)"


def write_replay_file(
    path: Path, buffers: Sequence[dict[str, np.ndarray]], stamp: ReplayStamp
) -> None:
    """Every learner's buffer (in learner order) and the stamp, as one ``.npz`` written
    atomically (the old file or the new one, never a part)."""
    arrays = {
        f"learner{index}_{name}": array
        for index, buffer in enumerate(buffers)
        for name, array in buffer.items()
    }
    with atomic_output(path) as temp:
        np.savez(temp, **arrays, **stamp.arrays())


def read_replay_stamp(path: Path) -> ReplayStamp | None:
    """The stamp of a replay file (None: written before drl stamped them).

    Raises:
        CheckpointError: not a readable ``.npz``, or a malformed stamp.
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            if f"{STAMP_PREFIX}round" not in data.files:
                return None
            return ReplayStamp(
                int(data[f"{STAMP_PREFIX}round"]),
                int(data[f"{STAMP_PREFIX}env_steps"]),
                str(data[f"{STAMP_PREFIX}learner_states_hash"]),
            )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path}: not a readable replay buffer file ({error})") from error


def read_replay_buffers(path: Path) -> list[dict[str, np.ndarray]]:
    """Every learner's buffer of a replay file, in learner order (``learner10`` after
    ``learner2``).

    Raises:
        CheckpointError: not a readable ``.npz`` of drl's, or one that holds no learner.
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            keys = [key for key in data.files if not key.startswith(STAMP_PREFIX)]
            learners = {key.split("_", 1)[0] for key in keys}
            stored = sorted(learners, key=lambda name: int(name.removeprefix("learner")))
            buffers = [
                {key.split("_", 1)[1]: data[key] for key in keys if key.startswith(f"{p}_")}
                for p in stored
            ]
    except (OSError, ValueError) as error:  # int(): a key drl did not write
        raise CheckpointError(f"{path}: not a readable replay buffer file ({error})") from error
    if not buffers:
        raise CheckpointError(f"{path}: the replay buffer file holds no learner")
    return buffers


def check_replay_belongs(path: Path, checkpoint: Checkpoint, checkpoint_path: Path) -> None:
    """Refuse a replay file that is not ``checkpoint``'s own (``--resume-replay``).

    Raises:
        UsageError: another round's buffer, another run's, or one without a stamp; the message
            names both and the choices.
        CheckpointError: not a readable replay file.
    """
    stamp = read_replay_stamp(path)
    own = ReplayStamp.of(checkpoint)
    if stamp == own:
        return
    choice = (
        "resume without --resume-replay (updates wait until the buffer refills), or from the "
        "checkpoint the buffer was saved with"
    )
    if stamp is None:
        raise UsageError(
            f"{path}: this replay buffer carries no stamp of the checkpoint it was saved with "
            f"(an older drl wrote it), so it cannot be shown to be {checkpoint_path}'s "
            f"({own.describe()}); {choice}"
        )
    if (stamp.round, stamp.env_steps) != (own.round, own.env_steps):
        raise UsageError(
            f"{path}: this replay buffer was saved with {stamp.describe()}, the checkpoint "
            f"{checkpoint_path} is of {own.describe()}: they were not saved together (a run "
            f"ended between its two writes, or a file was copied over); {choice}"
        )
    raise UsageError(
        f"{path}: this replay buffer was saved with another checkpoint of {own.describe()} "
        f"than {checkpoint_path} (their learner states differ); {choice}"
    )
