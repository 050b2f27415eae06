"""The parts of the run loop, each on its own: metrics sinks, checkpointing and the best policy,
the final evaluation; and a run with an extra sink (Ray)."""

from __future__ import annotations

import dataclasses

import pytest

from drlcli.checkpoints.files import read_checkpoint
from drlcli.checkpoints.record import BEST_BY_EVALUATION, BEST_BY_TRAINING_RETURN, RunProgress
from drlcli.checkpoints.replay_file import ReplayStamp, replay_path
from drlcli.errors import StorageError
from drlcli.evaluation import EvaluationResult
from drlcli.runtime.checkpointing import BestCheckpoint, Checkpointing
from drlcli.sinks.dispatch import MetricsSinks
from drlcli.topology import AvailableDevices

NO_GPU = AvailableDevices(cuda_devices=0, mps=False)


class Recording:
    """A sink that keeps its rows; ``fail_on`` makes its n-th write (1-based) raise."""

    def __init__(self, name: str = "recording", fail_on: int | None = None) -> None:
        self.name, self.fail_on = name, fail_on
        self.rows: list[dict] = []
        self.closed = False

    def write(self, row):
        if self.fail_on is not None and len(self.rows) + 1 == self.fail_on:
            raise ConnectionError("server unreachable\nsecond line")
        self.rows.append(dict(row))

    def close(self):
        self.closed = True


def test_an_optional_sink_that_fails_warns_once_and_the_others_go_on():
    record, flaky, steady = Recording("csv"), Recording("flaky", fail_on=2), Recording("steady")
    warnings: list[str] = []
    sinks = MetricsSinks(record, [flaky, steady], warn=warnings.append)
    for round_number in (1, 2, 3):
        sinks.write({"round": round_number})
    assert [row["round"] for row in record.rows] == [1, 2, 3]
    assert [row["round"] for row in steady.rows] == [1, 2, 3]
    assert [row["round"] for row in flaky.rows] == [1]  # left out after its failure
    assert warnings == [
        "warning: metrics sink flaky failed (ConnectionError: server unreachable); training "
        "goes on without it, the metrics CSV has every row"
    ]
    sinks.close()
    assert record.closed and steady.closed and not flaky.closed


def test_the_records_failure_stops_the_row_before_any_optional_sink_has_it():
    class FullDisk(Recording):
        def write(self, row):
            raise StorageError("cannot write metrics.csv: No space left on device")

    other = Recording()
    sinks = MetricsSinks(FullDisk(), [other], warn=pytest.fail)
    with pytest.raises(StorageError, match="No space left"):
        sinks.write({"round": 1})
    assert other.rows == []  # no sink holds a row the CSV lacks


def test_a_sink_that_fails_to_close_warns_and_the_record_still_closes():
    class BadClose(Recording):
        def close(self):
            raise OSError("flush failed")

    record, warnings = Recording("csv"), []
    MetricsSinks(record, [BadClose("tb")], warn=warnings.append).close()
    assert record.closed
    assert warnings == [
        "warning: metrics sink tb failed to close (OSError: flush failed); training goes on "
        "without it, the metrics CSV has every row"
    ]


def _result(env_steps: int, mean: float) -> EvaluationResult:
    return EvaluationResult(env_steps, (mean - 1.0, mean + 1.0), (10, 10))


@pytest.fixture
def run_parts(tmp_path, ppo_checkpoint_payload):
    """What ``Checkpointing`` needs, for a PPO run writing into tmp_path."""
    from drlcli.actors.contract import declared_inference_memory
    from drlcli.algos.ppo.algorithm import PPO, gaussian_actor_spec
    from drlcli.algos.ppo.learner import Learner
    from drlcli.checkpoints.semantics import actor_semantics
    from drlcli.config import config_from_dict
    from drlcli.envs import env_facts, make_env
    from drlcli.runtime.probe import ProbedActor

    config = config_from_dict(
        {
            "env": {"id": "InvertedPendulum-v5"},
            "output_dir": str(tmp_path),
            "algo_params": {"hidden_sizes": [8]},
        },
        default_name="parts",
    )
    facts = env_facts(make_env(config.env.id))
    spec = gaussian_actor_spec(config.algo_params, facts.action_low, facts.action_high)
    learner = Learner(spec, facts.obs_dim, facts.action_dim, config.algo_params)
    semantics = actor_semantics(spec, facts.obs_dim, facts.action_dim, "clip")
    actor = ProbedActor(spec, semantics, [], declared_inference_memory(learner.actor), 0)
    return PPO, config, actor, facts, [learner.state_dict()]


