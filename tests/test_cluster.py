"""A real Ray cluster of two node processes on this machine (`ray start --head` and `ray start
--address`, each with 2 CPUs and a resource of its own): `drl train --address` runs PPO and
FlashSAC whose rollout actors run on both nodes. Every process the cluster started is stopped
by PID afterwards, and none is left."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from drlcli.metrics import read_metrics

RAY = Path(sys.executable).parent / "ray"
ENV = {
    **{k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")},
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "COLUMNS": "200",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cluster_processes(temp_dir: str) -> list[psutil.Process]:
    """The processes of the cluster whose session lives in ``temp_dir``, and their children."""
    found: dict[int, psutil.Process] = {}
    for process in psutil.process_iter(["pid", "cmdline"]):
        if temp_dir in " ".join(process.info["cmdline"] or []):
            found[process.pid] = process
            for child in process.children(recursive=True):
                found[child.pid] = child
    return list(found.values())


@pytest.fixture(scope="module")
def cluster():
    """(address, temp dir) of a two-node Ray on 127.0.0.1; stopped by PID afterwards."""
    temp_dir = tempfile.mkdtemp(prefix="drlray", dir="/tmp")  # short: socket paths
    port = free_port()
    address = f"127.0.0.1:{port}"
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=2", f"--temp-dir={temp_dir}"]
    try:
        subprocess.run(
            [
                RAY,
                "start",
                "--head",
                f"--port={port}",
                "--include-dashboard=false",
                "--disable-usage-stats",
                '--resources={"drltest_node_a": 1}',
                *common,
            ],
            env=ENV,
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [RAY, "start", f"--address={address}", '--resources={"drltest_node_b": 1}', *common],
            env=ENV,
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield address, temp_dir
    finally:
        for process in cluster_processes(temp_dir):
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 30
        while cluster_processes(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = cluster_processes(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not left, f"cluster processes left: {[p.pid for p in left]}"


def rollout_actor_nodes(address: str, class_name: str) -> set[str]:
    """The node ids the cluster's actors of ``class_name`` ran on (Ray's GCS actor table)."""
    code = (
        "import sys, logging, ray, ray._private.state as state\n"
        "ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)\n"
        "for actor in state.actors().values():\n"
        "    if actor['ActorClassName'].endswith(sys.argv[2]):\n"
        "        print(actor['Address']['NodeID'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, address, class_name],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(done.stdout.split())


@pytest.mark.parametrize(
    ("algo", "params", "rollout_class"),
    [
        ("ppo", "{num_epochs: 1, num_minibatches: 2, hidden_sizes: [8]}", "MuJoCoActor"),
        (  # two data-parallel learners: their gloo group forms across the cluster's processes
            "flash_sac",
            "{batch_size: 16, warmup_steps: 40, actor_hidden_dim: 8, actor_num_blocks: 1,"
            " critic_hidden_dim: 8, critic_num_blocks: 1, num_bins: 11}\n"
            "num_gpus: 2\nactors_per_gpu: 1\nlearners_on_cpu: true",
            "EnvStepper",
        ),
    ],
)
def test_drl_train_joins_a_two_node_cluster_and_its_rollout_actors_use_both(
    cluster, tmp_path, algo, params, rollout_class
):
    address, _ = cluster
    config = tmp_path / f"{algo}.yaml"
    config.write_text(
        f"algo: {algo}\nenv: {{id: InvertedPendulum-v5, num_envs: 1}}\nnum_actors: 2\n"
        f"total_env_steps: 160\nrollout_length: 40\noutput_dir: {tmp_path / 'out'}\n"
        f"evaluation: {{episodes: 1}}\nalgo_params: {params}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "drlcli", "train", str(config), "--quiet", "--address", address],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(read_metrics(tmp_path / "out" / f"metrics_{algo}.csv")) == 2
    assert len(rollout_actor_nodes(address, rollout_class)) == 2


def test_a_local_run_starts_its_own_ray_beside_a_cluster_on_this_machine(cluster, tmp_path):
    """Without --address (and RAY_ADDRESS), Ray would join the cluster `ray start` left on this
    machine and refuse the local run's CPU count: drl starts a Ray of its own instead."""
    config = tmp_path / "local.yaml"
    config.write_text(
        "env: {id: InvertedPendulum-v5}\ntotal_env_steps: 128\nrollout_length: 64\n"
        f"output_dir: {tmp_path / 'out'}\nevaluation: {{episodes: 1}}\n"
        "algo_params: {num_epochs: 1, num_minibatches: 2, hidden_sizes: [8]}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "drlcli", "train", str(config), "--quiet"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
