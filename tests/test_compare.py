"""Statistics over seeds (drlcli/seed_statistics.py) and ``drl compare``: the IQM, bootstrap
intervals and probability of improvement against hand-computed cases; the command on runs
written here, its table, JSON and PNG; each bad input one line, exit 2. (On trained runs:
tests/test_tune.py's interrupted search of two seeds.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from drlcli.cli import app
from drlcli.metrics.seed_runs import final_evaluation_record, find_seed_runs, record_path
from drlcli.seed_statistics import (
    aggregate,
    bootstrap_interval,
    default_aggregate,
    improvement_interval,
    interquartile_mean,
    probability_of_improvement,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_iqm_is_the_mean_of_the_middle_half_as_rliable_cuts_it():
    # floor(n/4) values cut at each end: n=8 -> 2, n=5 -> 1, n=3 -> none.
    assert interquartile_mean([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5
    assert interquartile_mean([0.0, 10.0, 20.0, 30.0, 1000.0]) == 20.0
    assert interquartile_mean([1.0, 2.0, 9.0]) == 4.0
    assert aggregate([1.0, 2.0, 9.0], "median") == 2.0
    assert aggregate([1.0, 2.0, 9.0], "mean") == 4.0
    np.testing.assert_array_equal(
        aggregate([[1, 2, 3, 100], [4, 5, 6, 7]], "iqm", axis=1), [2.5, 5.5]
    )
    assert default_aggregate(3) == "mean" and default_aggregate(4) == "iqm"
    with pytest.raises(ValueError, match="unknown aggregate 'best'"):
        aggregate([1.0], "best")
    with pytest.raises(ValueError, match="no values"):
        aggregate([], "mean")


def test_the_bootstrap_interval_of_a_hand_computed_case():
    # Resampling [0, 0, 0, 10]: the mean is 2.5 k with k ~ Binomial(4, 1/4); P(k=0) = 0.32 so
    # the 2.5% point is 0, P(k <= 2) = 0.95 and P(k <= 3) = 0.996, so the 97.5% point is 7.5.
    interval = bootstrap_interval([[0.0, 0.0, 0.0, 10.0]], "mean")
    assert (interval.low, interval.high) == (0.0, 7.5)
    assert str(interval) == "[0, 7.5]"  # 4 significant digits, whole from 1000
    # The same seeds give the same interval: a report does not change between runs.
    assert bootstrap_interval([[1.0, 5.0, 2.0, 8.0]]) == bootstrap_interval([[1.0, 5.0, 2.0, 8.0]])
    with pytest.raises(ValueError, match="at least 2 values"):
        bootstrap_interval([[3.0]])


def test_the_bootstrap_is_stratified_each_task_resampled_on_its_own():
    # Two tasks of two runs each: every stratified resample keeps two runs of each task, so the
    # pooled mean is always 5; pooled without strata, a resample can be all zeros or all tens.
    stratified = bootstrap_interval([[0.0, 0.0], [10.0, 10.0]], "mean")
    pooled = bootstrap_interval([[0.0, 0.0, 10.0, 10.0]], "mean")
    assert (stratified.low, stratified.high) == (5.0, 5.0)
    assert (pooled.low, pooled.high) == (0.0, 10.0)


def test_the_probability_of_improvement_counts_pairs_and_half_the_ties():
    # Pairs of [1, 2, 3] over [0, 2, 5]: 1>0, 2>0, 3>0, 3>2 and the tie 2=2 -> 4.5 of 9.
    assert probability_of_improvement([1.0, 2.0, 3.0], [0.0, 2.0, 5.0]) == 0.5
    assert probability_of_improvement([10.0, 11.0], [0.0, 1.0]) == 1.0
    separated = improvement_interval([10.0, 11.0, 12.0], [0.0, 1.0, 2.0])
    assert (separated.low, separated.high) == (1.0, 1.0)
    overlapping = improvement_interval([1.0, 2.0, 3.0], [0.0, 2.0, 5.0])
    assert 0.0 <= overlapping.low < 0.5 < overlapping.high <= 1.0


def write_run(folder: Path, name: str, evaluations: list[tuple[int, float]]) -> Path:
    """A metrics CSV of drl's columns with periodic evaluations at (env steps, return)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["round,env_steps,wall_time_s,eval_return_mean,eval_env_steps"]
    for number, (steps, value) in enumerate(evaluations, start=1):
        lines.append(f"{number},{steps},{number},{value},{steps}")
    path = folder / f"metrics_{name}.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_error_line(result, exit_code: int = 2) -> str:
    assert result.exit_code == exit_code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_compare_reports_each_group_writes_its_json_and_png(tmp_path, checkpoint_file):
    root = tmp_path / "runs"
    finals = {"fast": [100.0, 120.0, 90.0], "slow": [50.0, 60.0, 130.0]}
    for group, values in finals.items():
        for seed, value in enumerate(values):
            write_run(root / group, f"{group}_seed{seed}", [(100, value / 2), (200, value)])

    # A run with a final evaluation in its checkpoint counts that one, not its last row.
    def evaluated(payload):
        payload["evaluation"] = {
            "env_steps": 200,
            "episodes": 2,
            "return_mean": 95.0,
            "return_std": 1.0,
            "episode_length_mean": 10.0,
            "success_rate": None,
        }

    os.replace(checkpoint_file(evaluated), root / "fast" / "model_fast_seed2.pt")
    finals["fast"][2] = 95.0
    plot, report = tmp_path / "plots" / "curves.png", tmp_path / "compare.json"
    result = invoke(
        "compare",
        str(root / "fast"),
        str(root / "slow"),
        "--plot",
        str(plot),
        "--json",
        str(report),
    )
    assert result.exit_code == 0, result.output
    assert "P(improve) [interval]" in result.output and "IQM [interval]" in result.output
    assert "fast on InvertedPendulum-v5: 100 / 120 / 95\n" in result.output
    assert f"curves: {plot}" in result.output
    document = json.loads(report.read_text())
    assert document["reference_group"] == "fast"
    groups = {group["group"]: group for group in document["groups"]}
    assert [run["final_return"] for run in groups["fast"]["runs"]] == finals["fast"]
    assert groups["fast"]["runs"][2]["final_source"] == "final evaluation"
    assert groups["slow"]["runs"][0]["final_source"] == "last periodic evaluation"
    for group, values in finals.items():
        interval = bootstrap_interval([values], "iqm")
        assert groups[group]["iqm"] == pytest.approx(interquartile_mean(values))
        assert groups[group]["median"] == float(np.median(values))
        assert groups[group]["iqm_interval"] == [interval.low, interval.high]
    improvement = groups["slow"]["probability_of_improvement"]
    assert improvement["value"] == probability_of_improvement(finals["slow"], finals["fast"])
    assert groups["fast"]["probability_of_improvement"] is None
    assert plot.read_bytes()[:8] == PNG_MAGIC and plot.stat().st_size > 10_000


