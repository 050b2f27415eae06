"""A local Ray of a run's own, out of the terminal's reach.

A terminal's Ctrl-C, ``timeout(1)`` and ``kill -- -PGID`` signal every process of the
foreground process group. Ray's own processes started by ``ray.init`` in the driver belong to
that group: the GCS server and the raylet shut down on that SIGTERM (and ignore an inherited
SIG_IGN: they install their own handlers), so the round in progress could never finish. The
driver therefore starts Ray from this small process, in a session of its own (``LocalRayHead``):
the group's signal reaches only the driver, which finishes the round, writes its checkpoint and
then closes the head.

The head lives exactly as long as its standard input: it prints the address of the Ray it
started as one JSON line, then reads stdin until end-of-file and shuts Ray down. A driver that
exits, however it exits (``kill -9`` included), closes that pipe, so no Ray process outlives it.
It ignores SIGINT and SIGTERM: where they reach it anyway (Slurm signals every process of a job
step), the driver decides when Ray goes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Any

from drlcli.errors import TrainingError, error_line

HEAD_STOP_TIMEOUT_S = 30.0
"""How long the driver waits for the head to shut Ray down before it kills the head."""


class LocalRayHead:
    """The process that holds a run's local Ray (the module docstring says why).

    Args:
        num_cpus: logical CPUs of the local Ray.
    """

    def __init__(self, num_cpus: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "drlcli.runtime.ray_head", str(num_cpus)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def address(self, timeout_s: float) -> str:
        """The GCS address of the Ray the head started (waits for it, ``timeout_s`` at most).

        Raises:
            TrainingError: the head could not start Ray (its one-line reason), or did not say
                where within ``timeout_s`` (it is then stopped).
        """
        lines: queue.Queue[str | None] = queue.Queue()
        # A thread reads the pipe: a blocking read of it has no timeout of its own.
        threading.Thread(
            target=_read_lines, args=(self.process.stdout, lines), name="drl-ray-head", daemon=True
        ).start()
        answer = None
        try:
            while answer is None:
                line = lines.get(timeout=timeout_s)
                if line is None:  # the head exited
                    code = self.process.wait()
                    raise TrainingError(
                        f"the local Ray did not start (its process exited with {code})"
                    )
                if line.startswith("{"):  # Ray may print before the head's answer
                    answer = json.loads(line)
        except queue.Empty:
            self.process.kill()
            raise TrainingError(
                f"the local Ray did not start within {timeout_s:g} s (hang_timeout_s); "
                "`drl doctor` checks this machine"
            ) from None
        if "error" in answer:
            raise TrainingError(f"the local Ray did not start: {answer['error']}")
        return str(answer["address"])

    def close(self) -> None:
        """Shut the head's Ray down and wait for it (kill it past ``HEAD_STOP_TIMEOUT_S``)."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(OSError):  # the head is gone already: a broken pipe
                self.process.stdin.close()
        try:
            self.process.wait(timeout=HEAD_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _read_lines(stream: Any, lines: queue.Queue[str | None]) -> None:
    """Every line of ``stream``, then None at its end (the head's output, for ``address``)."""
    with contextlib.suppress(ValueError, OSError):  # closed by ``close`` meanwhile
        for line in stream:
            lines.put(line)
    lines.put(None)


def _serve(num_cpus: int) -> int:
    """The head's side: start Ray, say where, hold it until stdin ends."""
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        import ray

        info: Any = ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            logging_level=logging.ERROR,
            log_to_driver=False,
            configure_logging=True,
        )
    except Exception as error:  # any failure to start Ray is the driver's one line
        print(json.dumps({"error": error_line(error)}), flush=True)
        return 1
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ray.init installs its own handler
    print(json.dumps({"address": info.address_info["gcs_address"]}), flush=True)
    try:
        sys.stdin.read()  # until the driver closes the pipe, or exits
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(_serve(int(sys.argv[1])))
