"""A real Ray cluster of two node processes on this machine (`ray start --head` and `ray start
--address`, each with 2 CPUs and a resource of its own): `drl train --address` runs PPO and
FlashSAC whose rollout actors run on both nodes. Every process the cluster started is stopped
by PID afterwards, and none is left."""

from __future__ import annotations

import contextlib
import csv
import os
import re
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

from drlcli.metrics.csv_file import read_metrics

# Clusters of its own, started by `ray`; one xdist worker runs them all (make test's
# --dist loadgroup), so the module's two-node cluster starts once.
pytestmark = [
    pytest.mark.ray,
    pytest.mark.subprocess,
    pytest.mark.xdist_group("two_node_cluster"),
]
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


@contextlib.contextmanager
def two_node_cluster(
    head_cpus: int = 2,
    ray_config: dict[str, str] | None = None,
    head_gpus: int = 0,
    second_node: bool = True,
):
    """(address, temp dir) of a two-node Ray on 127.0.0.1 (node b with 2 CPUs); every process
    it started is stopped by PID afterwards. ``ray_config``: Ray system settings for both
    nodes, as ``RAY_<name>`` environment variables of ``ray start``. ``head_gpus``: GPUs the
    head advertises (Ray takes the count as given: this machine has none). Without
    ``second_node``, the head alone."""
    env = {**ENV, **{f"RAY_{name}": value for name, value in (ray_config or {}).items()}}
    temp_dir = tempfile.mkdtemp(prefix="drlray", dir="/tmp")  # short: socket paths
    port = free_port()
    address = f"127.0.0.1:{port}"
    common = ["--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}"]
    try:
        subprocess.run(
            [
                RAY,
                "start",
                "--head",
                f"--port={port}",
                f"--num-cpus={head_cpus}",
                f"--num-gpus={head_gpus}",
                "--include-dashboard=false",
                "--disable-usage-stats",
                '--resources={"drltest_node_a": 1}',
                *common,
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        if second_node:
            subprocess.run(
                [
                    RAY,
                    "start",
                    f"--address={address}",
                    "--num-cpus=2",
                    '--resources={"drltest_node_b": 1}',
                    *common,
                ],
                env=env,
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


@pytest.fixture(scope="module")
def cluster():
    """(address, temp dir) of a two-node Ray on 127.0.0.1; stopped by PID afterwards."""
    with two_node_cluster() as running:
        yield running


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


def test_learner_device_rules_are_judged_on_the_clusters_gpus_once_joined(tmp_path):
    """The driver (this machine) has no GPU; the cluster it joins advertises one. FlashSAC's
    automatic whole-cycle CUDA graph then means a CUDA learner, which a custom actor cannot
    run in: refused in one line after joining, before any rollout actor or learner starts,
    where the driver's own hardware would have let it through to fail inside learner 0."""
    config = tmp_path / "custom.yaml"
    config.write_text(
        "algo: flash_sac\nenv: {id: InvertedPendulum-v5, num_envs: 1}\n"
        f"total_env_steps: 80\nrollout_length: 40\noutput_dir: {tmp_path / 'out'}\n"
        "algo_params:\n  batch_size: 16\n  warmup_steps: 40\n  critic_hidden_dim: 8\n"
        "  critic_num_blocks: 1\n  num_bins: 11\n"
        "  actor_config:\n    builder: tests.custom_actors:build\n"
        "    kwargs: {action_low: [-3.0], action_high: [3.0], hidden_dim: 8}\n"
    )
    command = [sys.executable, "-m", "drlcli", "train", str(config), "--quiet"]
    with two_node_cluster(head_gpus=1, second_node=False) as (address, temp_dir):
        done = subprocess.run(
            [*command, "--address", address], env=ENV, capture_output=True, text=True, timeout=240
        )
        started = {
            " ".join(process.cmdline())
            for process in cluster_processes(temp_dir)
            if process.is_running()
        }
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip() == (
        "error: algo_params.use_whole_cycle_cuda_graph is on (by default on NVIDIA CUDA) but "
        "actor_config names a custom actor, which cannot be captured; set "
        "use_whole_cycle_cuda_graph: false"
    )
    assert not any("EnvStepper" in line or "LearnerWorker" in line for line in started), started
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# The shipped package records where each process imported it from. A node of this one-machine
# cluster shares the driver's files (Ray even gives its workers the driver's sys.path), so to
# stand for a node that lacks the package, the unshipped variant imports only in the driver.
SHIPPED_PACKAGE = """
import os
from drlcli.algos.flash_sac.actor import build_flash_sac_actor

def build(*args, imports_log, **kwargs):
    with open(imports_log, "a") as log:
        log.write(__file__ + "\\n")
    return build_flash_sac_actor(*args, **kwargs)
"""
MISSING_ON_NODES = (
    "import os\n"
    "if 'DRL_TEST_DRIVER' not in os.environ:\n"
    "    raise ModuleNotFoundError(\"No module named 'shipped_actor'\")\n"
) + SHIPPED_PACKAGE


def shipping_project(tmp_path: Path, runtime_env: str, package: str = SHIPPED_PACKAGE) -> Path:
    """A project directory as a user has it: a custom actor package that no node has installed,
    a robot model file, and a FlashSAC config naming both, with ``runtime_env``."""
    import gymnasium

    project = tmp_path / "project"
    (project / "robots").mkdir(parents=True)
    (project / "shipped_actor").mkdir()
    (project / "shipped_actor" / "__init__.py").write_text(package)
    assets = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets"
    shutil.copy(assets / "inverted_pendulum.xml", project / "robots" / "pendulum.xml")
    (project / "run.yaml").write_text(
        "algo: flash_sac\n"
        "env: {id: InvertedPendulum-v5, num_envs: 1, kwargs: {xml_file: ./robots/pendulum.xml}}\n"
        f"num_actors: 2\ntotal_env_steps: 80\nrollout_length: 40\noutput_dir: {tmp_path / 'out'}\n"
        "evaluation: {episodes: 1}\n"
        "algo_params:\n  batch_size: 16\n  warmup_steps: 40\n  critic_hidden_dim: 8\n"
        "  critic_num_blocks: 1\n  num_bins: 11\n"
        "  actor_config:\n    builder: shipped_actor:build\n"
        "    kwargs: {action_low: [-3.0], action_high: [3.0], hidden_dim: 8, num_blocks: 1,"
        f" imports_log: {tmp_path / 'imports.log'}}}\n"
        f"{runtime_env}"
    )
    return project


def train_in(project: Path, address: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "drlcli", "train", "run.yaml", "--quiet", "--address", address],
        cwd=project,
        env={**ENV, "DRL_TEST_DRIVER": "1"},
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_runtime_env_ships_a_builder_package_and_a_model_file_to_every_node(cluster, tmp_path):
    address, temp_dir = cluster
    project = shipping_project(
        tmp_path, "runtime_env: {working_dir: ., py_modules: [./shipped_actor]}\n"
    )
    done = train_in(project, address)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(read_metrics(tmp_path / "out" / "metrics_run.csv")) == 1
    assert len(rollout_actor_nodes(address, "EnvStepper")) == 2
    imported_from = set((tmp_path / "imports.log").read_text().split())
    # The driver's own import, and the learner's and the evaluator's from Ray's shipped copy.
    assert str(project / "shipped_actor" / "__init__.py") in imported_from
    assert any(path.startswith(temp_dir) for path in imported_from), imported_from


@pytest.mark.parametrize(
    ("runtime_env", "package", "problem"),
    [
        ("", MISSING_ON_NODES, "cannot import 'shipped_actor', the policy actor's builder module"),
        (
            "runtime_env: {py_modules: [./shipped_actor]}\n",
            SHIPPED_PACKAGE,
            "cannot read env.kwargs.xml_file ./robots/pendulum.xml",
        ),
    ],
)
def test_a_node_without_the_code_or_the_file_stops_the_run_before_it_starts(
    cluster, tmp_path, runtime_env, package, problem
):
    address, _ = cluster
    done = train_in(shipping_project(tmp_path, runtime_env, package), address)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and re.match(r"error: node \S+ \([0-9a-f]{12}\): ", lines[0])
    assert problem in " ".join(done.stderr.split())
    assert not (tmp_path / "out" / "metrics_run.csv").exists()  # no round ran


def test_drl_tune_spreads_a_search_over_the_two_node_cluster(cluster, tmp_path):
    """Two trials of two CPUs each, on two nodes of two CPUs: one trial on each node, side by
    side, under ASHA; every trial's result and folder in the search's (shared) output folder."""
    address, _ = cluster
    config = tmp_path / "tuned.yaml"
    config.write_text(
        "env: {id: InvertedPendulum-v5, num_envs: 1}\nnum_actors: 2\ntotal_env_steps: 160\n"
        f"rollout_length: 40\noutput_dir: {tmp_path / 'out'}\nevaluation: {{episodes: 1}}\n"
        "algo_params: {num_epochs: 1, num_minibatches: 2, hidden_sizes: [8]}\n"
    )
    space = tmp_path / "space.yaml"
    space.write_text(
        "space: {algo_params.learning_rate: {loguniform: [1.0e-4, 1.0e-3]}}\n"
        "search: {trials: 2, searcher: random, evaluations_per_trial: 2, grace_evaluations: 1,\n"
        "         cpus_per_trial: 2, retrain_top: 0}\n"
    )
    output = tmp_path / "search"
    command = [sys.executable, "-m", "drlcli", "tune", str(config), str(space), "--quiet"]
    done = subprocess.run(
        [*command, "--address", address, "--output", str(output)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with open(output / "results.csv") as handle:
        results = list(csv.DictReader(handle))
    # ASHA (the default scheduler) may stop the worse trial at its first evaluation.
    assert sorted(row["trial"] for row in results) == ["trial_001", "trial_002"]
    assert {row["state"] for row in results} <= {"finished", "stopped early"}
    for row in results:
        rows = read_metrics(output / "trials" / row["trial"] / "metrics_trial.csv")
        assert int(rows[-1]["env_steps"]) == int(row["env_steps"]) or row["state"] != "finished"
    assert len(rollout_actor_nodes(address, "MuJoCoActor")) == 2


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


def node_b_raylet(temp_dir: str) -> psutil.Process:
    """The raylet of the node started with the ``drltest_node_b`` resource."""
    for process in cluster_processes(temp_dir):
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(process.cmdline())
            if "raylet" in process.name() and "drltest_node_b" in cmdline:
                return process
    raise AssertionError("node b's raylet is not running")


def test_a_node_that_leaves_mid_round_never_ends_the_run_in_a_traceback(tmp_path):
    """Node b's raylet is killed while both rollout actors are held mid-round (one on each
    node): its processes and the objects it holds are gone. The run either goes on (the lost
    rollout actor restarted on node a, which has room for it) or stops in one drl line with the
    last good checkpoint; never a Ray traceback."""
    markers = tmp_path / "markers"
    markers.mkdir()
    config = tmp_path / "pause.yaml"
    config.write_text(
        "algo: ppo\n"
        "env: {id: 'tests.range_envs:drltest/PauseAt-v0', num_envs: 1,"
        # Step 100 of a process: its 40 warm-up steps, round 1's 40, then mid-round 2.
        f" kwargs: {{at_step: 100, marker_dir: '{markers}'}}}}\n"
        f"num_actors: 2\ntotal_env_steps: 400\nrollout_length: 40\noutput_dir: {tmp_path / 'out'}\n"
        "evaluation: {episodes: 1}\n"
        "algo_params: {num_epochs: 1, num_minibatches: 2, hidden_sizes: [8]}\n"
    )
    repository = str(Path(__file__).resolve().parent.parent)
    # The head notices node b's death after failure_threshold missed health checks, 3 s apart
    # by default (15 s of waiting); 0.5 s apart, a busy but live raylet still answers in time.
    fast_death = {"health_check_period_ms": "500", "health_check_failure_threshold": "4"}
    with two_node_cluster(head_cpus=4, ray_config=fast_death) as (address, temp_dir):
        driver = subprocess.Popen(
            [sys.executable, "-m", "drlcli", "train", str(config), "--quiet", "--address", address],
            env={**ENV, "PYTHONPATH": repository},  # the workers import tests.range_envs
            cwd=repository,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 180
            while len(list(markers.glob("reached-*"))) < 2:
                assert driver.poll() is None, driver.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the rollout actors never reached step 100"
                time.sleep(0.1)
            raylet = node_b_raylet(temp_dir)
            for process in [*raylet.children(recursive=True), raylet]:
                with contextlib.suppress(psutil.Error):
                    process.send_signal(signal.SIGKILL)
            time.sleep(1.0)
            (markers / "release").touch()
            _, stderr = driver.communicate(timeout=300)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.communicate()
    assert "Traceback" not in stderr, stderr[-3000:]
    metrics = tmp_path / "out" / "metrics_pause.csv"
    if driver.returncode == 0:
        rows = read_metrics(metrics)
        assert len(rows) == 5
        assert sum(int(row["rollout_actor_restarts"]) for row in rows) >= 1
    else:
        assert driver.returncode == 1, stderr[-3000:]
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, stderr[-3000:]
        assert re.match(r"error: round \d+: .+; the last good checkpoint is ", errors[0]), errors
