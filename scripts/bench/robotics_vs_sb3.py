"""drl's PPO against Stable-Baselines3's on the robotics packages' tasks, with equal settings and
budget, and a privileged critic beside a symmetric one (docs/results.md, "Against
Stable-Baselines3 on the robotics packages").

    python scripts/bench/robotics_vs_sb3.py walker-walk --seeds 0 1 2 --steps 300000
    python scripts/bench/robotics_vs_sb3.py walker-walk --privileged --seeds 0 1 2

Run it in a robotics set's environment with Stable-Baselines3 added (``make test-robotics``
builds them; then ``.venv-robotics-dmc/bin/pip install -c constraints-robotics-dmc.txt
stable-baselines3``). Both sides: PPO with SB3's defaults (one environment, 2048 steps per
update, 10 epochs of minibatches of 64, Adam 3e-4 without annealing, clip 0.2, GAE 0.95,
gamma 0.99, no entropy bonus, gradient norm 0.5, separate 64x64 tanh policy and value networks,
log-std 0), and the same weight of the value loss: SB3's ``vf_coef * MSE`` with its 0.5 is drl's
``vf_coef * 0.5 * MSE`` (CleanRL's form) with 1.0, observations and rewards standardised by running
statistics clipped at 10 (SB3's ``VecNormalize``); a Dict observation flattened in sorted key
order on both sides. Each run is then evaluated on the same number of deterministic episodes
(its own seeds), with the task's success where it reports one. ``--privileged`` trains drl twice
instead: a policy that reads part of the observation, with a critic that reads the same part
(symmetric) or everything (privileged).

Prints one line per run and, per side, the median over seeds; ``--json FILE`` appends each run;
``--sides drl`` (or ``sb3``) trains one side only.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# name: (env id as drl takes it, gymnasium.make kwargs, module play must be allowed, when an
# episode succeeded (drl's env.success_when; None: the task reports no success), the policy's
# part for --privileged (YAML list), the critic's)
TASKS: dict[str, tuple[str, dict[str, Any], str, str | None, str, str]] = {
    "walker-walk": (
        "shimmy:dm_control/walker-walk-v0",
        {},
        "shimmy",
        None,
        "[height, orientations]",  # no joint velocities: a robot without their sensors
        "[height, orientations, velocity]",
    ),
    "cartpole-swingup": (
        "shimmy:dm_control/cartpole-swingup-v0",
        {},
        "shimmy",
        None,
        "[position]",
        "[position, velocity]",
    ),
    "FetchReachDense": (
        "gymnasium_robotics:FetchReachDense-v4",
        {},
        "gymnasium_robotics",
        "final_step",
        "[desired_goal, observation]",
        "[achieved_goal, desired_goal, observation]",
    ),
    "reach-v3": (
        "metaworld:Meta-World/MT1",
        {"env_name": "reach-v3"},
        "metaworld",
        "any_step",
        "['0:18', '36:39']",
        "['0:39']",
    ),
}
ROLLOUT, MINIBATCH, EPOCHS, LEARNING_RATE = 2048, 64, 10, 3e-4
SB3_VF_COEF = 0.5  # SB3's default, on the mean squared error
DRL_VF_COEF = 2 * SB3_VF_COEF  # drl's value loss is half the mean squared error


def drl_config(task: str, seed: int, steps: int, episodes: int, output: Path, keys: str) -> str:
    env_id, kwargs, _, success_when, _, _ = TASKS[task]
    success = f", success_when: {success_when}" if success_when else ""
    return (
        f"name: {task}_{seed}\nalgo: ppo\n"
        f"env: {{id: '{env_id}', num_envs: 1, seed: {seed}, kwargs: {json.dumps(kwargs)}"
        f"{success}{keys}}}\n"
        f"total_env_steps: {steps}\nrollout_length: {ROLLOUT}\n"
        f"evaluation: {{episodes: {episodes}}}\noutput_dir: {output}\n"
        f"algo_params: {{learning_rate: {LEARNING_RATE}, anneal_learning_rate: false, "
        f"num_epochs: {EPOCHS}, num_minibatches: {ROLLOUT // MINIBATCH}, hidden_sizes: [64, 64], "
        f"activation: tanh, ent_coef: 0.0, vf_coef: {DRL_VF_COEF}, max_grad_norm: 0.5, "
        "clip_coef: 0.2, "
        "normalize_observations: true, normalize_rewards: true}\n"
    )


def run_drl(
    task: str, seed: int, steps: int, episodes: int, folder: Path, label: str, keys: str = ""
) -> dict:
    """A ``drl train`` run (``keys``: what the env entry adds); its final deterministic
    evaluation and training time."""
    from drlcli.checkpoints.files import read_checkpoint

    output = folder / f"{label}_{task}_{seed}"
    config = output.with_suffix(".yaml")
    output.mkdir(parents=True, exist_ok=True)
    config.write_text(drl_config(task, seed, steps, episodes, output, keys))
    command = [sys.executable, "-m", "drlcli", "train", str(config), "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"drl train failed: {(done.stdout + done.stderr)[-800:]}")
    evaluation = read_checkpoint(output / f"model_{task}_{seed}.pt").evaluation
    with open(output / f"metrics_{task}_{seed}.csv", newline="") as file:
        wall = float(list(csv.DictReader(file))[-1]["wall_time_s"])
    return {
        "return": evaluation["return_mean"],
        "success_rate": evaluation.get("success_rate"),
        "train_s": wall,
    }


def run_sb3(task: str, seed: int, steps: int, episodes: int) -> dict:
    """SB3's PPO with its defaults on the same task; the same evaluation."""
    import gymnasium
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    env_id, kwargs, _, success_when, _, _ = TASKS[task]

    def make() -> Any:
        env = gymnasium.make(env_id, **kwargs)
        if isinstance(env.observation_space, gymnasium.spaces.Dict):
            env = gymnasium.wrappers.FlattenObservation(env)  # sorted keys, as drl's default
        return env

    torch.set_num_threads(1)
    venv = VecNormalize(DummyVecEnv([make]), norm_obs=True, norm_reward=True, clip_obs=10.0)
    venv.seed(seed)
    model = PPO(
        "MlpPolicy",
        venv,
        learning_rate=LEARNING_RATE,
        n_steps=ROLLOUT,
        batch_size=MINIBATCH,
        n_epochs=EPOCHS,
        vf_coef=SB3_VF_COEF,
        seed=seed,
        device="cpu",
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}},
    )
    started = time.perf_counter()
    model.learn(steps)
    train_s = time.perf_counter() - started
    venv.training, venv.norm_reward = False, False
    env = make()
    returns, successes = [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + 100_000 + episode)
        done, total, succeeded, info = False, 0.0, False, {}
        while not done:
            action, _ = model.predict(venv.normalize_obs(obs[None]), deterministic=True)
            obs, reward, terminated, truncated, info = env.step(action[0])
            total += float(reward)
            succeeded |= bool(info.get("success", info.get("is_success", 0)))
            done = terminated or truncated
        returns.append(total)
        if success_when is not None:
            final = bool(info.get("success", info.get("is_success", 0)))
            successes.append(final if success_when == "final_step" else succeeded)
    env.close()
    return {
        "return": float(np.mean(returns)),
        "success_rate": float(np.mean(successes)) if successes else None,
        "train_s": train_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument(
        "--summarize",
        type=Path,
        metavar="JSONL",
        help="train nothing: summarise the task's runs in this --json file (latest per side "
        "and seed)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--folder", type=Path, default=Path("output/robotics_vs_sb3"))
    parser.add_argument("--privileged", action="store_true", help="symmetric vs privileged")
    parser.add_argument("--sides", nargs="+", choices=["drl", "sb3"], default=["drl", "sb3"])
    parser.add_argument("--json", type=Path, help="append each run's result to this file")
    args = parser.parse_args()
    if args.summarize is not None:
        latest: dict[tuple[str, int], dict] = {}
        for line in args.summarize.read_text().splitlines():
            run = json.loads(line)
            if run["task"] == args.task:
                latest[(run["side"], run["seed"])] = run
        by_side: dict[str, list[dict]] = {}
        for (side, _), run in sorted(latest.items()):
            by_side.setdefault(side, []).append(run)
        summarize(by_side)
        return 0
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    _, _, _, _, policy, critic = TASKS[args.task]
    common = (args.task, args.steps, args.episodes)

    def drl(label: str, keys: str = "") -> Any:
        return lambda seed: run_drl(args.task, seed, *common[1:], args.folder, label, keys)

    sides = (
        {
            "symmetric": drl("symmetric", f", observation_keys: {policy}"),
            "privileged": drl(
                "privileged", f", observation_groups: {{policy: {policy}, critic: {critic}}}"
            ),
        }
        if args.privileged
        else {
            side: run
            for side, run in (
                ("drl", drl("drl")),
                ("sb3", lambda seed: run_sb3(args.task, seed, *common[1:])),
            )
            if side in args.sides
        }
    )
    results: dict[str, list[dict]] = {side: [] for side in sides}
    for seed in args.seeds:
        for side, run in sides.items():
            result = {"task": args.task, "side": side, "seed": seed, "steps": args.steps}
            result |= run(seed)
            results[side].append(result)
            print(json.dumps(result), flush=True)
            if args.json is not None:
                with open(args.json, "a") as file:
                    file.write(json.dumps(result) + "\n")
    summarize(results)
    return 0


def summarize(results: dict[str, list[dict]]) -> None:
    """Per side: the median, the IQM with its 95% bootstrap interval (from 2 seeds), the
    median success and training time; then the chance a seed of the first side beats one of
    the second (drlcli.seed_statistics)."""
    from drlcli.seed_statistics import (
        bootstrap_interval,
        figure,
        improvement_interval,
        interquartile_mean,
        probability_of_improvement,
    )

    for side, rows in results.items():
        returns = [r["return"] for r in rows]
        interval = f" {bootstrap_interval([returns])}" if len(returns) > 1 else ""
        rates = [r["success_rate"] for r in rows if r["success_rate"] is not None]
        rate = f", success {statistics.median(rates):.0%}" if rates else ""
        seconds = statistics.median(r["train_s"] for r in rows)
        print(
            f"{rows[0]['task']} {side}: median return {figure(statistics.median(returns))}, IQM "
            f"{figure(float(interquartile_mean(returns)))}{interval}{rate}, "
            f"training {seconds:.0f} s "
            f"(seeds {[r['seed'] for r in rows]}, {rows[0]['steps']} steps)"
        )
    if len(results) == 2 and all(len(rows) > 1 for rows in results.values()):
        (first, better), (second, worse) = (
            (side, [r["return"] for r in rows]) for side, rows in results.items()
        )
        chance = improvement_interval(better, worse)
        print(
            f"P({first} beats {second} on a seed) "
            f"{float(probability_of_improvement(better, worse)):.2f} "
            f"[{chance.low:.2f}, {chance.high:.2f}]"
        )


if __name__ == "__main__":
    sys.exit(main())
