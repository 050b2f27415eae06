"""FlashSAC end to end on the shared Ray session: train, checkpoint, resume, play, export."""

from __future__ import annotations

import pytest
import torch

from drlcli.actors.spec import ActorSpec
from drlcli.checkpoints.audit import audit_checkpoint
from drlcli.checkpoints.files import load_payload, read_checkpoint
from drlcli.checkpoints.policy import load_play_actor
from drlcli.config import load_config
from drlcli.errors import ConfigError, SemanticsError
from drlcli.evaluation import run_episodes
from drlcli.export import export_onnx
from drlcli.metrics.csv_file import read_metrics
from drlcli.runtime.policy_evaluator import PolicyEvaluator
from drlcli.runtime.run_context import EvaluatorContext
from drlcli.runtime.training import train
from drlcli.topology import AvailableDevices
from tests.conftest import copy_run_outputs
from tests.test_metrics import FLASH_SAC_COLUMNS

# One xdist worker runs the module (make test's --dist loadgroup): its run trains once.
pytestmark = [
    pytest.mark.usefixtures("ray_cluster"),
    pytest.mark.xdist_group("flash_sac_run"),
]
NO_GPU = AvailableDevices(cuda_devices=0, mps=False)

TINY_FLASH_SAC = """
algo: flash_sac
env: {{id: InvertedPendulum-v5, num_envs: 2, seed: 1}}
total_env_steps: {total}
rollout_length: 40
output_dir: {output}
algo_params:
  batch_size: 16
  warmup_steps: 40
  actor_hidden_dim: 16
  actor_num_blocks: 1
  critic_hidden_dim: 16
  critic_num_blocks: 1
  num_bins: 11
{extra}"""


@pytest.fixture
def flash_config(tmp_path):
    def make(name="fs", total=160, extra=""):
        path = tmp_path / f"{name}.yaml"
        path.write_text(TINY_FLASH_SAC.format(total=total, output=tmp_path / "out", extra=extra))
        return path

    return make


def run(path, **kwargs):
    return train(load_config(path), quiet=True, devices=NO_GPU, **kwargs)


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory, ray_cluster):
    """``flash_config()``'s two-round run, trained once for the module: ``(config, summary)``."""
    folder = tmp_path_factory.mktemp("two_rounds")
    path = folder / "fs.yaml"
    path.write_text(TINY_FLASH_SAC.format(total=160, output=folder / "out", extra=""))
    return load_config(path), run(path)


@pytest.fixture
def trained(flash_config, two_rounds):
    """``trained(name)``: ``flash_config(name)``'s outputs as if it had been run."""

    def copy(name: str):
        config = load_config(flash_config(name))
        copy_run_outputs(two_rounds[0], config)
        return config

    return copy


def test_flash_sac_trains_writes_metrics_and_a_playable_exportable_checkpoint(two_rounds, tmp_path):
    config, summary = two_rounds
    assert summary.rounds == 2 and summary.env_steps == 160
    rows = read_metrics(config.metrics_path)
    assert list(rows[0]) == FLASH_SAC_COLUMNS
    assert float(rows[1]["updates"]) > 0 and rows[1]["Loss/critic"] != ""
    payload = load_payload(config.checkpoint_path)
    assert payload["algo"] == "flash_sac" and payload["obs_rms_state"] is None
    assert payload["actor_semantics"]["action_transform"] == "tanh_affine"
    assert payload["learner_states"][0]["updates"] > 0
    assert not audit_checkpoint(config.checkpoint_path).failed
    policy = load_play_actor(config.checkpoint_path)
    assert len(run_episodes(policy, 1, seed=0)) == 1
    exported = export_onnx(config.checkpoint_path, tmp_path / "fs.onnx")
    assert exported.max_abs_error <= 1e-5
    # The final evaluation (made in learner 0's process) is PolicyEvaluator's.
    latest = read_checkpoint(config.checkpoint_path)
    spec = ActorSpec(latest.actor_semantics["builder"], latest.actor_semantics["kwargs"])
    expected = PolicyEvaluator(
        EvaluatorContext(config.env, spec, config.evaluation.episodes)
    ).evaluate(
        latest.actor, latest.obs_rms_state, latest.observation_clip, latest.progress.env_steps
    )
    assert latest.evaluation == expected.to_dict()


