"""The Slurm launcher (``scripts/slurm/ray_cluster.sh``) under a fake Slurm: ``SLURM_*``
variables, and stand-ins for ``scontrol``, ``srun``, ``ray`` and ``drl`` on PATH that log each
call (and the PID that serves it) instead of reaching a cluster. ``srun`` runs its command on
this machine; the head node's address is loopback, where the stand-in ``ray start --head``
listens, so the launcher's wait for the head is the real one."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.subprocess
LAUNCHER = REPO_ROOT / "scripts" / "slurm" / "ray_cluster.sh"

# Each stand-in appends "NAME PID ARGS..." to $FAKE_LOG.
STAND_INS = {
    "scontrol": """
echo "scontrol $$ $*" >> "$FAKE_LOG"
[ "$1 $2" = "show hostnames" ] || exit 1
for node in $FAKE_NODES; do echo "$node"; done
""",
    # srun's options come first; then the command, run here (exec: the command keeps the PID).
    "srun": """
echo "srun $$ $*" >> "$FAKE_LOG"
node=
while [ $# -gt 0 ]; do
  case "$1" in
    -w) node=$2; shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ "$*" = "hostname --ip-address" ]; then
  index=0
  for name in $FAKE_NODES; do
    index=$((index + 1))
    [ "$name" = "$node" ] && echo "127.0.0.$index"
  done
  exit 0
fi
exec "$@"
""",
    # ray start --head listens on its port as the real head does; --block waits to be stopped.
    "ray": """
echo "ray $$ $*" >> "$FAKE_LOG"
case "$*" in
  *--head*)
    port=${*##*--port=}; port=${port%% *}
    exec python3 -c 'import socket, sys, time
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
while True:
    time.sleep(1)' "$port" ;;
  *--block*) exec sleep 600 ;;
esac
""",
    # drl: $FAKE_DRL is "ok", "fail" (exit 3) or "wait" (until SIGTERM, as drl finishes a round).
    "drl": """
echo "drl $$ $*" >> "$FAKE_LOG"
case "$FAKE_DRL" in
  ok) exit 0 ;;
  fail) exit 3 ;;
  wait)
    trap 'echo "drl $$ stopped by SIGTERM" >> "$FAKE_LOG"; exit 143' TERM
    while true; do sleep 0.05; done ;;
esac
""",
}


@pytest.fixture
def fake_slurm(tmp_path):
    """``launch(*args, nodes=..., drl=..., wait=True)``: the launcher under the fake Slurm;
    returns the ``Popen`` (``wait=False``) or ``(returncode, stdout, stderr)``; ``.log()`` the
    stand-ins' calls as ``(name, pid, args)``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STAND_INS.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("export DRL_ACTIVATED=1\n")
    launched: list[subprocess.Popen] = []
    log = tmp_path / "calls.log"
    log.touch()
    with socket.socket() as probe:  # a free port for the stand-in head
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    class Launcher:
        port_number = port
        venv_path = venv

        def env(self, nodes, drl):
            return {
                **os.environ,
                "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                "FAKE_LOG": str(log),
                "FAKE_NODES": " ".join(nodes),
                "FAKE_DRL": drl,
                "SLURM_JOB_NODELIST": f"node[1-{len(nodes)}]",
                "SLURM_CPUS_ON_NODE": "8",
                "SLURM_GPUS_ON_NODE": "2",
                "DRL_VENV": str(venv),
                "RAY_PORT": str(port),
                "RAY_HEAD_WAIT_S": "20",
                # The workers' pause, as the launcher's default of 10 s gives them to join: at
                # 0 a loaded machine ran drl (and the teardown) before a worker's ray start.
                "RAY_WORKER_WAIT_S": "2",
            }

        def __call__(self, *args, nodes=("node1", "node2", "node3"), drl="ok", wait=True, env=None):
            process = subprocess.Popen(
                ["bash", str(LAUNCHER), *args],
                env=env if env is not None else self.env(nodes, drl),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # its process group: ended whatever the test's outcome
            )
            launched.append(process)
            if not wait:
                return process
            stdout, stderr = process.communicate(timeout=60)
            return process.returncode, stdout, stderr

        def log(self):
            calls = []
            for line in log.read_text().splitlines():
                name, pid, *args = line.split(" ")
                calls.append((name, int(pid), " ".join(args)))
            return calls

    yield Launcher()
    for process in launched:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_dry_run_prints_the_cluster_and_the_search_and_starts_nothing(fake_slurm):
    code, stdout, stderr = fake_slurm(
        "--dry-run", "tune", "my run.yaml", "space.yaml", "--trials", "6"
    )
    assert code == 0, stderr
    port = fake_slurm.port_number
    head = f"127.0.0.1:{port}"
    assert stdout.splitlines() == [
        f"source {fake_slurm.venv_path}/bin/activate",
        "srun --nodes=1 --ntasks=1 -w node1 ray start --head --node-ip-address=127.0.0.1 "
        f"--port={port} --num-cpus=8 --num-gpus=2 --include-dashboard=false --block &",
        f"# wait up to 20 s for {head} to accept connections",
        f"srun --nodes=1 --ntasks=1 -w node2 ray start --address={head} --num-cpus=8 "
        "--num-gpus=2 --block &",
        f"srun --nodes=1 --ntasks=1 -w node3 ray start --address={head} --num-cpus=8 "
        "--num-gpus=2 --block &",
        "sleep 2",
        f"drl tune my\\ run.yaml space.yaml --trials 6 --address {head} --quiet",
        "srun --overlap --nodes=3 --ntasks-per-node=1 -w node1,node2,node3 ray stop --force",
    ]
    # Only the queries ran: the node names and the head's address.
    assert [(name, args) for name, _, args in fake_slurm.log()] == [
        ("scontrol", "show hostnames node[1-3]"),
        ("srun", "--nodes=1 --ntasks=1 -w node1 hostname --ip-address"),
    ]


