"""Faults during training: processes that die, and what a run leaves on disk after them
(issue "Training survives faults and bad input, and loses nothing")."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import pathlib
import re
import signal
import subprocess
import threading
import time

import psutil
import pytest
import torch
from rich.console import Console

from drlcli.checkpoints.files import read_checkpoint
from drlcli.config import load_config
from drlcli.errors import ConfigError, StorageError, TrainingError, UsageError
from drlcli.metrics.csv_file import read_metrics
from drlcli.runtime.restarts import RestartCounter
from drlcli.runtime.training import train
from drlcli.topology import AvailableDevices

pytestmark = pytest.mark.usefixtures("ray_cluster")
NO_GPU = AvailableDevices(cuda_devices=0, mps=False)
DIE_ENV = "tests.range_envs:drltest/DieAt-v0"
PAUSE_ENV = "tests.range_envs:drltest/PauseAt-v0"
PARAMS = {
    # One warm-up step: DieAt counts its steps from its process's start, warm-up included.
    "ppo": "{num_epochs: 1, num_minibatches: 2, hidden_sizes: [8], observation_warmup_steps: 1}",
    "flash_sac": "{batch_size: 16, warmup_steps: 40, actor_hidden_dim: 8, actor_num_blocks: 1,"
    " critic_hidden_dim: 8, critic_num_blocks: 1, num_bins: 11}",
}


def dying_config(tmp_path, algo, kwargs, total, extra="", params=None, env=DIE_ENV):
    path = tmp_path / f"{algo}.yaml"
    path.write_text(
        f"algo: {algo}\nenv: {{id: '{env}', num_envs: 2, kwargs: {kwargs}}}\n"
        f"num_actors: 2\ntotal_env_steps: {total}\nrollout_length: 40\n"
        f"output_dir: {tmp_path / 'out'}\nalgo_params: {params or PARAMS[algo]}\n{extra}"
    )
    return load_config(path)


def assert_learner_died(message, round_pattern, config):
    """The one line of a run that lost learner 0: its round, the process, the checkpoint."""
    assert re.fullmatch(
        round_pattern
        + r": learner 0 died \(pid \d+: .*\); the last good checkpoint is "
        + re.escape(str(config.checkpoint_path)),
        message,
    ), message


def run(config):
    output = io.StringIO()
    summary = train(config, quiet=True, devices=NO_GPU, console=Console(file=output, width=200))
    return summary, output.getvalue()


@pytest.mark.parametrize("algo", ["ppo", "flash_sac"])
def test_a_rollout_actor_killed_mid_round_is_restarted_and_the_run_completes(tmp_path, algo):
    marker = tmp_path / "died"
    # Each env steps 40 per round: the 60th step of the first env there falls in round 2.
    config = dying_config(tmp_path, algo, f"{{at_step: 60, marker: '{marker}'}}", total=480)
    summary, output = run(config)

    assert marker.exists()  # a rollout actor's process did die, by SIGKILL
    assert summary.rounds == 3 and summary.env_steps == 480
    rows = read_metrics(config.metrics_path)
    assert [row["round"] for row in rows] == ["1", "2", "3"]
    assert [row["rollout_actor_restarts"] for row in rows] == ["0", "1", "0"]
    assert "round 2: 1 rollout-actor process(es) died and Ray restarted them" in output
    checkpoint = read_checkpoint(config.checkpoint_path)
    assert checkpoint.progress.round == 3 and checkpoint.progress.env_steps == 480
    assert all(torch.isfinite(t).all() for t in checkpoint.actor.values())


@pytest.mark.parametrize(("algo", "at_step"), [("ppo", 41), ("flash_sac", 40)])
def test_a_rollout_actor_killed_while_its_state_is_collected_is_a_restart(tmp_path, algo, at_step):
    """Killed while the round's checkpoint collects its state (after round 1's 40 steps; PPO's
    warm-up step before them): Ray restarts it, its fresh process's state is collected and the
    run goes on, the restart counted in the next row."""
    marker = tmp_path / "died"
    config = dying_config(
        tmp_path,
        algo,
        f"{{at_step: {at_step}, marker: '{marker}'}}",
        total=320,
        env="tests.range_envs:drltest/DieInState-v0",
    )
    summary, _ = run(config)
    assert marker.exists() and summary.rounds == 2
    rows = read_metrics(config.metrics_path)
    assert [row["rollout_actor_restarts"] for row in rows] == ["0", "1"]
    assert read_checkpoint(config.checkpoint_path).progress.round == 2


@pytest.mark.parametrize("algo", ["ppo", "flash_sac"])
def test_a_rollout_actor_killed_while_a_resumed_state_is_restored_is_a_restart(tmp_path, algo):
    """Resumed after round 1, one process dies while its stored episodes are put back
    (``DieInRestore``): Ray restarts it, the driver (PPO) or learner (FlashSAC) gives the
    fresh process the same stored state, and the run completes with the restart counted."""
    marker = tmp_path / "died"
    kwargs = f"{{marker: '{marker}'}}"
    env = "tests.range_envs:drltest/DieInRestore-v0"
    config = dying_config(tmp_path, algo, kwargs, total=160, env=env)
    run(config)
    assert not marker.exists()  # nothing was restored in the first run
    config = dying_config(tmp_path, algo, kwargs, total=320, env=env)
    summary = train(config, resume=config.checkpoint_path, quiet=True, devices=NO_GPU)
    assert marker.exists() and summary.rounds == 2 and summary.env_steps == 320
    rows = read_metrics(config.metrics_path)
    assert [row["rollout_actor_restarts"] for row in rows] == ["0", "1"]
    assert read_checkpoint(config.checkpoint_path).progress.round == 2


def test_a_learner_killed_while_it_saves_its_replay_buffer_names_the_checkpoint(
    tmp_path, monkeypatch
):
    """The learner dies after round 2's checkpoint is written, before its replay buffer is
    saved: one line naming the round and the checkpoint to resume from (which verifies)."""
    import drlcli.runtime.checkpointing as checkpointing

    params = PARAMS["flash_sac"].replace("}", ", save_replay_buffer: true}")
    config = dying_config(tmp_path, "flash_sac", "{at_step: 100000}", total=640, params=params)
    writes: list[int] = []
    original = checkpointing.write_checkpoint

    def write_then_kill_the_learner(path, checkpoint):
        original(path, checkpoint)
        if path == config.checkpoint_path:  # not the best checkpoint's
            writes.append(checkpoint.progress.round)
        if writes == [1, 2]:
            for pid in ray_processes("ray::OffPolicyLearnerWorker"):
                process = psutil.Process(pid)
                process.kill()
                process.wait(30)

    monkeypatch.setattr(checkpointing, "write_checkpoint", write_then_kill_the_learner)
    with pytest.raises(TrainingError) as error:
        run(config)
    assert_learner_died(str(error.value), r"round 2", config)
    assert read_checkpoint(config.checkpoint_path).progress.round == 2
    assert [row["round"] for row in read_metrics(config.metrics_path)] == ["1", "2"]
    # Round 1's buffer beside round 2's checkpoint: --resume-replay refuses the pair in one
    # line before anything starts, naming both rounds and the choices.
    monkeypatch.undo()
    before = config.checkpoint_path.read_bytes()
    with pytest.raises(UsageError) as refused:
        train(config, resume=config.checkpoint_path, resume_replay=True, devices=NO_GPU)
    assert refused.value.exit_code == 2
    assert str(refused.value) == (
        f"{config.checkpoint_path.with_name('model_flash_sac_replay.npz')}: this replay buffer "
        f"was saved with round 1 (160 env steps), the checkpoint {config.checkpoint_path} is "
        "of round 2 (320 env steps): they were not saved together (a run ended between its two "
        "writes, or a file was copied over); resume without --resume-replay (updates wait until "
        "the buffer refills), or from the checkpoint the buffer was saved with"
    )
    assert config.checkpoint_path.read_bytes() == before


def test_the_evaluator_dying_again_while_it_redoes_an_evaluation_is_one_restart_more(tmp_path):
    """The evaluator's process dies in the final evaluation, then again in the evaluation
    redone on its restarted process (``DieInEvaluation``): under the restart limit that is
    one restart more and the run completes with its evaluation; past it the run stops in one
    line naming the evaluator and the limit."""
    params = PARAMS["ppo"]
    env = "tests.range_envs:drltest/DieInEvaluation-v0"
    evaluation = "evaluation: {interval_env_steps: 100000, episodes: 1}\n"
    markers = tmp_path / "markers"
    markers.mkdir()
    kwargs = f"{{marker_dir: '{markers}'}}"
    extra = evaluation + "max_rollout_actor_restarts: 2\n"
    config = dying_config(tmp_path, "ppo", kwargs, 160, extra, params, env)
    summary, _ = run(config)
    assert sorted(marker.name for marker in markers.iterdir()) == ["first", "second"]
    assert summary.final_evaluation is not None
    assert read_checkpoint(config.checkpoint_path).evaluation is not None

    for marker in markers.iterdir():
        marker.unlink()
    extra = evaluation + "max_rollout_actor_restarts: 1\n"
    config = dying_config(tmp_path, "ppo", kwargs, 160, extra, params, env)
    with pytest.raises(TrainingError) as error:
        run(config)
    assert re.fullmatch(
        r"the evaluator died 2 times, more than max_rollout_actor_restarts: 1 \(pid \d+: .*\)",
        str(error.value),
    ), error.value
    assert read_checkpoint(config.checkpoint_path).evaluation is None


def test_data_parallel_learners_start_updating_together_after_one_lost_transitions(tmp_path):
    """Learner 0's rollout actor dies before the replay buffers are ready: that learner holds
    two transitions fewer than the other, whose buffer is ready one step earlier; every update
    is a collective of both, so they must still start at the same step (else they hang)."""
    marker = tmp_path / "died"
    params = PARAMS["flash_sac"].replace("warmup_steps: 40", "warmup_steps: 130")
    config = dying_config(
        tmp_path,
        "flash_sac",
        f"{{at_step: 60, marker: '{marker}'}}",
        total=480,
        extra="num_gpus: 2\nactors_per_gpu: 1\nlearners_on_cpu: true\n",
        params=params,
    )
    summary, _ = run(config)
    assert marker.exists() and summary.rounds == 3
    rows = read_metrics(config.metrics_path)
    assert [row["rollout_actor_restarts"] for row in rows] == ["0", "1", "0"]
    assert float(rows[1]["updates"]) > 0  # both learners updated in round 2, together
    checkpoint = read_checkpoint(config.checkpoint_path)
    first, second = checkpoint.learner_states
    for network in ("actor", "critic"):
        for name, tensor in first[network].items():
            assert torch.equal(tensor, second[network][name]), (network, name)


@pytest.mark.parametrize("algo", ["ppo", "flash_sac"])
def test_past_the_restart_limit_the_run_stops_naming_the_actor_and_the_checkpoint(tmp_path, algo):
    # Every process dies at its 60th step: in round 2 (first death), and again in round 3 by
    # the restarted process's 60th step (second death, past the limit of 1).
    config = dying_config(
        tmp_path, algo, "{at_step: 60}", total=960, extra="max_rollout_actor_restarts: 1\n"
    )
    with pytest.raises(TrainingError) as error:
        run(config)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("round 3: rollout actor ")
    assert "died 2 times, more than max_rollout_actor_restarts: 1" in message
    assert message.endswith(f"the last good checkpoint is {config.checkpoint_path}")
    assert read_checkpoint(config.checkpoint_path).progress.round == 2
    assert [row["round"] for row in read_metrics(config.metrics_path)] == ["1", "2"]


@pytest.mark.parametrize(
    ("algo", "loop_module", "failing_step"),
    [
        ("ppo", "drlcli.runtime.ppo_loop", "PPORoundLoop._warm_up_observations"),
        ("flash_sac", "drlcli.runtime.off_policy_loop", "OffPolicyRoundLoop.__init__"),
    ],
)
def test_a_round_loop_that_fails_part_way_leaves_no_process(
    tmp_path, monkeypatch, algo, loop_module, failing_step
):
    """The round loop fails after its actors started (PPO: in the observation warm-up;
    off-policy: in its constructor, loading the stored states, here the learners' first call):
    every actor it started is stopped, in the test session's shared Ray too."""
    import importlib

    module = importlib.import_module(loop_module)
    class_name, method = failing_step.split(".")
    loop_class = getattr(module, class_name)
    before = set(ray_processes("ray::"))

    def fail(*args, **kwargs):
        raise TrainingError("a call failed part-way")

    if method == "__init__":  # fail once the processes exist: at the learners' first call
        monkeypatch.setattr("drlcli.runtime.off_policy_loop._get", lambda *a, **k: fail())
    else:
        monkeypatch.setattr(loop_class, method, fail)
    config = dying_config(tmp_path, algo, "{at_step: 100000}", total=160)
    with pytest.raises(TrainingError, match="a call failed part-way"):
        run(config)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = {
            pid: title
            for pid, title in ray_processes("ray::").items()
            if pid not in before and not title.startswith("ray::IDLE")
        }
        if not left:
            break
        time.sleep(0.2)
    assert left == {}


def test_restart_counter_counts_deaths_and_replaced_processes_up_to_the_limit():
    counter = RestartCounter(limit=2, actor_ids=[4, 5])
    assert not counter.restarted_unseen(0, pid=100)  # first call: nothing to compare
    assert not counter.restarted_unseen(0, pid=100)
    assert counter.restarted_unseen(0, pid=101)  # replaced between two calls
    counter.died(1, "pid 200: killed")
    assert not counter.restarted_unseen(1, pid=201)  # the fresh process after a seen death
    assert counter.take_new_restarts() == 2 and counter.take_new_restarts() == 0
    counter.died(0, "pid 101: killed")
    with pytest.raises(TrainingError, match=r"^rollout actor 4 died 3 times, more than .*: 2"):
        counter.died(0, "pid 102: killed")


def ray_processes(title_prefix):
    """This test session's Ray processes (descendants of this process: never another Ray's on
    the machine) whose title (Ray names actor processes ``ray::ClassName...``, with
    ``.method`` while one runs) starts with ``title_prefix``: ``{pid: title}``."""
    found = {}
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmdline = process.cmdline()
            if cmdline and cmdline[0].startswith(title_prefix):
                found[process.pid] = cmdline[0]
    return found


def kill_processes_when(ready, title_prefix, timeout_s=60.0, then=None):
    """Start a thread that, once ``ready()``, SIGKILLs every process ``ray_processes`` finds
    with ``title_prefix``, then calls ``then(killed_pids)``; returns the thread and the list it
    fills with the killed PIDs."""
    killed: list[int] = []

    def watch():
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not ready():
            time.sleep(0.02)
        for pid in ray_processes(title_prefix):
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).send_signal(signal.SIGKILL)
                killed.append(pid)
        if then is not None:
            then(killed)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, killed


