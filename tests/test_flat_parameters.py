"""FlatParameters: the flat buffers behave like per-tensor parameters, clipping and Adam."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from drlcli.algos.ppo.learner import Learner
from drlcli.errors import CheckpointError, PolicyActorContractError
from drlcli.flat_parameters import FlatParameters
from tests.test_ppo import PARAMS, SPEC


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))


def _loss(model: nn.Module, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 5, generator=generator)
    return (model(x) ** 2).mean() * 100.0  # large gradients, so clipping is active


def test_flattening_keeps_values_and_modules_see_optimizer_updates():
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flat = FlatParameters(list(model.parameters()))
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])
    assert flat.values.numel() == sum(v.numel() for v in before.values())
    flat.values.add_(1.0)  # an in-place change of the flat tensor is a change of the module
    assert torch.equal(model[0].weight, before["0.weight"] + 1.0)
    assert flat.check_views()


# Both ways of clipping run here: numpy's is the CPU one, torch's the one on a GPU.
@pytest.mark.parametrize("clipping", ["_clip_in_numpy", "_clip_on_device"])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_training_matches_per_tensor_clipping_and_adam(clipping, max_norm):
    reference, model = _model(), _model()
    flat = FlatParameters(list(model.parameters()))
    clip = getattr(flat, clipping)
    flat_adam = torch.optim.Adam([flat.values], lr=1e-2, eps=1e-5, fused=True)
    reference_adam = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5, foreach=False)
    for step in range(5):
        flat.zero_grad()
        _loss(model, step).backward()
        norm = float(clip(max_norm))
        flat_adam.step()

        reference_adam.zero_grad()
        _loss(reference, step).backward()
        reference_norm = nn.utils.clip_grad_norm_(reference.parameters(), max_norm)
        reference_adam.step()

        assert norm == pytest.approx(reference_norm.item(), rel=1e-5)
        assert norm > 0.5  # clipped with the first max_norm, not with the second
        for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)
    applied = torch.linalg.vector_norm(flat.grads).item()
    assert applied == pytest.approx(min(norm, max_norm), rel=1e-4)


@pytest.mark.parametrize("clipping", ["_clip_in_numpy", "_clip_on_device"])
@pytest.mark.parametrize(
    ("gradient", "max_norm"),
    [([3e-6, 4e-6], 1e-6), ([0.3, 0.4], 0.75), ([0.3, 0.4], 0.5)],  # norm 5e-6, 0.5, 0.5
)
def test_clipping_scales_by_max_norm_over_norm_plus_epsilon_and_never_up(
    clipping, gradient, max_norm
):
    weight = nn.Parameter(torch.zeros(2))
    flat = FlatParameters([weight])
    flat.grads.copy_(torch.tensor(gradient))
    reference = nn.Parameter(torch.zeros(2))
    reference.grad = torch.tensor(gradient)
    expected_norm = nn.utils.clip_grad_norm_([reference], max_norm)
    assert float(getattr(flat, clipping)(max_norm)) == pytest.approx(float(expected_norm))
    # torch's epsilon (1e-6) matters at a norm of 5e-6; a norm under max_norm stays as it is.
    torch.testing.assert_close(weight.grad, reference.grad, rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("kernel", ["present", "absent", "of another signature"])
def test_adam_step_is_optimizer_step_bit_for_bit(monkeypatch, kernel):
    import drlcli.flat_parameters as flat_module

    kernel_calls = []
    if kernel == "present":
        fused_adam = flat_module._FUSED_ADAM
        assert fused_adam is not None, "this torch has no torch._fused_adam_"

        def counted(*args, **kwargs):
            kernel_calls.append(1)
            return fused_adam(*args, **kwargs)

        monkeypatch.setattr(flat_module, "_FUSED_ADAM", counted)
    elif kernel == "absent":
        monkeypatch.setattr(flat_module, "_FUSED_ADAM", None)
    else:  # a torch whose private kernel gained an argument: tried once, then never again

        def changed(*args, **kwargs):
            kernel_calls.append(1)
            raise TypeError("_fused_adam_() missing 1 required keyword argument: 'new_option'")

        monkeypatch.setattr(flat_module, "_FUSED_ADAM", changed)
    models = [_model(), _model()]
    flats = [FlatParameters(list(model.parameters())) for model in models]
    adams = [torch.optim.Adam([f.values], lr=1e-2, eps=1e-5, fused=True) for f in flats]
    for step in range(6):
        for model, flat in zip(models, flats, strict=True):
            flat.zero_grad()
            _loss(model, step).backward()
        for adam in adams:
            adam.param_groups[0]["lr"] = 1e-2 * (1 - step / 6)  # as PPO's annealing moves it
        adams[0].step()
        flats[1].adam_step(adams[1])
        assert torch.equal(flats[0].values, flats[1].values)
    states = [adam.state_dict()["state"][0] for adam in adams]
    for key in ("step", "exp_avg", "exp_avg_sq"):
        assert torch.equal(states[0][key], states[1][key])
    assert float(states[1]["step"]) == 6
    # The first step creates the state.
    assert len(kernel_calls) == {"present": 5, "absent": 0, "of another signature": 1}[kernel]


@pytest.mark.parametrize(
    "variant",
    [
        {"weight_decay": 0.1, "amsgrad": True},
        {"weight_decay": 0.1},
        {"amsgrad": True},
        {"maximize": True},
        {"fused": False},
        {"fused": False, "foreach": False},
        {"lr": torch.tensor(1e-2)},
    ],
    ids=repr,
)
def test_adam_step_defers_to_the_optimizer_for_variants_it_does_not_cover(variant):
    reference, model = _model(), _model()
    flats = [FlatParameters(list(m.parameters())) for m in (reference, model)]
    options = {"lr": 1e-2, "fused": True, **variant}
    if isinstance(options["lr"], torch.Tensor):  # one tensor each, as two learners hold
        adams = [
            torch.optim.Adam([f.values], **{**options, "lr": options["lr"].clone()}) for f in flats
        ]
    else:
        adams = [torch.optim.Adam([f.values], **options) for f in flats]
    for step in range(3):
        for m, flat in zip((reference, model), flats, strict=True):
            flat.zero_grad()
            _loss(m, step).backward()
        adams[0].step()
        flats[1].adam_step(adams[1])
    assert torch.equal(flats[0].values, flats[1].values)


def test_adam_step_defers_to_the_optimizer_when_it_holds_other_tensors():
    model = _model()
    flat = FlatParameters(list(model.parameters()))
    other = torch.zeros(3, requires_grad=True)
    other.grad = torch.ones(3)
    adam = torch.optim.Adam([flat.values, other], lr=0.1, fused=True)
    for step in range(2):
        flat.zero_grad()
        _loss(model, step).backward()
        flat.adam_step(adam)
    assert float(adam.state[other]["step"]) == 2  # stepped by optimizer.step(), every tensor
    assert not torch.equal(other, torch.zeros(3))


def test_load_state_dict_keeps_the_views():
    model = _model()
    flat = FlatParameters(list(model.parameters()))
    model.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})
    assert flat.check_views()
    assert torch.count_nonzero(flat.values) == 0


def test_check_views_detects_replaced_tensors():
    model = _model()
    flat = FlatParameters(list(model.parameters()))
    model[0].weight.data = model[0].weight.data.clone()
    assert not flat.check_views()

    other = _model()
    flat = FlatParameters(list(other.parameters()))
    other.zero_grad(set_to_none=True)
    assert not flat.check_views()


def test_check_views_looks_past_empty_parameters_and_checks_one_element_ones():
    empty, single, weight = (nn.Parameter(torch.zeros(shape)) for shape in ((0,), (1,), (4,)))
    for replaced in (single, weight):
        flat = FlatParameters([empty, single, weight])
        flat.zero_grad()
        assert flat.check_views()
        replaced.data = replaced.data.clone()  # after an empty view: still checked
        assert not flat.check_views()


def test_rejects_duplicates_and_mixed_dtypes():
    model = _model()
    with pytest.raises(ValueError, match="twice"):
        FlatParameters([model[0].weight, model[0].weight])
    mixed = [nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(2, dtype=torch.float64))]
    with pytest.raises(ValueError, match="dtype"):
        FlatParameters(mixed)
    with pytest.raises(ValueError, match="at least one"):
        FlatParameters([])


def _filled_learner(seed: int = 0) -> Learner:
    learner = Learner(SPEC, obs_dim=4, action_dim=1, params=PARAMS, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    size = 64
    learner.add(
        {
            "obs": torch.randn(size, 4, generator=generator).numpy(),
            "act": torch.randn(size, 1, generator=generator).numpy(),
            "logp": (torch.randn(size, generator=generator) - 1.0).numpy(),
            "value": torch.randn(size, generator=generator).numpy(),
            "ret": torch.randn(size, generator=generator).numpy(),
            "adv": torch.randn(size, generator=generator).numpy(),
        }
    )
    return learner


def test_learner_refuses_an_actor_that_replaces_its_parameters():
    learner = _filled_learner()

    def replace_parameters() -> None:
        weight = learner.actor.mean_network[0].weight
        weight.data = weight.data.clone()

    learner.actor.normalize_parameters = replace_parameters
    with pytest.raises(PolicyActorContractError, match="in place"):
        learner.train_step(0.0)


def test_learner_optimizer_state_round_trips_and_a_foreign_one_is_refused():
    learner = _filled_learner()
    learner.train_step(0.0)
    state = copy.deepcopy(learner.state_dict())
    fresh = Learner(SPEC, obs_dim=4, action_dim=1, params=PARAMS, seed=1)
    fresh.load_state_dict(state)
    torch.testing.assert_close(
        fresh.optimizer.state[fresh.flat.values]["exp_avg"],
        learner.optimizer.state[learner.flat.values]["exp_avg"],
    )
    # The per-tensor layout of another network (here: 3 parameter tensors) does not fit.
    per_tensor = torch.optim.Adam(_model().parameters()).state_dict()
    with pytest.raises(CheckpointError, match="optimiser state does not fit"):
        fresh.load_state_dict({**state, "optimizer": per_tensor})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s["param_groups"][0]["params"].append(1),
            r"^2 parameter tensors in 1 groups, expected 1 in one$",
        ),
        (
            lambda s: s["param_groups"].append({**s["param_groups"][0], "params": []}),
            r"^1 parameter tensors in 2 groups, expected 1 in one$",
        ),
        (
            lambda s: s["state"][0].update(exp_avg_sq=torch.zeros(7)),
            r"^exp_avg_sq of shape \(7,\) for parameters of shape \(\d+,\)$",
        ),
    ],
)
def test_a_learner_refuses_an_optimiser_state_not_over_its_flat_parameters(change, message):
    """``Optimizer.load_state_dict`` compares only group sizes: a moment of another size would
    load and fail at the next step, mid-run."""
    from drlcli.flat_parameters import check_flat_optimizer_state

    learner = _filled_learner()
    learner.train_step(0.0)
    state = copy.deepcopy(learner.state_dict())
    check_flat_optimizer_state(state["optimizer"], learner.flat)  # its own fits
    change(state["optimizer"])
    with pytest.raises(ValueError, match=message):
        check_flat_optimizer_state(state["optimizer"], learner.flat)
    with pytest.raises(CheckpointError, match="optimiser state does not fit"):
        learner.load_state_dict(state)


def test_a_fresh_optimiser_state_over_the_flat_parameters_fits():
    from drlcli.flat_parameters import check_flat_optimizer_state

    flat = FlatParameters(list(_model().parameters()))
    check_flat_optimizer_state({"state": {}, "param_groups": [{"lr": 1.0, "params": [0]}]}, flat)
    step_only = {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"params": [0]}]}
    check_flat_optimizer_state(step_only, flat)  # a 0-dim entry has no size to compare


def test_flat_parameters_refuse_what_they_cannot_flatten_in_full_sentences():
    weight = nn.Parameter(torch.zeros(2))
    cases = [
        ([], "FlatParameters needs at least one parameter"),
        ([weight, weight], "FlatParameters: a parameter is listed twice"),
        (
            [weight, nn.Parameter(torch.zeros(2, dtype=torch.float64))],
            "FlatParameters: all parameters must share device and dtype",
        ),
    ]
    for parameters, message in cases:
        with pytest.raises(ValueError) as error:
            FlatParameters(parameters)
        assert str(error.value) == message


def test_a_parameter_that_starts_right_after_the_flat_buffer_is_not_a_view_of_it():
    """The buffers are half-open ranges: a tensor starting at ``values``' end byte (as one
    placed just after it in the same allocation would) lives outside."""
    weight, bias = nn.Parameter(torch.zeros(4)), nn.Parameter(torch.zeros(2))
    flat = FlatParameters([weight, bias])
    flat.zero_grad()
    assert flat.check_views()
    for buffer in ("values", "grads"):
        allocation = torch.zeros(getattr(flat, buffer).numel() + 2)
        original = getattr(flat, buffer)
        allocation[: original.numel()] = original
        setattr(flat, buffer, allocation[: original.numel()])
        after = allocation[original.numel() :]
        if buffer == "values":
            bias.data = after
            weight.data = allocation[:4]
        else:
            bias.grad = after
            weight.grad = allocation[:4]
        assert not flat.check_views(), buffer
        flat = FlatParameters([weight, bias])  # a fresh, consistent pair for the next case
        flat.zero_grad()
        assert flat.check_views()
