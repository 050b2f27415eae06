"""What a run checks and decides before, and around, its processes, without Ray: the
pre-flight checks, builders that fail in every way, the dry run of a py_modules task, file
modes while threads write, and how a run's end is told to its sinks and ranked by drl tune."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.atomic import atomic_output
from drlcli.cli import app
from drlcli.config import load_config
from drlcli.errors import PolicyActorContractError
from drlcli.runtime.preflight import preflight
from drlcli.sinks.dispatch import MetricsSinks
from drlcli.topology import AvailableDevices
from drlcli.tune.runner import by_objective

NO_GPU = AvailableDevices(cuda_devices=0, mps=False)


def test_a_custom_actor_that_cannot_be_deep_copied_is_probed_in_place(write_config):
    path = write_config(
        "algo: flash_sac\nenv: {id: InvertedPendulum-v5}\nalgo_params:\n"
        "  use_whole_cycle_cuda_graph: false\n"
        "  actor_config: {builder: 'tests.custom_actors:build_uncopyable',\n"
        "                 kwargs: {action_low: [-3.0], action_high: [3.0]}}\n"
    )
    checked = preflight(load_config(path), None, False, NO_GPU, on_cluster=False)
    assert checked.actor.aux_loss_names == ["action_l2"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "def build(obs_dim, action_dim, device:\n",
            "importing module '{module}' failed (at {file}:1: SyntaxError: '(' was never closed",
        ),
        ("raise RuntimeError('no licence')\n", "importing module '{module}' failed (at {file}:1: "),
        (
            "def build(obs_dim, action_dim, device):\n    raise ValueError('width must be even')\n",
            "raised at {file}:2: ValueError: width must be even",
        ),
        (  # a TypeError inside the body is the body's, not a wrong call
            "def build(obs_dim, action_dim, device):\n    return len(3)\n",
            "raised at {file}:2: TypeError: object of type 'int' has no len()",
        ),
        (
            "def build(obs_dim, action_dim):\n    return None\n",
            "rejected its arguments (got an unexpected keyword argument 'device'); it is called as"
            " builder(obs_dim=, action_dim=, device=, **kwargs)",
        ),
    ],
)
def test_a_builder_that_fails_says_where_in_one_line(tmp_path, monkeypatch, source, message):
    module = f"failing_builder_{abs(hash(source))}"
    file = tmp_path / f"{module}.py"
    file.write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PolicyActorContractError) as error:
        build_policy_actor(ActorSpec(f"{module}:build"), 3, 1)
    assert message.format(module=module, file=file) in str(error.value)
    assert "\n" not in str(error.value)


def test_dry_run_sees_a_task_registered_by_a_py_modules_package(tmp_path, write_config):
    package = tmp_path / "ship" / "robot_tasks"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import gymnasium\n"
        "gymnasium.register('RobotPendulum-v0', "
        "entry_point='gymnasium.envs.mujoco.inverted_pendulum_v5:InvertedPendulumEnv', "
        "max_episode_steps=100)\n"
    )
    path = write_config(
        "algo: ppo\nenv: {id: 'robot_tasks:RobotPendulum-v0'}\n"
        f"runtime_env: {{py_modules: ['{package}']}}\n"
    )
    result = CliRunner().invoke(app, ["train", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "RobotPendulum-v0" in result.output


def test_atomic_writes_never_widen_the_umask_of_files_other_threads_create(tmp_path):
    """Reading the umask by setting it would, for an instant, make every file another thread
    creates (a sink's) world-writable."""
    os.umask(0o022)
    stop = threading.Event()
    modes: list[int] = []

    def create_files() -> None:
        index = 0
        while not stop.is_set():
            path = tmp_path / f"sink_{index}.log"
            path.write_text("row\n")
            modes.append(stat.S_IMODE(path.stat().st_mode))
            path.unlink()
            index += 1

    thread = threading.Thread(target=create_files)
    thread.start()
    try:
        for index in range(300):
            with atomic_output(tmp_path / f"model_{index % 3}.pt") as temp:
                Path(temp).write_bytes(b"x")
    finally:
        stop.set()
        thread.join()
    assert modes and set(modes) == {0o644}
    assert stat.S_IMODE((tmp_path / "model_0.pt").stat().st_mode) == 0o644


class OutcomeSink:
    def __init__(self) -> None:
        self.events: list[str] = []

    def write(self, row) -> None:
        pass

    def run_ended(self, outcome: str) -> None:
        self.events.append(outcome)

    def close(self) -> None:
        self.events.append("closed")


@pytest.mark.parametrize("outcome", ["finished", "failed", "stopped"])
def test_sinks_are_told_how_the_run_ended_before_they_close(outcome):
    record, told = OutcomeSink(), OutcomeSink()
    MetricsSinks(record, [told]).close(outcome)
    assert told.events == [outcome, "closed"]
    assert record.events == ["closed"]


def test_mlflow_marks_a_failed_or_stopped_run_so():
    from drlcli.sinks.mlflow_sink import MlflowSink

    sink = object.__new__(MlflowSink)
    for outcome, status in [("finished", "FINISHED"), ("failed", "FAILED"), ("stopped", "KILLED")]:
        sink.run_ended(outcome)
        assert sink.status == status


def test_tune_ranks_an_objective_of_zero_above_trials_without_one():
    rows = [
        {"trial": name, "objective": value}
        for name, value in [("none", None), ("zero", 0.0), ("low", -5.0), ("high", 3.0)]
    ]
    assert [row["trial"] for row in by_objective(rows)] == ["high", "zero", "low", "none"]


def _shape(num_envs: int, rollout_length: int, num_actors: int = 1, num_learners: int = 1):
    from drlcli.algos.entry_types import RoundShape

    return RoundShape(num_envs, rollout_length, num_actors, num_learners)


@pytest.mark.parametrize(
    ("recurrent", "shape", "most"),
    [
        (None, _shape(4, 8), 32),  # 4 envs x 8 steps
        (None, _shape(4, 8, num_actors=4, num_learners=2), 64),  # two rollout actors a learner
        ({"cell": "lstm", "sequence_length": 32}, _shape(4, 64), 8),  # 2 chunks an env
        ({"cell": "gru", "sequence_length": 32}, _shape(4, 40), 8),  # a short last chunk counts
        ({"cell": "lstm", "sequence_length": 32}, _shape(2, 16), 2),  # a round shorter than one
    ],
)
def test_ppo_refuses_more_minibatches_than_a_learners_round_holds(recurrent, shape, most):
    """One more minibatch than the steps (or sequences) a learner trains on each round would
    give the learner minibatches of one, fewer than asked: refused, naming the sizes."""
    from drlcli.algos.ppo.algorithm import check_round
    from drlcli.algos.ppo.params import PPOParams, RecurrentParams
    from drlcli.errors import ConfigError

    core = None if recurrent is None else RecurrentParams(**recurrent)
    check_round(PPOParams(num_minibatches=most, recurrent=core), shape)
    with pytest.raises(ConfigError) as refused:
        check_round(PPOParams(num_minibatches=most + 1, recurrent=core), shape)
    message = str(refused.value)
    assert message.startswith(f"algo_params.num_minibatches: {most + 1} is more than the {most} ")
    assert f"env.num_envs {shape.num_envs} x rollout_length {shape.rollout_length}" in message
    assert ("sequences" in message) == (recurrent is not None)


def test_drl_train_refuses_minibatches_a_round_cannot_fill_in_one_line(tmp_path, write_config):
    """Default num_minibatches (32) over a round of 2 envs x 8 steps: exit 2, one line, before
    anything is written."""
    path = write_config(
        f"env: {{id: InvertedPendulum-v5, num_envs: 2}}\nrollout_length: 8\n"
        f"total_env_steps: 64\noutput_dir: {tmp_path / 'out'}\n"
    )
    result = CliRunner().invoke(app, ["train", str(path), "--quiet"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "error: algo_params.num_minibatches: 32 is more than the 16 env steps a learner trains "
        "on each round (env.num_envs 2 x rollout_length 8 x 1 rollout actor(s)); use at most "
        "16, or a longer round"
    )
    assert not (tmp_path / "out").exists()
