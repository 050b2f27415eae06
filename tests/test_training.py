"""End-to-end PPO training on the shared Ray session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drlcli.algos.entry_types import RoundPlan
from drlcli.algos.ppo.algorithm import gaussian_actor_spec
from drlcli.checkpoints.audit import audit_checkpoint
from drlcli.checkpoints.checks import validate_actor_semantics
from drlcli.checkpoints.files import load_payload, read_checkpoint
from drlcli.config import load_config
from drlcli.envs import env_facts, make_env
from drlcli.errors import SemanticsError, UsageError
from drlcli.metrics.csv_file import read_metrics
from drlcli.metrics.schema import TIME_COLUMNS
from drlcli.runtime.policy_evaluator import PolicyEvaluator
from drlcli.runtime.ppo_loop import PPORoundLoop
from drlcli.runtime.run_context import EvaluatorContext, RunContext
from drlcli.runtime.training import train
from drlcli.topology import AvailableDevices, topology_for_config
from tests.test_metrics import PPO_COLUMNS

pytestmark = pytest.mark.usefixtures("ray_cluster")
NO_GPU = AvailableDevices(cuda_devices=0, mps=False)


def run(path, **kwargs):
    return train(load_config(path), quiet=True, devices=NO_GPU, **kwargs)


def test_two_round_smoke_training_writes_metrics_and_both_checkpoints(two_rounds):
    config, summary = two_rounds
    assert summary.rounds == 2 and summary.env_steps == 256
    rows = read_metrics(config.metrics_path)
    assert [row["round"] for row in rows] == ["1", "2"]
    assert list(rows[0]) == PPO_COLUMNS
    assert rows[1]["buffer_size"] == "128"
    for path in (config.checkpoint_path, config.best_checkpoint_path):
        payload = load_payload(path)
        validate_actor_semantics(payload["actor_semantics"])
        assert payload["algo"] == "ppo"
        assert payload["progress"]["env_steps"] in (128, 256)
        # The warm-up's 64 steps x 2 envs, then two rounds of as many.
        assert payload["obs_rms_state"]["count"] == 384.0 or path == config.best_checkpoint_path
        assert set(payload["actor"]) >= {"log_std", "mean_network.0.weight"}
        assert payload["env"]["kwargs"] == {"reset_noise_scale": 0.01}  # the task, for play
        assert not audit_checkpoint(path).failed  # drl verify passes on a real checkpoint
    # The final evaluation (made in rollout actor 0's process) is PolicyEvaluator's: its own
    # environment, seeds and frozen statistics, untouched by the training environments.
    latest = read_checkpoint(config.checkpoint_path)
    facts = env_facts(make_env(config.env.id, **config.env.kwargs))
    spec = gaussian_actor_spec(config.algo_params, facts.action_low, facts.action_high)
    evaluator = PolicyEvaluator(EvaluatorContext(config.env, spec, config.evaluation.episodes))
    expected = evaluator.evaluate(
        latest.actor, latest.obs_rms_state, latest.observation_clip, latest.progress.env_steps
    )
    assert latest.evaluation == expected.to_dict()
    assert summary.final_evaluation == expected


def evaluator_processes_started() -> int:
    """The PolicyEvaluator actors this Ray session has made (alive or not)."""
    import ray._private.state as state

    actors = state.actors().values()
    return sum(1 for actor in actors if actor["ActorClassName"].endswith("PolicyEvaluator"))


def test_same_config_and_seed_give_identical_metrics(tiny_config, two_rounds):
    second = load_config(tiny_config("second"))
    evaluators_before = evaluator_processes_started()
    run(tiny_config("second"))
    # Without periodic evaluation a process of the run (PPO: rollout actor 0) evaluated the
    # final policy: no process of its own was started for it.
    assert evaluator_processes_started() == evaluators_before
    rows_a, rows_b = read_metrics(two_rounds[0].metrics_path), read_metrics(second.metrics_path)
    assert len(rows_a) == 2
    for row_a, row_b in zip(rows_a, rows_b, strict=True):
        for column in PPO_COLUMNS:
            if column not in TIME_COLUMNS:
                assert row_a[column] == row_b[column], column


def test_resume_continues_the_counters_and_appends_metrics(tiny_config, trained):
    """A format-2 checkpoint and the same checkpoint rewritten in format 1 (which kept the
    reward-scaler moments under the learner, ``reward_scalers``) resume alike."""
    from drlcli.checkpoints.files import save_payload

    config = trained("resumed")
    longer = tiny_config("resumed", total=512)
    summary = run(longer, resume=config.checkpoint_path)
    assert summary.rounds == 4 and summary.env_steps == 512
    rows = read_metrics(config.metrics_path)
    assert [row["round"] for row in rows] == ["1", "2", "3", "4"]
    assert [row["env_steps"] for row in rows] == ["128", "256", "384", "512"]
    # The reward scaler's statistics continued (64 steps x 2 envs per round), not restarted.
    assert reward_counts(config.checkpoint_path) == [512.0]
    with pytest.raises(UsageError, match="raise total_env_steps"):
        run(longer, resume=config.checkpoint_path)

    old = trained("old")
    payload = load_payload(old.checkpoint_path)
    state = payload["learner_states"][0]
    state["reward_scalers"] = [actor.pop("reward_scaler") for actor in state["rollout_actors"]]
    save_payload(old.checkpoint_path, {**payload, "format_version": 1})
    assert not audit_checkpoint(old.checkpoint_path).failed
    run(tiny_config("old", total=512), resume=old.checkpoint_path)
    assert reward_counts(old.checkpoint_path) == [512.0]
    old_rows = read_metrics(old.metrics_path)
    assert len(old_rows) == 4
    for old_row, row in zip(old_rows, rows, strict=True):
        for column in PPO_COLUMNS:
            if column not in TIME_COLUMNS:
                assert old_row[column] == row[column], column


def reward_counts(checkpoint_path: Path) -> list[float]:
    """Each rollout actor's reward-scaler count in a checkpoint (its own state holds it)."""
    state = load_payload(checkpoint_path)["learner_states"][0]
    return [actor["reward_scaler"]["count"] for actor in state["rollout_actors"]]