def _checkpointing(run_parts, criterion, save_replay=None, monkeypatch=None, writes=None):
    algorithm, config, actor, facts, states = run_parts
    progress = RunProgress(best_criterion=criterion)
    parts = Checkpointing(algorithm, config, actor, facts, progress, save_replay)
    if monkeypatch is not None:
        import drlcli.runtime.checkpointing as module

        real = module.write_checkpoint

        def recorded(path, checkpoint):
            writes.append((path.name, checkpoint.progress.best_return, checkpoint.evaluation))
            return real(path, checkpoint)

        monkeypatch.setattr(module, "write_checkpoint", recorded)
    return parts, progress, states


def _advance(progress: RunProgress) -> None:
    progress.round += 1
    progress.env_steps += 100


def test_each_round_writes_the_latest_recording_the_new_best_then_the_best_then_the_replay(
    run_parts, monkeypatch
):
    writes: list = []
    saved: list = []
    parts, progress, states = _checkpointing(
        run_parts,
        BEST_BY_TRAINING_RETURN,
        lambda path, stamp: saved.append((path, stamp)),
        monkeypatch,
        writes,
    )
    config = run_parts[1]
    original_save = parts.save_replay
    parts.save_replay = lambda path, stamp: (
        writes.append((path.name, None, None)),
        original_save(path, stamp),
    )
    for training_return in (5.0, 3.0, None, 7.0):
        _advance(progress)
        latest = parts.round_ended(None, states, training_return)
        assert latest.progress.best_return == progress.best_return
    latest_name, best_name = config.checkpoint_path.name, config.best_checkpoint_path.name
    replay_name = replay_path(config.checkpoint_path).name
    assert writes == [
        (latest_name, 5.0, None),
        (best_name, 5.0, None),
        (replay_name, None, None),
        (latest_name, 5.0, None),  # 3.0 and None do not beat 5.0
        (replay_name, None, None),
        (latest_name, 5.0, None),
        (replay_name, None, None),
        (latest_name, 7.0, None),
        (best_name, 7.0, None),
        (replay_name, None, None),
    ]
    # Each replay is stamped with the latest checkpoint written just before it.
    assert [path for path, _ in saved] == [replay_path(config.checkpoint_path)] * 4
    assert [(stamp.round, stamp.env_steps) for _, stamp in saved] == [
        (1, 100),
        (2, 200),
        (3, 300),
        (4, 400),
    ]
    assert saved[-1][1] == ReplayStamp.of(read_checkpoint(config.checkpoint_path))
    best = read_checkpoint(config.best_checkpoint_path)
    assert (best.progress.round, best.progress.best_return) == (4, 7.0)


def test_a_replay_file_is_resumed_only_with_the_checkpoint_it_was_saved_with(run_parts):
    """``check_replay_belongs``: the replay of the latest checkpoint passes, also after the
    final evaluation rewrote that checkpoint; round 1's beside round 2's checkpoint, one of the
    same round with other learner states, and one without a stamp are refused, exit 2."""
    import numpy as np

    from drlcli.checkpoints.replay_file import (
        check_replay_belongs,
        read_replay_buffers,
        write_replay_file,
    )
    from drlcli.errors import UsageError

    config = run_parts[1]
    path = replay_path(config.checkpoint_path)
    buffers = [{"obs": np.arange(6, dtype=np.float32).reshape(3, 2)}]
    parts, progress, states = _checkpointing(
        run_parts,
        BEST_BY_TRAINING_RETURN,
        lambda where, stamp: write_replay_file(where, buffers, stamp),
    )
    _advance(progress)
    parts.round_ended(None, states, 1.0)
    round_1 = path.read_bytes()
    _advance(progress)
    parts.round_ended(None, states, 2.0)
    parts.run_ended(EvaluationResult(200, (3.0,), (10,)))
    check_replay_belongs(path, read_checkpoint(config.checkpoint_path), config.checkpoint_path)
    assert [b["obs"].tolist() for b in read_replay_buffers(path)] == [buffers[0]["obs"].tolist()]

    def refused() -> str:
        with pytest.raises(UsageError) as error:
            check_replay_belongs(
                path, read_checkpoint(config.checkpoint_path), config.checkpoint_path
            )
        assert error.value.exit_code == 2 and "\n" not in str(error.value)
        return str(error.value)

    path.write_bytes(round_1)  # the run ended between round 2's two writes
    assert refused() == (
        f"{path}: this replay buffer was saved with round 1 (100 env steps), the checkpoint "
        f"{config.checkpoint_path} is of round 2 (200 env steps): they were not saved together (a "
        "run ended between its two writes, or a file was copied over); resume without "
        "--resume-replay (updates wait until the buffer refills), or from the checkpoint the "
        "buffer was saved with"
    )
    other = [{**state, "actor": {k: v + 1 for k, v in state["actor"].items()}} for state in states]
    another_run = dataclasses.replace(read_checkpoint(config.checkpoint_path), learner_states=other)
    write_replay_file(path, buffers, ReplayStamp.of(another_run))
    assert "was saved with another checkpoint of round 2 (200 env steps)" in refused()
    np.savez(path, learner0_obs=buffers[0]["obs"])  # an older drl's file
    assert "carries no stamp of the checkpoint it was saved with" in refused()


