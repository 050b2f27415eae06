"""Behaviour before and after a refactor: a few rounds of presets on their fixed seeds, recorded
and compared bit for bit.

    python scripts/same_metrics.py record before.json      # on the old code
    python scripts/same_metrics.py compare before.json     # on the new code: exit 1 on a change

Each preset trains ``--rounds`` rounds (local Ray, outputs in a temporary folder) with periodic
evaluation off: which row an evaluation lands on depends on wall-clock time, not on the code.
Recorded per preset: every metrics row without the wall-clock columns, the final deterministic
evaluation, and a SHA-256 of every tensor and number in the latest checkpoint's learner states
(networks, optimiser moments, schedules; ``canonical_learner_states``) and observation
statistics. ``compare`` re-runs the presets the file names and prints each difference.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_PRESETS = (
    "quickstart",
    "inverted_pendulum_flash_sac_cpu",
    "hopper_ppo",
    "inverted_pendulum_nov_lstm",
)


def state_digest(value: Any) -> str:
    """SHA-256 over a nested state (dicts by sorted key, lists in order, tensors and arrays by
    dtype, shape and bytes, other leaves by ``repr``)."""
    import numpy as np
    import torch

    digest = hashlib.sha256()

    def feed(item: Any) -> None:
        if isinstance(item, dict):
            for key in sorted(item, key=str):
                digest.update(f"<{key}>".encode())
                feed(item[key])
        elif isinstance(item, list | tuple):
            digest.update(b"[")
            for element in item:
                feed(element)
            digest.update(b"]")
        elif isinstance(item, torch.Tensor):
            array = item.detach().cpu()
            digest.update(f"{array.dtype}{tuple(array.shape)}".encode())
            digest.update(array.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
        elif isinstance(item, np.ndarray):
            digest.update(f"{item.dtype}{item.shape}".encode())
            digest.update(np.ascontiguousarray(item).tobytes())
        else:
            digest.update(repr(item).encode())

    feed(value)
    return digest.hexdigest()


def canonical_learner_states(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The learner states in the layout of checkpoint format 2, so that a record of older code
    compares with newer: format 1 kept each PPO rollout actor's reward-scaler moments under the
    learner (``reward_scalers``), format 2 in the actor's own state (``reward_scaler``). A PPO
    rollout actor's ``recurrent`` entry, which drl writes since recurrent policies, holds
    nothing for an MLP (None): left out, so that older records compare."""
    canonical = []
    for state in states:
        state = dict(state)
        scalers = state.pop("reward_scalers", None)
        if scalers is not None and state.get("rollout_actors") is not None:
            state["rollout_actors"] = [
                {**actor, "reward_scaler": moments}
                for actor, moments in zip(state["rollout_actors"], scalers, strict=True)
            ]
        if state.get("rollout_actors") is not None:
            state["rollout_actors"] = [
                {k: v for k, v in actor.items() if not (k == "recurrent" and v is None)}
                for actor in state["rollout_actors"]
            ]
        canonical.append(state)
    return canonical


def run_preset(name: str, rounds: int, output_dir: Path) -> dict[str, Any]:
    """Train ``rounds`` rounds of preset ``name``; what a refactor must leave unchanged."""
    from rich.console import Console

    from drlcli.checkpoints.files import read_checkpoint
    from drlcli.metrics.csv_file import read_metrics
    from drlcli.metrics.schema import TIME_COLUMNS
    from drlcli.preset_catalog import find_preset
    from drlcli.runtime.training import train

    preset = find_preset(name)
    if preset is None:
        raise SystemExit(f"{name}: no such preset (drl presets lists them)")
    base = preset.config()
    steps_per_round = base.num_actors * base.env.num_envs * base.rollout_length
    config = dataclasses.replace(
        base,
        total_env_steps=rounds * steps_per_round,
        output_dir=str(output_dir),
        metrics_path=str(output_dir / f"metrics_{base.name}.csv"),
        evaluation=dataclasses.replace(base.evaluation, interval_env_steps=None),
    )
    summary = train(config, quiet=True, console=Console(stderr=True))
    checkpoint = read_checkpoint(summary.checkpoint_path)
    rows = [
        {column: value for column, value in row.items() if column not in TIME_COLUMNS}
        for row in read_metrics(summary.metrics_path)
    ]
    return {
        "rows": rows,
        "final_evaluation": checkpoint.evaluation,
        "learner_states_sha256": state_digest(canonical_learner_states(checkpoint.learner_states)),
        "obs_rms_sha256": state_digest(checkpoint.obs_rms_state),
    }


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Each way ``after`` differs from ``before`` (one preset's records), in words."""
    found = []
    if len(before["rows"]) != len(after["rows"]):
        found.append(f"{len(before['rows'])} rows before, {len(after['rows'])} after")
    for old, new in zip(before["rows"], after["rows"], strict=False):
        for column in sorted(set(old) | set(new)):
            if old.get(column) != new.get(column):
                found.append(
                    f"round {old.get('round')}: {column} {old.get(column)!r} -> {new.get(column)!r}"
                )
    for key in ("final_evaluation", "learner_states_sha256", "obs_rms_sha256"):
        if before[key] != after[key]:
            found.append(f"{key}: {before[key]!r} -> {after[key]!r}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("record", "compare"))
    parser.add_argument("file", type=Path, help="the record (JSON) to write or compare with")
    parser.add_argument("--presets", nargs="+", default=list(DEFAULT_PRESETS))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    if args.action == "compare":
        record = json.loads(args.file.read_text())
        presets, rounds = list(record["presets"]), record["rounds"]
    else:
        presets, rounds = args.presets, args.rounds
    results = {}
    with tempfile.TemporaryDirectory(prefix="drl-same-metrics-") as folder:
        for name in presets:
            results[name] = run_preset(name, rounds, Path(folder) / name)
    if args.action == "record":
        args.file.write_text(json.dumps({"rounds": rounds, "presets": results}, indent=1))
        print(f"recorded {len(presets)} presets, {rounds} rounds each, in {args.file}")
        return 0
    changed = 0
    for name in presets:
        found = differences(record["presets"][name], results[name])
        status = "same" if not found else f"{len(found)} differences"
        print(f"{name}: {len(results[name]['rows'])} rows, checkpoint states: {status}")
        for line in found:
            print(f"  {line}")
        changed += bool(found)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