def test_flash_sac_resume_restores_learner_state_and_counters(flash_config, trained):
    config = trained("res")
    stored = load_payload(config.checkpoint_path)["learner_states"][0]
    summary = run(flash_config("res", total=240), resume=config.checkpoint_path)
    assert summary.rounds == 3
    resumed = load_payload(config.checkpoint_path)["learner_states"][0]
    # The update counter (learning-rate schedule position) and reward statistics continue.
    assert resumed["updates"] > stored["updates"]
    assert resumed["return_scaler"]["count"] > stored["return_scaler"]["count"]
    assert [row["round"] for row in read_metrics(config.metrics_path)] == ["1", "2", "3"]

    # A critic of another width is refused before anything starts, naming the field.
    wide = flash_config("wide", total=320)
    wide.write_text(wide.read_text().replace("critic_hidden_dim: 16", "critic_hidden_dim: 32"))
    before = config.checkpoint_path.read_bytes()
    with pytest.raises(ConfigError, match=r"cannot resume: learner_states\[0\]: its critic's"):
        run(wide, resume=config.checkpoint_path)
    assert config.checkpoint_path.read_bytes() == before
    assert not load_config(wide).checkpoint_path.exists()


def test_replay_buffer_is_saved_and_restored_only_when_asked(flash_config, trained):
    import numpy as np

    from drlcli.checkpoints.replay_file import replay_path
    from drlcli.errors import CheckpointError, UsageError

    config = trained("plain")
    assert not replay_path(config.checkpoint_path).exists()
    with pytest.raises(CheckpointError, match="save_replay_buffer: true"):
        run(flash_config("plain", total=240), resume=config.checkpoint_path, resume_replay=True)
    with pytest.raises(UsageError, match="needs --resume"):
        run(flash_config("plain"), resume_replay=True)

    extra = "  save_replay_buffer: true\n"
    config = load_config(flash_config("kept", extra=extra))
    run(flash_config("kept", extra=extra))
    saved = replay_path(config.checkpoint_path)
    with np.load(saved, allow_pickle=False) as data:
        assert data["learner0_obs"].shape == (160, 4)
    summary = run(
        flash_config("kept", total=240, extra=extra),
        resume=config.checkpoint_path,
        resume_replay=True,
    )
    assert summary.rounds == 3
    rows = read_metrics(config.metrics_path)
    # With the buffer refilled, updates continue in the first resumed round: the buffer
    # already holds more than warmup_steps transitions.
    assert float(rows[2]["updates"]) == 80.0
    with np.load(saved, allow_pickle=False) as data:
        assert data["learner0_obs"].shape == (240, 4)


TWO_LEARNERS = "num_actors: 2\nnum_gpus: 2\nactors_per_gpu: 1\nlearners_on_cpu: true\n"
ONE_LEARNER = "num_actors: 2\n"
SAVE_REPLAY = "  save_replay_buffer: true\n"


def test_a_custom_actor_trains_on_two_learners_reports_its_aux_loss_and_plays_when_allowed(
    flash_config,
):
    """The injected actor's aux loss takes the actor loss's route on every learner: its own
    actor optimiser, then the same parameter averaging (every round here). Its checkpoint
    names the builder, which play runs only when allowed."""
    extra = (
        "  actor_config:\n"
        "    builder: tests.custom_actors:build\n"
        "    kwargs: {action_low: [-3.0], action_high: [3.0], aux_weight: 0.1}\n"
        "  use_whole_cycle_cuda_graph: false\n"
    ) + TWO_LEARNERS
    path = flash_config("custom2", extra=extra)  # the last lines are top-level keys
    config = load_config(path)
    assert (config.num_gpus, config.learners_on_cpu) == (2, True)
    run(path)
    rows = read_metrics(config.metrics_path)
    assert float(rows[-1]["Loss/aux_action_l2"]) > 0  # averaged over both learners' reports
    payload = load_payload(config.checkpoint_path)
    states = payload["learner_states"]
    assert len(states) == 2
    for name, tensor in states[0]["actor"].items():
        assert torch.equal(tensor, states[1]["actor"][name]), name
    semantics = payload["actor_semantics"]
    assert semantics["kind"] == "custom" and semantics["builder"] == "tests.custom_actors:build"
    with pytest.raises(SemanticsError, match="--allow-builder tests.custom_actors"):
        load_play_actor(config.checkpoint_path)
    policy = load_play_actor(config.checkpoint_path, allow_builders=["tests.custom_actors"])
    assert type(policy.actor).__name__ == "AuxLossActor"