def test_under_evaluation_only_evaluations_are_offers_and_the_final_one_is_recorded(
    run_parts, monkeypatch
):
    writes: list = []
    parts, progress, states = _checkpointing(
        run_parts, BEST_BY_EVALUATION, monkeypatch=monkeypatch, writes=writes
    )
    config = run_parts[1]
    _advance(progress)
    first = parts.round_ended(None, states, training_return=1e9)  # not an offer here
    assert progress.best_return is None and not config.best_checkpoint_path.exists()
    _advance(progress)
    parts.round_ended(None, states, 0.0, evaluated=(_result(100, 40.0), first))
    best = read_checkpoint(config.best_checkpoint_path)
    assert best.progress.env_steps == 100  # the evaluated weights', not this round's
    assert best.evaluation["return_mean"] == 40.0
    assert read_checkpoint(config.checkpoint_path).progress.best_return == 40.0

    parts.best.offer_evaluated(_result(100, 30.0), first)  # worse: nothing held
    final = parts.run_ended(_result(200, 50.0))
    assert final.evaluation["return_mean"] == 50.0 and final.progress.best_return == 50.0
    latest = read_checkpoint(config.checkpoint_path)
    assert latest.evaluation["return_mean"] == 50.0 and latest.progress.best_return == 50.0
    assert read_checkpoint(config.best_checkpoint_path).progress.env_steps == 200
    assert [name for name, _, _ in writes][-2:] == [
        config.checkpoint_path.name,
        config.best_checkpoint_path.name,
    ]


def test_under_training_return_the_final_evaluation_is_recorded_but_no_offer(run_parts):
    parts, progress, states = _checkpointing(run_parts, BEST_BY_TRAINING_RETURN)
    config = run_parts[1]
    _advance(progress)
    parts.round_ended(None, states, 2.0)
    best_before = config.best_checkpoint_path.read_bytes()
    parts.run_ended(_result(100, 1e9))
    assert read_checkpoint(config.checkpoint_path).evaluation["return_mean"] == 1e9
    assert progress.best_return == 2.0
    assert config.best_checkpoint_path.read_bytes() == best_before


def test_a_failed_latest_write_leaves_the_best_file_unwritten(run_parts, monkeypatch):
    import drlcli.runtime.checkpointing as module

    parts, progress, states = _checkpointing(run_parts, BEST_BY_TRAINING_RETURN)
    config = run_parts[1]

    def full_disk(path, checkpoint):
        raise StorageError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr(module, "write_checkpoint", full_disk)
    _advance(progress)
    with pytest.raises(StorageError):
        parts.round_ended(None, states, 9.0)
    assert not config.best_checkpoint_path.exists()


def test_a_tie_or_no_return_never_replaces_the_best():
    progress = RunProgress(best_return=5.0, best_criterion=BEST_BY_TRAINING_RETURN)
    best = BestCheckpoint(None, progress)
    best.offer_training_round(5.0, None, None)
    best.offer_training_round(None, None, None)
    best.offer_evaluated(_result(0, 99.0), None)  # another criterion's offer
    assert best.pending == [] and progress.best_return == 5.0


def test_the_final_evaluation_reuses_the_one_in_flight_when_it_evaluated_the_final_weights():
    from drlcli.runtime.evaluation_runner import EvaluationRunner

    def runner(in_flight):
        evaluations = object.__new__(EvaluationRunner)
        evaluations.collect = lambda wait=False: in_flight
        evaluations.evaluate_now = lambda checkpoint: _result(checkpoint.progress.env_steps, 1.0)
        return evaluations

    def checkpoint_at(env_steps):
        return dataclasses.replace(_STUB, progress=RunProgress(env_steps=env_steps))

    latest = checkpoint_at(200)
    same = (_result(200, 7.0), checkpoint_at(200))
    assert runner(same).final_evaluation(latest) is same[0]
    # One of an earlier round's weights (a stop rule ended the run while it was in flight) is
    # dropped: the last round waits for those, so only a stop rule leaves one.
    earlier = (_result(100, 9.0), checkpoint_at(100))
    final = runner(earlier).final_evaluation(latest)
    assert (final.env_steps, final.return_mean) == (200, 1.0)  # evaluated now
    assert runner(None).final_evaluation(latest).return_mean == 1.0


@dataclasses.dataclass(frozen=True)
class _Stub:
    progress: RunProgress


