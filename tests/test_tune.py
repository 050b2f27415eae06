"""``drl tune``: the search's pure parts, its command line, and a small search through Ray Tune
in the shared Ray session."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drlcli.cli import app
from drlcli.config import config_from_dict, load_config
from drlcli.errors import ConfigError
from drlcli.tune.search import (
    SeedBarrier,
    TrialFiles,
    TrialReports,
    TrialStop,
    decode_values,
    encode_choices,
    objective_of,
    plan_trials,
    trial_resources,
    tune_space,
)
from drlcli.tune.settings import SearchSettings, parse_search_settings
from drlcli.tune.space import Dimension

runner = CliRunner(env={"COLUMNS": "200"})
CONFIG = """
algo: ppo
env: {id: InvertedPendulum-v5, num_envs: 2, seed: 3}
total_env_steps: 256
rollout_length: 64
output_dir: OUT
evaluation: {episodes: 2}
algo_params: {num_epochs: 2, num_minibatches: 4, hidden_sizes: [16, 16]}
"""
SPACE = """
space:
  algo_params.learning_rate: {loguniform: [1.0e-5, 3.0e-3]}
  algo_params.hidden_sizes: {choice: [[16, 16], [32, 32]]}
search: {trials: 2, evaluations_per_trial: 2, objective_evaluations: 2, grace_evaluations: 1,
         retrain_top: 1, retrain_seeds: [10]}
"""


@pytest.fixture
def files(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(CONFIG.replace("OUT", str(tmp_path / "out")))
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    return config, space


def test_choices_a_searcher_cannot_hold_travel_as_json_text():
    encoded, decode = encode_choices([[64, 64], None, "relu", 3, {"a": 1}])
    assert encoded == ["[64, 64]", None, "relu", 3, '{"a": 1}']
    dimensions = [
        Dimension("algo_params.hidden_sizes", "choice", ([64, 64], [256, 256])),
        Dimension("gamma", "uniform", (0.9, 0.99)),
    ]
    assert decode_values({"algo_params.hidden_sizes": "[256, 256]", "gamma": 0.95}, dimensions) == {
        "algo_params.hidden_sizes": [256, 256],
        "gamma": 0.95,
    }


def test_ray_tune_domains_keep_each_kind_and_int_ranges_include_high():
    space = tune_space(
        [
            Dimension("a", "int", (2, 4)),
            Dimension("b", "loguniform", (1e-5, 1e-3)),
            Dimension("c", "uniform", (0.1, 0.3)),
            Dimension("d", "choice", ([1, 2], "x")),
        ]
    )
    samples = [space["a"].sample() for _ in range(200)]
    assert set(samples) == {2, 3, 4}
    assert all(1e-5 <= space["b"].sample() <= 1e-3 for _ in range(50))
    assert all(0.1 <= space["c"].sample() <= 0.3 for _ in range(50))
    assert set(space["d"].categories) == {"[1, 2]", "x"}


def reports_of(seeds: int, **settings) -> tuple[TrialReports, list[dict]]:
    """A trial's reports of ``seeds`` seeds, without Ray or files (no checkpoint to carry)."""
    sent: list[dict] = []
    files = [
        TrialFiles(f"seed_{seed}", Path("/nowhere/model.pt"), Path("b"), Path("m"))
        for seed in range(seeds)
    ]
    settings = parse_search_settings(
        {"seeds_per_trial": seeds, **settings}, config_from_dict({"env": {"seed": 100}})
    )
    return TrialReports("trial_001", files, settings, sent.append), sent


def test_the_objective_is_the_mean_of_the_last_evaluations():
    assert objective_of([10.0, 20.0, 60.0], 2) == 40.0
    assert objective_of([10.0], 3) == 10.0
    reports, sent = reports_of(1, objective_evaluations=2)
    (reporter,) = reports.reporters
    reporter.write({"eval_return_mean": None, "eval_env_steps": None})  # no evaluation: no report
    reporter.write({"eval_return_mean": 10.0, "eval_env_steps": 256})
    assert sent == []  # sent with the checkpoint of its round, written after the row
    reporter.write({"eval_return_mean": 30.0, "eval_env_steps": 512})
    assert len(sent) == 1
    reporter.finish(50.0, 1024)  # the last row's evaluation, then the final one
    assert sent == [
        {"objective": 10.0, "evaluation_return": 10.0, "env_steps": 256},
        {"objective": 20.0, "evaluation_return": 30.0, "env_steps": 512},
        {"objective": 40.0, "evaluation_return": 50.0, "env_steps": 1024},
    ]


def test_a_trial_of_several_seeds_reports_once_all_reached_the_point():
    """Two seeds in threads: nothing goes out until both evaluated at a point; the objective
    is the mean over the seeds of each one's mean of its last 2 evaluations."""
    import threading

    reports, sent = reports_of(2, objective_evaluations=2)
    first, second = reports.reporters
    assert reports.settings.objective_aggregate == "mean"  # below 4 seeds
    first.write({"eval_return_mean": 10.0, "eval_env_steps": 100})
    waiting = threading.Thread(
        target=first.write, args=({"eval_return_mean": 30.0, "eval_env_steps": 200},)
    )
    waiting.start()  # point 1 arrives: it waits for the other seed
    waiting.join(timeout=0.5)
    assert waiting.is_alive() and sent == []
    second.write({"eval_return_mean": 50.0, "eval_env_steps": 100})
    second.write({"eval_return_mean": 70.0, "eval_env_steps": 200})  # point 1 complete
    waiting.join(timeout=5)
    assert not waiting.is_alive()
    assert sent == [{"objective": 30.0, "evaluation_return": 30.0, "env_steps": 100}]
    finishing = threading.Thread(target=first.finish, args=(None, 200))
    finishing.start()
    second.finish(None, 200)
    finishing.join(timeout=5)
    # Seed 1: mean(10, 30) = 20; seed 2: mean(50, 70) = 60; the trial: 40.
    assert sent[1] == {"objective": 40.0, "evaluation_return": 50.0, "env_steps": 200}


