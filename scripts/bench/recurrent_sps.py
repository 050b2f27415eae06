"""Training throughput of a recurrent PPO policy against the MLP one, on the same task, in one
run; Stable-Baselines3's PPO and SB3-contrib's RecurrentPPO beside them.

    python scripts/bench/recurrent_sps.py                       # drl only
    PYTHONPATH=/path/to/sb3 python scripts/bench/recurrent_sps.py --sb3 --repeats 3

The task is the position-only InvertedPendulum-v5 (the policy and critic read ``'0:2'``, no
velocities); both drl runs use the quickstart's settings (4 envs, 512 steps per round, 10
epochs, 32 minibatches, 64x64 tanh heads), the recurrent one ``recurrent: {cell, size: 64,
sequence_length: 32}``. drl's figure is the steady rate: env steps per second from the end of
the first round to the end of the last (evaluation off; metrics and checkpoint writes between
rounds count). SB3's is timed the same way by a callback, from the end of its first rollout and
update to the end of the last, with the same settings (``n_envs`` 4, ``n_steps`` 512,
``batch_size`` making the same number of minibatches, VecNormalize of observations and
rewards; RecurrentPPO's ``MlpLstmPolicy`` with an LSTM of 64 for the actor and one for the
critic). Prints every repeat and the medians of
the rates and of each ratio (``recurrent / MLP`` of the same library, measured in the same
repeat).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console

from drlcli.config import config_from_dict
from drlcli.metrics.csv_file import read_metrics
from drlcli.runtime.training import train

POSITIONS = ["0:2"]


def drl_config(folder: Path, name: str, cell: str | None, steps: int, seed: int, minibatches: int):
    algo_params = {"num_epochs": 10, "num_minibatches": minibatches, "hidden_sizes": [64, 64]}
    if cell is not None:
        algo_params["recurrent"] = {"cell": cell, "size": 64, "sequence_length": 32}
    return config_from_dict(
        {
            "name": name,
            "algo": "ppo",
            "env": {
                "id": "InvertedPendulum-v5",
                "num_envs": 4,
                "seed": seed,
                "observation_groups": {"policy": POSITIONS, "critic": POSITIONS},
            },
            "num_actors": 1,
            "num_gpus": 1,
            "total_env_steps": steps,
            "rollout_length": 512,
            "evaluation": {"interval_env_steps": None, "episodes": 1},
            "output_dir": str(folder),
            "algo_params": algo_params,
        }
    )


def drl_steady_sps(config) -> float:
    train(config, quiet=True, console=Console(quiet=True))
    rows = read_metrics(config.metrics_path)
    steps = float(rows[-1]["env_steps"]) - float(rows[0]["env_steps"])
    return steps / (float(rows[-1]["wall_time_s"]) - float(rows[0]["wall_time_s"]))


def sb3_steady_sps(recurrent: bool, steps: int, seed: int, minibatches: int) -> float:
    """SB3's PPO or SB3-contrib's RecurrentPPO on the same position-only task."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    class Positions(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)

        def observation(self, observation):
            return observation[:2]

    class Clock(BaseCallback):
        """Time and env steps at the end of each rollout's update (the start of the next)."""

        def __init__(self):
            super().__init__()
            self.marks: list[tuple[float, int]] = []

        def _on_rollout_start(self) -> None:
            self.marks.append((time.perf_counter(), self.num_timesteps))

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            self.marks.append((time.perf_counter(), self.num_timesteps))

    env = VecNormalize(
        DummyVecEnv([lambda: Positions(gym.make("InvertedPendulum-v5")) for _ in range(4)])
    )
    settings = dict(
        n_steps=512, batch_size=4 * 512 // minibatches, n_epochs=10, learning_rate=3e-4, seed=seed
    )
    if recurrent:
        from sb3_contrib import RecurrentPPO

        model = RecurrentPPO(
            "MlpLstmPolicy", env, policy_kwargs={"lstm_hidden_size": 64}, **settings
        )
    else:
        from stable_baselines3 import PPO

        model = PPO("MlpPolicy", env, **settings)
    clock = Clock()
    model.learn(steps, callback=clock)
    (first_time, first_steps), (last_time, last_steps) = clock.marks[1], clock.marks[-1]
    return (last_steps - first_steps) / (last_time - first_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30720, help="drl env steps per run")
    parser.add_argument("--sb3-steps", type=int, default=6144, help="SB3 env steps per run")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cell", choices=["lstm", "gru"], default="lstm")
    parser.add_argument(
        "--num-minibatches",
        type=int,
        default=32,
        help="both drl runs' (32: the quickstart's; the recurrent presets train with 4)",
    )
    parser.add_argument("--sb3", action="store_true", help="also SB3's PPO and RecurrentPPO")
    args = parser.parse_args()
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            row = {
                "drl MLP": drl_steady_sps(
                    drl_config(
                        Path(folder), f"mlp{repeat}", None, args.steps, repeat, args.num_minibatches
                    )
                ),
                f"drl {args.cell.upper()}": drl_steady_sps(
                    drl_config(
                        Path(folder),
                        f"rnn{repeat}",
                        args.cell,
                        args.steps,
                        repeat,
                        args.num_minibatches,
                    )
                ),
            }
            if args.sb3:
                for key, recurrent in (("SB3 PPO", False), ("SB3-contrib RecurrentPPO", True)):
                    row[key] = sb3_steady_sps(
                        recurrent, args.sb3_steps, repeat, args.num_minibatches
                    )
            row["drl ratio"] = row[f"drl {args.cell.upper()}"] / row["drl MLP"]
            if args.sb3:
                row["SB3 ratio"] = row["SB3-contrib RecurrentPPO"] / row["SB3 PPO"]
            print(f"repeat {repeat}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()))
            for key, value in row.items():
                rates.setdefault(key, []).append(value)
    print(f"median of {args.repeats}:")
    for key, values in rates.items():
        unit = "" if key.endswith("ratio") else " env steps/s"
        print(f"  {key}: {statistics.median(values):.3g}{unit}")


if __name__ == "__main__":
    main()
