"""The terminal summary of a training run (no Ray: TrainingProgress on a recording console)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rich.console import Console

from drlcli.runtime.progress import TrainingProgress
from drlcli.runtime.training import TrainingSummary

SUMMARY = TrainingSummary(
    rounds=4,
    env_steps=512,
    wall_time_s=3.25,
    best_return=1000.0,
    last_return=998.5,
    checkpoint_path=Path("out/[run]/model.pt"),
    best_checkpoint_path=Path("out/[run]/model_best.pt"),
    metrics_path=Path("out/[run]/metrics.csv"),
)


def _render(summary: TrainingSummary) -> str:
    console = Console(record=True, width=200)
    TrainingProgress(512, 0, quiet=True, console=console).summary(summary)
    return console.export_text()


def test_summary_prints_counters_and_paths_verbatim():
    text = _render(SUMMARY)
    for expected in (
        "512",
        "3.2 s",
        "998.5",
        "1000.0",
        "out/[run]/model.pt",
        "out/[run]/model_best.pt",
    ):
        assert expected in text
    assert "out/[run]/metrics.csv" in text  # brackets are not taken as rich markup


def test_summary_says_why_no_best_checkpoint_was_written():
    text = _render(dataclasses.replace(SUMMARY, best_checkpoint_path=None))
    assert "not written: no round beat the resumed best 1000.0" in text
    text = _render(dataclasses.replace(SUMMARY, best_checkpoint_path=None, best_return=None))
    assert "not written: no episode finished" in text
