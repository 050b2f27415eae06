"""Shared fixtures. Ray starts once per test session (ray.init costs seconds here)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MUJOCO_GL", "egl")
# make test runs two pytest-xdist workers on a machine that may have two cores: OpenMP threads
# that spin while they wait for a core (libgomp's default) make a process with two torch threads
# beside another busy one several times slower (a FlashSAC test: 11 s alone, 64 s beside a
# two-thread torch loop, 15 s with passive waits). Set before anything imports torch; Ray's
# workers and the CLI's subprocesses inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# pytest-xdist's workers set COLUMNS=80, which rich reads once when drl's module-level consoles
# are made; the tests give the width per call (CliRunner's env) instead.
os.environ.pop("COLUMNS", None)

REPO_ROOT = Path(__file__).resolve().parent.parent
FAST_ONLY = os.environ.get("DRL_TEST_FAST") == "1"  # make test-fast


@pytest.hookimpl(tryfirst=True)  # before -m selects by the marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that uses the shared Ray session is marked ``ray``: ``-m "not ray"`` (and
    ``make test-fast``) leaves them out without each module having to say so.

    Under ``make test`` (two pytest-xdist workers) each worker starts its own Ray session when
    its first such test needs it, and both run Ray tests beside the rest. One worker running
    every Ray test in one session would be the critical path: their test time is about two
    thirds of the suite's."""
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(scope="session", autouse=FAST_ONLY)
def first_run_caches_built() -> None:
    """Under ``make test-fast``: what a library builds on its first run anywhere, through a
    process of its own, is built before the first test, not inside whichever test first needs
    it (matplotlib's font cache runs ``fc-list`` when none exists: on a fresh machine or HOME,
    ``drl compare``'s PNG test would otherwise trip ``no_subprocesses``)."""
    import matplotlib.font_manager  # noqa: F401  builds the cache at import when it is missing


@pytest.fixture(autouse=FAST_ONLY)
def no_subprocesses(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Under ``make test-fast`` a test that starts a process fails, naming the marker it lacks:
    the fast set stays the tests that need neither Ray nor a subprocess."""
    import multiprocessing.process
    import subprocess

    def refuse(*args, **kwargs):
        raise AssertionError(
            f"{request.node.nodeid} starts a process: mark it @pytest.mark.subprocess "
            "(make test-fast leaves such tests out)"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    yield


@pytest.fixture
def write_config(tmp_path: Path):
    """Write YAML text to a file in tmp_path and return its path."""

    def write(text: str, name: str = "run.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray for the whole test session; drl's train() reuses an initialised Ray."""
    import ray

    # Ray workers inherit the environment: let them import tests.custom_actors.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
    )
    # The machine's real CPU count: topologies with more processes than CPUs must still run
    # (drl gives each process a share of a CPU), as they do on a small cluster.
    ray.init(
        address="local",  # never a cluster `ray start` left on this machine (test_cluster's)
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
    )
    # Two of Ray's services serve no test: the log monitor (log_to_driver is off), tailing
    # every worker's log file for the session's whole life, and the autoscaler's monitor (a
    # fixed local node). On two cores their CPU is the tests'. Ray's own tests stop them so.
    node = ray._private.worker.global_worker.node
    with contextlib.suppress(AttributeError):  # a Ray without these methods keeps them
        node.kill_log_monitor()
        node.kill_monitor()
    yield
    ray.shutdown()


TINY_PPO = """
algo: ppo
env: {{id: InvertedPendulum-v5, num_envs: 2, seed: 3, kwargs: {{reset_noise_scale: 0.01}}}}
total_env_steps: {total}
rollout_length: 64
output_dir: {output}
algo_params: {{num_epochs: 2, num_minibatches: 4, hidden_sizes: [16, 16]}}
"""


@pytest.fixture
def tiny_config(tmp_path: Path):
    """A two-round PPO config on InvertedPendulum writing into tmp_path/out."""

    def make(name: str = "tiny", total: int = 256, extra: str = "") -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(TINY_PPO.format(total=total, output=tmp_path / "out") + extra)
        return path

    return make


