"""Training throughput with each metrics sink on, against the same run with none.

    python scripts/bench/sinks.py configs/hopper_ppo.yaml --steps 100000 --repeats 3

Each repeat trains the config four times in turn (no sink, TensorBoard, W&B offline, MLflow
into a SQLite store; all in a temporary folder), with periodic evaluation off so that the runs
differ only by their sinks. Throughput is env steps per second between the first and the last
metrics row, from the rows' wall_time_s: the whole run loop (rounds, checkpoints, every sink's
write), without Ray's start and the first round's warm-up. Prints each run, then the median
of each and its ratio to the median without sinks.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from pathlib import Path

from rich.console import Console

from drlcli.config import EvaluationConfig, LoggingConfig, MlflowConfig, WandbConfig, load_config
from drlcli.metrics import read_metrics
from drlcli.runtime.training import train


def throughput(metrics_path: Path) -> float:
    """Env steps per second from the first to the last row."""
    rows = read_metrics(metrics_path)
    steps = float(rows[-1]["env_steps"]) - float(rows[0]["env_steps"])
    return steps / (float(rows[-1]["wall_time_s"]) - float(rows[0]["wall_time_s"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
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
    for repeat in range(args.repeats):
        for name, logging in variants.items():
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
            measured[name].append(throughput(Path(config.metrics_path)))
            print(f"repeat {repeat}, {name}: {measured[name][-1]:.0f} env steps/s", flush=True)
    baseline = statistics.median(measured["none"])
    for name, values in measured.items():
        median = statistics.median(values)
        print(
            f"{name}: median {median:.0f} env steps/s over {len(values)} runs, "
            f"{median / baseline:.3f} of no sink"
        )


if __name__ == "__main__":
    main()