def test_four_seeds_aggregate_by_the_iqm_and_a_named_aggregate_wins():
    reports, sent = reports_of(4, objective_evaluations=1)
    assert reports.settings.objective_aggregate == "iqm"
    for reporter, value in zip(reports.reporters, (0.0, 10.0, 20.0, 1000.0), strict=True):
        reporter.returns.append(value)
        reporter.env_steps = 64
    assert reports.metrics()["objective"] == 15.0  # the middle two
    median, _ = reports_of(4, objective_aggregate="median")
    assert median.settings.objective_aggregate == "median"


def test_a_seed_that_fails_or_a_stopped_report_ends_every_seed_of_the_trial():
    import threading

    barrier = SeedBarrier(2, lambda point: None)
    outcome: list[BaseException] = []

    def arrive():
        try:
            barrier.arrive(0)
        except BaseException as error:
            outcome.append(error)

    waiting = threading.Thread(target=arrive)
    waiting.start()
    barrier.stop(RuntimeError("seed 1 failed"))
    waiting.join(timeout=5)
    assert [type(error) for error in outcome] == [TrialStop]
    with pytest.raises(TrialStop):  # and any later arrival
        barrier.arrive(1)

    def stopped_by_ray_tune(point):
        raise SystemExit(0)

    barrier, outcome = SeedBarrier(2, stopped_by_ray_tune), []
    waiting = threading.Thread(target=arrive)
    waiting.start()
    with pytest.raises(SystemExit):  # the seed that reported
        barrier.arrive(1)
    waiting.join(timeout=5)
    assert [type(error) for error in outcome] == [TrialStop]  # the seed that waited


def test_a_seed_whose_run_ended_early_counts_as_arrived():
    sent: list[int] = []
    barrier = SeedBarrier(2, sent.append)
    barrier.leave(1)  # a stop rule ended seed 1's run
    barrier.arrive(0)
    barrier.arrive(0)
    assert sent == [1, 2]


