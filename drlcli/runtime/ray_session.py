"""Starting and stopping Ray quietly, as the embedded default or on a cluster."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator


@contextlib.contextmanager
def ray_session(address: str | None, num_cpus: int) -> Iterator[None]:
    """Start a quiet local Ray (no dashboard, no usage stats) or join ``address``.

    A Ray already initialised by the caller (tests share one session) is used as it is and left
    running; a Ray started here is shut down on exit, on error and on Ctrl-C.

    Args:
        address: ``host:port`` or ``auto`` of a running cluster; None starts a local one.
        num_cpus: logical CPUs of a local Ray: enough for every rollout actor and learner.
    """
    import ray

    if ray.is_initialized():
        yield
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    options = {
        "include_dashboard": False,
        "logging_level": logging.ERROR,
        "log_to_driver": False,
        "configure_logging": True,
    }
    if address:
        ray.init(address=address, **options)
    else:
        ray.init(num_cpus=num_cpus, **options)
    try:
        yield
    finally:
        ray.shutdown()
