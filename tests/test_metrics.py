"""The metric schema, cross-learner aggregation (drlcli/metrics/schema.py) and the metrics CSV
(drlcli/metrics/csv_file.py)."""

from __future__ import annotations

import math

import pytest

from drlcli.algos.flash_sac.algorithm import FLASH_SAC
from drlcli.algos.ppo.algorithm import PPO
from drlcli.errors import TrainingError
from drlcli.metrics.csv_file import MetricsWriter, read_metrics
from drlcli.metrics.schema import average_metrics, check_metric_names, metric_columns

COMMON = [
    "round",
    "env_steps",
    "wall_time_s",
    "sps",
    "episodes",
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_length_mean",
    "rollout_actor_restarts",
]
PPO_COLUMNS = [
    *COMMON,
    "Loss/policy",
    "Loss/value",
    "Loss/entropy",
    "approx_kl",
    "clip_fraction",
    "grad_norm",
    "explained_variance",
    "learning_rate",
    "epochs",
    "buffer_size",
]
FLASH_SAC_COLUMNS = [
    *COMMON,
    "Loss/critic",
    "Loss/actor",
    "Loss/temperature",
    "temperature",
    "entropy",
    "q_mean",
    "learning_rate",
    "updates",
    "updates_per_second",
    "buffer_size",
]


def test_ppo_columns_are_the_documented_ones_in_order():
    assert metric_columns(PPO) == PPO_COLUMNS


def test_flash_sac_columns_end_with_the_aux_losses_sorted():
    assert metric_columns(FLASH_SAC, ["zeta", "action_l2"]) == [
        *FLASH_SAC_COLUMNS,
        "Loss/aux_action_l2",
        "Loss/aux_zeta",
    ]


def test_unknown_names_fail_closed_but_the_aux_family_is_open():
    check_metric_names(["round", "Loss/aux_anything"], PPO)
    with pytest.raises(TrainingError, match="'Loss/made_up' is not in the ppo metric schema"):
        check_metric_names(["round", "Loss/made_up"], PPO)
    with pytest.raises(TrainingError, match="'q_mean' is not in the ppo metric schema"):
        check_metric_names(["q_mean"], PPO)  # another algorithm's name


def test_average_metrics_means_every_name_and_sums_the_buffer_size():
    averaged = average_metrics(
        [
            {"Loss/value": 1.0, "approx_kl": 0.25, "buffer_size": 100.0},
            {"Loss/value": 3.0, "approx_kl": 0.75, "buffer_size": 50.0},
        ]
    )
    assert averaged == {"Loss/value": 2.0, "approx_kl": 0.5, "buffer_size": 150.0}


def test_learners_reporting_different_names_are_an_error():
    with pytest.raises(TrainingError, match="learner 1 reported metrics"):
        average_metrics([{"Loss/aux_a": 1.0}, {"Loss/aux_b": 1.0}])
    with pytest.raises(ValueError, match="no learner metrics"):
        average_metrics([])


def test_writer_truncates_writes_rows_and_formats_missing_values(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("stale contents\n")
    writer = MetricsWriter(path, ["round", "episode_return_mean", "sps"])
    writer.write({"round": 1, "episode_return_mean": None, "sps": 2.5})
    writer.write({"round": 2, "episode_return_mean": math.nan, "sps": 3.0})
    writer.close()
    assert path.read_text().splitlines() == [
        "round,episode_return_mean,sps",
        "1,,2.5",
        "2,,3",
    ]
    assert read_metrics(path)[0] == {"round": "1", "episode_return_mean": "", "sps": "2.5"}


def test_a_name_that_appears_after_the_start_fails_closed_and_writes_nothing(tmp_path):
    path = tmp_path / "m.csv"
    writer = MetricsWriter(path, ["round", "Loss/aux_a"])
    with pytest.raises(TrainingError, match=r"\['Loss/aux_b'\] are not among this run's columns"):
        writer.write({"round": 1, "Loss/aux_b": 0.5})
    writer.close()
    assert path.read_bytes() == b"round,Loss/aux_a\r\n"


def test_resume_appends_under_the_same_header_and_refuses_another(tmp_path):
    path = tmp_path / "m.csv"
    first = MetricsWriter(path, ["round", "sps"])
    first.write({"round": 1, "sps": 1.0})
    first.close()
    resumed = MetricsWriter(path, ["round", "sps"], append=True)
    resumed.write({"round": 2, "sps": 2.0})
    resumed.close()
    assert [row["round"] for row in read_metrics(path)] == ["1", "2"]
    before = path.read_bytes()
    with pytest.raises(TrainingError, match="existing metrics columns differ"):
        MetricsWriter(path, ["round", "episodes"], append=True)  # sps would be lost
    assert path.read_bytes() == before


def test_evaluation_columns_follow_the_common_ones_when_evaluation_is_periodic():
    assert metric_columns(PPO, evaluation=True) == [
        *COMMON,
        "eval_return_mean",
        "eval_return_std",
        "eval_episode_length_mean",
        "eval_env_steps",
        *PPO_COLUMNS[len(COMMON) :],
    ]


def test_success_columns_follow_the_common_and_the_evaluation_ones_of_a_task_with_success():
    assert metric_columns(PPO, success=True) == [
        *COMMON,
        "success_rate",
        *PPO_COLUMNS[len(COMMON) :],
    ]
    assert metric_columns(PPO, evaluation=True, success=True) == [
        *COMMON,
        "success_rate",
        "eval_return_mean",
        "eval_return_std",
        "eval_episode_length_mean",
        "eval_env_steps",
        "eval_success_rate",
        *PPO_COLUMNS[len(COMMON) :],
    ]


def test_a_resume_that_adds_columns_keeps_every_earlier_row_under_the_new_header(tmp_path):
    path = tmp_path / "m.csv"
    first = MetricsWriter(path, ["round", "sps"])
    first.write({"round": 1, "sps": 1.5})
    first.close()
    resumed = MetricsWriter(path, ["round", "eval_return_mean", "sps"], append=True)
    resumed.write({"round": 2, "eval_return_mean": 9.0, "sps": 2.5})
    resumed.close()
    assert read_metrics(path) == [
        {"round": "1", "eval_return_mean": "", "sps": "1.5"},
        {"round": "2", "eval_return_mean": "9", "sps": "2.5"},
    ]


def test_a_resumed_writer_drops_a_torn_line_and_the_rounds_after_its_checkpoint(tmp_path):
    path = tmp_path / "metrics.csv"
    first = MetricsWriter(path, ["round", "sps"])
    for round_number in (1, 2, 3):
        first.write({"round": round_number, "sps": 10.0 * round_number})
    first.close()
    with path.open("a") as handle:
        handle.write("4,4")  # a kill in the middle of writing round 4
    # The checkpoint holds round 2: round 3's row was written, its checkpoint never was.
    resumed = MetricsWriter(path, ["round", "sps"], append=True, resume_round=2)
    assert resumed.dropped_rounds == ["3"]
    resumed.write({"round": 3, "sps": 31.0})
    resumed.close()
    assert path.read_text() == "round,sps\n1,10\n2,20\n3,31\n"


def test_a_resumed_writer_keeps_everything_up_to_its_round(tmp_path):
    path = tmp_path / "metrics.csv"
    first = MetricsWriter(path, ["round", "sps"])
    first.write({"round": 1, "sps": 1.5})
    first.close()
    before = path.stat().st_mtime_ns, path.read_text()
    MetricsWriter(path, ["round", "sps"], append=True, resume_round=1).close()
    assert (path.stat().st_mtime_ns, path.read_text()) == before  # not rewritten
