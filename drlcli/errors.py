"""The DrlError family: every failure a user can cause or fix.

The CLI prints ``str(error)`` as one line on stderr, without a traceback, and exits with
``error.exit_code``: 2 for usage and configuration errors (the command line or the YAML must
change), 1 for runtime failures.
"""

from __future__ import annotations


class DrlError(Exception):
    """Base class. Messages say what was wrong and how to fix it."""

    exit_code: int = 1


class UsageError(DrlError):
    """The command line asks for something impossible or unsupported."""

    exit_code = 2


class ConfigError(DrlError):
    """The YAML configuration is missing, malformed, or fails validation."""

    exit_code = 2


class TopologyError(ConfigError):
    """The requested learner / rollout-actor topology is inconsistent."""


class EnvironmentSpecError(DrlError):
    """The environment cannot be made or has unsupported spaces."""

    exit_code = 2


class CheckpointError(DrlError):
    """A checkpoint cannot be read, is corrupt, or is not a drl checkpoint."""


class SemanticsError(CheckpointError):
    """A checkpoint's actor_semantics are missing, unsupported, or do not match."""


class PolicyActorContractError(DrlError):
    """A policy actor does not implement the contract (docs/adr/0017-custom-policy-actors.md)."""


class TrainingError(DrlError):
    """Training diverged or a worker failed."""


class TrainingStopped(DrlError):
    """Training stopped on a signal (Ctrl-C, or SIGTERM from Slurm or Kubernetes): after the
    round in progress was written, at once outside the rounds, or aborted by a second signal
    or the end of ``stop_grace_s`` (``drlcli.runtime.stop.StopRequest.error`` words it). Exit
    status 128 + the signal number, as a shell reports it.

    Attributes:
        checkpoint: the checkpoint to continue from (None: the run has none yet, or nothing is
            left to continue).
    """

    def __init__(self, message: str, signal_number: int, checkpoint: object):
        self.checkpoint = checkpoint
        self.exit_code = 128 + signal_number
        super().__init__(message)


class StorageError(DrlError):
    """A file cannot be written: no permission, no space left, not a folder."""


class ExportError(DrlError):
    """The ONNX graph could not be built or does not reproduce the torch policy."""


class SearchInterrupted(DrlError):
    """``drl tune`` stopped on a signal (Ctrl-C, SIGTERM) with its trials' checkpoints kept;
    ``drl tune --resume`` continues it. Exit status 128 + the signal number.

    Attributes:
        folder: the search's folder.
    """

    def __init__(self, signal_name: str, signal_number: int, folder: object):
        self.folder = folder
        self.exit_code = 128 + signal_number
        super().__init__(
            f"search stopped by {signal_name}; the trials' checkpoints are kept in {folder}"
        )


def first_line(text: str, default: str = "") -> str:
    """The first non-blank line of a message (at most 300 characters: a one-line error must
    stay one line), or ``default`` when it has none."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else default


def error_line(error: BaseException) -> str:
    """An exception in one line: ``Type: first line of its message``, or ``Type``."""
    message = first_line(str(error))
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