def test_reference_names_the_group_the_others_are_measured_against(tmp_path):
    """One folder whose groups come in name order: ``--reference`` puts the named one first
    (the JSON's reference, P(improve) against it); a name that is no group is one line that
    lists the groups, and nothing is written."""
    root = tmp_path / "runs"
    finals = {"a_variant": [10.0, 30.0, 20.0], "b_preset": [15.0, 25.0, 5.0]}
    for group, values in finals.items():
        for seed, value in enumerate(values):
            write_run(root, f"{group}_seed{seed}", [(100, value)])
    report, plot = tmp_path / "compare.json", tmp_path / "c.png"
    result = invoke(
        "compare", str(root), "--reference", "b_preset", "--plot", str(plot), "--json", str(report)
    )
    assert result.exit_code == 0, result.output
    document = json.loads(report.read_text())
    assert document["reference_group"] == "b_preset"
    assert [group["group"] for group in document["groups"]] == ["b_preset", "a_variant"]
    improvement = document["groups"][1]["probability_of_improvement"]["value"]
    assert improvement == probability_of_improvement(finals["a_variant"], finals["b_preset"])
    plot.unlink()
    report.unlink()
    line = one_error_line(
        invoke(
            "compare",
            str(root),
            "--reference",
            "preset",
            "--plot",
            str(plot),
            "--json",
            str(report),
        )
    )
    assert "--reference 'preset': no such group; the groups are a_variant, b_preset" in line
    assert not plot.exists() and not report.exists()