@pytest.fixture(scope="session")
def two_rounds(tmp_path_factory, ray_cluster):
    """``tiny_config()``'s two-round run, trained once per test session (per pytest-xdist
    worker): ``(config, summary)``. Read it; never write into its folder."""
    from drlcli.config import load_config
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    folder = tmp_path_factory.mktemp("two_rounds")
    path = folder / "tiny.yaml"
    path.write_text(TINY_PPO.format(total=256, output=folder / "out"))
    config = load_config(path)
    return config, train(config, quiet=True, devices=AvailableDevices(cuda_devices=0, mps=False))


@pytest.fixture
def trained(tiny_config, two_rounds):
    """``trained(name)``: ``tiny_config(name)``'s outputs as if it had been run (the shared
    two-round run's files under this name; training is deterministic); returns its config."""
    from drlcli.config import load_config

    def copy(name: str):
        config = load_config(tiny_config(name))
        copy_run_outputs(two_rounds[0], config)
        return config

    return copy


def fresh_ppo_payload(algo_params: dict) -> dict:
    """A real PPO checkpoint payload of a fresh learner on InvertedPendulum, built without Ray."""
    import numpy as np

    from drlcli.actors.contract import declared_inference_memory
    from drlcli.algos.ppo.algorithm import PPO, gaussian_actor_spec
    from drlcli.algos.ppo.learner import Learner
    from drlcli.checkpoints.record import RunProgress
    from drlcli.checkpoints.semantics import actor_semantics
    from drlcli.config import config_from_dict
    from drlcli.envs import env_facts, make_env
    from drlcli.runtime.checkpointing import build_checkpoint
    from drlcli.runtime.probe import ProbedActor

    config = config_from_dict(
        {"env": {"id": "InvertedPendulum-v5"}, "algo_params": algo_params},
        default_name="fixture",
    )
    facts = env_facts(make_env(config.env.id))
    spec = gaussian_actor_spec(config.algo_params, facts.action_low, facts.action_high)
    learner = Learner(spec, facts.obs_dim, facts.action_dim, config.algo_params)
    semantics = actor_semantics(spec, facts.obs_dim, facts.action_dim, "clip")
    obs_rms = {"mean": np.arange(4.0), "var": np.ones(4), "count": 100.0}
    progress = RunProgress(round=3, env_steps=6144, wall_time_s=1.5, best_return=12.5)
    actor = ProbedActor(spec, semantics, [], declared_inference_memory(learner.actor), 0)
    return build_checkpoint(
        PPO, config, actor, facts, progress, obs_rms, [learner.state_dict()]
    ).to_payload()


@pytest.fixture(scope="session")
def ppo_checkpoint_payload():
    """A real PPO checkpoint payload (fresh learner, InvertedPendulum), built without Ray."""
    return fresh_ppo_payload({"hidden_sizes": [8, 8]})


@pytest.fixture(scope="session")
def lstm_checkpoint_payload():
    """``ppo_checkpoint_payload`` of a recurrent policy: an LSTM of 8 units, 2 layers."""
    return fresh_ppo_payload({"hidden_sizes": [8], "recurrent": {"size": 8, "layers": 2}})


@pytest.fixture
def checkpoint_file(tmp_path: Path, ppo_checkpoint_payload):
    """Save a (deep-copied, optionally modified) payload and return its path."""
    import copy

    from drlcli.checkpoints.files import save_payload

    def make(modify=None, name: str = "model.pt", payload: dict | None = None) -> Path:
        payload = copy.deepcopy(ppo_checkpoint_payload if payload is None else payload)
        if modify is not None:
            modify(payload)
        return save_payload(tmp_path / name, payload)

    return make


def copy_run_outputs(base, config) -> None:
    """Give ``config`` (a ``Config``) the outputs of the run ``base`` made: its latest and
    best checkpoints and its metrics, under ``config``'s names. Tests share one trained run
    this way instead of training the same config again (training is deterministic)."""
    import shutil

    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    for attribute in ("checkpoint_path", "best_checkpoint_path", "metrics_path"):
        shutil.copyfile(getattr(base, attribute), getattr(config, attribute))
