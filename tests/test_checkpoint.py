from __future__ import annotations

import itertools
import os
import pickle
import random
import signal
import time

import pytest
import torch

from drlcli.checkpoints.checks import validate_actor_semantics
from drlcli.checkpoints.files import load_payload, save_payload
from drlcli.errors import CheckpointError, SemanticsError


def test_round_trip_keeps_every_field(checkpoint_file, ppo_checkpoint_payload):
    loaded = load_payload(checkpoint_file())
    assert set(loaded) == {*ppo_checkpoint_payload, "content_hash"}
    assert loaded["actor_semantics"] == ppo_checkpoint_payload["actor_semantics"]
    for name, tensor in ppo_checkpoint_payload["actor"].items():
        assert torch.equal(loaded["actor"][name], tensor)
    assert loaded["progress"] == {
        "round": 3,
        "env_steps": 6144,
        "wall_time_s": 1.5,
        "best_return": 12.5,
        "best_criterion": "training return",
        "best_tiebreak": None,
    }


def test_payload_is_plain_data_only(ppo_checkpoint_payload):
    allowed = (dict, list, tuple, str, int, float, bool, type(None), torch.Tensor)

    def walk(value, path):
        assert isinstance(value, allowed), f"{path}: {type(value).__name__}"
        if isinstance(value, dict):
            for key, item in value.items():
                assert isinstance(key, (str, int)), f"{path}: key {key!r}"
                walk(item, f"{path}.{key}")
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")

    walk(ppo_checkpoint_payload, "checkpoint")


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickle_that_would_run_code_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"format": "drl-checkpoint", "payload": _Payload(str(marker))}, path)
    with pytest.raises(CheckpointError, match=r"unpickling it would call io\.open"):
        load_payload(path)
    assert not marker.exists()
    # The same file with plain pickle *would* run the payload: the test is not vacuous.
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(pickle.dumps(_Payload(str(marker))))
    pickle.loads(plain.read_bytes())
    assert marker.exists()


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "absent.pt", "checkpoint not found"),
        (lambda d: d, "is a directory"),
        (lambda d: _write(d / "empty.pt", b""), "checkpoint file is empty"),
        (lambda d: _write(d / "text.pt", b"hello\n"), "not a readable torch"),
    ],
)
def test_unreadable_paths_raise_checkpoint_error_with_path(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(CheckpointError) as error:
        load_payload(path)
    assert message in str(error.value) and str(path) in str(error.value)


def test_truncated_checkpoint_is_refused(checkpoint_file, tmp_path):
    data = checkpoint_file().read_bytes()
    for fraction in (0.1, 0.5, 0.9):
        truncated = tmp_path / f"cut{fraction}.pt"
        truncated.write_bytes(data[: int(len(data) * fraction)])
        with pytest.raises(CheckpointError, match="not a readable torch checkpoint"):
            load_payload(truncated)


def test_foreign_torch_files_and_future_versions_are_refused(tmp_path, checkpoint_file):
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.ones(2)}, foreign)
    with pytest.raises(CheckpointError, match="not a drl checkpoint"):
        load_payload(foreign)
    future = checkpoint_file(lambda p: p.update(format_version=99), name="future.pt")
    with pytest.raises(CheckpointError, match="format version 99 is not supported"):
        load_payload(future)


def _write_forever(path, payloads) -> None:
    """A writer that saves the payloads in turn until it is killed (in a forked child)."""
    try:
        for index in itertools.count():
            save_payload(path, payloads[index % 2])
    finally:
        os._exit(1)


@pytest.mark.subprocess
def test_killing_the_writer_at_any_moment_leaves_a_complete_file(tmp_path):
    path = tmp_path / "atomic.pt"
    save_payload(
        path,
        {"format": "drl-checkpoint", "format_version": 1, "tag": 0, "data": torch.zeros(400_000)},
    )
    # Made here, so the forked writer only serialises (no torch kernel runs after the fork).
    payloads = [
        {
            "format": "drl-checkpoint",
            "format_version": 1,
            "tag": tag,
            "data": torch.full((400_000,), float(tag)),
        }
        for tag in (1, 2)
    ]
    rng = random.Random(0)
    for _ in range(25):
        writer = os.fork()  # torch is imported already: a writer in microseconds, not seconds
        if writer == 0:
            _write_forever(path, payloads)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(writer, signal.SIGKILL)
        _, status = os.waitpid(writer, 0)
        assert os.WIFSIGNALED(status), "the writer stopped before it was killed"
        payload = load_payload(path)
        assert payload["tag"] in (0, 1, 2)
        assert torch.equal(payload["data"], torch.full((400_000,), float(payload["tag"])))


