"""Is the memory learned? Position-only tasks trained with and without a recurrent policy.

    python scripts/bench/memory_study.py pendulum --seeds 0 1 2 3 4
    python scripts/bench/memory_study.py hopper --seeds 0 1 2 --variants mlp lstm
    PYTHONPATH=/path/to/sb3 python scripts/bench/memory_study.py pendulum --variants sb3_lstm

The tasks hide the velocities from the policy: ``pendulum`` is the preset
``inverted_pendulum_nov_lstm`` (InvertedPendulum-v5, policy and critic read ``'0:2'``),
``hopper`` the preset ``hopper_nov_lstm`` (Hopper-v5, the policy reads ``'0:5'``, the critic
the whole observation). Variants, each with the preset's budget, seeds and evaluations, and
each but the privileged ones with its critic on the policy's group (equal settings, whatever
the preset's critic reads):

- ``lstm``: the preset's LSTM (for ``hopper``, with its critic on the positions); ``gru``: the
  same with a GRU;
- ``mlp``: no recurrent core, with the MLP preset's minibatches (32, the quickstart's and
  hopper_ppo's): the MLP's own best settings, not the recurrent ones;
- ``framestack``: ``mlp`` over ``FrameStackObservation`` of the last 4 observations (the
  policy and critic read the positions of each);
- ``mlp_privileged``, ``lstm_privileged`` (run only when named): ``mlp`` and ``lstm`` with a
  privileged critic, as rsl_rl's asymmetric actor-critic: the value network reads the whole
  observation (the velocities too) in training, the policy the positions alone, as deployed
  (``hopper``'s ``lstm_privileged`` is the preset). RecurrentPPO has no such critic: a
  comparison of drl's training as a robotics user would set it up, not one at equal settings;
- ``sb3_lstm``: SB3-contrib's RecurrentPPO (``MlpLstmPolicy``) at the preset's settings (envs,
  steps per round, epochs, minibatch size in steps, learning rate, gamma, GAE lambda, LSTM
  size, heads, observation and reward normalisation), evaluated like drl every interval with
  10 deterministic episodes, its LSTM state reset at each episode's start.

Each finished run's metrics CSV (the ``sb3_lstm`` one written in drl's columns) is recorded
under ``docs/results/data/memory/<task>/`` (``study_runs.StudyRecord``), so ``drl compare``
redraws the tables from the repository alone, each table's seeds picked by their files
(``metrics_hopper_{lstm,sb3_lstm}_seed[0-4].csv``: the folder holds fresh seeds too), and a
study that stops resumes where it was: a run already recorded there is skipped.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import time
from pathlib import Path
from typing import Any

from study_runs import REPOSITORY, StudyRecord, run_drl

from drlcli.config import EnvWrapperConfig
from drlcli.preset_catalog import find_preset

TASKS = {"pendulum": "inverted_pendulum_nov_lstm", "hopper": "hopper_nov_lstm"}
EQUAL_VARIANTS = ("mlp", "lstm", "gru", "framestack", "sb3_lstm")
"""The variants whose policy and critic read the same observation: the study's default."""
PRIVILEGED = "_privileged"
VARIANTS = (*EQUAL_VARIANTS, f"mlp{PRIVILEGED}", f"lstm{PRIVILEGED}")
STACK = 4


def variant_config(task: str, variant: str, seed: int, output: Path):
    """The preset's config for one variant and seed, writing under ``output``."""
    base = find_preset(TASKS[task]).config()
    name = f"{task}_{variant}_seed{seed}"
    privileged = variant.endswith(PRIVILEGED)
    variant = variant.removesuffix(PRIVILEGED)
    params = base.algo_params
    env = dataclasses.replace(base.env, seed=seed)
    # Whatever the preset's critic reads: equal settings put it on the policy's group, the
    # privileged variants on the whole observation.
    policy_group = env.observation_groups.policy
    critic = (f"0:{_observation_width(env.id)}",) if privileged else policy_group
    groups = dataclasses.replace(env.observation_groups, critic=critic)
    env = dataclasses.replace(env, observation_groups=groups)
    if variant == "gru":
        params = dataclasses.replace(
            params, recurrent=dataclasses.replace(params.recurrent, cell="gru")
        )
    elif variant in ("mlp", "framestack"):
        params = dataclasses.replace(params, recurrent=None, num_minibatches=32)
    if variant == "framestack":
        (part,) = env.observation_groups.policy
        parts = [_shift(part, frame * _observation_width(env.id)) for frame in range(STACK)]
        env = dataclasses.replace(
            env,
            wrappers=(
                EnvWrapperConfig("FrameStackObservation", {"stack_size": STACK}),
                EnvWrapperConfig("FlattenObservation"),
            ),
            observation_groups=dataclasses.replace(
                env.observation_groups, policy=tuple(parts), critic=tuple(parts)
            ),
        )
    return dataclasses.replace(
        base,
        name=name,
        env=env,
        algo_params=params,
        output_dir=str(output),
        metrics_path=str(output / f"metrics_{name}.csv"),
    )


def _observation_width(env_id: str) -> int:
    import gymnasium as gym

    env = gym.make(env_id)
    width = int(env.observation_space.shape[0])
    env.close()
    return width


def _shift(part: str, offset: int) -> str:
    start, stop = (int(x) for x in part.split(":"))
    return f"{start + offset}:{stop + offset}"


