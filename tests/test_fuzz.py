"""Bad input never crashes: property-based mutations of configs and checkpoints, fed to the
commands as a user runs them (in-process through the CLI app). Every case ends in a valid run
or one ``error:`` line with exit 1 or 2, never a traceback.

Hypothesis runs derandomized (the same cases every time); ``DRL_FUZZ_EXAMPLES`` scales the
number of cases (default 1: the CI budget; ``--hypothesis-show-statistics`` counts them).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from drlcli.checkpoints.files import save_payload
from drlcli.cli import app

SCALE = float(os.environ.get("DRL_FUZZ_EXAMPLES", "1"))


def fuzz_settings(examples: int):
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def key_paths(value: Any, prefix: tuple = (), depth: int = 0) -> list[tuple]:
    """Every key path into nested dicts (and the first two items of lists)."""
    found = []
    if depth < 4 and isinstance(value, dict):
        for key, item in value.items():
            found.append((*prefix, key))
            found += key_paths(item, (*prefix, key), depth + 1)
    elif depth < 4 and isinstance(value, list):
        for index, item in enumerate(value[:2]):
            found.append((*prefix, index))
            found += key_paths(item, (*prefix, index), depth + 1)
    return found


PLAIN_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 10**12, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
TENSORS = st.one_of(
    st.just(torch.empty(0)),
    st.lists(st.integers(0, 5), min_size=0, max_size=3).map(lambda shape: torch.ones(shape)),
    st.just(torch.tensor(float("nan"))),
    st.just(torch.zeros(2, dtype=torch.int64)),
)


def mutate(document: Any, path: tuple, how: str, value: Any) -> Any:
    """A deep copy of ``document`` with the entry at ``path`` replaced, deleted, wrapped in a
    list, or given an unknown sibling key."""
    mutated = copy.deepcopy(document)
    parent = mutated
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if how == "replace":
        parent[last] = value
    elif how == "delete":
        del parent[last]
    elif how == "wrap":
        parent[last] = [parent[last]]
    elif how == "unknown key" and isinstance(parent, dict):
        parent[f"unknown_{last}"] = value
    return mutated


def assert_clean_outcome(result, command: list[str]) -> None:
    """Exit 0, or 1/2 with one ``error:`` line on stderr (``drl verify``: its report with a
    FAIL verdict, exit 1); never an uncaught exception."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{command}: {type(result.exception).__name__}: {result.exception}")
    assert result.exit_code in (0, 1, 2), (command, result.exit_code, result.output)
    if command[0] == "verify" and result.exit_code == 1:  # the report, its verdict FAIL
        assert "FAIL: " in result.stdout and not result.stderr.strip(), result.output
    elif result.exit_code != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (command, result.stderr)
        assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200"})


# --- checkpoints: play, verify, export, resume ---------------------------------------------


@pytest.fixture(scope="module")
def checkpoint_paths(ppo_checkpoint_payload) -> list[tuple]:
    return key_paths(ppo_checkpoint_payload)


def checkpoint_mutations(paths: list[tuple]):
    return st.tuples(
        st.sampled_from(paths),
        st.sampled_from(["replace", "replace", "replace", "delete", "wrap", "unknown key"]),
        st.one_of(PLAIN_VALUES, TENSORS),
    )


def mutated_checkpoint(data, folder: Path, payload: dict, paths: list[tuple]) -> Path:
    """A checkpoint file of ``payload`` with one drawn mutation. Re-hashed as it is saved: the
    mutation must be caught by the checks, not by the content hash."""
    path, how, value = data.draw(checkpoint_mutations(paths))
    return save_payload(folder / "mutated.pt", mutate(payload, path, how, value))


@given(data=st.data())
@fuzz_settings(120)
def test_mutated_checkpoints_are_verified_and_played_or_refused_in_one_line(
    data, runner, tmp_path, ppo_checkpoint_payload, checkpoint_paths
):
    checkpoint = mutated_checkpoint(data, tmp_path, ppo_checkpoint_payload, checkpoint_paths)
    for command in (["verify", str(checkpoint)], ["play", str(checkpoint), "--episodes", "1"]):
        assert_clean_outcome(runner.invoke(app, command), command)


@given(data=st.data())
@fuzz_settings(20)
def test_mutated_checkpoints_are_exported_or_refused_in_one_line(
    data, runner, tmp_path, ppo_checkpoint_payload, checkpoint_paths
):
    checkpoint = mutated_checkpoint(data, tmp_path, ppo_checkpoint_payload, checkpoint_paths)
    out = tmp_path / "policy.onnx"
    out.unlink(missing_ok=True)  # of an earlier example (tmp_path is shared by all)
    command = ["export", str(checkpoint), str(out)]
    result = runner.invoke(app, command)
    assert_clean_outcome(result, command)
    assert out.exists() == (result.exit_code == 0)  # a refused export leaves no file


@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.tuples(st.integers(0, 10**9), st.integers(1, 255)),  # a byte of a valid file flipped
    )
)
@fuzz_settings(40)
def test_random_and_flipped_bytes_are_refused_in_one_line(data, runner, tmp_path, checkpoint_file):
    path = tmp_path / "bytes.pt"
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        position, flip = data
        raw = bytearray(checkpoint_file(name="valid.pt").read_bytes())
        raw[position % len(raw)] ^= flip
        path.write_bytes(bytes(raw))
    for command in (["verify", str(path)], ["play", str(path), "--episodes", "1"]):
        result = runner.invoke(app, command)
        assert_clean_outcome(result, command)
        if command[0] == "play":  # a damaged file is never played
            assert result.exit_code != 0 or isinstance(data, tuple)