def test_search_settings_are_checked_against_the_config():
    config = config_from_dict({"env": {"id": "InvertedPendulum-v5", "seed": 1000}})
    with pytest.raises(ConfigError, match="search.retrain_seeds: 1000 is the config's env.seed"):
        parse_search_settings({}, config)
    other = config_from_dict({"env": {"id": "InvertedPendulum-v5"}})
    assert parse_search_settings(None, other) == SearchSettings(objective_aggregate="mean")
    # A trial's seeds run from env.seed: none of them may be re-trained on.
    with pytest.raises(
        ConfigError,
        match=r"search.retrain_seeds: 1002 is one of the seeds the trials train on \(1000-1003\)",
    ):
        parse_search_settings({"seeds_per_trial": 4, "retrain_seeds": [5, 1002]}, config)
    # Unset, the objective's evaluations are at most the trial's.
    assert parse_search_settings({"evaluations_per_trial": 2}, other).objective_evaluations == 2
    # Population-based training samples its population at random.
    assert parse_search_settings({"scheduler": "pbt"}, other).searcher == "random"
    for raw, message in [
        ({"trails": 3}, "search.trails: unknown key; did you mean 'trials'?"),
        ({"searcher": "grid"}, "search.searcher: expected one of optuna, random"),
        ({"scheduler": "hyperband"}, "search.scheduler: expected one of asha, pbt, none"),
        ({"scheduler": "pbt", "searcher": "optuna"}, "search.searcher: population-based"),
        ({"scheduler": "pbt", "quantile_fraction": 0.6}, "search.quantile_fraction: must be"),
        ({"retrain_seeds": [1, 1]}, "search.retrain_seeds: a seed is repeated"),
        ({"retrain_seeds": []}, "give seeds to re-train on, or retrain_top: 0"),
        ({"objective_evaluations": 5, "evaluations_per_trial": 4}, "5 is more than"),
        ({"cpus_per_trial": 0}, "search.cpus_per_trial: must be > 0"),
        ({"seeds_per_trial": 0}, "search.seeds_per_trial: must be"),
        ({"objective_aggregate": "max"}, "search.objective_aggregate: expected one of iqm"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_search_settings(raw, other)


def test_a_trial_reserves_its_processes_cpus_and_trains_on_its_own_budget(tmp_path):
    base = {"env": {"id": "InvertedPendulum-v5", "seed": 3}, "num_actors": 2, "name": "b"}
    config = config_from_dict(base)
    plan = plan_trials(base, config, [], SearchSettings(trial_env_steps=5000, cpus_per_trial=1.5))
    assert (plan.env_steps, plan.evaluation_interval) == (5000, 500)
    bundles = trial_resources(config, plan.settings).bundles
    # The trial's own process, then two rollout actors, the learner and the evaluator: 1.5 CPUs
    # in all, so that two such trials run side by side on 3 CPUs.
    assert bundles == [{"CPU": 1e-4}] + [{"CPU": 0.3749}] * 4
    assert sum(bundle["CPU"] for bundle in bundles) <= 1.5
    trial = plan.trial_config({"gamma": 0.9}, tmp_path, seed=7)
    assert (trial.gamma, trial.env.seed, trial.total_env_steps) == (0.9, 7, 5000)
    assert trial.output_dir == str(tmp_path) and trial.evaluation.interval_env_steps == 500
    # The sinks name a trial <search>/<trial> (its folder is <search>/trials/<trial>).
    named = plan.trial_config({}, tmp_path / "search_x" / "trials" / "trial_004", seed=7)
    assert named.logging.run_name == "search_x/trial_004"
    # Three seeds side by side: three runs' processes share the trial's 1.5 CPUs; each seed
    # writes into a folder of its own, named in the sinks too.
    three = dataclasses.replace(plan.settings, seeds_per_trial=3)
    assert (
        trial_resources(config, three, seeds=3).bundles == [{"CPU": 1e-4}] + [{"CPU": 0.1249}] * 12
    )
    assert dataclasses.replace(plan, settings=three).trial_seeds == (3, 4, 5)
    seed = plan.trial_config({}, tmp_path / "search_x" / "trials" / "trial_004", 4, "seed_4")
    assert seed.output_dir == str(tmp_path / "search_x" / "trials" / "trial_004" / "seed_4")
    assert seed.logging.run_name == "search_x/trial_004/seed_4" and seed.env.seed == 4


def test_dry_run_prints_the_plan_and_starts_nothing(files, tmp_path):
    config, space = files
    result = runner.invoke(app, ["tune", str(config), str(space), "--dry-run", "--trials", "5"])
    assert result.exit_code == 0, result.output
    assert "algo_params.learning_rate" in result.output and "loguniform" in result.output
    assert "5, 256 env steps each" in result.output and "every 128 env steps" in result.output
    assert "ASHA, after 1 evaluation" in result.output
    assert "seeds per trial │ 1 (seed 3)" in result.output
    assert "mean return of the last 2 evaluations" in result.output
    space.write_text(SPACE.replace("trials: 2,", "trials: 2, seeds_per_trial: 4,"))
    result = runner.invoke(app, ["tune", str(config), str(space), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "seeds per trial │ 4 (seeds 3-6, side by side)" in result.output
    assert "IQM over the seeds of each one's mean return of the last 2" in result.output
    assert "CPUs per trial  │ 1, shared by its 4 seeds' runs" in result.output
    assert not (tmp_path / "out").exists()


def test_set_changes_the_base_config_of_every_trial(files, tmp_path):
    """``drl tune --set``: keys set over the config before the plan (the trials' seeds follow
    the new env.seed, the folder its name); a wrong key is one line naming the --set."""
    from drlcli.tune.runner import prepare_search

    config, space = files
    plan = prepare_search(config, space, overrides={"env.seed": 40, "name": "smaller"})
    assert plan.trial_seeds == (40,) and plan.base["name"] == "smaller"
    trial = plan.trial_config({}, tmp_path / "search_smaller" / "trials" / "trial_001", 40)
    assert trial.env.seed == 40
    result = runner.invoke(app, ["tune", str(config), str(space), "--set", "gama=0.9", "--dry-run"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {config} with --set gama: gama: unknown key; did you mean 'gamma'?"
    ]


def test_bad_files_are_one_line_errors_before_any_trial(files, tmp_path):
    config, space = files
    space.write_text("space:\n  algo_params.learning_rate: {uniform: [0.01, 0.001]}\n")
    result = runner.invoke(app, ["tune", str(config), str(space)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {space}: space.algo_params.learning_rate: low must be below high; got "
        "[0.01, 0.001]"
    ]
    missing = runner.invoke(app, ["tune", str(config), str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and "search space file not found" in missing.output
    assert not (tmp_path / "out").exists()


def test_a_trial_whose_round_cannot_hold_its_minibatches_is_refused_before_any(files, tmp_path):
    """A round of 2 envs x 64 steps holds 128 minibatches at most: the range's high end, a
    combination of two keys each fine alone, and the search's own config are each refused in
    one line before anything starts, as the trial's own start would refuse them."""
    config, space = files

    def tune_lines(space_text: str) -> list[str]:
        space.write_text(space_text)
        result = runner.invoke(app, ["tune", str(config), str(space), "--dry-run"])
        assert result.exit_code == 2, result.output
        return result.output.strip().splitlines()

    assert tune_lines("space:\n  algo_params.num_minibatches: {int: [2, 512]}\n") == [
        f"error: {space}: space: a trial with algo_params.num_minibatches 512 is refused: "
        "algo_params.num_minibatches: 512 is more than the 128 env steps a learner trains on "
        "each round (env.num_envs 2 x rollout_length 64 x 1 rollout actor(s)); use at most "
        "128, or a longer round"
    ]
    both = tune_lines(
        "space:\n  rollout_length: {choice: [8, 64]}\n"
        "  algo_params.num_minibatches: {choice: [4, 32]}\n"
    )
    assert both[0].startswith(
        f"error: {space}: space: a trial with rollout_length 8, algo_params.num_minibatches 32 "
        "is refused: algo_params.num_minibatches: 32 is more than the 16 env steps"
    )
    assert tune_lines("space:\n  num_gpus: {choice: [1, 2]}\n") == [
        f"error: {space}: space: a trial with num_gpus 2 is refused: actors_per_gpu: must be "
        "set when num_gpus > 1 (num_gpus=2, num_actors=1); num_actors must equal num_gpus * "
        "actors_per_gpu"
    ]
    space.write_text(SPACE)
    config.write_text(config.read_text().replace("num_minibatches: 4", "num_minibatches: 129"))
    result = runner.invoke(app, ["tune", str(config), str(space), "--dry-run"])
    assert result.exit_code == 2
    assert result.output.startswith(
        f"error: {config}: algo_params.num_minibatches: 129 is more than the 128 env steps"
    )
    assert not (tmp_path / "out").exists()


def test_past_the_combinations_it_checks_each_searched_value_alone(files, monkeypatch):
    """A space of more combinations than TRIAL_CORNERS_CHECKED has each key's values checked
    alone against the config: a value too large alone is still refused before any trial, a
    pair too large only together is left to the trial's own start."""
    import drlcli.tune.runner as tune_runner

    config, space = files
    monkeypatch.setattr(tune_runner, "TRIAL_CORNERS_CHECKED", 1)
    space.write_text("space:\n  algo_params.num_minibatches: {int: [2, 512]}\n")
    with pytest.raises(ConfigError, match="a trial with algo_params.num_minibatches 512 is"):
        tune_runner.prepare_search(config, space)
    space.write_text(
        "space:\n  rollout_length: {choice: [8, 64]}\n"
        "  algo_params.num_minibatches: {choice: [4, 32]}\n"
    )
    assert len(tune_runner.prepare_search(config, space).dimensions) == 2


def test_a_searched_setting_that_some_trials_do_not_read_is_left_out_of_theirs(files, tmp_path):
    """desired_kl is read only under adaptive_kl, anneal_learning_rate only under anneal: a
    space that searches the schedule with desired_kl is accepted, and each trial's config (and
    so a winner's) holds only what that trial reads, which drl train takes; a setting no trial
    could read is refused."""
    from drlcli.tune.runner import prepare_search

    config, space = files
    config.write_text(
        config.read_text().replace("num_epochs: 2", "num_epochs: 2, anneal_learning_rate: false")
    )
    space.write_text(
        "space:\n  algo_params.learning_rate_schedule: {choice: [anneal, adaptive_kl]}\n"
        "  algo_params.desired_kl: {choice: [0.005, 0.02]}\n"
    )
    plan = prepare_search(config, space)
    folder = tmp_path / "search_x" / "trials" / "trial_001"
    anneal = plan.trial_config(
        {"algo_params.learning_rate_schedule": "anneal", "algo_params.desired_kl": 0.02}, folder, 3
    ).algo_params
    assert (anneal.desired_kl, anneal.anneal_learning_rate) == (0.01, False)
    adaptive = plan.trial_config(
        {"algo_params.learning_rate_schedule": "adaptive_kl", "algo_params.desired_kl": 0.02},
        folder,
        3,
    ).algo_params
    assert (adaptive.desired_kl, adaptive.anneal_learning_rate) == (0.02, True)
    space.write_text("space:\n  algo_params.desired_kl: {choice: [0.005, 0.02]}\n")
    with pytest.raises(ConfigError) as refused:
        prepare_search(config, space)
    assert str(refused.value) == (
        f"{space}: space.algo_params.desired_kl: read only with "
        "algo_params.learning_rate_schedule: adaptive_kl, which neither the config nor the "
        "space gives any trial; set it in the config, or search it too"
    )


def test_pbt_keeps_perturbed_values_in_their_ranges():
    from drlcli.tune.runner import clip_to_space

    dimensions = [
        Dimension("lr", "loguniform", (1e-5, 1e-3)),
        Dimension("epochs", "int", (4, 12)),
        Dimension("width", "choice", ("[8]", "[16]")),
    ]
    perturbed = {"lr": 1.2e-3, "epochs": 3, "width": "[16]"}
    assert clip_to_space(perturbed, dimensions) == {"lr": 1e-3, "epochs": 4, "width": "[16]"}
    assert clip_to_space({"lr": 2e-4, "epochs": 7, "width": "[8]"}, dimensions)["lr"] == 2e-4


@pytest.mark.subprocess  # the probe makes the env; gymnasium's MuJoCo loads glfw, which does
def test_pbt_refuses_a_key_whose_values_a_resume_cannot_take(files, tmp_path):
    """Population-based training resumes trials with other values: a value that changes the
    policy actor (its widths, say) or another network (PPO's value network) is refused before
    anything starts, naming the key."""
    config, space = files

    def dry_run(space_text: str):
        space.write_text(space_text)
        return runner.invoke(app, ["tune", str(config), str(space), "--dry-run"])

    result = dry_run(
        "space:\n  algo_params.learning_rate: {loguniform: [1.0e-4, 1.0e-3]}\n"
        "  algo_params.hidden_sizes: {choice: [[16, 16], [32, 32]]}\n"
        "search: {scheduler: pbt}\n"
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {space}: space.algo_params.hidden_sizes: [32, 32] changes the policy actor's "
        "architecture and semantics, which population-based training cannot do as a trial "
        "resumes from a checkpoint: search this key with scheduler: asha or none"
    ]
    # The value network is not in the actor semantics; a resume refuses other widths too.
    result = dry_run(
        "space: {algo_params.value_hidden_sizes: {choice: [[16, 16], [32]]}}\n"
        "search: {scheduler: pbt}\n"
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {space}: space.algo_params.value_hidden_sizes: [32] changes ppo's "
        "value_network_hidden_sizes (a network beyond the policy actor), which a trial resuming "
        "from another's checkpoint cannot take: search this key with scheduler: asha or none"
    ]
    result = dry_run(
        "space: {algo_params.learning_rate: {loguniform: [1.0e-4, 1.0e-3]}}\n"
        "search: {scheduler: pbt, perturbation_evaluations: 1}\n"
    )
    assert result.exit_code == 0, result.output
    # Under adaptive_kl a resume keeps the step size it reached: PBT could not change it.
    adaptive = config.read_text().replace(
        "hidden_sizes:", "learning_rate_schedule: adaptive_kl, hidden_sizes:"
    )
    config.write_text(adaptive)
    refused = dry_run(
        "space: {algo_params.learning_rate: {loguniform: [1.0e-4, 1.0e-3]}}\n"
        "search: {scheduler: pbt}\n"
    )
    assert refused.exit_code == 2
    (line,) = refused.output.strip().splitlines()
    assert line.startswith(
        f"error: {space}: space.algo_params.learning_rate: a trial resuming from another's "
        "checkpoint does not read learning_rate"
    ), line
    config.write_text(adaptive.replace("learning_rate_schedule: adaptive_kl, ", ""))
    result = dry_run(
        "space: {algo_params.learning_rate: {loguniform: [1.0e-4, 1.0e-3]}}\n"
        "search: {scheduler: pbt, perturbation_evaluations: 1}\n"
    )
    assert result.exit_code == 0, result.output
    assert "PBT: every 1 evaluation, the bottom 25% continue from the top 25%" in result.output
    assert "random" in result.output


@pytest.mark.usefixtures("ray_cluster")
def test_a_run_inside_a_trials_placement_group_places_every_process_in_it():
    """What a trial's drl train asks of Ray: each process in the trial's placement group, the
    CPU share fitted to its bundles, one torch thread per learner of a one-CPU trial."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from drlcli.runtime.resources import process_resources
    from drlcli.topology import AvailableDevices, topology_for_config

    config = config_from_dict({"env": {"id": "InvertedPendulum-v5"}, "num_actors": 2})
    topology = topology_for_config(config, AvailableDevices(cuda_devices=0, mps=False))
    group = placement_group([{"CPU": 1e-4}] + [{"CPU": 0.25}] * 4)
    ray.get(group.ready())
    try:
        inside = PlacementGroupSchedulingStrategy(group, placement_group_capture_child_tasks=True)
        resources = ray.get(
            ray.remote(process_resources)
            .options(num_cpus=0, scheduling_strategy=inside)
            .remote(topology, True)
        )
        # Two seeds of a trial side by side in the same group: each run takes half of it.
        halves = ray.get(
            ray.remote(process_resources)
            .options(num_cpus=0, scheduling_strategy=inside)
            .remote(topology, True, concurrent_runs=2)
        )
    finally:
        remove_placement_group(group)
    assert halves.cpu_share == 0.125 and halves.learner["num_cpus"] == 0.125
    assert halves.learner_torch_threads == 1
    assert resources.cpu_share == 0.25 and resources.cpu_processes == 4
    for options in (resources.learner, resources.rollout_actor):
        strategy = options["scheduling_strategy"]
        assert isinstance(strategy, PlacementGroupSchedulingStrategy)
        assert strategy.placement_group.id == group.id
        assert options["num_cpus"] == 0.25
    assert resources.learner_torch_threads == 1
    outside = process_resources(topology, True)  # this session's two CPUs, spread
    assert outside.rollout_actor["scheduling_strategy"] == "SPREAD"
    assert "scheduling_strategy" not in outside.learner


PAUSED_CONFIG = """
algo: ppo
env: {id: 'tests.range_envs:drltest/PauseAt-v0', num_envs: 2, seed: 3,
      kwargs: {at_step: 200, marker_dir: 'MARKERS'}}
total_env_steps: 320
rollout_length: 40
output_dir: OUT
evaluation: {episodes: 2}
algo_params: {num_epochs: 1, num_minibatches: 2, hidden_sizes: [8]}
"""
ONE_TRIAL = """
space: {algo_params.learning_rate: {loguniform: [1.0e-4, 1.0e-3]}}
search: {trials: 1, searcher: random, scheduler: none, evaluations_per_trial: 4, retrain_top: 0,
         seeds_per_trial: 2}
"""


@pytest.mark.usefixtures("ray_cluster")
def test_an_interrupted_search_resumes_to_the_results_of_one_never_stopped(tmp_path):
    """A trial of two seeds side by side. SIGTERM while their envs wait in round 4 (the
    warm-up's 64 steps, then 40 a round; after the trial's first report and checkpoint, which
    goes out at round 3): SearchInterrupted (exit 143), the folder kept; --resume continues
    each seed from the trial's last checkpoint, and each seed's metrics rows equal those of the
    same config and seed trained in one go, the evaluations included (one per round, so each
    row shows the previous round's); the objective is the mean over the seeds of each one's
    mean of its last 3 evaluations."""
    import json
    import os
    import signal
    import threading
    import time

    from drlcli.errors import SearchInterrupted, UsageError
    from drlcli.metrics.csv_file import read_metrics
    from drlcli.metrics.schema import TIME_COLUMNS
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices
    from drlcli.tune.runner import prepare_search, run_search

    markers = tmp_path / "markers"
    markers.mkdir()
    config = tmp_path / "paused.yaml"
    config.write_text(
        PAUSED_CONFIG.replace("MARKERS", str(markers)).replace("OUT", str(tmp_path / "out"))
    )
    space = tmp_path / "space.yaml"
    space.write_text(ONE_TRIAL)
    plan, folder = prepare_search(config, space), tmp_path / "search"
    trial = folder / "trials" / "trial_001"

    def stop_when_paused():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(markers.glob("reached-*")) and any(trial.glob("checkpoint_*")):
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=stop_when_paused, daemon=True)
    watcher.start()
    with pytest.raises(SearchInterrupted) as stopped:
        run_search(plan, folder, quiet=True)
    watcher.join()
    assert stopped.value.exit_code == 143
    assert str(stopped.value).startswith("search stopped by SIGTERM; the trials' checkpoints")
    with pytest.raises(UsageError, match="already holds a search: continue it with --resume"):
        run_search(plan, folder, quiet=True)
    (markers / "release").touch()  # from here on the env never waits
    summary = run_search(plan, folder, resume=True, quiet=True)
    with open(summary.results_csv) as handle:
        (result,) = list(csv.DictReader(handle))
    assert (result["state"], result["env_steps"]) == ("finished", "320")

    values = {"algo_params.learning_rate": float(result["algo_params.learning_rate"])}
    objectives = []
    for seed in (3, 4):
        whole = plan.trial_config(values, tmp_path / "whole", seed, f"seed_{seed}")
        devices = AvailableDevices(cuda_devices=0, mps=False)
        whole_summary = train(whole, quiet=True, devices=devices)
        whole_rows = read_metrics(whole.metrics_path)
        assert [row["eval_env_steps"] for row in whole_rows] == ["", "80", "160", "240"]
        last_three = [float(row["eval_return_mean"]) for row in whole_rows[2:]]
        last_three.append(whole_summary.final_evaluation.return_mean)
        objectives.append(sum(last_three) / 3)
        rows = read_metrics(trial / f"seed_{seed}" / "metrics_trial.csv")
        assert len(rows) == len(whole_rows) == 4
        for row, whole_row in zip(rows, whole_rows, strict=True):
            for column in whole_row:
                if column not in TIME_COLUMNS:
                    assert row[column] == whole_row[column], (seed, row["round"], column)
    assert objectives[0] != objectives[1]  # two seeds, two runs
    assert float(result["objective"]) == pytest.approx(sum(objectives) / 2, rel=1e-12)
    # drl compare on runs of the tests' own: the trial's seeds are a group; so are the same
    # seeds trained in one go, whose final evaluations are the same, so neither improves.
    report = tmp_path / "compare.json"
    compared = runner.invoke(
        app,
        [
            "compare",
            str(folder),
            str(tmp_path / "whole"),
            "--json",
            str(report),
            "--plot",
            str(tmp_path / "curves.png"),
        ],
    )
    assert compared.exit_code == 0, compared.output
    searched, alone = json.loads(report.read_text())["groups"]
    assert (searched["group"], alone["group"]) == ("search search: trial_001", "trial")
    assert [run["seed"] for run in searched["runs"]] == [3, 4]
    assert [run["final_source"] for run in searched["runs"]] == ["final evaluation"] * 2
    finals = [run["final_return"] for run in searched["runs"]]
    assert finals == [run["final_return"] for run in alone["runs"]]
    assert searched["iqm"] == pytest.approx(sum(finals) / 2)
    assert alone["probability_of_improvement"]["value"] == 0.5
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(UsageError, match="no search to resume here"):
        run_search(plan, tmp_path / "elsewhere", resume=True, quiet=True)


PBT_CONFIG = """
algo: ppo
env: {id: InvertedPendulum-v5, num_envs: 2, seed: 3}
num_actors: 1
total_env_steps: 512
rollout_length: 32
output_dir: OUT
evaluation: {episodes: 2}
algo_params: {num_epochs: 1, num_minibatches: 2, hidden_sizes: [8], anneal_learning_rate: false}
"""
PBT_SPACE = """
space: {algo_params.learning_rate: {choice: [1.0e-4, 1.0e-3, 1.0e-2]}}
search: {trials: 2, scheduler: pbt, synchronous: true, quantile_fraction: 0.5,
         evaluations_per_trial: 4, perturbation_evaluations: 3, retrain_top: 1,
         retrain_seeds: [10], seed: 1}
"""


@pytest.mark.usefixtures("ray_cluster")
def test_a_pbt_search_exploits_the_other_trials_weights_and_writes_a_winner_that_trains(
    tmp_path,
):
    """Two trials, perturbed together once (at the evaluation of 384 of 512 env steps): the
    worse one goes on from the better one's checkpoint of the round after (448: a trial waits
    for each evaluation there, so that a loaded machine does not move it to the end of the
    run) with another learning rate. Its weights there are those
    of the better trial's values trained alone to that step, its metrics rows up to there are
    that trial's, and its rows after it train with the new learning rate. The search's results
    (every trial, a drl run in its folder), its re-training of the best on seed 10 and its
    winner config, and the dashboard's group of its trials."""
    import json

    from drlcli.checkpoints.files import read_checkpoint
    from drlcli.metrics.csv_file import read_metrics
    from drlcli.metrics.schema import TIME_COLUMNS
    from drlcli.runtime.training import train
    from drlcli.topology import AvailableDevices
    from drlcli.tune.runner import prepare_search, run_search
    from tests.test_training import EVALUATION_COLUMNS

    config = tmp_path / "pbt.yaml"
    config.write_text(PBT_CONFIG.replace("OUT", str(tmp_path / "out")))
    space = tmp_path / "space.yaml"
    space.write_text(PBT_SPACE)
    plan = prepare_search(config, space)
    summary = run_search(plan, tmp_path / "search", quiet=True)
    with open(summary.results_csv) as handle:
        results = {row["trial"]: row for row in csv.DictReader(handle)}
    assert sorted(results) == ["trial_001", "trial_002"]
    assert {row["state"] for row in results.values()} == {"finished"}
    objectives = [float(row["objective"]) for row in results.values()]  # the file's order
    assert objectives == sorted(objectives, reverse=True)
    for trial, row in results.items():  # each trial is a drl run in its own folder
        trial_config = load_config(f"{row['folder']}/config.yaml")  # its last values
        assert trial_config.algo_params.learning_rate == float(row["algo_params.learning_rate"])
        assert (tmp_path / "search" / "trials" / trial / "model_trial.pt").exists()
    (candidate,) = summary.candidates
    assert list(candidate.seed_returns) == [10] and candidate.trial == next(iter(results))
    winner = load_config(summary.winner_yaml)
    assert winner.name == "pbt_tuned" and winner.total_env_steps == 512
    assert winner.algo_params.learning_rate == summary.winner_values["algo_params.learning_rate"]
    # The dashboard shows the trials as one group (search.yaml marks the folder).
    from drlcli.metrics.runs import find_runs

    found = {(run.group, run.name, run.group_kind) for run in find_runs([tmp_path / "search"])}
    assert {("search search", trial, "trials") for trial in results} <= found

    assert sorted(int(row["exploits"]) for row in results.values()) == [0, 1]
    (exploiting,) = [trial for trial, row in results.items() if row["exploits"] == "1"]
    trials = tmp_path / "search" / "trials"
    with open(trials / exploiting / "exploits.csv") as handle:
        (exploit,) = list(csv.DictReader(handle))
    exploited, env_steps = exploit["exploited"], int(exploit["env_steps"])
    assert exploited != exploiting and env_steps == 448
    new_rate = json.loads(exploit["values"])["algo_params.learning_rate"]
    assert float(results[exploiting]["algo_params.learning_rate"]) == new_rate

    # The exploited trial's values (never perturbed: it was the better one) trained alone.
    donor_rate = float(results[exploited]["algo_params.learning_rate"])
    alone = plan.trial_config({"algo_params.learning_rate": donor_rate}, tmp_path / "alone", 3)
    alone = config_from_dict({**alone.to_dict(), "total_env_steps": env_steps})
    train(alone, quiet=True, devices=AvailableDevices(cuda_devices=0, mps=False))
    resumed = read_checkpoint(trials / exploiting / "resumed_from.pt")
    expected = read_checkpoint(alone.checkpoint_path)
    assert resumed.progress.env_steps == env_steps
    for name, tensor in expected.actor.items():
        assert resumed.actor[name].equal(tensor), name
    rows = read_metrics(trials / exploiting / "metrics_trial.csv")
    alone_rows = read_metrics(alone.metrics_path)
    assert [int(row["env_steps"]) for row in rows] == list(range(64, 513, 64))
    for row, alone_row in zip(rows, alone_rows, strict=False):
        for column in alone_row:
            if column not in TIME_COLUMNS | EVALUATION_COLUMNS:
                assert row[column] == alone_row[column], (row["round"], column)
    after = [row for row in rows if int(row["env_steps"]) > env_steps]
    assert after and all(float(row["learning_rate"]) == new_rate for row in after)


PBT_RESUME_SPACE = """
space: {algo_params.learning_rate: {choice: [1.0e-4, 1.0e-3, 1.0e-2]}}
search: {trials: 2, scheduler: pbt, synchronous: true, quantile_fraction: 0.5,
         evaluations_per_trial: 6, perturbation_evaluations: 2, retrain_top: 0, seed: 1}
"""


@pytest.mark.usefixtures("ray_cluster")
def test_a_synchronous_pbt_search_stopped_after_a_perturbation_resumes_to_its_end(tmp_path):
    """Two trials perturbed together at 256 and 512 of 768 env steps. SIGTERM once the worse
    one went on from the better one's checkpoint at the second (its exploit row, at 576), so
    both stop with 512 as their last report: --resume takes each trial up there and the search
    finishes. (Ray's own scheduler, which a resumed search starts afresh, put its next
    perturbation at the trials' own time and waited forever.) The exploiting trial restores
    the same exploit on resume: it is recorded once."""
    import os
    import signal
    import threading
    import time

    from drlcli.errors import SearchInterrupted
    from drlcli.tune.runner import prepare_search, run_search

    config = tmp_path / "pbt.yaml"
    config.write_text(
        PBT_CONFIG.replace("OUT", str(tmp_path / "out")).replace(
            "total_env_steps: 512", "total_env_steps: 768"
        )
    )
    space = tmp_path / "space.yaml"
    space.write_text(PBT_RESUME_SPACE)
    plan, folder = prepare_search(config, space), tmp_path / "search"
    trials = folder / "trials"

    def exploits(trial: str) -> list[int]:
        record = trials / trial / "exploits.csv"
        lines = record.read_text().splitlines()[1:] if record.exists() else []
        return [int(line.split(",")[0]) for line in lines if line.count(",") >= 2]

    def stop(condition, seconds: float) -> threading.Event:
        """SIGTERM once ``condition`` holds or ``seconds`` passed, unless the event is set."""
        cancelled = threading.Event()

        def watch():
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not condition() and not cancelled.is_set():
                time.sleep(0.01)
            if not cancelled.is_set():
                os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, daemon=True).start()
        return cancelled

    stop(lambda: max(exploits("trial_001") + exploits("trial_002") + [0]) >= 576, 120)
    with pytest.raises(SearchInterrupted):
        run_search(plan, folder, quiet=True)
    before = {trial: exploits(trial) for trial in ("trial_001", "trial_002")}
    assert sorted(sum(before.values(), [])) == [320, 576], before  # one at each

    cancelled = stop(lambda: False, 90)  # the rest takes under 30 s: a stalled search fails
    try:
        summary = run_search(plan, folder, resume=True, quiet=True)
    except SearchInterrupted:
        pytest.fail("the resumed search waited forever: stopped after 90 s")
    finally:
        cancelled.set()
    with open(summary.results_csv) as handle:
        results = {row["trial"]: row for row in csv.DictReader(handle)}
    assert {(row["state"], row["env_steps"]) for row in results.values()} == {("finished", "768")}
    for trial, steps in before.items():
        after = exploits(trial)
        assert after[: len(steps)] == steps and after == sorted(set(after)), (trial, after)


def test_the_summary_shows_each_candidates_seeds_median_iqm_and_worst_in_80_columns():
    from pathlib import Path

    from rich.console import Console

    from drlcli.report import render_search_summary
    from drlcli.tune.runner import Candidate, SearchSummary

    returns = {1000: 2964.7, 1001: 2733.6, 1002: 3205.6, 1003: 3349.7, 1004: 3608.0}
    candidate = Candidate("trial_006", {"gae_lambda": 0.824370058859538}, 3315.2, returns)
    console = Console(width=80, record=True)
    summary = SearchSummary(
        Path("s"), Path("s/results.csv"), Path("s/winner.yaml"), {}, [candidate]
    )
    render_search_summary(summary, console)
    text = console.export_text()
    assert "re-trained on seeds 1000, 1001, 1002, 1003, 1004" in text
    row = next(line for line in text.splitlines() if "trial_006 " in line and "│" in line)
    interval = candidate.iqm_interval
    assert [cell.strip() for cell in row.split("│")[1:6]] == [
        "trial_006",
        "3315.2",
        "3205.6",
        f"{candidate.iqm:.1f} [{interval.low:.0f}, {interval.high:.0f}]",
        "2733.6",
    ]
    assert candidate.iqm == pytest.approx((2964.7 + 3205.6 + 3349.7) / 3)  # 5 seeds: 1 cut each end
    assert interval.low < candidate.iqm < interval.high
    assert "trial_006: gae_lambda=0.8244; seeds 2965 / 2734 / 3206 / 3350 / 3608" in text
    assert "winner: drl train s/winner.yaml" in text
    # Two candidates: the chance that the winner beats the runner-up on a seed.
    runner_up = Candidate(
        "trial_002", {"gae_lambda": 0.9}, 3100.0, {s: r - 500 for s, r in returns.items()}
    )
    render_search_summary(dataclasses.replace(summary, candidates=[candidate, runner_up]), console)
    text = console.export_text()
    assert "P(trial_006 beats trial_002 on a seed): 0.88 [" in text


def test_an_exploit_takes_each_seed_of_the_other_trial(tmp_path, checkpoint_file):
    """Population-based training with 2 seeds per trial: the exploited trial's checkpoint holds
    both seeds; each seed continues from the same seed of the other trial, takes its metrics
    rows and drops its own best; the exploit is one row of the trial's exploits.csv, once."""
    import json
    import os
    import shutil

    from drlcli.errors import TrainingError
    from drlcli.tune.search import restore_trial

    stored = tmp_path / "stored"
    for seed in (3, 4):
        part = stored / f"seed_{seed}"
        part.mkdir(parents=True)
        os.replace(checkpoint_file(name=f"c{seed}.pt"), part / "model.pt")
        (part / "evaluation_returns.json").write_text(json.dumps([float(seed)]))
        (part / "metrics.csv").write_text(f"round,env_steps\n1,{seed}\n")
    (stored / "trial.json").write_text(json.dumps({"trial": "trial_002"}))
    trial_folder = tmp_path / "trials" / "trial_001"
    files = []
    for seed in (3, 4):
        folder = trial_folder / f"seed_{seed}"
        folder.mkdir(parents=True)
        (folder / "model_trial_best.pt").write_text("a best of a history left behind")
        (folder / "metrics_trial.csv").write_text("round,env_steps\n1,0\n2,0\n")
        files.append(
            TrialFiles(
                f"seed_{seed}",
                folder / "model_trial.pt",
                folder / "model_trial_best.pt",
                folder / "metrics_trial.csv",
            )
        )
    starts = restore_trial(stored, "trial_001", trial_folder, files, {"gamma": 0.9})
    assert [(resume.parent.name, returns, steps) for resume, returns, steps in starts] == [
        ("seed_3", [3.0], 6144),
        ("seed_4", [4.0], 6144),
    ]
    for seed, seed_files in zip((3, 4), files, strict=True):
        assert seed_files.metrics.read_text() == f"round,env_steps\n1,{seed}\n"
        assert not seed_files.best.exists()
    exploits = [["env_steps", "exploited", "values"], ["6144", "trial_002", '{"gamma": 0.9}']]
    with open(trial_folder / "exploits.csv") as handle:
        assert list(csv.reader(handle)) == exploits
    # A search resumed before the trial reported a checkpoint of its own restores the same
    # exploit again: one row still; another exploit (other values) is a row of its own.
    restore_trial(stored, "trial_001", trial_folder, files, {"gamma": 0.9})
    restore_trial(stored, "trial_001", trial_folder, files, {"gamma": 0.8})
    with open(trial_folder / "exploits.csv") as handle:
        assert list(csv.reader(handle)) == [*exploits, ["6144", "trial_002", '{"gamma": 0.8}']]
    shutil.rmtree(stored / "seed_4")
    with pytest.raises(TrainingError, match="has no seed_4 to resume from"):
        restore_trial(stored, "trial_001", trial_folder, files, {"gamma": 0.9})


@pytest.mark.parametrize(
    "space", sorted((Path(__file__).parent.parent / "examples" / "tune").glob("*.yaml"))
)
def test_every_example_space_file_plans_against_the_preset_its_comment_names(space):
    """Each examples/tune file's comment gives its command, drl tune PRESET FILE: that plan
    reads and checks (the file and the preset together)."""
    import re

    from drlcli.preset_catalog import find_preset
    from drlcli.tune.runner import prepare_search

    command = re.search(r"drl tune (\w+) (examples/tune/\S+\.yaml)", space.read_text())
    assert command and command.group(2) == f"examples/tune/{space.name}", space
    import yaml

    from drlcli.config import load_config

    preset = find_preset(command.group(1)).path
    plan = prepare_search(preset, space)
    # The plan is the file's and the preset's: its trial count, the preset's budget per trial.
    assert plan.settings.trials == yaml.safe_load(space.read_text())["search"]["trials"]
    assert plan.env_steps == load_config(preset).total_env_steps
