"""The run's Ray session: a quiet local Ray of its own (``LocalRayHead``) or a cluster joined at
an address, with one line where none answers. The CPU shares of the run's processes are
``runtime/resources.py``'s, Ray's failures in drl's words ``runtime/ray_errors.py``'s."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any

from drlcli.errors import (
    ConfigError,
    TrainingError,
    UsageError,
    error_line,
)
from drlcli.runtime.ray_head import LocalRayHead
from drlcli.runtime.stop import HANG_TIMEOUT_FLOOR_S


@contextlib.contextmanager
def ray_session(
    address: str | None,
    num_cpus: int,
    runtime_env: dict[str, Any] | None = None,
    start_timeout_s: float = HANG_TIMEOUT_FLOOR_S,
) -> Iterator[None]:
    """Start a quiet local Ray (no dashboard, no usage stats) or join ``address``.

    A local Ray runs in a process of its own session (``LocalRayHead``: a terminal's Ctrl-C or
    a SIGTERM to the driver's process group reaches the driver, not Ray). A Ray already
    initialised by the caller (tests share one session) is used as it is and left running; a
    Ray started here is shut down on exit, on error and on Ctrl-C.

    Args:
        address: ``host:port`` or ``auto`` of a running cluster; None starts a local one.
        num_cpus: logical CPUs of a local Ray: enough for every rollout actor and learner.
        runtime_env: Ray's runtime environment of the job (code and files for every node).
        start_timeout_s: how long a local Ray may take to start.

    Raises:
        ConfigError: a runtime environment, with a Ray that the caller started.
        UsageError: no Ray cluster answers at ``address``.
    """
    import ray

    if ray.is_initialized():
        if runtime_env:
            raise ConfigError(
                "runtime_env: this process's Ray was started before drl's training; give the "
                "runtime environment to that ray.init(runtime_env=...) instead"
            )
        yield
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    options: dict[str, Any] = {
        "logging_level": logging.ERROR,
        "log_to_driver": False,
        "configure_logging": True,
    }
    if runtime_env:
        options["runtime_env"] = runtime_env
    with contextlib.ExitStack() as stack:
        if address:
            target = address
            options["include_dashboard"] = False
        else:
            head = LocalRayHead(num_cpus)
            stack.callback(head.close)
            target = head.address(start_timeout_s)
        with _own_sigterm_handler():
            _init(target, options, joining=bool(address))
        stack.callback(ray.shutdown)
        yield


@contextlib.contextmanager
def _own_sigterm_handler() -> Iterator[None]:
    """Keep this process's SIGTERM handler: ``ray.init`` replaces it with one that exits at
    once (a run's handler finishes the round in progress first)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _init(address: str, options: dict[str, Any], joining: bool) -> None:
    """``ray.init``; where no cluster answers at a joined ``address``, one line on why."""
    import ray

    try:
        if joining:
            _check_reachable(address)
        ray.init(address=address, **options)
    except OSError as error:  # ConnectionError, TimeoutError, an unknown host
        if not joining:
            raise TrainingError(f"the local Ray did not answer ({error_line(error)})") from None
        raise UsageError(
            f"no Ray cluster answers at {address!r} ({error_line(error)}); start one "
            "(ray start --head) or give its address with --address; without --address and "
            "RAY_ADDRESS, drl starts a Ray of its own on this machine"
        ) from None


def _check_reachable(address: str) -> None:
    """A ``host:port`` address must accept a connection: Ray itself retries a dead address for
    minutes before it gives up. (``auto`` and ``ray://`` addresses are Ray's to resolve.)

    Raises:
        ConnectionError: nothing listens there.
    """
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return
    with socket.create_connection((host, int(port)), timeout=10):
        pass