def rows_written(path, count):
    return lambda: path.exists() and len(path.read_text().splitlines()) > count


def paused(marker_dir, path, count):
    """Whether ``count`` rows are written and a rollout actor's env waits (``PauseAt``)."""
    return lambda: rows_written(path, count)() and any(marker_dir.glob("reached-*"))


def release(marker_dir):
    (marker_dir / "release").touch()


@pytest.mark.parametrize(
    ("algo", "learner_class"),
    [("ppo", "PPOLearnerWorker"), ("flash_sac", "OffPolicyLearnerWorker")],
)
def test_a_dead_learner_stops_the_run_and_resume_continues_from_the_last_checkpoint(
    tmp_path, algo, learner_class
):
    # The rollout actors wait in round 4 (each env steps 40 a round) while the learner is killed
    # after round 3; then they go on, and the learner's next call finds it dead.
    kwargs = f"{{at_step: 140, marker_dir: '{tmp_path}'}}"
    config = dying_config(tmp_path, algo, kwargs, total=160 * 6, env=PAUSE_ENV)
    metrics = pathlib.Path(config.metrics_path)
    thread, killed = kill_processes_when(
        paused(tmp_path, metrics, 3), f"ray::{learner_class}", then=lambda _: release(tmp_path)
    )
    with pytest.raises(TrainingError) as error:
        run(config)
    thread.join()
    assert killed
    assert_learner_died(str(error.value), r"round \d+", config)
    assert read_checkpoint(config.checkpoint_path).progress.round == 3

    summary = train(config, resume=config.checkpoint_path, quiet=True, devices=NO_GPU)
    assert summary.rounds == 6 and summary.env_steps == 160 * 6
    rows = read_metrics(config.metrics_path)
    assert [int(row["round"]) for row in rows] == list(range(1, 7))
    env_steps = [int(row["env_steps"]) for row in rows]
    assert env_steps == sorted(env_steps) and env_steps[-1] == 160 * 6


