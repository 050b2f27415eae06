"""The PPO minibatch gradient written out for the built-in networks, in numpy, without autograd.

On 64x64 networks and 64-sample minibatches a PPO minibatch step is bound by per-call
overhead, not arithmetic: autograd records every forward operation and replays a backward node
for each, and a torch call on a 64x64 tensor costs several microseconds before any arithmetic
(``scripts/bench/ppo_update.py`` measures each way). The built-in policy (an MLP mean with a
state-independent log-std, ``drlcli.actors.gaussian``) and value network (an MLP) have a short
closed-form gradient, so this module computes it with numpy on views of the same parameter
memory: one forward pass per network that keeps its layer outputs, the loss's derivatives with
respect to the policy mean, log-std and value (``ppo_output_gradients``), and one backward pass
per network that writes every gradient into the parameters' ``.grad`` memory. The rollout actor
samples with the same forward pass (``DenseNetwork``), so the first PPO ratio of a round is 1.

The maths is ``ppo_loss`` of ``maths.py``, unchanged (Method.md, "The update, written out");
tests check these gradients against autograd's. Custom policy actors, and built-in networks of
any other shape, use autograd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from drlcli.actors.gaussian import GaussianPolicyActor
from drlcli.algos.ppo.networks import ValueNetwork
from drlcli.algos.ppo.params import PPOParams

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_ACTIVATION_NAMES = {nn.Tanh: "tanh", nn.ReLU: "relu", nn.ELU: "elu"}


def array_view(tensor: torch.Tensor) -> np.ndarray:
    """A numpy array over ``tensor``'s memory (CPU): writes through either are seen by both."""
    return tensor.detach().numpy()


@dataclass(frozen=True)
class DenseLayer:
    """One ``nn.Linear`` as numpy views: ``weight [out, in]``, ``bias [out]`` and, where the
    parameters have them, their gradients' memory."""

    weight: np.ndarray
    bias: np.ndarray
    weight_grad: np.ndarray | None
    bias_grad: np.ndarray | None


class DenseNetwork:
    """An MLP ``Linear, activation, ..., Linear`` (what ``gaussian.mlp`` builds) run in numpy on
    its parameters' memory; parameters updated in place (optimiser steps, ``load_state_dict``)
    are seen without copying.

    Build with :meth:`of`, which returns None for a network of another shape or device.
    """

    def __init__(self, layers: list[DenseLayer], activation: str) -> None:
        self.layers, self.activation = layers, activation

    @classmethod
    def of(cls, network: nn.Module) -> DenseNetwork | None:
        if type(network) is not nn.Sequential or len(network) % 2 == 0:
            return None
        modules = list(network)
        linears, activations = modules[0::2], modules[1::2]
        if any(type(layer) is not nn.Linear or layer.bias is None for layer in linears):
            return None
        kinds = {type(module) for module in activations}
        if len(kinds) > 1 or not kinds <= set(_ACTIVATION_NAMES):
            return None
        if any(type(module) is nn.ELU and module.alpha != 1.0 for module in activations):
            return None
        parameters = [p for layer in linears for p in (layer.weight, layer.bias)]
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in parameters):
            return None
        layers = [
            DenseLayer(
                array_view(layer.weight),
                array_view(layer.bias),
                None if layer.weight.grad is None else array_view(layer.weight.grad),
                None if layer.bias.grad is None else array_view(layer.bias.grad),
            )
            for layer in linears
        ]
        return cls(layers, _ACTIVATION_NAMES[kinds.pop()] if kinds else "tanh")

    @property
    def has_gradients(self) -> bool:
        return all(
            layer.weight_grad is not None and layer.bias_grad is not None for layer in self.layers
        )

    def forward(self, inputs: np.ndarray) -> list[np.ndarray]:
        """``[inputs, hidden_1, ..., hidden_n, output]``, each ``[B, width]`` float32: what the
        backward pass needs (the activations' derivatives are taken from their outputs)."""
        outputs = [inputs]
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            hidden = outputs[-1] @ layer.weight.T
            hidden += layer.bias
            if index < last:
                _activate_(hidden, self.activation)
            outputs.append(hidden)
        return outputs

    def backward(self, outputs: list[np.ndarray], grad_output: np.ndarray) -> None:
        """Overwrite every layer's weight and bias gradient with d(loss)/d(parameter), given
        ``outputs`` of :meth:`forward` and ``grad_output`` = d(loss)/d(output) ``[B, out]``."""
        grad = grad_output
        for index in range(len(self.layers) - 1, -1, -1):
            layer, layer_input = self.layers[index], outputs[index]
            np.matmul(grad.T, layer_input, out=layer.weight_grad)
            np.sum(grad, axis=0, out=layer.bias_grad)
            if index > 0:
                grad = grad @ layer.weight
                grad *= _activation_derivative(layer_input, self.activation)


