"""FlashSAC with 1 and 2 data-parallel CPU learners: updates per second, the all-reduce's cost
per update, and env steps per second of a short training.

    python scripts/bench/flash_sac_learners.py configs/hopper_flash_sac_cpu.yaml --repeats 3

1. Updates alone: each learner in its own Ray process with one torch thread, on random
   transitions of the config's sizes. The baseline is one learner making --updates updates with
   nothing else in its timed loop; then two learners joined in a gloo group make them together
   (each update all-reduces gradients and BatchNorm statistics). The cost of the all-reduce per
   update is the difference of the two times per update.
2. Training: ``drl train``'s code path on the config with --steps env steps (warm-up shortened to
   one batch so that most of the run updates), once with one learner and once with two
   (``learners_on_cpu``; the config's rollout actors split between them). Env steps per second
   include the updates and Ray's start-up of the actors, not Ray's own start.

Medians over --repeats. On a machine with fewer cores than processes, the two-learner figures
include the learners' competition for cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MUJOCO_GL", "egl")

import torch  # noqa: E402
from flash_sac_updates import random_learner  # noqa: E402  (this folder: Ray passes it on)

from drlcli.config import Config, load_config  # noqa: E402
from drlcli.runtime.off_policy_workers import DataParallelMember, form_data_parallel_group  # noqa: E402


class TimedLearner(DataParallelMember):
    """One FlashSAC learner in a Ray process, timing its updates on random transitions."""

    def __init__(self, config: Config, learners: int, seed: int) -> None:
        torch.set_num_threads(1)
        # The same networks everywhere, as the round loop starts them; each its own transitions.
        self.off_policy_learner, self.replay = random_learner(config, 1_000_000, learners, seed)
        self.batch_size = config.algo_params.batch_size

    def time_updates(self, updates: int) -> float:
        """Seconds for ``updates`` updates (after 4 untimed ones)."""
        learner = self.off_policy_learner
        batches = [
            self.replay.sample(self.batch_size, 1.0, learner.device) for _ in range(updates + 4)
        ]
        for batch in batches[:4]:
            learner.update(batch)
        started = time.perf_counter()
        for batch in batches[4:]:
            learner.update(batch)
        return time.perf_counter() - started


def time_updates(config: Config, learners: int, updates: int) -> float:
    """Seconds per update, the slowest learner's."""
    import ray

    remote = ray.remote(TimedLearner).options(num_cpus=0)
    workers = [remote.remote(config, learners, seed) for seed in range(learners)]
    try:
        if learners > 1:
            form_data_parallel_group(workers)
        seconds = ray.get([worker.time_updates.remote(updates) for worker in workers])
    finally:
        for worker in workers:
            ray.kill(worker)
    return max(seconds) / updates


def train_rates(config: Config, learners: int, steps: int) -> tuple[float, float]:
    """(env steps per second, updates per second per learner) of a short training."""
    from rich.console import Console

    from drlcli.metrics.csv_file import read_metrics
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    params = dataclasses.replace(
        config.algo_params, warmup_steps=config.algo_params.batch_size, save_replay_buffer=False
    )
    actors = max(config.num_actors, learners)
    with tempfile.TemporaryDirectory() as output:
        run = dataclasses.replace(
            config,
            name=f"bench_{learners}",
            algo_params=params,
            total_env_steps=steps,
            output_dir=output,
            metrics_path=str(Path(output) / "metrics.csv"),
            num_actors=actors,
            num_gpus=learners,
            actors_per_gpu=actors // learners if learners > 1 else None,
            learners_on_cpu=learners > 1,
            evaluation=dataclasses.replace(config.evaluation, interval_env_steps=None, episodes=1),
        )
        started = time.perf_counter()
        summary = train(
            run,
            quiet=True,
            devices=AvailableDevices(cuda_devices=0, mps=False),
            console=Console(file=io.StringIO()),
        )
        seconds = time.perf_counter() - started
        rows = read_metrics(run.metrics_path)
    rates = [float(row["updates_per_second"]) for row in rows if float(row["updates"]) > 0]
    return summary.env_steps / seconds, statistics.median(rates) if rates else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--updates", type=int, default=200, help="timed updates per repeat")
    parser.add_argument("--steps", type=int, default=20_000, help="env steps of each training")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import ray

    config = load_config(args.config)
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        one, two = [], []
        for _ in range(args.repeats):  # alternating, so that a slow spell hits both
            one.append(time_updates(config, 1, args.updates))
            two.append(time_updates(config, 2, args.updates))
        per_update_one, per_update_two = statistics.median(one), statistics.median(two)
        batch = config.algo_params.batch_size
        print(f"{args.config.name}: updates alone, one torch thread per learner")
        print(
            f"  1 learner : {1 / per_update_one:7.1f} updates/s, "
            f"{batch / per_update_one:9.0f} samples/s"
        )
        print(
            f"  2 learners: {1 / per_update_two:7.1f} updates/s each, "
            f"{2 * batch / per_update_two:9.0f} samples/s together"
        )
        print(
            f"  all-reduce cost per update: {1000 * (per_update_two - per_update_one):.2f} ms "
            f"(ratio of update rates 2/1: {per_update_one / per_update_two:.2f})"
        )
        print(f"training, {args.steps} env steps (Ray already started):")
        for learners in (1, 2):
            rates = [train_rates(config, learners, args.steps) for _ in range(args.repeats)]
            steps_per_second = statistics.median(rate for rate, _ in rates)
            updates_per_second = statistics.median(ups for _, ups in rates)
            print(
                f"  {learners} learner(s): {steps_per_second:7.0f} env steps/s, "
                f"{updates_per_second:6.1f} updates/s per learner"
            )
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
