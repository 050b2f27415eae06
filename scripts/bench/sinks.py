"""Training throughput with each metrics sink on, against the same run with none.

    python scripts/bench/sinks.py configs/hopper_ppo.yaml --steps 100000 --repeats 7

Each repeat trains the config four times in turn (no sink, TensorBoard, W&B offline, MLflow
into a SQLite store; all in a temporary folder), with periodic evaluation off so that the runs
differ only by their sinks. The order rotates from one repeat to the next, so that a machine
whose speed drifts during a repeat does not always favour the same variant. Throughput is env
steps per second between the first and the last metrics row, from the rows' wall_time_s: the
whole run loop (rounds, checkpoints, every sink's write), without Ray's start and the first
round's warm-up. Prints each run, then the median of each and its ratio to the median without
sinks, and the median of the ratios paired within a repeat (each sink's run against the no-sink
run of the same repeat).

Then each sink's own cost, measured alone (--cost-rows rows, 2000 by default): the rows of the
last no-sink run, repeated at increasing env steps, written into the sink as the run loop
writes them, then the sink closed (its background writes drained; there is no checkpoint to
upload). The cost is the CPU time this process and its children (W&B's service)
spend on it, per row, against the no-sink runs' median wall time per row (one round): the
share of the machine a sink takes from training, without the noise of whole runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console

from drlcli.config import EvaluationConfig, LoggingConfig, MlflowConfig, WandbConfig, load_config
from drlcli.metrics.csv_file import read_metrics
from drlcli.runtime.training import train
from drlcli.sinks import open_sinks


def throughput(metrics_path: Path) -> tuple[float, float]:
    """Env steps per second and wall seconds per row (one round), from the first to the last
    row."""
    rows = read_metrics(metrics_path)
    steps = float(rows[-1]["env_steps"]) - float(rows[0]["env_steps"])
    seconds = float(rows[-1]["wall_time_s"]) - float(rows[0]["wall_time_s"])
    return steps / seconds, seconds / (len(rows) - 1)


def replayed_rows(metrics_path: Path, count: int) -> list[dict[str, Any]]:
    """``count`` rows as the run loop hands them to a sink (numbers, not CSV text): the run's
    rows over and over, env steps going on increasing."""
    rows = [
        {key: float(value) if value else "" for key, value in row.items()}
        for row in read_metrics(metrics_path)
    ]
    step = int(rows[-1]["env_steps"])
    replayed = []
    for index in range(count):
        row = dict(rows[index % len(rows)])
        row["env_steps"] = int(row["env_steps"]) + step * (index // len(rows))
        replayed.append(row)
    return replayed


def cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds of this process (all threads), of its children that ended and of those
    running (W&B's service) so far."""
    times = process.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # ended since the list was made
            total += sum(child.cpu_times()[:2])
    return total


def sink_cost(config: Any, rows: list[dict[str, Any]]) -> tuple[float, float]:
    """CPU seconds and wall seconds per row to write ``rows`` into the config's one sink and
    close it (opening it is left out: once per run)."""
    (sink,) = open_sinks(config, warn=print)
    process = psutil.Process()
    cpu, wall = cpu_seconds(process), time.perf_counter()
    for row in rows:
        sink.write(row)
    sink.close()
    return (cpu_seconds(process) - cpu) / len(rows), (time.perf_counter() - wall) / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cost-rows", type=int, default=2000)
    args = parser.parse_args()

    base = load_config(args.config)
    folder = Path(tempfile.mkdtemp(prefix="drl-bench-sinks-"))
    variants = {
        "none": LoggingConfig(),
        "tensorboard": LoggingConfig(tensorboard=str(folder / "tensorboard")),
        "wandb": LoggingConfig(wandb=WandbConfig(mode="offline", dir=str(folder))),
        "mlflow": LoggingConfig(
            mlflow=MlflowConfig(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
        ),
    }
    measured: dict[str, list[float]] = {name: [] for name in variants}
    round_seconds: list[float] = []
    names = list(variants)
    for repeat in range(args.repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            logging = variants[name]
            config = dataclasses.replace(
                base,
                name=f"{name}_{repeat}",
                total_env_steps=args.steps,
                evaluation=EvaluationConfig(interval_env_steps=None, episodes=1),
                logging=logging,
                output_dir=str(folder),
                metrics_path=str(folder / f"metrics_{name}_{repeat}.csv"),
            )
            train(config, quiet=True, console=Console(quiet=True))
            steps_per_second, seconds_per_round = throughput(Path(config.metrics_path))
            measured[name].append(steps_per_second)
            if name == "none":
                round_seconds.append(seconds_per_round)
                last_plain = Path(config.metrics_path)
            print(f"repeat {repeat}, {name}: {measured[name][-1]:.0f} env steps/s", flush=True)
    baseline = statistics.median(measured["none"])
    for name, values in measured.items():
        median = statistics.median(values)
        paired = statistics.median(
            value / none for value, none in zip(values, measured["none"], strict=True)
        )
        print(
            f"{name}: median {median:.0f} env steps/s over {len(values)} runs, "
            f"{median / baseline:.3f} of no sink; paired within a repeat: {paired:.3f}"
        )

    round_s = statistics.median(round_seconds)
    rows = replayed_rows(last_plain, args.cost_rows)
    print(f"each sink alone, {len(rows)} rows; a round without sinks: {round_s * 1000:.0f} ms")
    for name, logging in variants.items():
        if name == "none":
            continue
        config = dataclasses.replace(
            base,
            name=f"{name}_cost",
            logging=logging,
            output_dir=str(folder),
            metrics_path=str(folder / f"metrics_{name}_cost.csv"),
        )
        cpu, wall = sink_cost(config, rows)
        print(
            f"{name}: {cpu * 1000:.2f} ms CPU and {wall * 1000:.2f} ms wall per row, "
            f"{cpu / round_s:.2%} of a round"
        )


if __name__ == "__main__":
    main()