def test_resume_with_more_rollout_actors_starts_them_from_the_merged_reward_statistics(
    tiny_config, trained
):
    config = trained("grown")
    assert reward_counts(config.checkpoint_path) == [256.0]
    run(tiny_config("grown", total=512, extra="num_actors: 2\n"), resume=config.checkpoint_path)
    # 256 merged + 128 of one round each
    assert reward_counts(config.checkpoint_path) == [384.0, 384.0]
    # Observation statistics: the checkpoint's 384 (warm-up and two rounds), then both actors'.
    assert load_payload(config.checkpoint_path)["obs_rms_state"]["count"] == 384.0 + 2 * 128
    # Rounds left are counted in env steps: one round of the new size (256) reaches 512.
    rows = read_metrics(config.metrics_path)
    assert [row["env_steps"] for row in rows] == ["128", "256", "512"]


def test_resume_refuses_a_checkpoint_with_other_actor_semantics(tiny_config, trained):
    config = trained("base")
    before = config.checkpoint_path.read_bytes()
    changed = tiny_config("base", total=512).read_text().replace("[16, 16]", "[32, 32]")
    path = tiny_config("changed")
    path.write_text(changed)
    with pytest.raises(SemanticsError, match=r"kwargs: checkpoint .*16, 16.* != expected .*32, 32"):
        run(path, resume=config.checkpoint_path)
    assert config.checkpoint_path.read_bytes() == before


