"""The built-in actors' builders and the inference-memory helpers (drlcli/actors/), piece by
piece: defaults, initialisation, dtypes, devices, and the exact words they report."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from drlcli.actors.contract import declared_inference_memory
from drlcli.actors.gaussian import GaussianPolicyActor, build_gaussian_actor
from drlcli.actors.memory import describe_memory, format_bytes, tensor_bytes
from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.algos.flash_sac.actor import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    FlashSACActor,
    truncated_zeta_pmf,
)
from drlcli.checkpoints.semantics import builtin_tensor_shapes
from drlcli.errors import PolicyActorContractError

LOW64, HIGH64 = np.array([-1.0, -2.0]), np.array([1.0, 2.0])  # float64, as numpy makes them


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (17_920, "17.5 KiB"),
        (1024**2 - 1, "1024.0 KiB"),
        (1024**2, "1.0 MiB"),
        (3_355_443, "3.2 MiB"),
        (1024**3 - 1, "1024.0 MiB"),
        (1024**3, "1.0 GiB"),
        (7_945_689_497, "7.4 GiB"),
        (5 * 1024**4, "5120.0 GiB"),
    ],
)
def test_byte_counts_are_shown_in_the_largest_unit_below_1024(count, shown):
    assert format_bytes(count) == shown


def test_memory_is_described_per_category_or_as_nothing():
    assert describe_memory({"parameters": 17_920, "buffers": 48}) == (
        "parameters 17.5 KiB, buffers 48 B (declared)"
    )
    assert describe_memory({}) == "nothing (declared)"


def test_tensor_bytes_count_every_tensor_of_a_nested_state_and_nothing_else():
    state = {
        "weight": torch.zeros(3, 4),  # 48 bytes
        "inner": {"counts": torch.zeros(5, dtype=torch.int16), "note": "text", "step": 7},
    }
    assert tensor_bytes(state) == 48 + 10
    assert tensor_bytes("not a tensor") == 0 and tensor_bytes([torch.zeros(2)]) == 0


class _Declares(GaussianPolicyActor):
    def __init__(self, answer) -> None:
        super().__init__(3, 2, LOW64, HIGH64)
        self.answer = answer

    def inference_startup_memory_categories(self):
        return self.answer


@pytest.mark.parametrize(
    "answer",
    [
        [("parameters", 10)],
        {"parameters": -1},
        {"parameters": 1.5},
        {"parameters": True},
        {3: 10},
    ],
)
def test_declared_memory_must_be_non_negative_integer_bytes_by_name(answer):
    with pytest.raises(PolicyActorContractError) as error:
        declared_inference_memory(_Declares(answer))
    assert str(error.value) == (
        "policy actor _Declares: inference_startup_memory_categories() must return "
        "dict[str, int] (non-negative bytes per category)"
    )


def test_declared_memory_of_zero_bytes_is_fine_and_copied():
    answer = {"parameters": 0, "buffers": 12}
    declared = declared_inference_memory(_Declares(answer))
    assert declared == answer and declared is not answer


def test_the_gaussian_builder_defaults_and_keeps_float32_bounds():
    actor = build_gaussian_actor(3, 2, action_low=LOW64, action_high=HIGH64)
    assert torch.equal(actor.log_std.detach(), torch.zeros(2))
    assert [module.out_features for module in actor.mean_network[0::2]] == [64, 64, 2]
    assert isinstance(actor.mean_network[1], torch.nn.Tanh)
    for bounds in (actor, GaussianPolicyActor(3, 2, LOW64, HIGH64)):
        assert bounds.action_low.dtype == bounds.action_high.dtype == torch.float32
        torch.testing.assert_close(bounds.action_high, torch.tensor([1.0, 2.0]))
    assert torch.equal(GaussianPolicyActor(3, 2, LOW64, HIGH64).log_std.detach(), torch.zeros(2))
    wide = build_gaussian_actor(3, 2, action_low=LOW64, action_high=HIGH64, init_log_std=-0.5)
    assert torch.equal(wide.log_std.detach(), torch.full((2,), -0.5))


def test_hidden_layers_are_orthogonal_with_gain_sqrt_2():
    torch.manual_seed(0)
    actor = build_gaussian_actor(
        5, 2, action_low=LOW64, action_high=HIGH64, hidden_sizes=(4, 3), activation="relu"
    )
    for layer in actor.mean_network[0:-1:2]:  # rows <= columns: W W^T = gain^2 I
        torch.testing.assert_close(
            layer.weight @ layer.weight.T, 2.0 * torch.eye(layer.out_features), atol=1e-5, rtol=0
        )
        assert torch.equal(layer.bias, torch.zeros(layer.out_features))
    singular = torch.linalg.svdvals(actor.mean_network[-1].weight)
    assert not torch.allclose(singular, torch.full_like(singular, math.sqrt(2.0)))


def test_an_unknown_activation_is_refused_naming_the_choices():
    with pytest.raises(ValueError) as error:
        GaussianPolicyActor(3, 2, LOW64, HIGH64, activation="gelu")
    assert str(error.value) == "activation must be one of ['elu', 'relu', 'tanh'], got 'gelu'"


DEVICES_ASKED: list[object] = []


def recording_builder(obs_dim, action_dim, device="not given", **kwargs):
    """An actor builder (``tests.test_actor_builders:recording_builder``) that records the
    device it was asked for."""
    DEVICES_ASKED.append(device)
    return build_gaussian_actor(obs_dim, action_dim, "cpu", **kwargs)


def test_build_policy_actor_passes_the_device_to_the_builder():
    DEVICES_ASKED.clear()
    spec = ActorSpec(
        "tests.test_actor_builders:recording_builder",
        {"action_low": [-1.0, -2.0], "action_high": [1.0, 2.0]},
    )
    device = torch.device("cpu")
    build_policy_actor(spec, 3, 2, device)
    build_policy_actor(spec, 3, 2)
    assert DEVICES_ASKED[0] is device and DEVICES_ASKED[1] == "cpu"


def test_tensor_shapes_are_only_read_from_built_in_builders():
    spec = ActorSpec("tests.custom_actors:build", {"action_low": [-1.0], "action_high": [1.0]})
    with pytest.raises(ValueError) as error:
        builtin_tensor_shapes(spec, 3, 1)
    assert str(error.value) == (
        "builtin_tensor_shapes: tests.custom_actors:build is not a built-in builder"
    )


def test_the_flash_sac_actor_has_one_member_of_its_papers_sizes_and_float32_bounds():
    actor = FlashSACActor(3, 2, LOW64, HIGH64)
    shapes = {name: tuple(p.shape) for name, p in actor.named_parameters()}
    assert shapes["mean_head.weight"] == (1, 2, 128)
    assert shapes["log_std_head.weight"] == (1, 2, 128)
    assert all(shape[0] == 1 for name, shape in shapes.items() if name.startswith("encoder"))
    assert len({name.split(".")[2] for name in shapes if name.startswith("encoder.blocks")}) == 2
    assert actor.action_bias.dtype == actor.action_range.dtype == torch.float32
    torch.testing.assert_close(actor.action_range, torch.tensor([1.0, 2.0]))
    weights = torch.arange(1, 17, dtype=torch.float64) ** -2.0
    assert torch.equal(actor.zeta_pmf, (weights / weights.sum()).float())


def test_the_zeta_distribution_is_computed_in_float64():
    for mu, steps in ((2.0, 16), (1.3, 1000), (3.7, 7)):
        weights = torch.arange(1, steps + 1, dtype=torch.float64) ** -mu
        assert torch.equal(truncated_zeta_pmf(mu, steps), (weights / weights.sum()).float())


def test_the_flash_sac_sample_is_mean_plus_std_times_its_noise_and_the_biases_add():
    actor = FlashSACActor(3, 2, LOW64, HIGH64, hidden_dim=16, num_blocks=1)
    with torch.no_grad():
        actor.mean_bias.fill_(0.3)
        actor.log_std_bias.fill_(-0.2)
    obs = torch.randn(4, 3)
    actor.eval()
    with torch.no_grad():
        features = actor.encoder(obs.unsqueeze(0))
        mean, std = actor.get_mean_and_std(obs)
        torch.testing.assert_close(mean, actor.mean_head(features)[0] + 0.3)
        raw = actor.log_std_head(features)[0] - 0.2
        torch.testing.assert_close(
            std, torch.exp(LOG_STD_MIN + (LOG_STD_MAX - LOG_STD_MIN) * 0.5 * (1 + torch.tanh(raw)))
        )
    actor.sample_noise = lambda like: torch.ones_like(like)
    with torch.no_grad():
        actions, _ = actor(obs, training=False)
    torch.testing.assert_close(actions, actor.transform(mean + std))