_STUB = _Stub(RunProgress())


def test_a_run_writes_every_row_to_an_extra_sink_and_survives_one_that_fails(
    tiny_config, ray_cluster
):
    from rich.console import Console

    from drlcli.config import load_config
    from drlcli.metrics.csv_file import read_metrics
    from drlcli.runtime.training import train

    config = load_config(tiny_config("sinks", total=384))
    recording, broken = Recording(), Recording("broken", fail_on=1)
    console = Console(record=True, width=200)
    summary = train(
        config, quiet=True, console=console, metrics_sinks=[broken, recording], devices=NO_GPU
    )
    csv_rows = read_metrics(summary.metrics_path)
    assert len(recording.rows) == len(csv_rows) == summary.rounds == 3
    for written, sunk in zip(csv_rows, recording.rows, strict=True):
        assert set(written) == set(sunk)
        for column, value in sunk.items():
            assert (written[column] == "") if value is None else (float(written[column]) == value)
    assert recording.closed
    assert console.export_text().count("warning: metrics sink broken failed") == 1


class StopAt:
    """A stop rule that ends the run once ``round`` rounds are trained; it keeps what it saw."""

    def __init__(self, rounds: int, reason: str = "target reached") -> None:
        self.rounds, self.reason = rounds, reason
        self.seen: list[int] = []

    def after_round(self, row):
        self.seen.append(int(row["round"]))
        return self.reason if row["round"] >= self.rounds else None


def test_the_first_stop_rule_with_a_reason_ends_the_run_in_order():
    from drlcli.runtime.stop import first_stop_reason

    late, early, never = StopAt(3, "late"), StopAt(2, "early"), StopAt(99)
    rules = [never, late, early]
    assert first_stop_reason(rules, {"round": 1}) is None
    assert first_stop_reason(rules, {"round": 2}) == "early"
    assert first_stop_reason(rules, {"round": 3}) == "late"  # the first in order wins
    assert never.seen == [1, 2, 3] and early.seen == [1, 2]  # later rules wait their turn


def test_a_stop_rule_ends_a_run_as_finished_and_resume_goes_on(tiny_config, ray_cluster):
    from rich.console import Console

    from drlcli.config import load_config
    from drlcli.metrics.csv_file import read_metrics
    from drlcli.runtime.training import train

    config = load_config(tiny_config("stop_rule", total=384))  # 3 rounds planned
    rule = StopAt(2, "pruned by the search")
    console = Console(record=True, width=200)
    summary = train(config, quiet=True, console=console, stop_rules=[rule], devices=NO_GPU)
    assert summary.rounds == 2 and summary.stopped_early == "pruned by the search"
    assert "stopping after round 2: pruned by the search" in console.export_text()
    assert rule.seen == [1, 2] and len(read_metrics(summary.metrics_path)) == 2
    assert read_checkpoint(config.checkpoint_path).progress.round == 2
    assert summary.final_evaluation is not None  # a finished run: evaluated as any other
    resumed = train(config, quiet=True, resume=config.checkpoint_path, devices=NO_GPU)
    assert resumed.rounds == 3 and resumed.stopped_early is None
    assert [row["round"] for row in read_metrics(config.metrics_path)] == ["1", "2", "3"]


class SignalledAt(StopAt):
    """``StopAt`` whose last round also received a SIGINT: the signal arrives while the
    round's outputs are written, then the rule ends the run."""

    def after_round(self, row):
        import signal

        if row["round"] >= self.rounds:
            signal.raise_signal(signal.SIGINT)  # the run's handler records it, deferred
        return super().after_round(row)


def test_a_signal_in_the_round_a_stop_rule_ends_the_run_wins(tiny_config, ray_cluster):
    """A stop rule and a signal in the same round: the run stops as signalled (exit 130, the
    resume line), without the final evaluation the stop rule would have run."""
    from rich.console import Console

    from drlcli.config import load_config
    from drlcli.errors import TrainingStopped
    from drlcli.runtime.training import train

    config = load_config(tiny_config("signal_and_rule", total=384))  # 3 rounds planned
    console = Console(record=True, width=200)
    with pytest.raises(TrainingStopped) as stopped:
        train(config, quiet=True, console=console, stop_rules=[SignalledAt(1)], devices=NO_GPU)
    assert stopped.value.exit_code == 130
    assert str(stopped.value) == (
        f"stopped by SIGINT after round 1; checkpoint {config.checkpoint_path}"
    )
    assert stopped.value.checkpoint == config.checkpoint_path
    assert "stopping after round 1" not in console.export_text()
    checkpoint = read_checkpoint(config.checkpoint_path)
    assert checkpoint.progress.round == 1 and checkpoint.evaluation is None
