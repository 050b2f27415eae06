"""Draws docs/architecture.png: the processes of a PPO run, what crosses between them each round,
and the fault model. The picture's text source; rerun after a change to the topology:

    python docs/architecture_diagram.py          # writes docs/architecture.png

Blue boxes are processes (one Ray worker each), orange ones the driver's process and the
ParameterServer it holds; arrows are what one round sends, in the order of Method.md's "Rounds
and synchronisation".
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUTPUT = Path(__file__).with_name("architecture.png")

# name: (x, y, width, height, title, lines)
PROCESSES = {
    "driver": (
        0.5,
        7.6,
        6.4,
        1.9,
        "driver: drl train (TrainingRun, RoundsRun)",
        [
            "preflight before anything starts; StopRequest (signals)",
            "owns the local Ray head; writes the metrics CSV,",
            "the latest and best checkpoints (atomic, hashed)",
        ],
    ),
    "evaluator": (
        11.8,
        7.6,
        6.2,
        1.9,
        "evaluator: PolicyEvaluator",
        ["deterministic episodes on separately seeded", "envs (no state between calls)"],
    ),
    "learner0": (
        0.5,
        4.3,
        5.2,
        1.9,
        "learner 0: PPOLearnerWorker",
        ["Learner: policy actor, value network,", "Adam, the PPO update (train_step)"],
    ),
    "server": (
        6.9,
        4.3,
        4.6,
        1.9,
        "ParameterServer (in the driver)",
        ["global observation statistics;", "averages the learners' networks"],
    ),
    "learner1": (
        12.7,
        4.3,
        5.3,
        1.9,
        "learner 1 (num_gpus > 1)",
        ["its own rollout actors, the same update"],
    ),
    "actors0": (
        0.5,
        0.6,
        5.2,
        1.9,
        "rollout actors of learner 0: MuJoCoActor",
        [
            "RolloutSampler: num_envs environments,",
            "a policy copy, GAE, reward scaling",
            "(a recurrent policy's states too)",
        ],
    ),
    "actors1": (
        12.7,
        0.6,
        5.3,
        1.9,
        "rollout actors of learner 1",
        ["MuJoCoActor x actors_per_learner"],
    ),
}

# (start point, end point, label, label position as a fraction along the arrow, curvature)
MESSAGES = [
    ((1.7, 4.3), (1.7, 2.5), "1. parameters\n{actor, value}", 0.5, 0.0),
    ((4.5, 2.5), (4.5, 4.3), "2. trajectories\n(object store)", 0.5, 0.0),
    ((7.6, 4.3), (5.7, 2.2), "1. observation\nstatistics", 0.45, 0.0),
    ((5.7, 1.3), (9.2, 4.3), "3. statistics increments", 0.55, 0.2),
    ((5.7, 5.5), (6.9, 5.5), "", 0.5, 0.0),
    ((6.9, 5.0), (5.7, 5.0), "", 0.5, 0.0),
    ((11.5, 5.5), (12.7, 5.5), "", 0.5, 0.0),
    ((12.7, 5.0), (11.5, 5.0), "", 0.5, 0.0),
    ((14.0, 4.3), (14.0, 2.5), "", 0.5, 0.0),
    ((16.6, 2.5), (16.6, 4.3), "", 0.5, 0.0),
    ((3.1, 6.2), (3.1, 7.6), "5. metrics; states\nfor the checkpoint", 0.5, 0.0),
    ((6.9, 8.55), (11.8, 8.55), "6. weights, when an evaluation is due", 0.5, 0.0),
]
NOTES = [
    ((9.2, 6.75), "4. every param_sync_interval rounds: networks in, their average out"),
    ((9.2, 9.95), "one round of PPO, in order; blue: Ray processes, orange: the driver's,"),
    ((9.2, 9.6), "on the local Ray head or a cluster (--address)"),
    ((15.3, -0.5), "An off-policy run (SAC, FlashSAC):"),
    ((15.3, -0.9), "EnvSteppers instead of MuJoCoActors (no policy:"),
    ((15.3, -1.3), "each learner's collector chooses every action);"),
    ((15.3, -1.7), "no ParameterServer: data-parallel learners"),
    ((15.3, -2.1), "all-reduce their gradients instead."),
]

FAULTS = [
    'Faults (Method.md, "Faults")',
    "- a rollout actor or the evaluator that dies is restarted by Ray",
    "  (up to max_rollout_actor_restarts);",
    "  PPO redoes the round's sample with the same parameters: the data stays on-policy",
    "- a learner that dies ends the run: exit 1, naming the last good",
    "  checkpoint; drl train CONFIG --resume PATH continues it bit for bit",
    "- Ctrl-C or SIGTERM: the round in progress ends, a checkpoint is written, exit 130 / 143",
    "- the checkpoint holds progress, observation statistics, every learner's networks,",
    "  optimiser and generator, every rollout actor's episodes, generator and reward",
    "  statistics (a recurrent policy's states), the config and the last evaluation",
]


def main() -> None:
    figure, axes = plt.subplots(figsize=(15, 11))
    axes.set_xlim(0, 18.5)
    axes.set_ylim(-3.6, 10.2)
    axes.axis("off")
    for name, (x, y, width, height, title, lines) in PROCESSES.items():
        colour = "#fde3c8" if name in ("driver", "server") else "#dbe9f6"
        axes.add_patch(
            FancyBboxPatch(
                (x, y), width, height, boxstyle="round,pad=0.05", fc=colour, ec="#34495e", lw=1.4
            )
        )
        axes.text(x + 0.2, y + height - 0.35, title, fontsize=10.5, weight="bold", va="top")
        for index, line in enumerate(lines):
            axes.text(x + 0.2, y + height - 0.85 - 0.38 * index, line, fontsize=9, va="top")
    for start, end, label, where, curve in MESSAGES:
        axes.add_patch(
            FancyArrowPatch(
                start,
                end,
                arrowstyle="-|>",
                mutation_scale=14,
                lw=1.3,
                color="#2c3e50",
                connectionstyle=f"arc3,rad={curve}",
            )
        )
        if label:
            x = start[0] + (end[0] - start[0]) * where
            y = start[1] + (end[1] - start[1]) * where
            axes.text(
                x,
                y,
                label,
                fontsize=8.5,
                ha="center",
                va="center",
                bbox={"fc": "white", "ec": "none", "alpha": 0.9, "pad": 1.5},
            )
    for (x, y), text in NOTES:
        axes.text(x, y, text, fontsize=9, ha="center", va="center")
    for index, line in enumerate(FAULTS):
        axes.text(
            0.5,
            -0.1 - 0.36 * index,
            line,
            fontsize=9.5,
            weight="bold" if index == 0 else "normal",
            va="top",
            family="monospace",
        )
    figure.tight_layout()
    figure.savefig(OUTPUT, dpi=110)
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