def _activate_(pre_activation: np.ndarray, activation: str) -> None:
    if activation == "tanh":
        np.tanh(pre_activation, out=pre_activation)
    elif activation == "relu":
        np.maximum(pre_activation, 0, out=pre_activation)
    else:  # elu, alpha 1: x where x > 0, else exp(x) - 1
        negative = np.minimum(pre_activation, 0)
        np.expm1(negative, out=negative)
        np.maximum(pre_activation, 0, out=pre_activation)
        pre_activation += negative


def _activation_derivative(output: np.ndarray, activation: str) -> np.ndarray:
    """d(output)/d(pre-activation), from the output."""
    if activation == "tanh":
        return 1 - output * output
    if activation == "relu":
        return output > 0
    return np.where(output > 0, 1, output + 1)  # elu: exp(x) = output + 1 where x <= 0


def gaussian_log_prob(actions: np.ndarray, mean: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """``log N(actions; mean, exp(log_std))`` summed over the action ``[B]``."""
    z = (actions - mean) * np.exp(-log_std)
    return -0.5 * (z * z).sum(-1) - (log_std.sum() + len(log_std) * HALF_LOG_2PI)


def ppo_output_gradients(
    *,
    mean: np.ndarray,
    log_std: np.ndarray,
    actions: np.ndarray,
    new_value: np.ndarray,
    old_logprob: np.ndarray,
    old_value: np.ndarray,
    advantages: np.ndarray,
    returns: np.ndarray,
    params: PPOParams,
) -> tuple[dict[str, float | np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """``ppo_loss`` and its derivatives with respect to the networks' outputs.

    For the diagonal Gaussian ``log pi(a|s) = sum_j -z_j^2 / 2 - log_std_j - log(2 pi) / 2``
    with ``z = (a - mu) / sigma``: ``d log pi / d mu = z / sigma`` and
    ``d log pi / d log_std = z^2 - 1``. The clipped surrogate ``max(-A r, -A clip(r))`` passes
    ``-A r`` on to ``log pi`` (through ``dr = r d log pi``) wherever the unclipped term is the
    smaller loss or ``r`` is inside the clip range (where the two are equal), and nothing
    elsewhere.

    Args:
        mean: policy mean ``[B, A]``; log_std: ``[A]``; actions: stored raw actions ``[B, A]``.
        new_value: value now ``[B]``; old_logprob, old_value: at sampling time ``[B]``.
        advantages: (already normalised) ``[B]``; returns: value targets ``[B]``.

    Returns:
        ``(stats, grad_mean [B, A], grad_log_std [A], grad_value [B])``: the loss's gradients;
        stats ``pg_loss``, ``v_loss``, ``entropy_loss`` (floats) and ``logratio`` ``[B]``.
    """
    batch = len(mean)
    inverse_std = np.exp(-log_std)
    z = (actions - mean) * inverse_std
    z_squared = z * z
    new_logprob = -0.5 * z_squared.sum(-1) - (log_std.sum() + len(log_std) * HALF_LOG_2PI)
    logratio = new_logprob - old_logprob
    ratio = np.exp(logratio)
    surrogate = advantages * ratio
    clipped_surrogate = advantages * np.clip(ratio, 1 - params.clip_coef, 1 + params.clip_coef)
    pg_loss = -float(np.minimum(surrogate, clipped_surrogate).mean())
    # A product with the mask, not np.where: a NaN advantage makes NaN gradients, as in autograd.
    grad_logprob = surrogate * (surrogate <= clipped_surrogate) * (-1.0 / batch)
    grad_mean = grad_logprob[:, None] * z * inverse_std
    grad_log_std = grad_logprob @ (z_squared - 1) - params.ent_coef
    entropy_loss = float(log_std.sum()) + len(log_std) * (0.5 + HALF_LOG_2PI)

    error = new_value - returns
    if params.clip_value_loss:
        moved = new_value - old_value
        clipped_error = old_value + np.clip(moved, -params.clip_coef, params.clip_coef) - returns
        squared, clipped_squared = error * error, clipped_error * clipped_error
        v_loss = 0.5 * float(np.maximum(squared, clipped_squared).mean())
        # max() splits a tie evenly (as autograd does); the clipped value passes gradient only
        # inside the clip range.
        clipped_grad = clipped_error * (np.abs(moved) <= params.clip_coef)
        grad_value = np.where(
            squared > clipped_squared,
            error,
            np.where(squared < clipped_squared, clipped_grad, 0.5 * (error + clipped_grad)),
        )
    else:
        v_loss = 0.5 * float((error * error).mean())
        grad_value = error
    grad_value = grad_value * (params.vf_coef / batch)
    stats = {
        "pg_loss": pg_loss,
        "v_loss": v_loss,
        "entropy_loss": entropy_loss,
        "logratio": logratio,
    }
    return stats, grad_mean, grad_log_std, grad_value


class ClosedFormGradients:
    """PPO minibatch gradients of the built-in policy actor and value network, written into
    their parameters' ``.grad``. Build with :meth:`for_networks` (None where it does not
    apply)."""

    def __init__(
        self, log_std: torch.Tensor, policy_mean: DenseNetwork, value: DenseNetwork
    ) -> None:
        self.log_std = array_view(log_std)
        self.log_std_grad = array_view(log_std.grad)
        self.policy_mean, self.value = policy_mean, value

    @classmethod
    def for_networks(cls, actor: nn.Module, value_network: nn.Module) -> ClosedFormGradients | None:
        if type(actor) is not GaussianPolicyActor or type(value_network) is not ValueNetwork:
            return None  # a subclass may change the maths
        policy_mean = DenseNetwork.of(actor.mean_network)
        value = DenseNetwork.of(value_network.network)
        if policy_mean is None or value is None or actor.log_std.grad is None:
            return None
        if not (policy_mean.has_gradients and value.has_gradients):
            return None  # the gradients' memory must exist (FlatParameters gives it)
        return cls(actor.log_std, policy_mean, value)

    def compute(
        self,
        *,
        obs: np.ndarray,
        actions: np.ndarray,
        old_logprob: np.ndarray,
        old_value: np.ndarray,
        advantages: np.ndarray,
        returns: np.ndarray,
        params: PPOParams,
        value_obs: np.ndarray | None = None,
    ) -> dict[str, float | np.ndarray]:
        """Overwrite every parameter's gradient with the minibatch's PPO-loss gradient (float32
        arrays, shapes as ``ppo_output_gradients``); returns its stats. ``obs``: the policy's
        observations; ``value_obs``: the value network's (a privileged critic's), None: ``obs``."""
        policy_outputs = self.policy_mean.forward(obs)
        value_outputs = self.value.forward(obs if value_obs is None else value_obs)
        stats, grad_mean, grad_log_std, grad_value = ppo_output_gradients(
            mean=policy_outputs[-1],
            log_std=self.log_std,
            actions=actions,
            new_value=value_outputs[-1][:, 0],
            old_logprob=old_logprob,
            old_value=old_value,
            advantages=advantages,
            returns=returns,
            params=params,
        )
        self.log_std_grad[:] = grad_log_std
        self.policy_mean.backward(policy_outputs, grad_mean)
        self.value.backward(value_outputs, grad_value[:, None])
        return stats
