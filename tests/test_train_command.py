"""`drl train` as a user runs it: a subprocess with its own local Ray. (Signals at each phase
of a run: tests/test_run_life.py.)"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from drlcli.checkpoints.files import read_checkpoint
from drlcli.config import load_config
from drlcli.metrics.csv_file import read_metrics
from drlcli.runtime.stop import Phase, StopRequest

pytestmark = pytest.mark.subprocess  # drl train as a user runs it: its own process (and Ray)


def ray_processes() -> set[int]:
    found = set()
    for process in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            command = " ".join(process.info["cmdline"] or [])
            name = process.info["name"] or ""
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if (
            name in ("raylet", "gcs_server")
            or command.startswith("ray::")
            or (
                "ray" in command
                and (
                    "default_worker.py" in command
                    or "dashboard" in command
                    or "log_monitor" in command
                    or "monitor.py" in command
                )
            )
        ):
            found.add(process.info["pid"])
    return found


def orphaned(pid: int, driver: int) -> bool:
    """A Ray process left behind by ``driver``: its parent is the (exited) driver or, once
    reparented, init. Ray processes of other live sessions (benchmarks running on the same
    machine) have a live parent and are not counted."""
    try:
        return psutil.Process(pid).ppid() in (1, driver)
    except psutil.NoSuchProcess:
        return False


def wait_for_no_new(before: set[int], driver: int, timeout: float = 20.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while True:
        leftover = {pid for pid in ray_processes() - before if orphaned(pid, driver)}
        if not leftover or time.monotonic() > deadline:
            return leftover
        time.sleep(0.5)


def drl(*args: str) -> list[str]:
    return [sys.executable, "-m", "drlcli", *args]


ENV = {**os.environ, "COLUMNS": "200", "RAY_ADDRESS": ""}


def test_a_signal_in_the_middle_of_an_import_still_gets_its_notice(tmp_path, monkeypatch):
    """The signal can land while the main thread is importing a module that printing needs
    (rich loads its emoji table on first use); the notice must not see it half-imported."""
    (tmp_path / "half_imported_by_drl_test.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"
        "for _ in range(10000):\n    pass\nVALUE = 'imported'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    printed = []

    class ImportingConsole:
        def print(self, text: str, style: str = "") -> None:
            import half_imported_by_drl_test

            printed.append((text, half_imported_by_drl_test.VALUE))

    try:
        with StopRequest(ImportingConsole(), grace_s=20.0) as stop:  # type: ignore[arg-type]
            stop.enter(Phase.ROUND, 1)
            import half_imported_by_drl_test  # noqa: F401
    finally:
        sys.modules.pop("half_imported_by_drl_test", None)
    assert stop.requested
    notice = (
        "SIGTERM: stopping after this round, within stop_grace_s 20 s (send it again to abort now)"
    )
    assert printed == [(notice, "imported")]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["train", "--resume", "missing.pt"], 1, "checkpoint not found"),
    ],
)
def test_bad_resume_path_is_one_line(tiny_config, args, code, message):
    path = tiny_config("bad")
    result = subprocess.run(
        drl(args[0], str(path), *args[1:]), capture_output=True, text=True, env=ENV, timeout=120
    )
    assert result.returncode == code
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def kill_session(session: int) -> None:
    """SIGKILL every process of ``session`` (a driver started with start_new_session=True and
    the Ray processes it started; a few of Ray's agents outlive a SIGKILLed driver)."""
    for process in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if os.getsid(process.info["pid"]) == session:
                process.kill()


def _row_count(path) -> int:
    """Rows in a metrics CSV being written (0 before it exists)."""
    try:
        return max(0, len(Path(path).read_text().splitlines()) - 1)
    except FileNotFoundError:
        return 0


def test_kill_9_at_random_moments_never_loses_a_checkpoint_or_a_metrics_row(tiny_config):
    """``kill -9`` of ``drl train`` (no handler runs) at random moments, several times, each
    time resuming from the latest checkpoint: both checkpoints always load, the env-step counter
    never goes back, and the final CSV has every round exactly once."""
    rounds, steps_per_round = 20, 128  # each trial below writes 1-3 rows before its kill
    path = tiny_config("killed", total=steps_per_round * rounds)
    config = load_config(path)
    rng = random.Random(20261130)
    resumed_from = [0]
    for trial in range(3):
        command = ["train", "--quiet", str(path)]
        if trial > 0:
            command += ["--resume", str(config.checkpoint_path)]
        process = subprocess.Popen(
            drl(*command),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=ENV,
            start_new_session=True,
        )
        try:
            # Counted in rounds, not seconds: however fast this machine trains, no trial reaches
            # the end of the run before its kill.
            target_rows = resumed_from[-1] + rng.randint(1, 3)
            written = config.checkpoint_path.stat().st_mtime_ns if trial > 0 else 0
            start = time.monotonic()
            while time.monotonic() - start < 120 and process.poll() is None:
                checkpoint = config.checkpoint_path
                wrote = checkpoint.exists() and checkpoint.stat().st_mtime_ns != written
                if wrote and _row_count(config.metrics_path) >= target_rows:
                    break  # this process has written a checkpoint and its rows
                time.sleep(0.002)
            assert process.poll() is None, process.stderr.read()
            time.sleep(rng.uniform(0.0, 0.05))  # somewhere in a round, a write, a Ray call
            process.kill()
            process.wait(timeout=30)
        finally:
            kill_session(process.pid)
            process.stderr.close()
        latest = read_checkpoint(config.checkpoint_path)  # loads, its content hash agrees
        assert read_checkpoint(config.best_checkpoint_path).progress.round <= latest.progress.round
        assert latest.progress.env_steps == latest.progress.round * steps_per_round
        resumed_from.append(latest.progress.round)
    assert resumed_from == sorted(resumed_from) and resumed_from[-1] < rounds
    assert resumed_from[-1] > 0  # the trials did train (and checkpoint) something

    # The last resume runs to the end (its own Ray, like the killed ones) and leaves no Ray
    # process behind.
    before = ray_processes()
    done = subprocess.Popen(
        drl("train", "--quiet", str(path), "--resume", str(config.checkpoint_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    stdout, stderr = done.communicate(timeout=240)
    assert done.returncode == 0, stderr[-3000:]
    assert f"round {rounds}/{rounds}" in stdout and "training finished" in stdout
    assert wait_for_no_new(before, done.pid) == set()
    assert read_checkpoint(config.checkpoint_path).progress.round == rounds
    rows = read_metrics(config.metrics_path)
    assert [int(row["round"]) for row in rows] == list(range(1, rounds + 1))
    assert [int(row["env_steps"]) for row in rows] == [
        steps_per_round * r for r in range(1, rounds + 1)
    ]
    # No temporary file of an interrupted write is left beside the outputs.
    assert sorted(p.name for p in config.checkpoint_path.parent.iterdir()) == sorted(
        [config.checkpoint_path.name, config.best_checkpoint_path.name, "metrics_killed.csv"]
    )
