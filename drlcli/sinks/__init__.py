"""Metrics sinks beside the CSV, opened from a run's ``logging`` config section.

Each sink is an optional extra: a run whose config asks for one that is not installed is
refused before anything starts, with the command that installs it. A sink that fails while the
run goes on (an unwritable folder, a full disk) warns once and is left out
(``drlcli.sinks.dispatch.MetricsSinks``): the CSV stays the record of truth.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from drlcli.config import Config
from drlcli.errors import UsageError
from drlcli.sinks.dispatch import sink_warning

# sink -> (the module it needs, the extra that installs it, the config key / CLI option)
EXTRAS = {
    "tensorboard": ("tensorboard", "tensorboard", "--tensorboard DIR"),
    "wandb": ("wandb", "wandb", "--wandb PROJECT"),
    "mlflow": ("mlflow", "mlflow", "--mlflow URI"),
}


def require_extra(sink: str) -> None:
    """Refuse a sink whose package is not installed.

    Raises:
        UsageError: naming the extra to install.
    """
    module, extra, option = EXTRAS[sink]
    if importlib.util.find_spec(module) is None:
        raise UsageError(
            f"logging.{sink} ({option}) needs the {module} package, not installed here: "
            f"pip install 'drlcli[{extra}]'"
        )


def wanted_sinks(config: Config) -> list[str]:
    """The sinks a config's ``logging`` section turns on."""
    return [sink for sink in EXTRAS if getattr(config.logging, sink) is not None]


def check_sinks(config: Config) -> None:
    """Every sink the config turns on can be opened here (its package is installed).

    Raises:
        UsageError: naming the extra to install.
    """
    for sink in wanted_sinks(config):
        require_extra(sink)


def open_sinks(config: Config, warn: Callable[[str], None], resumed: bool = False) -> list[Any]:
    """The config's sinks, opened; one that fails to open warns (one line) and is left out.
    ``resumed``: the run resumes a checkpoint (an MLflow run continues its own)."""
    opened = []
    for sink in wanted_sinks(config):
        try:
            opened.append(_OPENERS[sink](config, resumed))
        except Exception as error:  # an optional sink never stops the run
            warn(sink_warning(sink, "failed to open", error))
    return opened


def _tensorboard(config: Config, resumed: bool) -> Any:
    from drlcli.sinks.tensorboard_sink import TensorBoardSink

    return TensorBoardSink.for_run(config)  # a resumed run's event files join the earlier ones


def _wandb(config: Config, resumed: bool) -> Any:
    from drlcli.sinks.wandb_sink import WandbSink

    return WandbSink(config, resumed)


def _mlflow(config: Config, resumed: bool) -> Any:
    from drlcli.sinks.mlflow_sink import MlflowSink

    return MlflowSink(config, resumed)


_OPENERS: dict[str, Callable[[Config, bool], Any]] = {
    "tensorboard": _tensorboard,
    "wandb": _wandb,
    "mlflow": _mlflow,
}
