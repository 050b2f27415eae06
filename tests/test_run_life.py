"""A run owns its whole life: SIGINT or SIGTERM to ``drl train``'s whole process group (a
terminal's Ctrl-C, ``timeout(1)``, ``kill -- -PGID``) or to the driver alone (``kill PID``), at
each phase of PPO, FlashSAC and SAC runs: Ray's start, PPO's warm-up, the first round, a later
round, a checkpoint's write, the final evaluation; two signals in a round, a round that hangs
after the signal, and the driver killed outright.

Each run is held at its phase by its environment (tests/range_envs.py: ``PauseAt`` holds a
rollout actor's step until released, ``SlowEvaluation`` makes the final evaluation last) or, for
a checkpoint's write, by tests/hold_checkpoint_write/sitecustomize.py, then signalled. Setup
stops at once, a round in progress finishes; the exit status is 128 + the signal, the last line
says how to continue, the checkpoint verifies, and no process the run started is left."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from drlcli.checkpoints.files import load_payload, read_checkpoint
from drlcli.config import load_config
from drlcli.metrics.csv_file import read_metrics

pytestmark = pytest.mark.subprocess

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "COLUMNS": "200",
    "RAY_ADDRESS": "",
    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
}
PAUSE = "tests.range_envs:drltest/PauseAt-v0"
SLOW_EVALUATION = "tests.range_envs:drltest/SlowEvaluation-v0"

ALGO_PARAMS = {
    "ppo": "{num_epochs: 1, num_minibatches: 2, hidden_sizes: [16, 16]}",
    "flash_sac": (
        "{batch_size: 16, warmup_steps: 20, actor_hidden_dim: 16, actor_num_blocks: 1, "
        "critic_hidden_dim: 16, critic_num_blocks: 1, num_bins: 11}"
    ),
    "sac": "{batch_size: 16, warmup_steps: 20, hidden_sizes: [16, 16]}",
}
ROLLOUT_LENGTH = {"ppo": 64, "flash_sac": 40, "sac": 40}


def write_config(
    folder: Path, algo: str, env: str, rounds: int, extra: str = "", params: str = ""
) -> Path:
    """A run of ``rounds`` rounds of one env in one rollout actor, evaluated once at its end;
    ``extra``: more top-level lines, ``params``: more ``algo_params`` entries."""
    path = folder / f"{algo}.yaml"
    algo_params = ALGO_PARAMS[algo] if not params else ALGO_PARAMS[algo][:-1] + f", {params}}}"
    path.write_text(
        f"algo: {algo}\n"
        f"env: {{{env}, num_envs: 1, seed: 2}}\n"
        f"total_env_steps: {rounds * ROLLOUT_LENGTH[algo]}\n"
        f"rollout_length: {ROLLOUT_LENGTH[algo]}\n"
        "evaluation: {episodes: 1}\n"
        f"output_dir: {folder / 'out'}\n"
        f"algo_params: {algo_params}\n"
        f"{extra}"
    )
    return path


def paused_at(step: int, markers: Path) -> str:
    return f"id: '{PAUSE}', kwargs: {{at_step: {step}, marker_dir: '{markers}'}}"


class Driver:
    """``drl train`` in a process group of its own (as a shell's job), and every process it
    started, seen while it runs."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "drlcli", "train", "--quiet", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**ENV, **(env or {})},
            start_new_session=True,
        )
        self.started: set[int] = set()

    def watch(self) -> None:
        """Note the processes the driver started so far (Ray's under its own head)."""
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        self.started |= {child.pid for child in children}

    def wait_until(self, condition, what: str, timeout: float = 120.0) -> None:
        """Poll ``condition`` every 50 ms and the process tree every 250 ms: a walk of the
        tree costs several ms of CPU, which the run under test needs more."""
        deadline = time.monotonic() + timeout
        for poll in itertools.count():
            if condition():
                break
            if poll % 5 == 0:
                self.watch()
            assert self.process.poll() is None, f"exited before {what}: " + self.stderr()
            assert time.monotonic() < deadline, f"never {what}"
            time.sleep(0.05)
        self.watch()

    def send(self, sent: signal.Signals, group: bool = True) -> None:
        """``sent`` to the driver's whole process group (a terminal's Ctrl-C, ``timeout(1)``,
        Slurm), or to the driver alone (``kill PID``)."""
        if group:
            os.killpg(self.process.pid, sent)
        else:
            self.process.send_signal(sent)

    def finish(self, timeout: float = 120.0) -> tuple[int, str, str]:
        try:
            stdout, stderr = self.process.communicate(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        return self.process.returncode, stdout, " ".join(stderr.split())

    def stderr(self) -> str:
        self.process.kill()
        return self.process.communicate()[1][-3000:]

    def leftovers(self, timeout: float = 30.0) -> set[int]:
        """The processes it started that are still alive (waits for them to go)."""
        deadline = time.monotonic() + timeout
        while True:
            alive = {pid for pid in self.started if _alive(pid)}
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def ray_head_started(driver: Driver) -> bool:
    driver.watch()
    for pid in driver.started:
        try:
            if "drlcli.runtime.ray_head" in " ".join(psutil.Process(pid).cmdline()):
                return True
        except psutil.NoSuchProcess:
            continue
    return False


@pytest.mark.parametrize(
    ("algo", "sent", "group"),
    [
        # No algorithm's code runs yet: one case per way the signal arrives.
        ("ppo", signal.SIGINT, True),
        ("sac", signal.SIGTERM, False),  # the driver alone
    ],
)
def test_a_signal_while_ray_starts_stops_at_once(tmp_path, algo, sent, group):
    path = write_config(tmp_path, algo, "id: InvertedPendulum-v5", rounds=3)
    driver = Driver(str(path))
    driver.wait_until(lambda: ray_head_started(driver), "started Ray")
    driver.send(sent, group)
    code, _, stderr = driver.finish()
    assert code == 128 + sent, stderr
    assert f"stopped by {sent.name} while starting; no checkpoint yet" in stderr
    assert "Traceback" not in stderr
    assert not load_config(path).checkpoint_path.exists()
    assert driver.leftovers() == set()


def test_a_signal_during_ppo_warm_up_stops_at_once(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    path = write_config(tmp_path, "ppo", paused_at(10, markers), rounds=3)  # warm-up: 64 steps
    driver = Driver(str(path))
    driver.wait_until(lambda: any(markers.glob("reached-*")), "held in the warm-up")
    driver.send(signal.SIGTERM)
    code, _, stderr = driver.finish()
    assert code == 143, stderr
    assert "stopped by SIGTERM during the observation warm-up; no checkpoint yet" in stderr
    assert "Traceback" not in stderr
    assert driver.leftovers() == set()


WARM_UP_STEPS = {"ppo": 64, "flash_sac": 0, "sac": 0}  # PPO's observation warm-up


@pytest.mark.parametrize(
    ("algo", "held_round", "sent", "group"),
    [
        # PPO's round loop and the off-policy one (FlashSAC and SAC share it), each in its
        # first round and a later one, each signal to the group and to the driver alone.
        ("ppo", 1, signal.SIGTERM, True),
        ("ppo", 2, signal.SIGINT, False),  # the driver alone
        ("flash_sac", 2, signal.SIGTERM, True),
        ("sac", 1, signal.SIGINT, False),
    ],
)
def test_a_signal_mid_round_finishes_the_round_then_stops(tmp_path, algo, held_round, sent, group):
    markers = tmp_path / "markers"
    markers.mkdir()
    length = ROLLOUT_LENGTH[algo]
    at_step = WARM_UP_STEPS[algo] + (held_round - 1) * length + length // 3
    path = write_config(tmp_path, algo, paused_at(at_step, markers), rounds=6)
    driver = Driver(str(path))
    driver.wait_until(lambda: any(markers.glob("reached-*")), f"held in round {held_round}")
    driver.send(sent, group)
    time.sleep(1.0)  # the signal is in before the round goes on
    (markers / "release").touch()
    assert_stopped_after_round(driver, path, sent, held_round)


def held_in_a_write(path: Path, markers: Path, **hold: str) -> Driver:
    """``drl train path`` whose round-2 checkpoint write (``hold``: or replay write) is held
    by tests/hold_checkpoint_write/sitecustomize.py until ``markers/release`` exists."""
    hook = str(Path(__file__).parent / "hold_checkpoint_write")
    return Driver(
        str(path),
        env={
            "PYTHONPATH": os.pathsep.join([hook, ENV["PYTHONPATH"]]),
            "DRL_TEST_HOLD_WRITE": str(markers),
            **hold,
        },
    )


@pytest.mark.parametrize(
    ("algo", "sent", "group"),
    [
        ("ppo", signal.SIGINT, True),
        ("flash_sac", signal.SIGINT, False),  # the driver alone
        ("sac", signal.SIGTERM, True),
    ],
)
def test_a_signal_while_a_checkpoint_is_written_finishes_the_round(tmp_path, algo, sent, group):
    """Held after round 2's checkpoint data is written, before it replaces round 1's
    (tests/hold_checkpoint_write/sitecustomize.py)."""
    markers = tmp_path / "markers"
    markers.mkdir()
    path = write_config(tmp_path, algo, "id: InvertedPendulum-v5", rounds=6)
    driver = held_in_a_write(path, markers)
    driver.wait_until((markers / "reached").exists, "held in round 2's checkpoint write")
    driver.send(sent, group)
    time.sleep(1.0)
    (markers / "release").touch()
    assert_stopped_after_round(driver, path, sent, 2)


def held_in_round_2(tmp_path: Path, algo: str, extra: str = "") -> tuple[Path, Path, Driver]:
    """A run of ``algo`` held in the middle of its round 2 (``PauseAt``): its config, the
    markers folder (``release`` lets the round go on) and its driver."""
    markers = tmp_path / "markers"
    markers.mkdir()
    length = ROLLOUT_LENGTH[algo]
    at_step = WARM_UP_STEPS[algo] + length + length // 3
    path = write_config(tmp_path, algo, paused_at(at_step, markers), rounds=6, extra=extra)
    driver = Driver(str(path))
    driver.wait_until(lambda: any(markers.glob("reached-*")), "held in round 2")
    return path, markers, driver


def assert_aborted_in_round_2(driver: Driver, path: Path, code: int, line: str) -> None:
    """The run ended with ``code`` and ``line`` (then the resume line); round 1's checkpoint
    is the last good one and verifies; its row is the only one; nothing is left running."""
    config = load_config(path)
    exit_code, _, stderr = driver.finish()
    assert exit_code == code, stderr
    assert (f"{line}; continue with: drl train {path} --resume {config.checkpoint_path}") in stderr
    assert "Traceback" not in stderr
    assert read_checkpoint(config.checkpoint_path).progress.round == 1  # verifies
    assert len(read_metrics(config.metrics_path)) == 1
    assert driver.leftovers() == set()


def test_a_second_signal_mid_round_aborts_the_round_at_once(tmp_path):
    """Two Ctrl-C a second apart in round 2 (a terminal's, to the whole group): the second
    aborts the round without waiting for it, and the message names it and the checkpoint."""
    path, _, driver = held_in_round_2(tmp_path, "ppo")
    driver.send(signal.SIGINT)
    time.sleep(1.0)
    driver.send(signal.SIGINT)
    config = load_config(path)
    line = (
        f"aborted by a second SIGINT during round 2; checkpoint {config.checkpoint_path}, "
        "of round 1"
    )
    assert_aborted_in_round_2(driver, path, 130, line)


def test_a_round_that_hangs_after_sigterm_is_abandoned_after_stop_grace_s(tmp_path):
    """One SIGTERM (all Slurm and Kubernetes send before SIGKILL) while a rollout actor's step
    never returns: after stop_grace_s the round is abandoned and the run ends, 143."""
    path, _, driver = held_in_round_2(tmp_path, "sac", extra="stop_grace_s: 2\n")
    sent = time.monotonic()
    driver.send(signal.SIGTERM)
    config = load_config(path)
    line = (
        "aborted: round 2 did not finish within stop_grace_s 2 s of SIGTERM; checkpoint "
        f"{config.checkpoint_path}, of round 1"
    )
    assert_aborted_in_round_2(driver, path, 143, line)
    assert time.monotonic() - sent < 60  # not PauseAt's 120 s


def test_a_driver_killed_outright_leaves_no_ray_process_and_no_replay_resumed_silently(tmp_path):
    """``kill -9`` of the driver while it saves round 2's replay buffer (held after the data is
    written, before it replaces round 1's): the local Ray head sees its pipe close and takes
    every Ray process with it; the checkpoint is round 2's, the replay file round 1's, and
    ``--resume-replay`` refuses the pair in one line, exit 2."""
    markers = tmp_path / "markers"
    markers.mkdir()
    path = write_config(
        tmp_path, "sac", "id: InvertedPendulum-v5", rounds=6, params="save_replay_buffer: true"
    )
    config = load_config(path)
    driver = held_in_a_write(path, markers, DRL_TEST_HOLD_REPLAY="1")
    driver.wait_until((markers / "reached").exists, "held in round 2's replay write")
    assert len(driver.started) > 3  # the head, Ray's own processes and the run's actors
    driver.send(signal.SIGKILL, group=False)
    driver.finish()
    assert driver.leftovers() == set()
    assert read_checkpoint(config.checkpoint_path).progress.round == 2

    resumed = subprocess.run(
        [sys.executable, "-m", "drlcli", "train", str(path), "--resume"]
        + [str(config.checkpoint_path), "--resume-replay"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert resumed.returncode == 2, resumed.stderr
    lines = resumed.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in resumed.stderr
    assert lines[0].startswith(
        f"error: {config.checkpoint_path.with_name('model_sac_replay.npz')}: this replay buffer "
        "was saved with round 1 (40 env steps), the checkpoint "
        f"{config.checkpoint_path} is of round 2 (80 env steps)"
    ), lines[0]


def assert_stopped_after_round(driver: Driver, path: Path, sent: signal.Signals, rounds: int):
    """The round in progress finished: its row and checkpoint are written and agree, the
    checkpoint verifies, one line says how to continue, and nothing is left running."""
    config = load_config(path)
    code, stdout, stderr = driver.finish()
    assert code == 128 + sent, stderr
    assert f"{sent.name}: stopping after this round" in stdout
    assert (
        f"stopped by {sent.name} after round {rounds}; checkpoint {config.checkpoint_path}; "
        f"continue with: drl train {path} --resume {config.checkpoint_path}"
    ) in stderr
    assert "Traceback" not in stderr
    assert read_checkpoint(config.checkpoint_path).progress.round == rounds  # verifies
    assert len(read_metrics(config.metrics_path)) == rounds
    assert driver.leftovers() == set()


@pytest.mark.parametrize(
    ("algo", "sent", "group", "resume"),
    [
        ("ppo", signal.SIGTERM, True, True),
        ("flash_sac", signal.SIGINT, True, True),
        # SAC's evaluations are hosted as FlashSAC's are (the off-policy round loop's): its
        # resume would repeat FlashSAC's.
        ("sac", signal.SIGTERM, False, False),  # the driver alone
    ],
)
def test_a_signal_in_the_final_evaluation_stops_and_resume_evaluates(
    tmp_path, algo, sent, group, resume
):
    """The final evaluation is interrupted at once; ``--resume`` of the fully trained
    checkpoint then runs that evaluation alone and records it."""
    env = f"id: '{SLOW_EVALUATION}', kwargs: {{reset_delay_s: 3.0}}"
    path = write_config(tmp_path, algo, env, rounds=2)
    config = load_config(path)

    def trained() -> bool:
        try:
            return load_payload(config.checkpoint_path)["progress"]["round"] == 2
        except Exception:  # not written yet, or being replaced
            return False

    driver = Driver(str(path))
    driver.wait_until(trained, "trained its rounds")
    time.sleep(0.5)
    driver.send(sent, group)
    code, _, stderr = driver.finish()
    assert code == 128 + sent, stderr
    assert (
        f"stopped by {sent.name} during the final evaluation, after round 2; checkpoint "
        f"{config.checkpoint_path}; continue with: drl train {path} --resume "
        f"{config.checkpoint_path}"
    ) in stderr
    assert read_checkpoint(config.checkpoint_path).evaluation is None
    assert driver.leftovers() == set()
    if not resume:
        return

    resumed = Driver(str(path), "--resume", str(config.checkpoint_path))
    code, stdout, stderr = resumed.finish(timeout=180)
    assert code == 0, stderr
    assert "final evaluation" in stdout
    finished = read_checkpoint(config.checkpoint_path)
    assert finished.progress.round == 2 and finished.evaluation is not None
    assert len(read_metrics(config.metrics_path)) == 2  # no round trained again


def test_an_address_where_no_cluster_answers_is_one_line(tmp_path):
    """A stale --address (or RAY_ADDRESS): one line at once, not a traceback after Ray's
    minutes of retries."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = write_config(tmp_path, "ppo", "id: InvertedPendulum-v5", rounds=1)
    result = subprocess.run(
        [sys.executable, "-m", "drlcli", "train", str(path), "--address", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith(f"error: no Ray cluster answers at '127.0.0.1:{port}' (")
    assert "start one (ray start --head) or give its address with --address" in lines[0]