def test_an_output_folder_that_cannot_be_written_is_refused_before_anything_starts(
    tiny_config, tmp_path
):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    config = dataclasses.replace(load_config(tiny_config()), output_dir=str(blocker / "out"))
    with pytest.raises(StorageError) as error:
        train(config, quiet=True, devices=NO_GPU)
    assert str(error.value) == (
        f"output_dir: cannot write in {blocker / 'out'}: Not a directory; choose a folder you "
        "can write to"
    )
    assert error.value.exit_code == 1


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only: skipped where mounting is not allowed)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def test_a_full_disk_stops_the_round_in_one_line_and_keeps_the_previous_checkpoint(
    tiny_config, small_disk
):
    config = load_config(tiny_config("full", total=128 * 60))
    config = dataclasses.replace(
        config, output_dir=str(small_disk), metrics_path=str(small_disk / "metrics.csv")
    )
    filler = small_disk / "filler"

    def fill() -> None:
        with filler.open("wb") as handle, contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()

    deadline = time.monotonic() + 60

    def fill_when_ready():
        while time.monotonic() < deadline and not rows_written(small_disk / "metrics.csv", 3)():
            time.sleep(0.01)
        fill()

    thread = threading.Thread(target=fill_when_ready, daemon=True)
    thread.start()
    with pytest.raises(TrainingError) as error:
        train(config, quiet=True, devices=NO_GPU)
    thread.join()
    message = str(error.value)
    assert re.fullmatch(
        r"round \d+: cannot write \S+: No space left on device \(\d+\.\d MiB free there\); "
        rf"the last good checkpoint is {re.escape(str(config.checkpoint_path))}",
        message,
    ), message
    kept = read_checkpoint(config.checkpoint_path)  # intact and loadable
    assert kept.progress.round >= 2

    filler.unlink()  # space again: the run resumes from the kept checkpoint, two rounds more
    rounds = kept.progress.round + 2  # (the first run's 60 rounds only outlast the filling)
    resumed = dataclasses.replace(config, total_env_steps=128 * rounds)
    summary = train(resumed, resume=config.checkpoint_path, quiet=True, devices=NO_GPU)
    assert summary.rounds == rounds
    rows = read_metrics(config.metrics_path)
    assert [int(row["round"]) for row in rows] == list(range(1, rounds + 1))


