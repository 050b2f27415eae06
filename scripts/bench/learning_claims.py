"""Learning claims about drl's own features, each a comparison of short trainings on the test
suite's tasks, judged and printed: PASS or FAIL per claim, exit 1 if any fails.

    python scripts/bench/learning_claims.py user-robot          # seeds 0 1 2
    python scripts/bench/learning_claims.py privileged-critic   # PPO seeds 0 1, SAC seed 0
    python scripts/bench/learning_claims.py all

- ``user-robot``: a user's own MuJoCo robot (``tests.user_robot:PuckReach-v0``, registered from
  the test package, its observation in centimetres, metres per second and millimetres) learns
  with drl's PPO defaults in 16384 env steps (8 rounds of 4 envs x 512 steps; the final
  deterministic evaluation of 10 episodes is the figure): on every seed well above a uniformly
  random policy (more than 0.7 of its return, a negative number), on the median seed by far (more
  than 0.4 of it), and the observation statistics never hurt (the median with them at least the
  median without). Measured (seeds 0-2): defaults about -12, without observation normalisation
  about -30, random about -67, a hand-written proportional controller about -8.
- ``privileged-critic``: on ``tests.dict_envs:drltest/HiddenBonus-v0`` the policy reads the
  target; a bonus drawn per episode, which no action changes, adds to every reward. A critic that
  reads the bonus and the time left (``observation_groups``) explains the returns and leaves the
  policy gradient its signal. Same seeds and budget: the privileged critic's policy is at least
  twice as close to the target (PPO 4000 env steps, SAC 2000), and PPO's value network explains
  the returns only with the bonus (explained variance above 0.5, below 0.2 without). Measured:
  PPO 0.04-0.07 against 0.11-0.28 over seeds 0-2, SAC 0.001-0.015 against 0.04-0.07 over 0-1.

These were tests of the suite until they cost it three minutes of its CPU; the suite keeps a
short training of each task (tests/test_user_robot.py, tests/test_observation_groups.py).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# The tasks live in the test package: this process and Ray's workers import them from the root.
sys.path.insert(0, str(REPO_ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
)

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402

import tests.dict_envs  # noqa: E402,F401  (registers drltest/HiddenBonus-v0)
from drlcli.checkpoints.policy import load_play_actor  # noqa: E402
from drlcli.config import config_from_dict  # noqa: E402
from drlcli.runtime.training import TrainingSummary, train  # noqa: E402
from drlcli.topology import AvailableDevices  # noqa: E402
from tests import user_robot  # noqa: E402

PUCK = f"tests.user_robot:{user_robot.ENV_ID}"
HIDDEN_BONUS = "tests.dict_envs:drltest/HiddenBonus-v0"
NO_GPU = AvailableDevices(cuda_devices=0, mps=False)


def quiet_train(config: dict, output: Path, name: str) -> tuple[TrainingSummary, Path, Path]:
    """Train ``config`` (a dict as in YAML) into ``output``; its summary, checkpoint, metrics."""
    loaded = config_from_dict({**config, "output_dir": str(output)}, default_name=name)
    with open(os.devnull, "w") as sink:
        summary = train(loaded, quiet=True, console=Console(file=sink), devices=NO_GPU)
    return summary, loaded.checkpoint_path, loaded.metrics_path


def user_robot_claim(seeds: list[int], output: Path) -> list[str]:
    """Train PuckReach with the defaults and without observation statistics; the failures."""
    random_return = user_robot.random_policy_return(episodes=10)
    print(f"user-robot: a uniformly random policy returns {random_return:.1f}")
    finals: dict[str, list[float]] = {"defaults": [], "without normalisation": []}
    for seed in seeds:
        for kind, algo_params in (
            ("defaults", {}),
            ("without normalisation", {"normalize_observations": False}),
        ):
            started = time.perf_counter()
            summary, _, _ = quiet_train(
                {
                    "algo": "ppo",
                    "env": {"id": PUCK, "num_envs": 4, "seed": seed},
                    "total_env_steps": 16384,
                    "rollout_length": 512,
                    "algo_params": algo_params,
                },
                output / f"puck_{kind.replace(' ', '_')}_{seed}",
                f"puck{seed}",
            )
            assert summary.final_evaluation is not None
            finals[kind].append(summary.final_evaluation.return_mean)
            print(
                f"  seed {seed}, {kind}: final evaluation {finals[kind][-1]:.1f} "
                f"({time.perf_counter() - started:.0f} s)"
            )
    defaults, raw = finals["defaults"], finals["without normalisation"]
    median, raw_median = statistics.median(defaults), statistics.median(raw)
    print(f"  median: defaults {median:.1f}, without {raw_median:.1f}")
    failures = []
    if not random_return < -50:
        failures.append(
            f"a random policy returns {random_return:.1f}: the task is solved by chance"
        )
    if not min(defaults) > 0.7 * random_return:
        failures.append(f"a seed's final evaluation {min(defaults):.1f} is not above 0.7 x random")
    if not median > 0.4 * random_return:
        failures.append(f"the median {median:.1f} is not above 0.4 x random")
    if not median >= raw_median:
        failures.append("observation statistics lowered the median final evaluation")
    return failures


def policy_error(checkpoint_path: Path) -> float:
    """Mean squared distance of the deterministic action from the target, over targets in
    [-1, 1]: what HiddenBonus rewards (its bonus no action changes)."""
    policy = load_play_actor(checkpoint_path, allow_env_modules=["tests.dict_envs"])
    targets = np.linspace(-1.0, 1.0, 21)[:, None].astype(np.float32)
    return float(np.mean((policy.act(targets)[:, 0] - targets[:, 0]) ** 2))


CRITICS = {
    "symmetric": {"observation_keys": ["target"]},
    "privileged": {
        "observation_groups": {"policy": ["target"], "critic": ["target", "bonus", "time_left"]}
    },
}
PRIVILEGED_RUNS = {
    "ppo": (4000, {"num_epochs": 4, "num_minibatches": 4, "hidden_sizes": [32, 32]}),
    "sac": (2000, {"batch_size": 64, "warmup_steps": 200, "hidden_sizes": [32, 32]}),
}


def privileged_critic_claim(algo: str, seeds: list[int], output: Path) -> list[str]:
    """Train HiddenBonus with a symmetric and a privileged critic per seed; the failures."""
    total, algo_params = PRIVILEGED_RUNS[algo]
    errors: dict[str, list[float]] = {kind: [] for kind in CRITICS}
    explained: dict[str, list[float]] = {kind: [] for kind in CRITICS}
    for seed in seeds:
        for kind, observation in CRITICS.items():
            _, checkpoint, metrics = quiet_train(
                {
                    "algo": algo,
                    "env": {"id": HIDDEN_BONUS, "num_envs": 4, "seed": seed, **observation},
                    "total_env_steps": total,
                    "rollout_length": 50,
                    "evaluation": {"episodes": 1},
                    "algo_params": algo_params,
                },
                output / f"bonus_{algo}_{kind}_{seed}",
                f"{kind}_{seed}",
            )
            errors[kind].append(policy_error(checkpoint))
            line = f"  {algo} seed {seed}, {kind} critic: policy error {errors[kind][-1]:.4f}"
            if algo == "ppo":
                with open(metrics, newline="") as file:
                    explained[kind].append(
                        float(list(csv.DictReader(file))[-1]["explained_variance"])
                    )
                line += f", explained variance {explained[kind][-1]:.2f}"
            print(line)
    failures = []
    if not sum(errors["privileged"]) < 0.5 * sum(errors["symmetric"]):
        failures.append(f"{algo}: the privileged critic's policy is not twice as close: {errors}")
    if algo == "ppo" and not (
        min(explained["privileged"]) > 0.5 and max(explained["symmetric"]) < 0.2
    ):
        failures.append(
            f"ppo: explained variance not > 0.5 with the bonus, < 0.2 without: {explained}"
        )
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("claim", choices=["user-robot", "privileged-critic", "all"])
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=None, help="instead of each claim's"
    )
    parser.add_argument("--output", type=Path, default=None, help="keep the runs here")
    args = parser.parse_args()
    output = args.output or Path(tempfile.mkdtemp(prefix="drl-claims-"))
    failures: dict[str, list[str]] = {}
    if args.claim in ("user-robot", "all"):
        failures["user-robot"] = user_robot_claim(args.seeds or [0, 1, 2], output)
    if args.claim in ("privileged-critic", "all"):
        failures["privileged-critic"] = privileged_critic_claim(
            "ppo", args.seeds or [0, 1], output
        ) + privileged_critic_claim("sac", args.seeds or [0], output)
    for claim, failed in failures.items():
        print(f"{claim}: {'FAIL' if failed else 'PASS'}")
        for failure in failed:
            print(f"  {failure}")
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
