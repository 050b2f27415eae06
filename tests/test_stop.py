"""How a run stops (``drlcli/runtime/stop.py``): one phase value names what every signal
interrupted, a second signal or the end of ``stop_grace_s`` aborts a round, a phase that
outlives its bound is abandoned; and what is closed on the way out (``ProcessOwner``, the local
Ray head's start). No Ray: the handler is called as the signal would call it, the watchdog
signals this process's main thread."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from drlcli.errors import TrainingError, TrainingStopped
from drlcli.runtime.stop import Phase, StopRequest

CHECKPOINT = Path("out/model_run.pt")


def stop_request(grace_s: float = 20.0) -> StopRequest:
    return StopRequest(Console(file=io.StringIO()), grace_s)


def signalled(stop: StopRequest, sent: signal.Signals) -> bool:
    """Call the handler as ``sent`` would; True where it stopped at once."""
    try:
        stop._handle(int(sent), None)
    except KeyboardInterrupt:
        return True
    return False


@pytest.mark.parametrize(
    ("phase", "round_number", "checkpoint", "expected"),
    [
        (Phase.STARTING, 0, None, "stopped by SIGTERM while starting; no checkpoint yet"),
        (
            Phase.STARTING,
            4,  # a resumed run: the checkpoint it resumed from
            CHECKPOINT,
            f"stopped by SIGTERM while starting, after round 4; checkpoint {CHECKPOINT}",
        ),
        (
            Phase.WARM_UP,
            0,
            None,
            "stopped by SIGTERM during the observation warm-up; no checkpoint yet",
        ),
        (
            Phase.FINAL_EVALUATION,
            6,
            CHECKPOINT,
            f"stopped by SIGTERM during the final evaluation, after round 6; checkpoint "
            f"{CHECKPOINT}",
        ),
        (
            Phase.ENDING,
            6,
            CHECKPOINT,
            f"stopped by SIGTERM while ending, after round 6; checkpoint {CHECKPOINT}",
        ),
    ],
)
def test_outside_the_rounds_a_first_signal_stops_at_once_naming_the_phase(
    phase, round_number, checkpoint, expected
):
    stop = stop_request()
    stop.enter(phase, round_number)
    assert signalled(stop, signal.SIGTERM)
    error = stop.error(checkpoint, round_number)
    assert isinstance(error, TrainingStopped)
    assert (str(error), error.exit_code, error.checkpoint) == (expected, 143, checkpoint)


def test_a_run_stopped_while_ending_with_its_final_evaluation_written_has_nothing_to_continue():
    stop = stop_request()
    stop.enter(Phase.ENDING, 6)
    assert signalled(stop, signal.SIGINT)
    error = stop.error(CHECKPOINT, 6, complete=True)
    assert error is not None and error.checkpoint is None  # no "continue with" line
    assert str(error).endswith("(the run is complete: it holds its final evaluation)")


def test_in_a_round_the_first_signal_waits_for_its_outputs_and_a_second_aborts():
    stop = stop_request()
    stop.enter(Phase.ROUND, 3)
    assert not signalled(stop, signal.SIGINT)  # the round goes on
    assert stop.requested
    stop.enter(Phase.CHECKPOINT, 3)
    error = stop.error(CHECKPOINT, 3)
    assert str(error) == f"stopped by SIGINT after round 3; checkpoint {CHECKPOINT}"

    stop = stop_request()
    stop.enter(Phase.ROUND, 3)
    assert not signalled(stop, signal.SIGINT)
    assert signalled(stop, signal.SIGINT)
    error = stop.error(CHECKPOINT, 2)
    assert isinstance(error, TrainingStopped) and error.exit_code == 130
    assert str(error) == (
        f"aborted by a second SIGINT during round 3; checkpoint {CHECKPOINT}, of round 2"
    )


def test_a_second_signal_while_a_round_writes_its_outputs_names_that_phase():
    stop = stop_request()
    stop.enter(Phase.CHECKPOINT, 1)
    assert not signalled(stop, signal.SIGTERM)
    assert signalled(stop, signal.SIGINT)  # the exit status is the signal that aborted
    error = stop.error(None, 0)
    assert error is not None and error.exit_code == 130
    assert str(error) == "aborted by a second SIGINT while round 1's outputs were written; " + (
        "no checkpoint yet"
    )


def test_no_signal_and_no_expired_bound_is_no_error():
    stop = stop_request()
    stop.enter(Phase.ROUND, 1)
    assert stop.error(CHECKPOINT, 0) is None


def interrupted_within(stop: StopRequest, seconds: float) -> float:
    """Sleep in the main thread until the watchdog interrupts it; how long that took."""
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        time.sleep(seconds)
    return time.monotonic() - started


def test_after_the_first_signal_a_round_that_does_not_finish_within_the_grace_is_abandoned():
    with stop_request(grace_s=0.3) as stop:
        stop.enter(Phase.ROUND, 2, bound_s=60)
        assert not signalled(stop, signal.SIGTERM)
        stop.enter(Phase.CHECKPOINT, 2, bound_s=60)  # the grace covers the round's outputs
        assert interrupted_within(stop, 20) < 10
    error = stop.error(CHECKPOINT, 1)
    assert isinstance(error, TrainingStopped) and error.exit_code == 143
    assert str(error) == (
        "aborted: round 2 did not finish within stop_grace_s 0.3 s of SIGTERM; checkpoint "
        f"{CHECKPOINT}, of round 1"
    )


@pytest.mark.parametrize(
    ("phase", "what"),
    [
        (Phase.STARTING, "the run's start"),
        (Phase.ROUND, "round 2"),
        (Phase.FINAL_EVALUATION, "the final evaluation"),
    ],
)
def test_a_phase_that_outlives_its_bound_without_a_signal_is_a_training_error(phase, what):
    with stop_request() as stop:
        stop.enter(phase, 2, bound_s=0.3)
        assert interrupted_within(stop, 20) < 10
    error = stop.error(CHECKPOINT, 1)
    assert isinstance(error, TrainingError) and not isinstance(error, TrainingStopped)
    assert str(error).startswith(f"{what} did not finish within 0.3 s (hang_timeout_s): ")
    assert error.exit_code == 1


def test_a_phase_that_ends_in_time_is_not_abandoned_and_the_watchdog_stops_with_the_run():
    with stop_request() as stop:
        stop.enter(Phase.ROUND, 1, bound_s=0.3)
        stop.enter(Phase.CHECKPOINT, 1, bound_s=60)  # a new phase, a new bound
        time.sleep(0.6)
        stop.enter(Phase.FINAL_EVALUATION, 1, bound_s=0.3)
    time.sleep(0.6)  # the watchdog went with the run: no signal after it
    assert stop.expired is None and stop.error(CHECKPOINT, 1) is None
    assert signal.getsignal(signal.SIGINT) is not stop._handle


def test_once_the_run_closes_after_an_error_no_bound_expires_and_a_signal_changes_nothing():
    """``disarm``: the closing after an error is not abandoned by the phase's bound, and a
    Ctrl-C meanwhile interrupts only the step it lands in, without becoming the run's end."""
    with stop_request(grace_s=0.2) as stop:
        stop.enter(Phase.ROUND, 1, bound_s=0.2)
        stop.disarm()
        time.sleep(0.6)
        assert signalled(stop, signal.SIGINT)
    assert stop.expired is None and not stop.requested
    assert stop.error(CHECKPOINT, 1) is None


