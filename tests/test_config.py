from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from drlcli.algos.ppo.params import PPOParams
from drlcli.config import Config, load_config
from drlcli.errors import ConfigError

from .conftest import REPO_ROOT


def test_missing_fields_take_defaults(write_config):
    config = load_config(write_config("algo: ppo\n", name="tiny.yaml"))
    assert config.algo_params == PPOParams()
    assert config.env.id == "InvertedPendulum-v5"
    assert config.name == "tiny"
    assert config.metrics_path == str(Path("output") / "metrics_tiny.csv")
    assert config.checkpoint_path == Path("output/model_tiny.pt")
    assert config.best_checkpoint_path == Path("output/model_tiny_best.pt")


def test_config_is_frozen(write_config):
    config = load_config(write_config("num_actors: 2\n"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_actors = 3  # type: ignore[misc]


def test_values_are_read_and_converted(write_config):
    config = load_config(
        write_config(
            "name: custom\nenv: {id: Hopper-v5, num_envs: 3, seed: 7}\n"
            "actors_per_gpu: 2\nnum_actors: 2\nmetrics_path: m.csv\n"
            "algo_params: {learning_rate: 3e-4, hidden_sizes: [32, 16], target_kl: 1}\n"
        )
    )
    assert config.name == "custom"
    assert config.env.num_envs == 3 and config.env.seed == 7
    # YAML 1.1 would read 3e-4 as a string; drl reads it as the float everybody means.
    assert config.algo_params.learning_rate == pytest.approx(3e-4)
    assert config.algo_params.hidden_sizes == (32, 16)
    assert config.algo_params.target_kl == 1.0 and isinstance(config.algo_params.target_kl, float)
    assert config.metrics_path == "m.csv"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("num_actorz: 1\n", "num_actorz: unknown key; did you mean 'num_actors'?"),
        ("env: {idd: Hopper-v5}\n", "env.idd: unknown key"),
        ("algo_params: {batch_size: 64}\n", "algo_params.batch_size: unknown key"),
        ("algo_params: {num_epochs: abc}\n", "algo_params.num_epochs: expected int, got 'abc'"),
        ("num_actors: 1.5\n", "num_actors: expected int, got 1.5"),
        ("num_actors: true\n", "num_actors: expected int, got True"),
        ("num_actors: 0\n", "num_actors: must be a positive integer, got 0"),
        ("num_gpus: -1\n", "num_gpus: must be a positive integer, got -1"),
        ("actors_per_gpu: 0\n", "actors_per_gpu: must be a positive integer, got 0"),
        ("param_sync_interval: 0\n", "param_sync_interval: must be a positive integer"),
        ("rollout_length: 0\n", "rollout_length: must be a positive integer"),
        ("gamma: 1.5\n", "gamma: must be in [0, 1], got 1.5"),
        ("gamma: .nan\n", "gamma: expected a finite number"),
        ("algo_params: {learning_rate: 0}\n", "algo_params.learning_rate: must be > 0, got 0.0"),
        ("algo_params: {normalize_rewards: 1}\n", "expected true or false, got 1"),
        ("algo_params: {activation: sigmoid}\n", "algo_params.activation: expected one of"),
        ("algo_params: {hidden_sizes: 64}\n", "algo_params.hidden_sizes: expected a list"),
        ("algo_params: {hidden_sizes: [64, x]}\n", "algo_params.hidden_sizes[1]: expected int"),
        (
            "algo_params: {hidden_sizes: [64, 0]}\n",
            "algo_params.hidden_sizes[1]: must be a positive integer, got 0",
        ),
        (
            "algo_params: {value_hidden_sizes: [-256]}\n",
            "algo_params.value_hidden_sizes[0]: must be a positive integer, got -256",
        ),
        ("env: Hopper-v5\n", "env: expected a mapping, got 'Hopper-v5'"),
        (
            "evaluation: null\n",
            "evaluation: expected a mapping, got null (leave evaluation out for its defaults)",
        ),
        ("env: {kwargs: null}\n", "env.kwargs: expected a mapping, got null"),
        ("algo: dqn\n", "algo: unknown algorithm 'dqn'; choose one of: flash_sac, ppo"),
        ("name: 'a b'\n", "name: 'a b' cannot name output files"),
        ("metrics_path: 3\n", "metrics_path: expected a string, got 3"),
        ("env: {kwargs: 3}\n", "env.kwargs: expected a mapping, got 3"),
        (
            "env: {kwargs: {max_episode_steps: 5}}\n",
            "env.kwargs.max_episode_steps: set by drl; use env.max_episode_steps",
        ),
        ("env: {kwargs: {render_mode: human}}\n", "env.kwargs.render_mode: set by drl"),
        ("env: {kwargs: {start: 2024-01-01}}\n", "env.kwargs.start: datetime.date(2024, 1, 1) is"),
        ("env: {kwargs: {scale: .inf}}\n", "env.kwargs.scale: inf is not plain data"),
    ],
)
def test_bad_values_name_the_key_path(write_config, text, message):
    path = write_config(text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert message in str(error.value)
    assert str(path) in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "config file is empty"),
        ("# only a comment\n", "config file is empty"),
        ("- 1\n- 2\n", "top level must be a mapping"),
        ("just a string\n", "top level must be a mapping of keys to values, got str"),
        ("env: {id: [\n", "YAML syntax error at line"),
    ],
)
def test_malformed_files(write_config, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write_config(text))