SEMANTICS = {
    "schema_version": 1,
    "kind": "builtin",
    "builder": "drlcli.actors.gaussian:build_gaussian_actor",
    "kwargs": {"hidden_sizes": [8]},
    "obs_dim": 4,
    "action_dim": 1,
    "action_transform": "clip",
}


@pytest.mark.parametrize(
    ("semantics", "message"),
    [
        (None, "actor_semantics is missing or null; retraining is the only remedy"),
        ([1, 2], "actor_semantics must be a mapping"),
        ({k: v for k, v in SEMANTICS.items() if k != "obs_dim"}, "actor_semantics lacks obs_dim"),
        ({**SEMANTICS, "schema_version": 0}, "schema_version 0 is not supported"),
        ({**SEMANTICS, "schema_version": True}, "schema_version True is not supported"),
        ({**SEMANTICS, "obs_dim": "4"}, "actor_semantics.obs_dim must be int"),
        ({**SEMANTICS, "kind": "other"}, "kind must be 'builtin' or 'custom'"),
    ],
)
def test_bad_semantics_are_refused_for_every_actor(semantics, message):
    with pytest.raises(SemanticsError) as error:
        validate_actor_semantics(semantics)
    assert message in str(error.value)


def test_semantic_mismatch_lists_every_differing_field_with_both_values():
    expected = {**SEMANTICS, "obs_dim": 11, "kwargs": {"hidden_sizes": [64]}}
    with pytest.raises(SemanticsError) as error:
        validate_actor_semantics(SEMANTICS, expected, source="m.pt")
    text = str(error.value)
    assert "m.pt: actor_semantics do not match" in text
    assert "obs_dim: checkpoint 4 != expected 11" in text
    assert "kwargs: checkpoint {'hidden_sizes': [8]} != expected {'hidden_sizes': [64]}" in text
    assert "action_dim" not in text
    assert validate_actor_semantics(SEMANTICS, dict(SEMANTICS)) == SEMANTICS


def _break_optimizer(payload):
    del payload["learner_states"][0]["optimizer"]


def _reward_scalers(value):
    """Format 1's place of the reward-scaler moments, under the learner."""

    def modify(payload):
        payload["learner_states"][0]["reward_scalers"] = value

    return modify


def _rollout_actor_reward_scaler(value):
    """Format 2's place: in the rollout actor's own state."""

    def modify(payload):
        rollout_actor = {"envs": {}, "torch_rng": torch.zeros(8), "reward_scaler": value}
        payload["learner_states"][0]["rollout_actors"] = [rollout_actor]

    return modify


@pytest.mark.parametrize(
    ("modify", "message"),
    [
        (_break_optimizer, r"learner_states\[0\] lacks optimizer"),
        (_reward_scalers("moments"), r"reward_scalers is a str, expected a list"),
        (
            _reward_scalers([{"mean": torch.zeros(1)}]),
            r"reward_scalers\[0\] is not \{mean, var, count\}",
        ),
        (
            _reward_scalers([{"mean": torch.zeros(2), "var": torch.ones(2), "count": 4.0}]),
            r"reward_scalers\[0\] has the wrong shape",
        ),
        (
            _rollout_actor_reward_scaler(
                {"mean": torch.ones(1), "var": -torch.ones(1), "count": 1}
            ),
            r"rollout_actors\[0\]\.reward_scaler has non-finite moments or a negative variance",
        ),
        (
            _rollout_actor_reward_scaler("moments"),
            r"rollout_actors\[0\]\.reward_scaler is not \{mean, var, count\}",
        ),
    ],
)
def test_resume_refuses_damaged_learner_states_before_starting(
    tmp_path, checkpoint_file, modify, message
):
    from drlcli.config import load_config
    from drlcli.runtime.training import train

    config_path = tmp_path / "fixture.yaml"
    config_path.write_text(
        "env: {id: InvertedPendulum-v5}\n"
        "total_env_steps: 100000\n"
        f"output_dir: {tmp_path / 'out'}\n"
        "algo_params: {hidden_sizes: [8, 8]}\n"
    )
    path = checkpoint_file(modify)
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match=message):
        train(load_config(config_path), resume=path, quiet=True)
    assert path.read_bytes() == before
    assert not (tmp_path / "out").exists()  # no metrics or checkpoints were started


