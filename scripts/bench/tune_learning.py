"""Learning evidence for ``drl tune``: a small search whose space holds a learning rate that
cannot learn, then its winner re-trained on fresh seeds.

    python scripts/bench/tune_learning.py
    python scripts/bench/tune_learning.py --config inverted_pendulum_ppo \
        --space examples/tune/inverted_pendulum_ppo_space.yaml --hopeless 1e-8 --target 950

Runs the search (local Ray, every CPU), prints each trial (values, objective, state) and the
re-trained candidates, then checks two things and exits 1 if either fails:
1. every trial with ``algo_params.learning_rate == --hopeless`` was stopped by ASHA or ranks
   below every other trial, and the search sampled at least one such trial;
2. the winner's median final evaluation over the re-training seeds is at least --target.
Outputs go to a temporary folder unless --output is given.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

from drlcli.preset_catalog import find_preset
from drlcli.tune.runner import prepare_search, run_search

LEARNING_RATE = "algo_params.learning_rate"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="inverted_pendulum_ppo", help="preset or YAML")
    parser.add_argument(
        "--space", type=Path, default=Path("examples/tune/inverted_pendulum_ppo_space.yaml")
    )
    parser.add_argument("--hopeless", type=float, default=1e-8, help="a learning rate that fails")
    parser.add_argument("--target", type=float, default=950.0, help="the winner's median, at least")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    preset = find_preset(args.config)
    config_path = Path(args.config) if preset is None else preset.path
    output = args.output or Path(tempfile.mkdtemp(prefix="drl-tune-bench-")) / "search"
    started = time.perf_counter()
    summary = run_search(prepare_search(config_path, args.space), output, quiet=True)
    wall = time.perf_counter() - started
    with open(summary.results_csv) as handle:
        trials = list(csv.DictReader(handle))  # best objective first

    print(f"search of {len(trials)} trials and re-training: {wall:.0f} s, in {output}")
    for row in trials:
        print(
            f"  {row['trial']}: learning rate {float(row[LEARNING_RATE]):.3g}, objective "
            f"{float(row['objective'] or 'nan'):.1f}, {row['state']} at {row['env_steps']} steps"
        )
    for candidate in summary.candidates:
        returns = " / ".join(f"{value:.0f}" for value in candidate.seed_returns.values())
        print(
            f"  re-trained {candidate.trial}: median {candidate.median:.1f}, IQM "
            f"{candidate.iqm:.1f} ({returns} on seeds {list(candidate.seed_returns)})"
        )

    failures = []
    hopeless = [row for row in trials if float(row[LEARNING_RATE]) == args.hopeless]
    others = [row for row in trials if float(row[LEARNING_RATE]) != args.hopeless]
    if not hopeless:
        failures.append(f"no trial sampled learning rate {args.hopeless:g}: choose another seed")
    worst_other = min(float(row["objective"]) for row in others) if others else float("inf")
    for row in hopeless:
        if row["state"] != "stopped early" and float(row["objective"]) >= worst_other:
            failures.append(
                f"{row['trial']} (learning rate {args.hopeless:g}) ran its whole budget and "
                f"ranks above another trial ({float(row['objective']):.1f} >= {worst_other:.1f})"
            )
    winner = summary.candidates[0] if summary.candidates else None
    if winner is None:
        failures.append("no candidate was re-trained (search.retrain_top: 0?)")
    elif winner.median < args.target:
        failures.append(f"the winner's median {winner.median:.1f} is below {args.target:g}")
    for failure in failures:
        print(f"FAIL: {failure}")
    if not failures:
        print(
            f"PASS: the {len(hopeless)} trial(s) at learning rate {args.hopeless:g} stopped "
            f"early or ranked last; the winner ({winner.trial}) re-trains to a median of "
            f"{winner.median:.1f} >= {args.target:g}"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