def test_env_kwargs_are_read_as_plain_data(write_config):
    config = load_config(
        write_config("env: {id: Ant-v5, kwargs: {include_cfrc_ext_in_observation: false}}\n")
    )
    assert config.env.kwargs == {"include_cfrc_ext_in_observation": False}
    assert load_config(write_config("env: {id: Ant-v5}\n")).env.kwargs == {}


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_to_dict_round_trips(write_config):
    from drlcli.config import config_from_dict

    config = load_config(write_config("algo_params: {hidden_sizes: [8]}\n"))
    assert config_from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "path", sorted((REPO_ROOT / "drlcli" / "presets").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_shipped_config_loads(path):
    config = load_config(path)
    assert isinstance(config, Config)
    assert config.name == path.stem


def test_runtime_env_becomes_rays_with_absolute_paths_and_bad_paths_are_named(
    write_config, tmp_path, monkeypatch
):
    from drlcli.runtime.nodes import check_runtime_env, import_py_modules_here

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkgs" / "my_actors").mkdir(parents=True)
    config = load_config(
        write_config(
            "runtime_env:\n  working_dir: .\n  py_modules: [./pkgs/my_actors]\n"
            "  excludes: ['*.pt']\n  env_vars: {GLOO_SOCKET_IFNAME: eth0}\n"
        )
    )
    assert config.runtime_env.to_ray() == {
        "working_dir": str(tmp_path),
        "py_modules": [str(tmp_path / "pkgs" / "my_actors")],
        "excludes": ["*.pt"],
        "env_vars": {"GLOO_SOCKET_IFNAME": "eth0"},
    }
    check_runtime_env(config.runtime_env)
    monkeypatch.setattr(sys, "path", list(sys.path))
    import_py_modules_here(config.runtime_env)
    assert sys.path[0] == str(tmp_path / "pkgs")  # `import my_actors` works
    assert load_config(write_config("algo: ppo\n")).runtime_env.is_empty()

    with pytest.raises(ConfigError, match=r"runtime_env.env_vars.A: expected a string, got 1"):
        load_config(write_config("runtime_env: {env_vars: {A: 1}}\n"))
    with pytest.raises(ConfigError, match=r"runtime_env.pip: unknown key"):
        load_config(write_config("runtime_env: {pip: [numpy]}\n"))
    missing = load_config(write_config("runtime_env: {working_dir: ./nowhere}\n"))
    with pytest.raises(ConfigError, match=r"runtime_env.working_dir: ./nowhere is not a directory"):
        check_runtime_env(missing.runtime_env)
    archive = load_config(write_config("runtime_env: {py_modules: [./pkgs/x.zip]}\n"))
    with pytest.raises(ConfigError, match=r"py_modules\[0\]: ./pkgs/x.zip is neither a package"):
        check_runtime_env(archive.runtime_env)


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_seed_numpy_and_gymnasium_cannot_take_is_refused(write_config, seed):
    """env.seed -1 passed the config and failed at the first reset, a traceback."""
    with pytest.raises(ConfigError, match=rf"env\.seed: .*{seed}"):
        load_config(write_config(f"env: {{seed: {seed}}}\n"))


def test_with_seed_names_the_run_and_its_own_metrics_path(write_config):
    from drlcli.config import with_seed

    config = with_seed(load_config(write_config("name: hopper\n")), 4)
    assert (config.name, config.env.seed) == ("hopper_seed4", 4)
    assert config.metrics_path == "output/metrics_hopper_seed4.csv"
    assert str(config.checkpoint_path) == "output/model_hopper_seed4.pt"
    explicit = load_config(write_config("name: hopper\nmetrics_path: logs/curve.csv\n"))
    assert with_seed(explicit, 2).metrics_path == "logs/curve_seed2.csv"
    assert with_seed(with_seed(explicit, 2), 5).metrics_path == "logs/curve_seed5.csv"


def test_a_whole_number_written_as_a_float_is_an_integer(write_config):
    """``total_env_steps: 1e6`` is how RL configs write step counts; YAML reads it as a float.
    A fraction is still refused."""
    config = load_config(write_config("total_env_steps: 1e6\nrollout_length: 2.56e2\n"))
    assert config.total_env_steps == 1_000_000 and isinstance(config.total_env_steps, int)
    assert config.rollout_length == 256 and isinstance(config.rollout_length, int)
    with pytest.raises(ConfigError, match=r"rollout_length: expected int, got 25\.5"):
        load_config(write_config("rollout_length: 25.5\n"))
    with pytest.raises(ConfigError, match=r"env\.num_envs: expected int, got True"):
        load_config(write_config("env: {num_envs: true}\n"))