def test_the_plot_goes_under_output_by_default(tmp_path, monkeypatch):
    """Without ``--plot`` the PNG lands in ``output/`` (git-ignored, where runs go), not in the
    working directory, so comparing inside a checkout leaves no untracked file."""
    for group, values in {"a": [1.0, 2.0], "b": [3.0, 4.0]}.items():
        for seed, value in enumerate(values):
            write_run(tmp_path / "runs", f"{group}_seed{seed}", [(100, value)])
    monkeypatch.chdir(tmp_path)
    result = invoke("compare", "runs")
    assert result.exit_code == 0, result.output
    plot = tmp_path / "output" / "compare.png"
    assert plot.read_bytes()[:8] == PNG_MAGIC
    assert "curves: output/compare.png" in result.output
    assert not (tmp_path / "compare.png").exists()


def test_a_run_without_its_checkpoint_counts_its_final_evaluation_record(tmp_path, checkpoint_file):
    """What a study commits instead of a checkpoint: the record written from the checkpoint
    (``final_evaluation_record``) gives the same final figure, task and seed; a damaged one is
    one line."""
    root = tmp_path / "runs"
    for seed in (0, 1):
        write_run(root, f"kept_seed{seed}", [(100, 10.0), (200, 20.0)])

    def evaluated(payload):
        payload["evaluation"] = {
            "env_steps": 256,
            "episodes": 2,
            "return_mean": 42.5,
            "return_std": 1.0,
            "episode_length_mean": 10.0,
            "success_rate": None,
        }

    record = final_evaluation_record(checkpoint_file(evaluated))
    assert (record["env_id"], record["return_mean"], record["env_steps"]) == (
        "InvertedPendulum-v5",
        42.5,
        256,
    )
    path = record_path(root / "metrics_kept_seed1.csv")
    assert path.name == "final_evaluation_kept_seed1.json"
    path.write_text(json.dumps(record))
    runs = {run.name: run for run in find_seed_runs([root])}
    kept = runs["kept_seed1"]
    assert (kept.final_return, kept.final_source, kept.task) == (
        42.5,
        "final evaluation",
        "InvertedPendulum-v5",
    )
    assert kept.seed == record["seed"] and list(kept.curve_steps) == [100, 200, 256]
    assert runs["kept_seed0"].final_source == "last periodic evaluation"
    with pytest.raises(ValueError, match="holds no final evaluation"):
        final_evaluation_record(checkpoint_file(name="plain.pt"))
    path.write_text('{"env_id": "InvertedPendulum-v5", "seed": 1}')
    line = one_error_line(invoke("compare", str(root), "--plot", str(tmp_path / "c.png")))
    assert "final_evaluation_kept_seed1.json: not a final-evaluation record (KeyError" in line


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: root.mkdir(), "no drl run under this folder"),
        (lambda root: write_run(root, "lonely_seed0", [(10, 1.0)]), "has one run"),
        (
            lambda root: [write_run(root, f"x_seed{seed}", []) for seed in (0, 1)],
            "has no deterministic evaluation",
        ),
        (
            lambda root: [
                record_path(write_run(root, f"x_seed{seed}", [(10, 1.0)])).write_text(
                    '{"env_id": "Hopper-v5", "seed": 0, "return_mean": NaN, "env_steps": 10}'
                )
                for seed in (0, 1)
            ],
            "run x_seed0's final evaluation return is nan (final evaluation), which no "
            "statistic can use",
        ),
        (
            lambda root: [
                write_run(root, f"x_seed{seed}", [(10, 1.0)]).write_text("round,env_steps\n1,x\n")
                for seed in (0, 1)
            ],
            "not a readable metrics CSV",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, make, message):
    root = tmp_path / "runs"
    make(root)
    line = one_error_line(invoke("compare", str(root), "--plot", str(tmp_path / "c.png")))
    assert message in line
    assert not (tmp_path / "c.png").exists()