class FakeHandles:
    """``ray.kill`` stand-in: the first kill is interrupted by Ctrl-C."""

    def __init__(self) -> None:
        self.killed: list[int] = []
        self.interrupted = False

    def kill(self, handle: int) -> None:
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        self.killed.append(handle)


def test_closing_the_processes_finishes_every_handle_through_a_ctrl_c(monkeypatch):
    import ray

    from drlcli.runtime.process_owner import ProcessOwner

    fake = FakeHandles()
    monkeypatch.setattr(ray, "kill", fake.kill)
    owner = ProcessOwner()
    for handle in (1, 2, 3):
        owner.started(handle)
    with pytest.raises(KeyboardInterrupt):
        owner.close()
    assert sorted(fake.killed) == [1, 2, 3] and owner.handles == []


@pytest.mark.subprocess
def test_a_local_ray_head_that_never_answers_is_stopped_after_its_bound():
    from drlcli.runtime.ray_head import LocalRayHead

    head = LocalRayHead.__new__(LocalRayHead)  # a head that hangs before it says where
    head.process = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; print('starting', flush=True); time.sleep(60)"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    with pytest.raises(TrainingError, match=r"^the local Ray did not start within 0\.5 s "):
        head.address(timeout_s=0.5)
    assert time.monotonic() - started < 10
    assert head.process.wait(timeout=10) != 0  # killed, not left running
    head.close()