@pytest.mark.parametrize(
    ("algo", "extra", "message"),
    [
        (
            "flash_sac",
            "  buffer_size: 2000000000\n",
            r"this run needs \d+\.\d GiB of memory, \d+\.\d GiB is free: 1 replay buffer\(s\) of "
            r"2000000000 transitions alone take \d+\.\d GiB; shrink algo_params.buffer_size$",
        ),
        (
            "ppo",
            "",
            r"this run needs .* a round's rollout \(40000000000 env steps\) alone take .*; "
            r"shrink rollout_length$",
        ),
    ],
)
def test_a_run_that_does_not_fit_in_memory_is_refused_before_anything_starts(
    tmp_path, algo, extra, message
):
    params = {
        "ppo": "algo_params: {hidden_sizes: [8]}\nrollout_length: 20000000000\n",
        "flash_sac": "algo_params:\n  actor_hidden_dim: 8\n  critic_hidden_dim: 8\n" + extra,
    }[algo]
    path = tmp_path / "huge.yaml"
    path.write_text(
        f"algo: {algo}\nenv: {{id: InvertedPendulum-v5, num_envs: 2}}\n"
        f"total_env_steps: 100000000000\noutput_dir: {tmp_path / 'out'}\n{params}"
    )
    with pytest.raises(ConfigError, match=message):
        train(load_config(path), quiet=True, devices=NO_GPU)
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_memory_needs_add_up_and_name_the_largest():
    from drlcli.algos.entry_types import MemoryNeed
    from drlcli.runtime.memory_budget import check_memory

    needs = [MemoryNeed("a", 600, "field_a"), MemoryNeed("b", 500, "field_b")]
    check_memory(needs, 1100)  # fits exactly
    check_memory(needs, None)  # unknown: not checked
    with pytest.raises(ConfigError, match=r"needs 1.1 KiB of memory, 1.1 KiB is free: a alone"):
        check_memory(needs, 1099)