def test_learners_sample_with_own_parameters_between_syncs_and_average_on_sync(tiny_config):
    import ray

    config = load_config(
        tiny_config(
            "multi",
            extra="num_actors: 4\nnum_gpus: 2\nactors_per_gpu: 2\nparam_sync_interval: 2\n"
            "learners_on_cpu: true\n",
        )
    )
    topology = topology_for_config(config, NO_GPU)
    assert (topology.num_learners, topology.num_actors) == (2, 4)
    from drlcli.actors.spec import ActorSpec  # noqa: F401  (spec built as train() does)

    facts = env_facts(make_env(config.env.id))
    spec = gaussian_actor_spec(config.algo_params, facts.action_low, facts.action_high)
    plan = RoundPlan(total_rounds=4, steps_per_round=4 * 2 * 64)
    loop = PPORoundLoop(RunContext(config, topology, spec, facts, plan))
    try:
        _, metrics = loop.run_round(0)  # not a sync round
        assert metrics["buffer_size"] == 4 * 128  # summed over both learners
        trained = ray.get(loop.last_trained_refs)
        held = [ray.get(learner.network_state.remote()) for learner in loop.learners]
        weight = "mean_network.0.weight"
        assert not torch.equal(held[0]["actor"][weight], held[1]["actor"][weight])
        for learner_index in range(2):
            # The parameters learner l's rollout actors will sample with next are l's own.
            next_params = ray.get(loop.parameter_refs[learner_index])
            assert torch.equal(next_params["actor"][weight], held[learner_index]["actor"][weight])
            assert torch.equal(
                trained[learner_index]["actor"][weight], held[learner_index]["actor"][weight]
            )

        loop.run_round(1)  # sync round: (1 + 1) % 2 == 0
        trained = ray.get(loop.last_trained_refs)
        expected = {
            part: {name: (trained[0][part][name] + trained[1][part][name]) / 2 for name in tensors}
            for part, tensors in trained[0].items()
        }
        for learner in loop.learners:
            state = ray.get(learner.network_state.remote())
            for part in ("actor", "value"):
                for name, tensor in state[part].items():
                    torch.testing.assert_close(tensor, expected[part][name], rtol=0, atol=1e-7)
        for ref in loop.parameter_refs:
            torch.testing.assert_close(ray.get(ref)["actor"][weight], expected["actor"][weight])
    finally:
        loop.close()


def test_processes_share_the_cpus_of_a_cluster_that_has_too_few():
    import ray

    from drlcli.runtime.resources import process_resources
    from drlcli.topology import TrainingTopology

    cpus = ray.cluster_resources()["CPU"]
    crowded = process_resources(TrainingTopology(2, int(cpus), "cpu", 2), evaluator_process=True)
    assert crowded.cpu_processes == 2 * int(cpus) + 2 + 1  # and the evaluator
    assert 0 < crowded.cpu_share <= cpus / crowded.cpu_processes
    assert crowded.learner == {"num_cpus": crowded.cpu_share}
    assert crowded.rollout_actor == {"num_cpus": crowded.cpu_share, "scheduling_strategy": "SPREAD"}
    hosted = process_resources(TrainingTopology(2, int(cpus), "cpu", 2), evaluator_process=False)
    assert hosted.cpu_processes == crowded.cpu_processes - 1
    roomy = process_resources(TrainingTopology(1, 1, "cuda", 1), True)  # actor, evaluator
    assert roomy.cpu_share == 1.0 and roomy.learner == {"num_gpus": 1.0}


def test_an_off_policy_learner_gets_the_cores_the_other_processes_leave(monkeypatch):
    """learner_threads null: the machine's cores less the run's other CPU processes (rollout
    actors, the evaluator), shared by the CPU learners, at least one each
    (scripts/bench/learner_threads.py: a learner on every core beside its env stepper made
    0.6-0.8 times the updates of one on the core left to it)."""
    from drlcli.runtime.resources import process_resources
    from drlcli.topology import TrainingTopology

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    threads = [
        process_resources(TrainingTopology(*shape), evaluator, None).learner_torch_threads
        for shape, evaluator in [
            ((1, 1, "cpu", 1), False),  # 16 cores, 1 env stepper: 15
            ((1, 4, "cpu", 4), True),  # 4 steppers and the evaluator: 11 left
            ((2, 2, "cpu", 2), True),  # two learners of 2 steppers each share 11: 5 each
            ((1, 1, "cuda", 1), True),  # a CUDA learner: 16 - 2
            ((1, 40, "cpu", 40), True),  # more processes than cores: still 1
        ]
    ]
    assert threads == [15, 11, 5, 14, 1]
    assert process_resources(TrainingTopology(1, 1, "cpu", 1), True, 3).learner_torch_threads == 3