def test_dry_run_of_a_training_on_one_node_starts_no_workers(fake_slurm):
    code, stdout, _ = fake_slurm("--dry-run", "train", "configs/hopper_ppo.yaml", nodes=("gpu7",))
    assert code == 0
    lines = [line.rstrip() for line in stdout.splitlines()]
    assert not any("--address=" in line or line.startswith("sleep") for line in lines)
    assert any(
        line.startswith("drl train configs/hopper_ppo.yaml --address 127.0.0.1:") for line in lines
    )
    assert lines[-1] == "srun --overlap --nodes=1 --ntasks-per-node=1 -w gpu7 ray stop --force"


@pytest.mark.parametrize(
    "args, unset, message",
    [
        ((), None, "usage: sbatch scripts/slurm/ray_cluster.sh [--dry-run] train|tune ARGS..."),
        (("play", "x.pt"), None, "usage: sbatch"),
        (("train",), None, "usage: sbatch"),
        (("train", "c.yaml"), "SLURM_JOB_NODELIST", "SLURM_JOB_NODELIST is not set"),
    ],
)
def test_a_wrong_call_is_one_line_and_exit_2(fake_slurm, args, unset, message):
    env = fake_slurm.env(("node1",), "ok")
    if unset:
        del env[unset]
    code, stdout, stderr = fake_slurm(*args, env=env)
    assert code == 2 and stdout == ""
    assert len(stderr.splitlines()) == 1 and message in stderr
    assert fake_slurm.log() == []


def assert_cluster_stopped(fake_slurm) -> None:
    """ray stop ran on every node, and every process the launcher started has ended."""
    calls = fake_slurm.log()
    stops = [args for name, _, args in calls if name == "srun" and "ray stop" in args]
    assert stops == [
        "--overlap --nodes=3 --ntasks-per-node=1 -w node1,node2,node3 ray stop --force"
    ]
    started = [pid for name, pid, args in calls if name == "ray" and "--block" in args]
    assert len(started) == 3  # the head and two workers
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in started)


@pytest.mark.parametrize("drl, expected", [("ok", 0), ("fail", 3)])
def test_the_cluster_is_stopped_when_drl_ends_and_its_status_is_the_jobs(fake_slurm, drl, expected):
    code, _, stderr = fake_slurm("train", "c.yaml", "--seed", "2", drl=drl)
    assert code == expected, stderr
    drl_calls = [args for name, _, args in fake_slurm.log() if name == "drl"]
    assert drl_calls == [
        f"train c.yaml --seed 2 --address 127.0.0.1:{fake_slurm.port_number} --quiet"
    ]
    assert_cluster_stopped(fake_slurm)


def test_scancel_stops_drl_first_then_the_cluster(fake_slurm):
    """scancel (or the time limit's --signal) sends SIGTERM to the batch script: drl gets it and
    is waited for (it finishes its round and keeps its checkpoints), then Ray stops everywhere."""
    process = fake_slurm("tune", "c.yaml", "space.yaml", drl="wait", wait=False)
    deadline = time.monotonic() + 30
    while not any(name == "drl" for name, _, _ in fake_slurm.log()):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 143, stderr
    calls = fake_slurm.log()
    stopped = [index for index, (name, _, args) in enumerate(calls) if args == "stopped by SIGTERM"]
    ray_stop = [index for index, (_, _, args) in enumerate(calls) if "ray stop" in args]
    assert len(stopped) == 1 and ray_stop and stopped[0] < ray_stop[0]
    assert_cluster_stopped(fake_slurm)