def test_a_dead_evaluator_is_restarted_and_evaluations_go_on(tmp_path):
    # The evaluator is killed after round 2; the rollout actors wait in round 5 until the
    # process Ray starts in its place has been made, so rounds go on with it (not a race
    # between its start-up, seconds, and the end of the run).
    config = dying_config(
        tmp_path,
        "ppo",
        f"{{at_step: 180, marker_dir: '{tmp_path}'}}",
        total=160 * 12,
        extra="evaluation: {interval_env_steps: 320, episodes: 2}\n",
        env=PAUSE_ENV,
    )
    metrics = pathlib.Path(config.metrics_path)

    def release_once_restarted(killed):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            titles = ray_processes("ray::PolicyEvaluator")
            if any(pid not in killed and ".__init__" not in t for pid, t in titles.items()):
                break
            time.sleep(0.05)
        release(tmp_path)

    thread, killed = kill_processes_when(
        rows_written(metrics, 2), "ray::PolicyEvaluator", then=release_once_restarted
    )
    summary, _ = run(config)
    thread.join()
    assert killed
    assert summary.rounds == 12 and summary.final_evaluation is not None
    rows = read_metrics(config.metrics_path)
    # Evaluations of weights after the kill came back from the restarted process.
    assert any(row["eval_env_steps"] and int(row["eval_env_steps"]) > 320 * 3 for row in rows)