def recurrent_ppo_settings(config) -> dict[str, Any]:
    """SB3-contrib's ``RecurrentPPO`` arguments (besides the policy and the env: ``MlpLstmPolicy``
    over ``num_envs * num_actors`` envs under ``VecNormalize``) equal to ``config``'s settings:
    rollout and minibatch sizes in steps, epochs, learning rate and its annealing, gamma, GAE
    lambda, clip, entropy and value-loss weights, gradient clip, seed, LSTM size, heads and
    initial log std."""
    params = config.algo_params
    steps_per_round = config.env.num_envs * config.num_actors * config.rollout_length
    rate = params.learning_rate
    return {
        "n_steps": config.rollout_length,
        "batch_size": steps_per_round // params.num_minibatches,
        "n_epochs": params.num_epochs,
        # SB3 passes the fraction of training left: a linear anneal to 0, as drl's
        "learning_rate": (lambda left: rate * left) if params.anneal_learning_rate else rate,
        "gamma": config.gamma,
        "gae_lambda": config.gae_lambda,
        "clip_range": params.clip_coef,
        "ent_coef": params.ent_coef,
        # SB3's value term is vf_coef * MSE, drl's vf_coef * 0.5 * MSE (CleanRL's form): the
        # same weight is half drl's coefficient (robotics_vs_sb3.py's SB3 0.5 against drl 1.0).
        "vf_coef": params.vf_coef / 2,
        "max_grad_norm": params.max_grad_norm,
        "seed": config.env.seed,
        "policy_kwargs": {
            "lstm_hidden_size": params.recurrent.size,
            "net_arch": {
                "pi": list(params.hidden_sizes),
                "vf": list(params.value_network_hidden_sizes),
            },
            "log_std_init": params.init_log_std,
        },
    }


def run_sb3_lstm(config, output: Path) -> dict[str, Any]:
    """SB3-contrib's RecurrentPPO at ``config``'s settings; its evaluations in a drl CSV."""
    import gymnasium as gym
    import numpy as np
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    (part,) = config.env.observation_groups.policy
    start, stop = (int(x) for x in part.split(":"))

    class Part(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (stop - start,), np.float64)

        def observation(self, observation):
            return observation[start:stop]

    def make():
        return Part(gym.make(config.env.id))

    num_envs = config.env.num_envs * config.num_actors
    env = VecNormalize(DummyVecEnv([make] * num_envs), gamma=config.gamma)
    env.seed(config.env.seed)
    model = RecurrentPPO("MlpLstmPolicy", env, **recurrent_ppo_settings(config))
    episodes = config.evaluation.episodes
    interval = config.evaluation.interval_env_steps
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()

    def evaluate(env_steps: int) -> float:
        single = make()
        returns = []
        for episode in range(episodes):
            obs, _ = single.reset(seed=10_000 + config.env.seed * 100 + episode)
            state, start_flag, total = None, np.ones(1, bool), 0.0
            while True:
                normalised = env.normalize_obs(obs[None])
                action, state = model.predict(
                    normalised, state=state, episode_start=start_flag, deterministic=True
                )
                obs, reward, terminated, truncated, _ = single.step(action[0])
                total += float(reward)
                start_flag = np.zeros(1, bool)
                if terminated or truncated:
                    break
            returns.append(total)
        single.close()
        mean = float(np.mean(returns))
        rows.append(
            {
                "round": len(rows) + 1,
                "env_steps": env_steps,
                "wall_time_s": time.perf_counter() - started,
                "eval_env_steps": env_steps,
                "eval_return_mean": mean,
                "eval_return_std": float(np.std(returns)),
            }
        )
        # a RecurrentPPO run takes an hour or more and records only when it ends
        print(
            f"{config.name}: {env_steps:,} env steps, evaluation {mean:.1f}, "
            f"{rows[-1]['wall_time_s']:.0f} s",
            flush=True,
        )
        return mean

    class Evaluations(BaseCallback):
        def __init__(self):
            super().__init__()
            self.next = interval

        def _on_rollout_start(self) -> None:
            if interval and self.num_timesteps >= self.next:
                evaluate(self.num_timesteps)
                self.next += interval

        def _on_step(self) -> bool:
            return True

    model.learn(config.total_env_steps, callback=Evaluations())
    final = evaluate(model.num_timesteps)
    path = output / f"metrics_{config.name}.csv"
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return {
        "final_return": final,
        "wall_s": time.perf_counter() - started,
        "env_steps": model.num_timesteps,
        "csv": path,
        "evaluation_record": {
            "env_id": config.env.id,
            "seed": config.env.seed,
            "return_mean": final,
            "env_steps": model.num_timesteps,
            "episodes": episodes,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(EQUAL_VARIANTS))
    parser.add_argument("--output-dir", type=Path, default=Path("output/memory_study"))
    parser.add_argument(
        "--results",
        type=Path,
        default=REPOSITORY / "docs/results/data/memory",
        help="where the finished runs are recorded (a smoke test's: elsewhere)",
    )
    parser.add_argument("--steps", type=int, default=None, help="override the preset's budget")
    args = parser.parse_args()
    record = StudyRecord(args.results / args.task)
    done = record.done()
    output = args.output_dir / args.task
    output.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for variant in args.variants:
            if (variant, seed) in done:
                print(f"{variant} seed {seed}: recorded, skipped")
                continue
            config = variant_config(args.task, variant, seed, output)
            if variant == "sb3_lstm":  # at the recurrent preset's settings
                config = dataclasses.replace(
                    variant_config(args.task, "lstm", seed, output), name=config.name
                )
            if args.steps is not None:
                config = dataclasses.replace(config, total_env_steps=args.steps)
            result = run_sb3_lstm(config, output) if variant == "sb3_lstm" else run_drl(config)
            record.add(variant, seed, result)


if __name__ == "__main__":
    main()
