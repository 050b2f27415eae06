"""An off-policy learner's torch threads and OpenMP's wait policy, measured in whole runs.

    python scripts/bench/learner_threads.py configs/inverted_pendulum_sac.yaml --repeats 3

Each variant trains the config with ``drl train``'s code path (a local Ray of its own, as
``drl train`` starts it) for --steps env steps, warm-up one batch, no evaluation, and reads the
learner's ``updates_per_second`` of the rounds after the first (the updates' own pace, beside
the env stepper and the driver) and the run's env steps per second. Variants:

- ``all cores``: ``learner_threads`` = this machine's cores (drl's default before
  ``learner_threads``), OpenMP's default (spinning) waits: the baseline;
- ``all cores, passive``: the same with ``OMP_WAIT_POLICY=PASSIVE`` in every process;
- ``1 thread`` and ``1 thread, passive``;
- ``auto``: ``learner_threads: null`` (the cores left by the run's other CPU processes),
  ``auto, passive``.

The order of the variants rotates per repeat; figures are medians over --repeats, with each
variant's ratio to the baseline of the same repeat (median of those ratios).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.pop("OMP_WAIT_POLICY", None)  # each variant sets it (its processes inherit it)

from rich.console import Console  # noqa: E402

from drlcli.config import load_config  # noqa: E402
from drlcli.metrics.csv_file import read_metrics

# noqa: E402
from drlcli.runtime.training import train  # noqa: E402
from drlcli.topology import AvailableDevices  # noqa: E402

CORES = os.cpu_count() or 1
VARIANTS = {  # name: (learner_threads, OMP_WAIT_POLICY)
    "all cores": (CORES, None),
    "all cores, passive": (CORES, "PASSIVE"),
    "1 thread": (1, None),
    "1 thread, passive": (1, "PASSIVE"),
    "auto": (None, None),
    "auto, passive": (None, "PASSIVE"),
}


def run_variant(config_path: Path, steps: int, threads: int | None, wait: str | None) -> tuple:
    """(updates per second after round 1, env steps per second) of one run."""
    config = load_config(config_path)
    with tempfile.TemporaryDirectory() as folder:
        params = dataclasses.replace(config.algo_params, warmup_steps=config.algo_params.batch_size)
        config = dataclasses.replace(
            config,
            algo_params=params,
            total_env_steps=steps,
            learner_threads=threads,
            evaluation=dataclasses.replace(config.evaluation, interval_env_steps=None),
            output_dir=folder,
            metrics_path=str(Path(folder) / "metrics.csv"),
        )
        if wait is None:
            os.environ.pop("OMP_WAIT_POLICY", None)
        else:
            os.environ["OMP_WAIT_POLICY"] = wait
        try:
            summary = train(
                config,
                quiet=True,
                devices=AvailableDevices(cuda_devices=0, mps=False),
                console=Console(file=io.StringIO()),
            )
        finally:
            os.environ.pop("OMP_WAIT_POLICY", None)
        rows = read_metrics(config.metrics_path)[1:]
        updates = statistics.median(float(row["updates_per_second"]) for row in rows)
        return updates, summary.env_steps / summary.wall_time_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    names = list(VARIANTS)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            results[name].append(run_variant(args.config, args.steps, *VARIANTS[name]))
            updates, sps = results[name][-1]
            print(f"repeat {repeat + 1} {name}: {updates:.1f} updates/s, {sps:.0f} env steps/s")
    baseline = results["all cores"]
    print(f"\n{args.config} on {CORES} cores, {args.steps} env steps, medians of {args.repeats}:")
    print("| variant | updates/s | ratio | env steps/s | ratio |")
    print("|---|---|---|---|---|")
    for name in names:
        runs = results[name]
        update_ratio = statistics.median(r[0] / b[0] for r, b in zip(runs, baseline, strict=True))
        sps_ratio = statistics.median(r[1] / b[1] for r, b in zip(runs, baseline, strict=True))
        print(
            f"| {name} | {statistics.median(r[0] for r in runs):.1f} | {update_ratio:.2f} | "
            f"{statistics.median(r[1] for r in runs):.0f} | {sps_ratio:.2f} |"
        )


if __name__ == "__main__":
    main()