@pytest.mark.parametrize("algo", ["ppo"])  # FlashSAC's stepper pool: the unit test below
def test_a_rollout_actor_that_dies_again_while_it_is_restarted_does_not_end_the_run(tmp_path, algo):
    """The process dies in round 2; the process Ray starts in its place dies while it is made,
    before the restoration answers. The run goes on with a third process and completes. (Ray
    restarts a process that dies in its constructor without telling its caller: drl counts the
    deaths it sees, the one of round 2.)"""
    path = tmp_path / f"{algo}.yaml"
    path.write_text(
        f"algo: {algo}\nenv: {{id: 'tests.range_envs:drltest/DieTwice-v0', num_envs: 2, "
        f"kwargs: {{at_step: 60, marker_dir: '{tmp_path}'}}}}\n"
        f"num_actors: 2\ntotal_env_steps: 480\nrollout_length: 40\n"
        f"output_dir: {tmp_path / 'out'}\nalgo_params: {PARAMS[algo]}\n"
        "max_rollout_actor_restarts: 2\n"
    )
    config = load_config(path)
    summary, _ = run(config)
    assert (tmp_path / "first").exists() and (tmp_path / "second").exists()
    assert summary.rounds == 3
    rows = read_metrics(config.metrics_path)
    assert [row["rollout_actor_restarts"] for row in rows] == ["0", "1", "0"]


class _Dying:
    """A stand-in for ``get_when_restarted``: the restarted process dies ``deaths`` times while
    it is restored (Ray's actor error), then answers."""

    def __init__(self, deaths: int, actor_id: str) -> None:
        self.deaths, self.actor_id, self.calls = deaths, actor_id, 0

    def __call__(self, call, roles=None, timeout_s=300.0):
        from drlcli.runtime.ray_errors import WorkerDied

        self.calls += 1
        if self.calls <= self.deaths:
            raise WorkerDied("rollout actor 0 died", self.actor_id, "pid 1: killed", False)
        return {"process_id": 2}