@pytest.mark.parametrize(
    ("node_cpus", "processes", "share"),
    [
        ([8.0], 5, 1.0),
        ([2.0, 2.0], 4, 1.0),
        ([2.0, 2.0], 5, 2 / 3),  # 4 x 0.8 of the total would fit only 2 per node: 4 of 5
        ([4.0], 5, 0.8),
        ([1.0, 3.0], 8, 0.5),
        ([0.5], 2, 0.25),
    ],
)
def test_the_cpu_share_fits_every_process_on_some_node(node_cpus, processes, share):
    from drlcli.runtime.resources import cpu_share

    found = cpu_share(node_cpus, processes)
    assert found == pytest.approx(share, abs=1e-4) and found <= share
    units = round(found * 1e4)  # Ray's fixed-point resource units
    assert sum(round(cpus * 1e4) // units for cpus in node_cpus) >= processes


def test_train_with_dashboard_serves_the_run_while_it_trains(tiny_config):
    from typer.testing import CliRunner

    from drlcli.cli import app

    path = tiny_config("beside", total=128)
    result = CliRunner().invoke(
        app, ["train", str(path), "--quiet", "--dashboard", "--dashboard-port", "0"]
    )
    assert result.exit_code == 0, result.output
    assert "drl dashboard: http://127.0.0.1:" in result.output


@pytest.mark.parametrize(
    ("algo", "what"), [("ppo", "reward"), ("ppo", "obs"), ("flash_sac", "obs")]
)
def test_a_non_finite_environment_stops_training_naming_the_round_and_keeps_the_checkpoint(
    tmp_path, algo, what
):
    from drlcli.errors import TrainingError

    params = (
        # One warm-up step: the env counts its steps across resets.
        "{num_epochs: 1, num_minibatches: 2, hidden_sizes: [8, 8], observation_warmup_steps: 1}"
        if algo == "ppo"
        else "{batch_size: 16, warmup_steps: 32, actor_hidden_dim: 8, actor_num_blocks: 1, "
        "critic_hidden_dim: 8, critic_num_blocks: 1, num_bins: 11}"
    )
    path = tmp_path / "broken.yaml"
    path.write_text(
        f"algo: {algo}\n"
        "env: {id: 'tests.range_envs:drltest/NaNAfter-v0', num_envs: 2,"
        f" kwargs: {{after: 90, what: {what}}}}}\n"
        f"total_env_steps: 1000\nrollout_length: 40\noutput_dir: {tmp_path / 'out'}\n"
        f"algo_params: {params}\n"
    )
    config = load_config(path)
    with pytest.raises(TrainingError) as error:
        run(path)
    message = str(error.value)
    # Each env steps 40 per round: the 90th step falls in round 3.
    assert message.startswith(f"round 3: drltest/NaNAfter-v0 returned a non-finite {what}")
    assert f"the last good checkpoint is {config.checkpoint_path}" in message
    kept = read_checkpoint(config.checkpoint_path)
    assert kept.progress.round == 2
    assert all(torch.isfinite(t).all() for t in kept.actor.values() if t.is_floating_point())
    assert len(read_metrics(config.metrics_path)) == 2


TWO_LEARNERS = "num_actors: 2\nnum_gpus: 2\nactors_per_gpu: 1\nlearners_on_cpu: true\n"


def test_resume_under_another_learner_count_starts_from_the_mean_and_learner_0s_optimiser(
    tiny_config, trained
):
    """Method.md: with another learner count every learner starts from the mean of the stored
    networks and learner 0's optimiser; training then continues to the budget. One run goes
    from one learner to two, then back to one."""
    import ray

    config = trained("count")  # one learner, 256 env steps
    for total, extra, learners in ((512, TWO_LEARNERS, 2), (1024, "", 1)):
        stored = read_checkpoint(config.checkpoint_path)
        resumed = load_config(tiny_config("count", total=total, extra=extra))
        topology = topology_for_config(resumed, NO_GPU)
        facts = env_facts(make_env(resumed.env.id))
        spec = gaussian_actor_spec(resumed.algo_params, facts.action_low, facts.action_high)
        plan = RoundPlan(8, 256, stored.progress.round, stored.progress.env_steps)
        loop = PPORoundLoop(RunContext(resumed, topology, spec, facts, plan, stored))
        try:
            states = ray.get([learner.state_dict.remote() for learner in loop.learners])
        finally:
            loop.close()
        assert len(states) == topology.num_learners == learners
        for part in ("actor", "value"):
            for name in stored.learner_states[0][part]:
                mean = torch.stack([s[part][name] for s in stored.learner_states]).mean(0)
                for state in states:
                    torch.testing.assert_close(state[part][name], mean, rtol=0, atol=1e-7)
        first_moment = stored.learner_states[0]["optimizer"]["state"][0]["exp_avg"]
        for state in states:
            assert torch.equal(state["optimizer"]["state"][0]["exp_avg"], first_moment)

        summary = run(tiny_config("count", total=total, extra=extra), resume=config.checkpoint_path)
        assert summary.env_steps == total
        steps = [int(row["env_steps"]) for row in read_metrics(config.metrics_path)]
        assert steps == sorted(steps) and steps[-1] == total
    assert len(read_checkpoint(config.checkpoint_path).learner_states) == 1


def test_a_runtime_env_cannot_be_given_to_a_ray_the_caller_started(ray_cluster, tiny_config):
    from drlcli.errors import ConfigError

    config = load_config(tiny_config("shipped", extra="runtime_env: {env_vars: {A: b}}\n"))
    with pytest.raises(ConfigError, match="give the runtime environment to that ray.init"):
        train(config, quiet=True)
    assert not config.checkpoint_path.exists()


# Rounds of 32 steps per env (no warm-up: raw observations): rounds 1 and 2 rise, every later
# round is worse than both (the reward falls after step 64).
IMPROVING = """
algo: ppo
env:
  {{id: 'tests.range_envs:drltest/Improving-v0', num_envs: 2, seed: 0, kwargs: {{peak_step: 64}}}}
total_env_steps: {total}
rollout_length: 32
output_dir: {output}
algo_params:
  {{num_epochs: 1, num_minibatches: 2, hidden_sizes: [8, 8], normalize_observations: false}}
"""


def test_the_latest_checkpoint_records_the_best_and_a_resume_never_replaces_it_with_worse(
    tmp_path,
):
    """Every round of this task beats the previous one: the last round is a best, and the
    latest checkpoint must say so (it used to record the best before the round's offer). The
    resumed rounds are worse than the best file's policy: the best the latest checkpoint
    records is the one to beat, and nothing replaces the best file."""
    path = tmp_path / "improving.yaml"
    path.write_text(IMPROVING.format(total=128, output=tmp_path / "out"))
    config = load_config(path)
    summary = run(path)
    latest, best = load_payload(config.checkpoint_path), load_payload(config.best_checkpoint_path)
    rows = read_metrics(config.metrics_path)
    assert best["progress"]["env_steps"] == 128  # the last round was the best
    stored_best = best["progress"]["best_return"]
    assert latest["progress"]["best_return"] == stored_best
    assert stored_best == pytest.approx(float(rows[-1]["episode_return_mean"]))
    assert summary.best_return == stored_best

    best_before = config.best_checkpoint_path.read_bytes()
    path.write_text(IMPROVING.format(total=192, output=tmp_path / "out"))
    summary = run(path, resume=config.checkpoint_path)
    resumed_rows = read_metrics(config.metrics_path)[2:]
    assert len(resumed_rows) == 1  # round 3 (rounds of 64 env steps)
    assert all(float(row["episode_return_mean"]) < stored_best for row in resumed_rows)
    assert config.best_checkpoint_path.read_bytes() == best_before
    assert summary.best_return == stored_best
    assert load_payload(config.checkpoint_path)["progress"]["best_return"] == stored_best


def assert_identical(mine, theirs, where=""):
    """Nested containers of tensors and plain values, equal bit for bit."""
    if isinstance(theirs, dict):
        assert set(mine) == set(theirs), where
        for key in theirs:
            assert_identical(mine[key], theirs[key], f"{where}.{key}")
    elif isinstance(theirs, (list, tuple)):
        assert len(mine) == len(theirs), where
        for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            assert_identical(a, b, f"{where}[{index}]")
    elif isinstance(theirs, torch.Tensor):
        assert torch.equal(mine, theirs), where
    else:
        assert mine == theirs, where


def stopped_and_resumed(config_path, train_path, **resume_kwargs) -> int:
    """Train ``config_path`` with ``train_path(path, **kwargs)``, stopped by SIGTERM (from a
    thread, once the metrics CSV has two rows: the run stops after the round in progress), then
    resumed from its latest checkpoint to the end. Returns the round it stopped after."""
    import os
    import signal
    import threading
    import time

    from drlcli.errors import TrainingStopped

    config = load_config(config_path)
    metrics_path = Path(config.metrics_path)

    def watch():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if metrics_path.exists() and len(metrics_path.read_text().splitlines()) > 2:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.01)

    previous = signal.signal(signal.SIGTERM, lambda *args: None)  # a late signal is harmless
    try:
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        with pytest.raises(TrainingStopped):
            train_path(config_path)
        watcher.join()
    finally:
        signal.signal(signal.SIGTERM, previous)
    stopped_at = load_payload(config.checkpoint_path)["progress"]["round"]
    train_path(config_path, resume=config.checkpoint_path, **resume_kwargs)
    return stopped_at