def test_resume_refuses_other_env_kwargs(tmp_path, checkpoint_file):
    from drlcli.config import load_config
    from drlcli.runtime.training import train

    config_path = tmp_path / "fixture.yaml"
    config_path.write_text(
        "env: {id: InvertedPendulum-v5, kwargs: {reset_noise_scale: 0.1}}\n"
        "total_env_steps: 100000\n"
        f"output_dir: {tmp_path / 'out'}\n"
        "algo_params: {hidden_sizes: [8, 8]}\n"
    )
    with pytest.raises(
        CheckpointError, match=r"env.kwargs: checkpoint \{\} != config \{'reset_noise"
    ):
        train(load_config(config_path), resume=checkpoint_file(), quiet=True)
    assert not (tmp_path / "out").exists()


def test_resume_refuses_other_value_network_widths(tmp_path, checkpoint_file):
    from drlcli.checkpoints.record import EnvRecord
    from drlcli.config import load_config
    from drlcli.errors import ConfigError
    from drlcli.runtime.preflight import load_for_resume
    from drlcli.runtime.training import train

    path = checkpoint_file()  # trained with hidden_sizes [8, 8] for both networks
    before = path.read_bytes()
    config_path = tmp_path / "fixture.yaml"
    config_path.write_text(
        "env: {id: InvertedPendulum-v5}\n"
        f"output_dir: {tmp_path / 'out'}\n"
        "algo_params: {hidden_sizes: [8, 8], value_hidden_sizes: [16]}\n"
    )
    with pytest.raises(
        ConfigError, match=r"value network has hidden layers \[8, 8\], the config builds \[16\]"
    ):
        train(load_config(config_path), resume=path, quiet=True)
    assert path.read_bytes() == before
    assert not (tmp_path / "out").exists()

    # The same widths written out explicitly are the same network.
    config_path.write_text(
        "env: {id: InvertedPendulum-v5}\n"
        "algo_params: {hidden_sizes: [8, 8], value_hidden_sizes: [8, 8]}\n"
    )
    payload = load_payload(path)
    facts = EnvRecord(**payload["env"]).facts()
    load_for_resume(path, load_config(config_path), payload["actor_semantics"], facts)


def _learner_actor(change):
    def modify(payload):
        change(payload["learner_states"][0]["actor"])

    return modify


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda actor: actor.clear(), r"lacks log_std, action_low, action_high, mean_network"),
        (lambda actor: actor.pop("log_std"), r"lacks log_std;"),
        (lambda actor: actor.update(extra=torch.ones(1)), r"has extra the actor does not;"),
        (lambda actor: actor.update(log_std=torch.ones(3)), r"log_std has shape \[3\] where the"),
        (lambda actor: actor.update(log_std=[0.0]), r"log_std is a list, not a tensor;"),
    ],
)
def test_resume_refuses_a_learner_whose_actor_does_not_fit_before_ray_starts(
    tmp_path, checkpoint_file, change, message
):
    from drlcli.config import load_config
    from drlcli.errors import ConfigError
    from drlcli.runtime.training import train

    path = checkpoint_file(_learner_actor(change))
    config_path = tmp_path / "fixture.yaml"
    config_path.write_text(
        "env: {id: InvertedPendulum-v5}\n"
        f"output_dir: {tmp_path / 'out'}\n"
        "algo_params: {hidden_sizes: [8, 8]}\n"
    )
    # No Ray fixture: a learner that cannot load its actor is refused before any process starts.
    prefix = r"cannot resume: learner_states\[0\]: its policy actor "
    with pytest.raises(ConfigError, match=prefix + message):
        train(load_config(config_path), resume=path, quiet=True)
    assert not (tmp_path / "out").exists()


