"""Success as the task reports it (Method.md, "Success"): the episode outcome by rule, the
success_rate and eval_success_rate columns, the best checkpoint by success rate, play's table,
and the bad paths (a configured key no episode reports, best_by success_rate on a task without
success)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

import tests.range_envs  # noqa: F401  (registers drltest/SuccessPattern-v0)
from drlcli.checkpoints.files import read_checkpoint
from drlcli.cli import app
from drlcli.config import load_config
from drlcli.envs import EnvBatch
from drlcli.errors import ConfigError
from drlcli.metrics.csv_file import read_metrics
from drlcli.success import ANY_STEP, FINAL_STEP, EpisodeSuccess, flag, reported_key, success_rate

PATTERN = "tests.range_envs:drltest/SuccessPattern-v0"


def test_the_rule_reads_any_step_or_the_final_step():
    infos = [{"success": 0.0}, {"success": 1.0}, {"success": 0.0}]
    for when, expected in ((ANY_STEP, True), (FINAL_STEP, False)):
        outcome = EpisodeSuccess(1, None, when)
        for info in infos:
            outcome.step(0, info)
        assert outcome.finish(0) is expected
        assert outcome.finish(0) is None  # forgotten: the next episode starts unseen


def test_the_key_is_the_configured_one_or_success_then_is_success():
    assert reported_key({"is_success": 1, "success": 0}, None) == "success"
    assert reported_key({"is_success": 1}, None) == "is_success"
    assert reported_key({"is_success": 1}, "solved") is None
    assert reported_key({"solved": True}, "solved") == "solved"
    assert [flag(v) for v in (True, 0.0, np.float32(1.0), np.array(1.0), 0)] == [
        True,
        False,
        True,
        True,
        False,
    ]
    outcome = EpisodeSuccess(2, None, ANY_STEP)
    outcome.step(0, {"reward_run": 1.0})  # a task that reports nothing: no outcome
    assert outcome.finish(0) is None


def test_the_success_rate_counts_only_episodes_with_an_outcome():
    assert success_rate([True, None, False, True]) == pytest.approx(2 / 3)
    assert success_rate([None, None]) is None and success_rate([]) is None


def test_an_episode_in_progress_keeps_its_outcome_across_a_resume():
    """EnvBatch's state holds each episode's success so far: a batch restored in episode 1
    after its 5th step (its 4th succeeded; its last will not, the episode being odd) ends it
    succeeded; without the stored outcome it would end failed."""
    actions = np.zeros((1, 1))
    batch = EnvBatch("drltest/SuccessPattern-v0", 1, seed=0, success_when=ANY_STEP)
    for _ in range(8 + 5):
        batch.step(actions)
    state = batch.state_dict()
    restored = EnvBatch("drltest/SuccessPattern-v0", 1, seed=0, success_when=ANY_STEP)
    restored.load_state_dict(state)
    ends = [restored.step(actions).finished_successes for _ in range(3)]
    assert ends == [[], [], [True]]
    fresh = EnvBatch("drltest/SuccessPattern-v0", 1, seed=0, success_when=ANY_STEP)
    fresh.load_state_dict({**state, "episode_success": None})  # a checkpoint from before
    assert [fresh.step(actions).finished_successes for _ in range(3)][-1] == [False]


def pattern_config(tmp_path, algo: str, env_extra: str = "", extra: str = "", total: int = 160):
    params = {
        "ppo": "{num_epochs: 1, num_minibatches: 2, hidden_sizes: [8]}",
        "sac": "{batch_size: 16, warmup_steps: 20, hidden_sizes: [8]}",
    }[algo]
    path = tmp_path / f"{algo}.yaml"
    path.write_text(
        f"algo: {algo}\nenv: {{id: '{PATTERN}', num_envs: 2{env_extra}}}\n"
        f"total_env_steps: {total}\nrollout_length: 40\noutput_dir: {tmp_path / 'out'}\n"
        f"algo_params: {params}\n{extra}"
    )
    return path


def run(path):
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices

    output = io.StringIO()
    config = load_config(path)
    summary = train(
        config,
        quiet=True,
        devices=AvailableDevices(cuda_devices=0, mps=False),
        console=Console(file=output, width=200),
    )
    return config, summary, output.getvalue()


@pytest.mark.usefixtures("ray_cluster")
def test_final_step_success_is_a_column_chooses_the_best_checkpoint_and_play_prints_it(
    tmp_path,
):
    """SAC (no observation warm-up: each env's episodes count from 0): per round each of the 2
    envs ends 5 episodes of 8 steps; by the final step episodes 0, 2, 4 succeed in round 1
    (6 of 10) and 6, 8 in round 2 (4 of 10). The best is round 1's; the final evaluation's 3
    fresh episodes succeed 2 of 3, and so do play's, each episode's outcome in its row."""
    path = pattern_config(
        tmp_path,
        "sac",
        ", success_when: final_step",
        "evaluation: {episodes: 3, best_by: success_rate}\n",
    )
    config, summary, output = run(path)
    rows = read_metrics(config.metrics_path)
    assert [row["success_rate"] for row in rows] == ["0.6", "0.4"]
    assert "eval_success_rate" not in rows[0]  # no periodic evaluation
    best = read_checkpoint(config.best_checkpoint_path)
    assert best.progress.round == 1 and best.progress.best_return == pytest.approx(0.6)
    assert summary.best_criterion == "training success rate"
    latest = read_checkpoint(config.checkpoint_path)
    assert latest.evaluation["success_rate"] == pytest.approx(2 / 3)
    assert summary.final_evaluation.success_rate == pytest.approx(2 / 3)

    result = CliRunner().invoke(
        app,
        [
            "play",
            str(config.checkpoint_path),
            "--episodes",
            "3",
            "--allow-env-module",
            "tests.range_envs",
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    assert any(line.startswith("┃ episode ┃ return ┃ length ┃ success ┃") for line in lines)
    cells = [line.split("│")[4].strip() for line in lines if line.startswith("│")]
    assert cells == ["yes", "no", "yes", "67% (2/3)"]


@pytest.mark.usefixtures("ray_cluster")
def test_any_step_success_with_periodic_evaluation_and_a_tie_broken_by_return(tmp_path):
    """PPO, the key named ``is_success``: by any step every episode succeeded, in training and
    in each evaluation; the evaluations tie at 1.0 and the latest, whose mean return is the
    highest (the reward grows with the evaluator's steps), is the best."""
    path = pattern_config(
        tmp_path,
        "ppo",
        ", kwargs: {key: is_success}",
        "evaluation: {interval_env_steps: 80, episodes: 2, best_by: success_rate}\n",
        total=240,  # one rollout actor of 2 envs: 80 env steps a round
    )
    config, summary, _ = run(path)
    rows = read_metrics(config.metrics_path)
    assert [float(row["success_rate"]) for row in rows] == [1.0, 1.0, 1.0]
    evaluated = [row for row in rows if row["eval_success_rate"]]
    assert len(evaluated) >= 2 and all(float(row["eval_success_rate"]) == 1.0 for row in evaluated)
    best = read_checkpoint(config.best_checkpoint_path)
    assert summary.best_criterion == "evaluation success rate"
    assert best.evaluation["success_rate"] == 1.0
    # The final evaluation (not a CSV row) ties the rate too and has the highest return.
    final_return = summary.final_evaluation.return_mean
    assert final_return > max(float(row["eval_return_mean"]) for row in evaluated)
    assert best.progress.best_tiebreak == pytest.approx(final_return)
    assert best.progress.round == 3


@pytest.mark.usefixtures("ray_cluster")
def test_a_configured_key_no_episode_reports_is_a_warning_after_the_first_round(tmp_path):
    path = pattern_config(tmp_path, "sac", ", success_key: solved")
    config, _, output = run(path)
    assert (
        "warning: env.success_key 'solved': none of the 10 episodes of round 1 reported it in "
        "info; success_rate stays empty"
    ) in output
    assert output.count("warning: env.success_key") == 1
    assert [row["success_rate"] for row in read_metrics(config.metrics_path)] == ["", ""]


def test_best_by_success_rate_on_a_task_without_success_is_one_line(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "algo: ppo\nenv: {id: InvertedPendulum-v5}\ntotal_env_steps: 2048\n"
        f"output_dir: {tmp_path / 'out'}\nevaluation: {{best_by: success_rate}}\n"
    )
    result = CliRunner().invoke(app, ["train", str(path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: evaluation.best_by: success_rate needs a task that reports success; the first "
        "step of InvertedPendulum-v5 has neither info['success'] nor info['is_success'] (name "
        "its key with env.success_key, or use best_by: return)"
    ]
    assert not (tmp_path / "out").exists()


def test_an_unknown_success_rule_is_refused():
    from drlcli.config import config_from_dict

    with pytest.raises(ConfigError, match="env.success_when"):
        config_from_dict({"env": {"success_when": "last"}})


def test_a_checkpoint_from_before_the_success_tiebreak_still_reads(checkpoint_file):
    def older(payload):
        del payload["progress"]["best_tiebreak"]
        payload["evaluation"] = {
            "env_steps": 6144,
            "episodes": 2,
            "return_mean": 1.0,
            "return_std": 0.0,
            "episode_length_mean": 8.0,
        }

    checkpoint = read_checkpoint(checkpoint_file(older))
    assert checkpoint.progress.best_tiebreak is None and checkpoint.progress.round == 3