# Which round's row shows a periodic evaluation depends on when it finishes (Method.md).
EVALUATION_COLUMNS = frozenset(
    {"eval_return_mean", "eval_return_std", "eval_episode_length_mean", "eval_env_steps"}
)


def assert_same_run(resumed, whole, parts) -> None:
    """Every metrics row but the wall-clock and evaluation columns, and the checkpoints'
    ``parts``, equal."""
    rows, resumed_rows = read_metrics(whole.metrics_path), read_metrics(resumed.metrics_path)
    assert len(resumed_rows) == len(rows)
    for row, resumed_row in zip(rows, resumed_rows, strict=True):
        for column in row:
            if column not in TIME_COLUMNS | EVALUATION_COLUMNS:
                assert resumed_row[column] == row[column], (row["round"], column)
    mine, theirs = load_payload(resumed.checkpoint_path), load_payload(whole.checkpoint_path)
    for part in parts:
        assert_identical(mine[part], theirs[part], part)


RECURRENT_PPO = """
algo: ppo
env: {{id: InvertedPendulum-v5, num_envs: 2, seed: 3, observation_groups: {{policy: ['0:2']}}}}
total_env_steps: 768
rollout_length: 64
output_dir: {output}
evaluation: {{interval_env_steps: 128, episodes: 2}}
algo_params:
  num_epochs: 2
  num_minibatches: 2
  hidden_sizes: [16]
  recurrent: {{cell: {cell}, size: 8, sequence_length: 16}}
{extra}"""