def test_resume_of_a_finished_run_is_refused_before_ray_or_any_output(tmp_path, checkpoint_file):
    from drlcli.config import load_config
    from drlcli.errors import UsageError
    from drlcli.evaluation import EvaluationResult
    from drlcli.runtime.training import train

    def evaluated(payload):  # the run ended: its final evaluation is recorded
        payload["evaluation"] = EvaluationResult(6144, (10.0,), (5,)).to_dict()

    path = checkpoint_file(evaluated)  # 6144 env steps trained
    before = path.read_bytes()
    config_path = tmp_path / "fixture.yaml"
    config_path.write_text(
        "env: {id: InvertedPendulum-v5}\n"
        f"output_dir: {tmp_path / 'out'}\n"
        "total_env_steps: 6144\n"
        "algo_params: {hidden_sizes: [8, 8]}\n"
    )
    # No Ray fixture: the refusal comes before a Ray session would start.
    with pytest.raises(UsageError, match=r"already trained 6144 of total_env_steps=6144; raise"):
        train(load_config(config_path), resume=path, quiet=True)
    assert path.read_bytes() == before
    assert not (tmp_path / "out").exists()


MOMENTS = {"mean": torch.zeros(1, dtype=torch.float64), "var": torch.ones(1), "count": 8.0}


@pytest.mark.parametrize(
    "modify", [_reward_scalers([MOMENTS, None]), _rollout_actor_reward_scaler(MOMENTS)]
)
def test_resume_accepts_reward_moments_of_either_format(tmp_path, checkpoint_file, modify):
    from drlcli.checkpoints.record import EnvRecord
    from drlcli.config import load_config
    from drlcli.runtime.mujoco_actor import rollout_actor_states
    from drlcli.runtime.preflight import load_for_resume

    config_path = tmp_path / "fixture.yaml"
    config_path.write_text("env: {id: InvertedPendulum-v5}\nalgo_params: {hidden_sizes: [8, 8]}\n")
    path = checkpoint_file(modify)
    payload = load_payload(path)
    facts = EnvRecord(**payload["env"]).facts()
    stored = load_for_resume(path, load_config(config_path), payload["actor_semantics"], facts)
    assert rollout_actor_states(stored.learner_states[0])[0]["reward_scaler"]["count"] == 8.0


def test_format_1_reward_moments_go_back_into_their_rollout_actors_states():
    from drlcli.runtime.mujoco_actor import rollout_actor_states

    first, second = {"envs": 1, "torch_rng": 2}, {"envs": 3, "torch_rng": 4}
    assert rollout_actor_states({"actor": {}}) is None
    assert rollout_actor_states({"rollout_actors": [first]}) == [first]
    assert rollout_actor_states({"reward_scalers": ["m0", None]}) == [
        {"reward_scaler": "m0"},
        {"reward_scaler": None},
    ]
    state = {"rollout_actors": [first, second], "reward_scalers": ["m0", "m1"]}
    assert rollout_actor_states(state) == [
        {**first, "reward_scaler": "m0"},
        {**second, "reward_scaler": "m1"},
    ]
    assert first == {"envs": 1, "torch_rng": 2}  # the stored states are left as they were
    # Counts that disagree (a damaged file): the moments alone, the episodes restart.
    assert rollout_actor_states({"rollout_actors": [first], "reward_scalers": ["a", "b"]}) == [
        {"reward_scaler": "a"},
        {"reward_scaler": "b"},
    ]


@pytest.mark.parametrize(
    ("remove", "message"),
    [
        (
            lambda p: p["progress"].pop("best_criterion"),
            "checkpoint env or progress entry is malformed (KeyError('best_criterion'))",
        ),
        (
            lambda p: p["progress"].pop("round"),
            "checkpoint env or progress entry is malformed (KeyError('round'))",
        ),
        (
            lambda p: p["env"].pop("max_episode_steps"),
            "checkpoint env or progress entry is malformed (KeyError('max_episode_steps'))",
        ),
        (lambda p: p["env"].pop("kwargs"), "checkpoint env entry lacks 'kwargs'"),
        (lambda p: p.pop("inference_memory"), "checkpoint lacks 'inference_memory'"),
        (
            lambda p: p.pop("observation_clip"),
            "checkpoint 'observation_clip' must be a positive number, got None",
        ),
    ],
    ids=["best_criterion", "round", "max_episode_steps", "kwargs", "inference_memory", "clip"],
)
def test_every_field_drl_writes_is_required(checkpoint_file, remove, message):
    """Format version 1 has always carried these fields: a file without one is not drl's."""
    from drlcli.checkpoints.files import read_checkpoint

    path = checkpoint_file(remove)
    with pytest.raises(CheckpointError) as error:
        read_checkpoint(path)
    assert str(error.value) == f"{path}: {message}"