RESUME_CONFIG = """
env: {id: InvertedPendulum-v5}
algo_params: {hidden_sizes: [8, 8], num_epochs: 1, num_minibatches: 1}
rollout_length: 16
total_env_steps: 6160
output_dir: OUT
name: fixture
"""


class ChecksPassed(Exception):
    """Raised where ``drl train --resume`` would start Ray: every check before it passed."""


@pytest.fixture
def stop_before_ray(monkeypatch):
    """``drl train`` runs every check of a resume, then raises ``ChecksPassed`` instead of
    starting Ray (its processes' part is ``load_like_the_processes``)."""
    from drlcli.runtime import training

    def refuse(*args, **kwargs):
        raise ChecksPassed

    monkeypatch.setattr(training, "ray_session", refuse)


def load_like_the_processes(config_path: Path, checkpoint_path: Path) -> None:
    """What the run's processes do with a resumed checkpoint, here: the parameter server takes
    its statistics, each learner its state, each rollout actor its episodes and reward
    statistics and samples a round with them, the learner trains on it. A refusal is a
    ``DrlError`` (what the run prints in one line); anything else fails the test."""
    from drlcli.algos.ppo.learner import Learner
    from drlcli.checkpoints.verified import read_verified_checkpoint
    from drlcli.config import load_config
    from drlcli.envs import env_facts, make_env
    from drlcli.errors import DrlError
    from drlcli.runtime.mujoco_actor import MuJoCoActor, rollout_actor_states
    from drlcli.runtime.parameter_server import ParameterServer
    from drlcli.runtime.probe import probe_actor
    from drlcli.runtime.run_context import RolloutActorContext

    config = load_config(config_path)
    checkpoint = read_verified_checkpoint(checkpoint_path)
    facts = env_facts(make_env(config.env.id))
    spec = probe_actor(checkpoint.algorithm, config, facts).spec
    params = config.algo_params
    try:
        statistics = ParameterServer(checkpoint.obs_rms_state).get_obs_rms()
        for state in checkpoint.learner_states:
            learner = Learner(spec, facts.obs_dim, facts.action_dim, params)
            learner.load_state_dict(state)
            rollout_actor = MuJoCoActor(
                RolloutActorContext(0, config.env, spec, params, config.gamma)
            )
            try:
                for stored in rollout_actor_states(state) or []:
                    if "envs" in stored:
                        rollout_actor.load_state_dict(stored)
                    else:
                        rollout_actor.restore_reward_scaler(stored["reward_scaler"])
                trajectory, _ = rollout_actor.sample(
                    learner.network_state(), 16, config.gamma, config.gae_lambda, statistics
                )
            finally:
                rollout_actor.close()
            learner.add(trajectory)
            learner.train_step(0.5)
    except DrlError:
        pass


@given(data=st.data())
@fuzz_settings(25)
def test_resume_from_mutated_checkpoints_trains_or_refuses_in_one_line(
    data, runner, tmp_path, ppo_checkpoint_payload, checkpoint_paths, stop_before_ray
):
    """Without Ray (what its processes do runs here): Ray's own failures have their tests."""
    checkpoint = mutated_checkpoint(data, tmp_path, ppo_checkpoint_payload, checkpoint_paths)
    config = tmp_path / "resume.yaml"
    config.write_text(RESUME_CONFIG.replace("OUT", str(tmp_path / "out")))
    command = ["train", str(config), "--quiet", "--resume", str(checkpoint)]
    result = runner.invoke(app, command)
    if isinstance(result.exception, ChecksPassed):
        load_like_the_processes(config, checkpoint)
    else:
        assert_clean_outcome(result, command)


# --- configs -------------------------------------------------------------------------------

VALID_CONFIGS = [
    yaml.safe_load((Path(__file__).parent.parent / "drlcli" / "presets" / name).read_text())
    for name in ("quickstart.yaml", "hopper_flash_sac_cpu.yaml")
]


@given(data=st.data())
@fuzz_settings(150)
def test_mutated_configs_are_validated_or_refused_in_one_line(data, runner, tmp_path):
    document = data.draw(st.sampled_from(VALID_CONFIGS))
    path, how, value = data.draw(
        st.tuples(
            st.sampled_from(key_paths(document)),
            st.sampled_from(["replace", "replace", "delete", "wrap", "unknown key"]),
            PLAIN_VALUES,
        )
    )
    config = tmp_path / "mutated.yaml"
    config.write_text(yaml.safe_dump(mutate(document, path, how, value)))
    command = ["train", str(config), "--dry-run"]
    assert_clean_outcome(runner.invoke(app, command), command)


@given(text=st.text(max_size=200))
@fuzz_settings(40)
def test_arbitrary_text_as_a_config_is_refused_in_one_line(text, runner, tmp_path):
    config = tmp_path / "text.yaml"
    config.write_text(text)
    command = ["train", str(config), "--dry-run"]
    assert_clean_outcome(runner.invoke(app, command), command)
