"""One contiguous tensor for a set of parameters, and one for their gradients.

PPO's minibatch step on small networks is bound by per-call overhead, not arithmetic: global
gradient-norm clipping and Adam each loop over every parameter tensor. With the parameters'
storage moved into one flat tensor (each ``nn.Parameter`` becomes a view of it) and their
``.grad`` views of one flat gradient, autograd still accumulates into each view in place, and
zeroing, clipping and the optimiser step are one call each over the whole model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

# The kernel behind torch.optim.Adam(fused=True); private, hence looked up, not assumed.
_FUSED_ADAM = getattr(torch, "_fused_adam_", None)


class FlatParameters:
    """Moves ``parameters`` into ``values`` (flat, same device and dtype) and gives each a
    ``.grad`` view into ``grads``.

    The modules keep their ``nn.Parameter`` objects, so ``state_dict``/``load_state_dict``
    (in-place copies) work unchanged. Anything that *replaces* a parameter's tensor
    (``p.data = ...``) or its gradient (``zero_grad(set_to_none=True)``) detaches it from the
    flat buffers; :meth:`check_views` detects that.

    Args:
        parameters: tensors of one device and floating dtype, each trained (no duplicates).
    """

    def __init__(self, parameters: Sequence[nn.Parameter]) -> None:
        self.parameters = list(parameters)
        if not self.parameters:
            raise ValueError("FlatParameters needs at least one parameter")
        if len({id(p) for p in self.parameters}) != len(self.parameters):
            raise ValueError("FlatParameters: a parameter is listed twice")
        first = self.parameters[0]
        if any(p.device != first.device or p.dtype != first.dtype for p in self.parameters):
            raise ValueError("FlatParameters: all parameters must share device and dtype")
        with torch.no_grad():
            self.values = torch.cat([p.detach().reshape(-1) for p in self.parameters])
        self.grads = torch.zeros_like(self.values)
        self._fused_kernel_fits = True  # until the kernel refuses adam_step's arguments
        # The optimiser steps this tensor; its gradient is the flat gradient buffer.
        self.values.grad = self.grads
        offset = 0
        for parameter in self.parameters:
            size = parameter.numel()
            parameter.data = self.values[offset : offset + size].view_as(parameter)
            parameter.grad = self.grads[offset : offset + size].view_as(parameter)
            offset += size

    def zero_grad(self) -> None:
        self.grads.zero_()

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor | float:
        """Scale the gradients so their global L2 norm is at most ``max_norm`` (as
        ``torch.nn.utils.clip_grad_norm_``); returns the norm before clipping: a float on CPU
        (computed in numpy, a few microseconds instead of torch's ~35), a 0-d tensor elsewhere
        (no device synchronisation)."""
        if self.grads.device.type == "cpu":
            return self._clip_in_numpy(max_norm)
        return self._clip_on_device(max_norm)

    def _clip_in_numpy(self, max_norm: float) -> float:
        grads = self.grads.numpy()
        norm = float(np.sqrt(np.dot(grads, grads)))
        scale = max_norm / (norm + 1e-6)
        if not scale >= 1.0:  # a NaN norm spreads to every gradient, as in torch
            grads *= scale
        return norm

    def _clip_on_device(self, max_norm: float) -> torch.Tensor:
        norm = torch.linalg.vector_norm(self.grads)
        self.grads.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm

    def adam_step(self, optimizer: torch.optim.Adam) -> None:
        """``optimizer.step()`` of a fused Adam over :attr:`values`, bit for bit, without the
        optimiser's Python dispatch (about 75 us of a 85 us step on CPU, where PPO makes 320
        steps a round): its own ``torch._fused_adam_`` kernel on its own state. The first step
        (which creates the state), another Adam variant, a tensor learning rate, a torch
        without that kernel or one whose kernel refuses these arguments (a private signature
        may change: then every later step too) go through ``optimizer.step()``.
        """
        group = optimizer.param_groups[0]
        state = optimizer.state.get(self.values)
        if (
            not state
            or _FUSED_ADAM is None
            or not self._fused_kernel_fits
            or not group.get("fused")
            or len(optimizer.param_groups) != 1
            or len(group["params"]) != 1
            or group["params"][0] is not self.values
            or group.get("differentiable")
            or group["amsgrad"]
            or group["maximize"]
            or group["weight_decay"]
            or group.get("decoupled_weight_decay")
            or isinstance(group["lr"], torch.Tensor)
        ):
            optimizer.step()
            return
        beta1, beta2 = group["betas"]
        with torch.no_grad():
            state["step"] += 1  # before the kernel, which reads it for the bias corrections
            try:
                _FUSED_ADAM(
                    [self.values],
                    [self.grads],
                    [state["exp_avg"]],
                    [state["exp_avg_sq"]],
                    [],
                    [state["step"]],
                    amsgrad=False,
                    lr=group["lr"],
                    beta1=float(beta1),
                    beta2=float(beta2),
                    weight_decay=0.0,
                    eps=group["eps"],
                    maximize=False,
                    grad_scale=None,
                    found_inf=None,
                )
            except TypeError:  # the arguments are bound before the kernel touches a tensor
                state["step"] -= 1
                self._fused_kernel_fits = False
                optimizer.step()

    def check_views(self) -> bool:
        """Whether every parameter and gradient still lives in the flat buffers."""
        start, end = self.values.data_ptr(), self.values.data_ptr() + self.values.nbytes
        grad_start = self.grads.data_ptr()
        grad_end = grad_start + self.grads.nbytes
        for parameter in self.parameters:
            if parameter.numel() == 0:  # an empty view has no address to check
                continue
            grad = parameter.grad
            if not start <= parameter.data_ptr() < end:
                return False
            if grad is None or not grad_start <= grad.data_ptr() < grad_end:
                return False
        return True


def check_flat_optimizer_state(state: dict[str, Any], flat: FlatParameters) -> None:
    """Check that an optimiser ``state_dict`` is one over ``flat.values`` (one group of one
    tensor, its buffers of that size): ``Optimizer.load_state_dict`` compares only the group
    sizes, and a moment of another size would fail only at the next step.

    Raises:
        ValueError: naming what differs.
    """
    groups = state["param_groups"]
    indices = [index for group in groups for index in group["params"]]
    if len(groups) != 1 or len(indices) != 1:
        raise ValueError(
            f"{len(indices)} parameter tensors in {len(groups)} groups, expected 1 in one"
        )
    for key, value in state["state"].get(indices[0], {}).items():
        if isinstance(value, torch.Tensor) and value.dim() and value.shape != flat.values.shape:
            raise ValueError(
                f"{key} of shape {tuple(value.shape)} for parameters of shape "
                f"{tuple(flat.values.shape)}"
            )