def test_a_checkpoint_without_evaluation_reads_and_one_without_content_hash_is_refused(
    checkpoint_file, tmp_path
):
    from drlcli.checkpoints.audit import audit_checkpoint
    from drlcli.checkpoints.files import CONTENT_HASH, read_checkpoint

    def mid_run(payload):
        payload["evaluation"] = None  # a checkpoint of a round, not the end of a run

    assert read_checkpoint(checkpoint_file(mid_run)).evaluation is None
    path = checkpoint_file()
    payload = torch.load(path, weights_only=True)

    def refusal_of(changed: dict) -> str:
        torch.save(changed, path)
        with pytest.raises(CheckpointError) as error:
            read_checkpoint(path)
        return str(error.value)

    del payload[CONTENT_HASH]
    # A drl checkpoint in all else: one an older drl wrote, before the content hash.
    assert refusal_of(payload) == (
        f"{path}: written by an older drl, before every checkpoint carried a content hash: its "
        "integrity cannot be checked and the format has no migration; train again with this "
        "drl (drl train CONFIG)"
    )
    checks = {check.name: check for check in audit_checkpoint(path).checks}
    assert checks["content hash"].status == "FAIL"
    assert checks["content hash"].detail == "no content hash; drl writes one into every checkpoint"
    del payload["actor_semantics"]  # nor drl's record: damaged, or not drl's
    assert refusal_of(payload) == (
        f"{path}: carries no content hash, which drl writes into every checkpoint: the file is "
        "damaged or was not written by drl; use another checkpoint"
    )


def test_changed_bytes_are_reported_as_corruption_never_read_silently(checkpoint_file):
    """Flip bits all over a checkpoint: each flip makes it unreadable, is caught by the content
    hash, or changed nothing that is read (zip padding, say); none loads with changed contents."""
    import random

    from drlcli.checkpoints.audit import audit_checkpoint
    from drlcli.checkpoints.files import CONTENT_HASH, content_hash, read_checkpoint

    def contents_hash(payload):
        return content_hash({k: v for k, v in payload.items() if k != CONTENT_HASH})

    path = checkpoint_file()
    original = path.read_bytes()
    expected = contents_hash(read_checkpoint(path).to_payload())
    rng = random.Random(0)
    caught_by_hash = 0
    for trial in range(60):
        data = bytearray(original)
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        try:
            checkpoint = read_checkpoint(path)
        except CheckpointError as error:
            if "corrupted" in str(error):
                caught_by_hash += 1
                try:
                    checks = {check.name: check for check in audit_checkpoint(path).checks}
                except CheckpointError:  # torch's zip reader refused it on this read
                    continue
                assert checks["content hash"].status == "FAIL", trial
            continue
        assert contents_hash(checkpoint.to_payload()) == expected, f"flip {trial} read silently"
    assert caught_by_hash > 0, "no flip reached the contents: the test would not see a miss"
    path.write_bytes(original)
    read_checkpoint(path)


def test_the_content_hash_covers_scalars_empty_tensors_and_every_dtype():
    from drlcli.checkpoints.files import content_hash

    payload = {
        "step": torch.tensor(3.0),  # 0-dim, as Adam's step counters are
        "empty": torch.zeros(0),
        "mask": torch.tensor([True, False]),
        "half": torch.ones(2, dtype=torch.bfloat16),
        "plain": {"round": 3, "name": "x"},
    }
    reference = content_hash(payload)
    assert content_hash(dict(reversed(list(payload.items())))) == reference  # order-free
    changed = {**payload, "step": torch.tensor(4.0)}
    assert content_hash(changed) != reference
    assert content_hash({**payload, "plain": {"round": 4, "name": "x"}}) != reference