@pytest.mark.parametrize(("deaths", "survives"), [(1, True), (2, False)])
def test_a_death_while_a_rollout_actor_is_restored_is_one_restart_more(
    monkeypatch, deaths, survives
):
    """PPO's driver: a process that dies while its reward statistics are restored counts as a
    restart and is restored again; past ``max_rollout_actor_restarts`` the run stops."""
    import drlcli.runtime.ppo_loop as ppo_loop
    from drlcli.runtime.restarts import RestartCounter

    loop = object.__new__(ppo_loop.PPORoundLoop)
    method = type("Method", (), {"remote": staticmethod(lambda state: None)})()
    handle = type("Handle", (), {"restore_reward_scaler": method})()
    loop.rollout_actors, loop.reward_moments, loop.roles = [handle], [None], {}
    loop.restarts = RestartCounter(2, [0])
    loop.restarts.died(0, "the death that started the restore")
    monkeypatch.setattr(ppo_loop, "actor_id_of", lambda handle: "actor-0")
    dying = _Dying(deaths, "actor-0")
    monkeypatch.setattr(ppo_loop, "get_when_restarted", dying)
    if survives:
        loop._restore(0)
        assert loop.restarts.restarts == [1 + deaths] and dying.calls == deaths + 1
    else:
        with pytest.raises(TrainingError, match="died 3 times, more than max_rollout"):
            loop._restore(0)


def test_an_env_stepper_that_dies_again_while_it_comes_back_is_one_restart_more(monkeypatch):
    """FlashSAC's learner: the same for a stepper whose fresh observations are fetched."""
    import numpy

    import drlcli.runtime.off_policy_workers as workers
    from drlcli.runtime.restarts import RestartCounter

    class Failed:
        def __init__(self):
            self.remote = lambda: None

    handle = type("Handle", (), {"observations": Failed()})()
    pool = workers.RayStepperPool([handle], 2, RestartCounter(3, [0]))
    pool._futures = ["in flight"]

    def get(ref, roles=None):  # the step in flight: its process died
        raise workers.WorkerDied("stepper died", "actor-0", "pid 1: killed", False)

    monkeypatch.setattr(workers, "get_or_raise", get)
    dying = _Dying(1, "actor-0")

    def fresh_observations(call):
        dying(call)
        return numpy.zeros((2, 3))

    monkeypatch.setattr(workers, "get_when_restarted", fresh_observations)
    result = pool._result_or_restart(0)
    assert pool.restarts.restarts == [2] and dying.calls == 2
    assert result["lost"].all()


def test_a_round_that_hangs_ends_the_run_after_hang_timeout_s(tmp_path):
    """A rollout actor's step that never returns (``PauseAt``, never released) and no signal:
    the driver's wait on round 2 is abandoned after ``hang_timeout_s``, the run ends in one
    line naming the round, the bound and the last good checkpoint, which verifies."""
    markers = tmp_path / "markers"
    markers.mkdir()
    # One warm-up step, then 40 per round: the 51st step is in round 2.
    kwargs = f"{{at_step: 51, marker_dir: '{markers}'}}"
    config = dying_config(
        tmp_path, "ppo", kwargs, total=480, extra="hang_timeout_s: 15\n", env=PAUSE_ENV
    )
    started = time.monotonic()
    with pytest.raises(TrainingError) as error:
        run(config)
    assert time.monotonic() - started < 100  # not the 120 s PauseAt holds at most
    assert str(error.value) == (
        "round 2 did not finish within 15 s (hang_timeout_s): a stuck environment, a lost node "
        "or an overloaded machine; raise hang_timeout_s if it only needs longer; the last good "
        f"checkpoint is {config.checkpoint_path}"
    )
    assert any(markers.glob("reached-*"))
    assert read_checkpoint(config.checkpoint_path).progress.round == 1
    assert [row["round"] for row in read_metrics(config.metrics_path)] == ["1"]
