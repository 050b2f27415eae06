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


def test_a_per_tensor_optimizer_state_is_flattened_on_load():
    """Checkpoints written before the flat layout held one Adam entry per parameter tensor."""
    learner = _filled_learner()
    parameters = learner.flat.parameters
    per_tensor = torch.optim.Adam(parameters, lr=1e-3, eps=1e-5)
    for step in range(3):
        learner.flat.zero_grad()
        loss = sum((p * (step + 1)).square().sum() for p in parameters)
        loss.backward()
        per_tensor.step()
    networks = learner.network_state()
    learner.load_state_dict({**networks, "optimizer": per_tensor.state_dict()})
    loaded = learner.optimizer.state[learner.flat.values]
    for key in ("exp_avg", "exp_avg_sq"):
        expected = torch.cat([per_tensor.state[p][key].reshape(-1) for p in parameters])
        assert torch.equal(loaded[key], expected)
    assert float(loaded["step"]) == 3.0
    assert learner.optimizer.param_groups[0]["lr"] == 1e-3

    wrong_shapes = per_tensor.state_dict()
    wrong_shapes["state"][0]["exp_avg"] = torch.zeros(7)
    with pytest.raises(CheckpointError, match="shape"):
        learner.load_state_dict({**networks, "optimizer": wrong_shapes})


def _per_tensor_state(parameters, steps):
    """An Adam ``state_dict`` over ``parameters`` one by one with the given step counts (a
    missing step: no state for that parameter, as for one that never had a gradient)."""
    state = {}
    for index, (parameter, step) in enumerate(zip(parameters, steps, strict=True)):
        if step is not None:
            state[index] = {
                "step": torch.tensor(float(step)),
                "exp_avg": torch.full_like(parameter, float(index + 1)),
                "exp_avg_sq": torch.full_like(parameter, float(index + 10)),
            }
    group = {"lr": 1e-3, "params": list(range(len(parameters)))}
    return {"state": state, "param_groups": [group]}


def test_flattening_takes_the_first_parameters_step_and_concatenates_the_moments_in_order():
    from drlcli.flat_parameters import flatten_optimizer_state

    model = _model()
    flat = FlatParameters(list(model.parameters()))
    merged = flatten_optimizer_state(_per_tensor_state(flat.parameters, [3, 2, 2, 2]), flat)
    assert merged["param_groups"] == [{"lr": 1e-3, "params": [0]}]
    entry = merged["state"][0]
    assert float(entry["step"]) == 3.0  # the first parameter's, as documented
    sizes = [p.numel() for p in flat.parameters]
    expected = torch.cat([torch.full((n,), float(i + 1)) for i, n in enumerate(sizes)])
    assert torch.equal(entry["exp_avg"], expected)
    assert entry["exp_avg_sq"][0] == 10.0 and entry["exp_avg_sq"][-1] == 13.0


def test_flattening_a_state_without_moments_gives_a_fresh_optimiser_state():
    from drlcli.flat_parameters import flatten_optimizer_state

    flat = FlatParameters(list(_model().parameters()))
    merged = flatten_optimizer_state(_per_tensor_state(flat.parameters, [None] * 4), flat)
    assert merged["state"] == {}
    single = {"state": {}, "param_groups": [{"lr": 1.0, "params": [0]}]}
    assert flatten_optimizer_state(single, flat) is single  # already over one tensor


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["param_groups"][0]["params"].pop(), r"^3 parameter tensors in 1 groups, "),
        (
            lambda s: s["state"][1].update(exp_avg=torch.zeros(2)),
            r"^exp_avg of shape \(2,\) for a parameter of shape \(16,\)$",
        ),
    ],
)
def test_flattening_refuses_a_state_of_other_parameters_naming_what_differs(change, message):
    from drlcli.flat_parameters import flatten_optimizer_state

    flat = FlatParameters(list(_model().parameters()))
    state = _per_tensor_state(flat.parameters, [1, 1, 1, 1])
    change(state)
    with pytest.raises(ValueError, match=message):
        flatten_optimizer_state(state, flat)


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