def test_resume_under_another_learner_count_keeps_the_runs_totals(flash_config):
    """Method.md: the mean of the stored networks, learner 0's optimisers, the totals shared
    out; the replay buffers pooled and dealt out, none dropped or duplicated. One run goes
    from one learner to two, then back to one."""
    from drlcli.algos.flash_sac.algorithm import FLASH_SAC
    from drlcli.off_policy.resume import learner_states_for

    config = load_config(flash_config("switch", total=320, extra=SAVE_REPLAY + ONE_LEARNER))
    run(flash_config("switch", total=320, extra=SAVE_REPLAY + ONE_LEARNER))
    for total, after, count in ((480, TWO_LEARNERS, 2), (640, ONE_LEARNER, 1)):
        stored = load_payload(config.checkpoint_path)["learner_states"]
        _, stored_rows = replay_observations(config.checkpoint_path)
        shared = learner_states_for(stored, count, FLASH_SAC.off_policy.network_keys)
        for counter in ("transitions", "updates"):  # shared out, up to rounding
            assert abs(sum(s[counter] for s in shared) - sum(s[counter] for s in stored)) < count
        scaler_count = sum(s["return_scaler"]["count"] for s in stored)
        assert all(s["return_scaler"]["count"] == scaler_count for s in shared)
        mean_head = torch.stack([s["critic"]["head.weight"] for s in stored]).mean(0)
        assert all(torch.equal(s["critic"]["head.weight"], mean_head) for s in shared)

        summary = run(
            flash_config("switch", total=total, extra=SAVE_REPLAY + after),
            resume=config.checkpoint_path,
            resume_replay=True,
        )
        assert summary.env_steps == total
        rows = read_metrics(config.metrics_path)
        assert [int(r["env_steps"]) for r in rows] == list(range(160, total + 1, 160))
        # The refilled buffers hold every stored transition once, plus the new round's.
        assert float(rows[-1]["buffer_size"]) == total
        learner_files, rows_now = replay_observations(config.checkpoint_path)
        assert learner_files == count
        assert set(stored_rows) <= set(rows_now) and len(rows_now) == total


def replay_observations(checkpoint_path) -> tuple[int, list[tuple]]:
    """The replay file beside ``checkpoint_path``: how many learners' buffers it holds, and
    every stored observation of them all as a sorted list of tuples."""
    import numpy as np

    from drlcli.checkpoints.replay_file import replay_path

    with np.load(replay_path(checkpoint_path), allow_pickle=False) as data:
        files = sorted(k for k in data.files if k.split("_", 1)[1] == "obs")
        return len(files), sorted(map(tuple, np.concatenate([data[k] for k in files]).tolist()))


def test_a_flash_sac_run_stopped_and_resumed_with_its_replay_is_the_run_never_stopped(
    flash_config,
):
    """Method.md, "Resume is exact": SIGTERM after some round, --resume --resume-replay, and
    every metrics row (but wall-clock and SPS) and the final learner state (networks,
    optimisers, counters, the collection's random streams and episodes) equal those of a run
    never stopped, bit for bit."""
    from tests.test_training import assert_same_run, stopped_and_resumed

    extra = "  save_replay_buffer: true\n"
    whole = load_config(flash_config("whole", total=480, extra=extra))
    run(flash_config("whole", total=480, extra=extra))
    stopped_path = flash_config("stopped", total=480, extra=extra)
    assert 2 <= stopped_and_resumed(stopped_path, run, resume_replay=True) < 6
    assert len(read_metrics(whole.metrics_path)) == 6
    assert_same_run(load_config(stopped_path), whole, ("actor", "learner_states", "evaluation"))
