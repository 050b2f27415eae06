"""Shared fixtures. Ray starts once per test session (ray.init costs seconds here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MUJOCO_GL", "egl")

REPO_ROOT = Path(__file__).resolve().parent.parent


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

    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


TINY_PPO = """
algo: ppo
env: {{id: InvertedPendulum-v5, num_envs: 2, seed: 3}}
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
