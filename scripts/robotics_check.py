"""drl on the robotics packages of the field, through its CLI: a short training run of a task
of each package of one tested set, then drl verify, drl play (with a video), drl export.

    python scripts/robotics_check.py dmc        # dm_control through Shimmy
    python scripts/robotics_check.py metaworld  # Meta-World and Gymnasium-Robotics

Run by ``make test-robotics``, which builds each set's virtual environment (not part of CI:
the packages and the MuJoCo they need are a download of their own). Prints PASS or FAIL per
check with the command's last line, and exits 1 when any check fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Per set: (name, env id as drl takes it, env kwargs (YAML), the module play must be allowed,
# whether the task reports success in its info).
TASKS = {
    "dmc": [
        ("walker-walk", "shimmy:dm_control/walker-walk-v0", "{}", "shimmy", False),
        ("cartpole-swingup", "shimmy:dm_control/cartpole-swingup-v0", "{}", "shimmy", False),
    ],
    "metaworld": [
        (
            "FetchReachDense",
            "gymnasium_robotics:FetchReachDense-v4",
            "{}",
            "gymnasium_robotics",
            True,
        ),
        ("reach-v3", "metaworld:Meta-World/MT1", "{env_name: reach-v3}", "metaworld", True),
    ],
}


def config_text(env_id: str, kwargs: str, output: Path) -> str:
    """A PPO run of 2 rounds of 2 environments: enough to exercise every stage, not to learn."""
    return (
        f"algo: ppo\nenv: {{id: '{env_id}', num_envs: 2, kwargs: {kwargs}}}\n"
        "total_env_steps: 1024\nrollout_length: 256\n"
        "evaluation: {episodes: 2}\n"
        f"output_dir: {output}\n"
        "algo_params: {num_epochs: 2, num_minibatches: 4}\n"
    )


def run(command: list[str], timeout_s: float = 900.0) -> tuple[bool, str]:
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    return done.returncode == 0, f"{time.monotonic() - started:.0f} s: {last[:200]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("set", choices=sorted(TASKS))
    parser.add_argument("--keep", type=Path, help="leave the runs' outputs in this folder")
    args = parser.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    drl = [sys.executable, "-m", "drlcli"]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="drl-robotics-") as temporary:
        folder = args.keep or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        for name, env_id, kwargs, module, reports_success in TASKS[args.set]:
            output = Path(folder) / name
            config = Path(folder) / f"{name}.yaml"
            config.write_text(config_text(env_id, kwargs, output))
            checkpoint = output / f"model_{name}.pt"
            allow = ["--allow-env-module", module]
            checks = [
                ("train", [*drl, "train", str(config), "--quiet"]),
                ("verify", [*drl, "verify", str(checkpoint)]),
                ("play", [*drl, "play", str(checkpoint), "--episodes", "1", *allow]),
                (
                    "play --video",
                    [
                        *drl,
                        "play",
                        str(checkpoint),
                        "--episodes",
                        "1",
                        "--video",
                        str(output / "clip.mp4"),
                        *allow,
                    ],
                ),
                ("export", [*drl, "export", str(checkpoint), str(output / "p.onnx"), *allow]),
            ]
            for check, command in checks:
                ok, detail = run(command)
                failures += not ok
                print(f"{'PASS' if ok else 'FAIL'} {name} {check} ({detail})", flush=True)
                if not ok and check == "train":
                    break  # the rest need its checkpoint
                if check == "train":
                    header = (output / f"metrics_{name}.csv").read_text().splitlines()[0]
                    has = "success_rate" in header.split(",")
                    failures += has != reports_success
                    print(
                        f"{'PASS' if has == reports_success else 'FAIL'} {name} success columns "
                        f"({'present' if has else 'absent'})",
                        flush=True,
                    )
    print(f"{'all checks passed' if not failures else f'{failures} checks failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
