"""What every node of a run needs: the config's runtime environment (code and files Ray ships
with the job) and a check, before the first round, that every node can import the policy
actor's builder and build the task, so that a node without them fails the run in one line
naming the node instead of a worker's traceback mid-run."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from drlcli.config import Config, EnvConfig, RuntimeEnvConfig
from drlcli.errors import ConfigError, error_line

NODE_CHECK_TIMEOUT_S = 300.0
"""How long the check waits for a node (its first use of a runtime environment installs it)."""


def check_runtime_env(runtime_env: RuntimeEnvConfig) -> None:
    """The local paths it names exist (before anything is uploaded).

    Raises:
        ConfigError: naming the key and the path.
    """
    if runtime_env.working_dir is not None and not Path(runtime_env.working_dir).is_dir():
        raise ConfigError(
            f"runtime_env.working_dir: {runtime_env.working_dir} is not a directory "
            f"(relative paths are read from {Path.cwd()})"
        )
    for index, module in enumerate(runtime_env.py_modules):
        path = Path(module)
        if not (path.is_dir() or (path.is_file() and path.suffix == ".whl")):
            raise ConfigError(
                f"runtime_env.py_modules[{index}]: {module} is neither a package directory nor "
                f"a .whl file (relative paths are read from {Path.cwd()})"
            )


def import_py_modules_here(runtime_env: RuntimeEnvConfig) -> None:
    """Let this process (the driver) import ``py_modules`` as Ray's workers will: a package
    directory by its name (its parent goes on ``sys.path``), a wheel from the file."""
    for module in runtime_env.py_modules:
        path = Path(module).resolve()
        entry = str(path if path.suffix == ".whl" else path.parent)
        if entry not in sys.path:
            sys.path.insert(0, entry)


def probe_node(builder: str, env_config: EnvConfig) -> str | None:
    """On one node, in a process of the run's runtime environment: import the builder's module,
    then build and close the task. Returns what failed, or None."""
    from drlcli.envs import make_task_env

    module = builder.split(":", 1)[0]
    try:
        importlib.import_module(module)
    except Exception as error:  # any failure to import is the node's problem to report
        return (
            f"cannot import {module!r}, the policy actor's builder module "
            f"({type(error).__name__}: {error}); ship it with runtime_env.py_modules or install "
            "it on every node"
        )
    xml_file = env_config.kwargs.get("xml_file")
    if isinstance(xml_file, str) and xml_file.startswith((".", "/", "~")):
        path = Path(xml_file).expanduser()
        if not os.access(path, os.R_OK):
            return (
                f"cannot read env.kwargs.xml_file {xml_file} (from {os.getcwd()}); ship it "
                "with runtime_env.working_dir and give its path relative to that directory "
                "(./...)"
            )
    try:
        make_task_env(env_config).close()
    except Exception as error:  # as above: the node cannot build the task
        return f"cannot build the task {env_config.id} ({error_line(error)})"
    return None


def check_every_node(config: Config, builder: str) -> int:
    """Run ``probe_node`` on every alive node with CPUs (where rollout actors, learners and the
    evaluator may run). Call inside the run's Ray session. Returns the number of nodes.

    Raises:
        ConfigError: ``node <address> (<id>): <what failed>``, for the first failing node.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [
        node
        for node in ray.nodes()
        if node.get("Alive") and float(node["Resources"].get("CPU", 0.0)) > 0
    ]
    probe = ray.remote(num_cpus=0, max_retries=0)(probe_node)
    pending: dict[Any, dict[str, Any]] = {}
    for node in nodes:
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        pending[probe.options(scheduling_strategy=strategy).remote(builder, config.env)] = node
    for ref, node in pending.items():
        where = f"node {node['NodeManagerAddress']} ({node['NodeID'][:12]})"
        try:
            problem = ray.get(ref, timeout=NODE_CHECK_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            problem = f"did not answer within {NODE_CHECK_TIMEOUT_S:g} s"
        except ray.exceptions.RayError as error:  # the runtime environment failed to set up
            lines = [line for line in str(error).splitlines() if line.strip()]
            problem = f"cannot start a process there ({lines[-1].strip() if lines else error})"
        if problem is not None:
            # The other probes are left to finish (they hold no CPU) or to go with the driver:
            # force-cancelling a probe whose reply is on its way crashes Ray 2.60's core worker
            # ("Tried to complete task that was not pending"), seen in CI.
            raise ConfigError(f"{where}: {problem}")
    return len(nodes)