def test_a_recurrent_run_stopped_and_resumed_is_the_run_never_stopped(tmp_path):
    """ADR 0018: every env's hidden states in progress are in the checkpoint; the resumed run
    (two learners averaged, a privileged recurrent critic, the policy reading positions only)
    equals the whole one bit for bit, as an MLP's does. The state's restore is the same code
    for either cell (GRU: tests/test_recurrent_ppo.py)."""
    cell, learners, extra = "lstm", 2, TWO_LEARNERS

    def config_file(name):
        path = tmp_path / f"{name}.yaml"
        path.write_text(RECURRENT_PPO.format(output=tmp_path / "out", cell=cell, extra=extra))
        return path

    whole_path, stopped_path = config_file("whole"), config_file("stopped")
    whole = load_config(whole_path)
    run(whole_path)
    stopped_at = stopped_and_resumed(stopped_path, run)
    assert 2 <= stopped_at < whole.total_env_steps // (128 * learners)
    parts = ("actor", "learner_states", "obs_rms_state", "training_obs_rms_state")
    assert_same_run(load_config(stopped_path), whole, parts)
    states = load_payload(whole.checkpoint_path)["learner_states"]
    memory = states[0]["rollout_actors"][0]["recurrent"]
    assert memory["policy_state"].abs().max() > 0  # the states in progress were resumed


@pytest.mark.parametrize("learners", [1, 2])
def test_a_run_stopped_and_resumed_is_the_run_never_stopped(tiny_config, learners):
    """Method.md, "Resume is exact": SIGTERM after some round, --resume, and every metrics row
    (but wall-clock and SPS), the final networks, optimiser states, observation statistics and
    rollout actors' states equal those of a run never stopped, bit for bit. The one-learner run
    evaluates every round: the evaluation in flight at the stop is redone as it resumes."""
    extra = (
        TWO_LEARNERS if learners == 2 else "evaluation: {interval_env_steps: 128, episodes: 2}\n"
    )
    whole = load_config(tiny_config("whole", total=1024, extra=extra))
    run(tiny_config("whole", total=1024, extra=extra))
    stopped_path = tiny_config("stopped", total=1024, extra=extra)
    stopped_at = stopped_and_resumed(stopped_path, run)
    assert 2 <= stopped_at < whole.total_env_steps // (128 * learners)
    parts = ("actor", "learner_states", "obs_rms_state", "evaluation")
    assert_same_run(load_config(stopped_path), whole, parts)
    if learners == 1:  # the evaluation of the last round before the stop is in a later row
        rows = read_metrics(load_config(stopped_path).metrics_path)[stopped_at:]
        assert str(stopped_at * 128) in [row["eval_env_steps"] for row in rows]