def test_a_missing_path_and_a_file_that_is_no_run_are_one_line(tmp_path):
    assert "no such file or folder" in one_error_line(invoke("compare", str(tmp_path / "none")))
    stray = tmp_path / "notes.txt"
    stray.write_text("hello")
    assert "not a run's metrics CSV or checkpoint" in one_error_line(invoke("compare", str(stray)))


def test_a_group_of_two_tasks_is_refused(tmp_path, checkpoint_file):
    root = tmp_path / "runs"
    for seed in (0, 1):
        write_run(root, f"mixed_seed{seed}", [(10, 1.0)])

    def other_task(payload):
        payload["env"]["id"] = "Hopper-v5"

    os.replace(checkpoint_file(), root / "model_mixed_seed0.pt")
    os.replace(checkpoint_file(other_task, name="other.pt"), root / "model_mixed_seed1.pt")
    line = one_error_line(invoke("compare", str(root), "--plot", str(tmp_path / "c.png")))
    assert "mixes tasks Hopper-v5, InvertedPendulum-v5" in line


@pytest.mark.subprocess
def test_the_fast_set_passes_where_matplotlib_never_ran(tmp_path):
    """``make test-fast`` on a fresh machine: matplotlib has no font cache and builds one
    through a process of its own, which the fast set's guard refuses inside a test
    (tests/conftest.py builds it before the first test). The PNG test, under the guard, in a
    fresh HOME and cache."""
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "DRL_TEST_FAST": "1",
        "HOME": str(home),
        "MPLCONFIGDIR": str(home / "matplotlib"),
        "XDG_CACHE_HOME": str(home / "cache"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
        + ["-m", "not ray and not subprocess", "-n", "0"]
        + [f"{__file__}::test_compare_reports_each_group_writes_its_json_and_png"],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert (home / "matplotlib").is_dir()  # the cache was built there, not found elsewhere


def test_groups_of_two_tasks_are_each_measured_against_their_own_tasks_reference(tmp_path):
    """A return is on its task's scale: with Hopper's and Walker2d's groups in one call, each
    group's P(improve) is against the first group of its own task, the first Walker2d group is a
    reference too, and the note names both; a group of unknown task keeps the first group."""
    root = tmp_path / "runs"
    finals = {
        "hopper_preset": ("Hopper-v5", [3000.0, 1200.0, 3300.0]),
        "hopper_variant": ("Hopper-v5", [3400.0, 3100.0, 2900.0]),
        "walker_preset": ("Walker2d-v5", [5000.0, 4500.0, 3500.0]),
        "walker_variant": ("Walker2d-v5", [4000.0, 5200.0, 4800.0]),
        "unknown": (None, [10.0, 20.0]),
    }
    for group, (task, values) in finals.items():
        for seed, value in enumerate(values):
            csv = write_run(root / group, f"{group}_seed{seed}", [(100, value)])
            if task is not None:
                record = {"env_id": task, "seed": seed, "return_mean": value, "env_steps": 100}
                record_path(csv).write_text(json.dumps(record))
    report = tmp_path / "compare.json"
    folders = [str(root / group) for group in finals]
    result = invoke("compare", *folders, "--plot", str(tmp_path / "c.png"), "--json", str(report))
    assert result.exit_code == 0, result.output
    groups = {group["group"]: group for group in json.loads(report.read_text())["groups"]}
    assert {name: group["reference"] for name, group in groups.items()} == {
        "hopper_preset": None,
        "hopper_variant": "hopper_preset",
        "walker_preset": None,
        "walker_variant": "walker_preset",
        "unknown": "hopper_preset",
    }
    assert groups["walker_preset"]["probability_of_improvement"] is None
    assert groups["walker_variant"]["probability_of_improvement"]["value"] == (
        probability_of_improvement(finals["walker_variant"][1], finals["walker_preset"][1])
    )
    assert groups["hopper_variant"]["probability_of_improvement"]["value"] == (
        probability_of_improvement(finals["hopper_variant"][1], finals["hopper_preset"][1])
    )
    note = " ".join(result.output.split())
    assert (
        "beats one of the reference of its task: hopper_preset on Hopper-v5, walker_preset on "
        "Walker2d-v5" in note
    )
