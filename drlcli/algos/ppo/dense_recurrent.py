"""A recurrent core's step in numpy, for the rollout actor (ADR 0018).

A rollout steps each core once per env step for a handful of environments: a torch
``nn.LSTM`` call then costs about 100 us of dispatch for microseconds of arithmetic, twice a
step (the policy's core and the critic's). ``DenseRecurrentCore`` is the same cell on views of
the parameters' memory (weights updated in place are seen without copying), as
``closed_form.DenseNetwork`` is for the MLP heads; training reads sequences with torch's fused
cell (``RecurrentCore.sequence``), whose outputs on the stored states equal these to float32
rounding (tested: ratio 1 before an update).

The cells, as torch defines them (``x`` the layer's input, ``h``/``c`` its state):

    LSTM: i, f, g, o = x W_ih^T + b_ih + h W_hh^T + b_hh      (gates in that order)
          c' = sigmoid(f) c + sigmoid(i) tanh(g);   h' = sigmoid(o) tanh(c')
    GRU:  r, z, n_x = x W_ih^T + b_ih;   r_h, z_h, n_h = h W_hh^T + b_hh
          r = sigmoid(r + r_h);   z = sigmoid(z + z_h);   n = tanh(n_x + r n_h)
          h' = (1 - z) n + z h
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from drlcli.actors.recurrent import RecurrentCore
from drlcli.algos.ppo.closed_form import array_view


@dataclass(frozen=True)
class DenseCellLayer:
    """One layer's parameters as numpy views."""

    weight_ih: np.ndarray
    weight_hh: np.ndarray
    bias_ih: np.ndarray
    bias_hh: np.ndarray


def _sigmoid(values: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow warnings: ``(1 + tanh(x / 2)) / 2``."""
    return 0.5 * (1.0 + np.tanh(0.5 * values))


@functools.cache
def _lstm_tanh_scale(size: int) -> np.ndarray:
    """``[4 * size]``: 0.5 for the input, forget and output gates, 1 for the candidate."""
    scale = np.full(4 * size, 0.5, dtype=np.float32)
    scale[2 * size : 3 * size] = 1.0
    return scale


class DenseRecurrentCore:
    """``RecurrentCore.step`` in numpy. Build with :meth:`of`, None for a core off the CPU
    or not float32."""

    def __init__(self, cell: str, layers: list[DenseCellLayer]) -> None:
        self.cell, self.layers = cell, layers

    @classmethod
    def of(cls, core: RecurrentCore) -> DenseRecurrentCore | None:
        parameters = list(core.rnn.parameters())
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in parameters):
            return None
        rnn = core.rnn
        layers = [
            DenseCellLayer(
                *(
                    array_view(getattr(rnn, f"{name}_l{index}"))
                    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
                )
            )
            for index in range(core.layers)
        ]
        return cls(core.cell, layers)

    def step(self, features: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One step of ``B`` environments: ``features [B, input_dim]`` float32 and the state
        it reads (``RecurrentCore``'s layout, reset where an episode begins). Returns
        ``(output [B, size], state after the step)``, new arrays."""
        after = np.empty_like(state)
        inputs = features
        for index, layer in enumerate(self.layers):
            if self.cell == "lstm":
                hidden, cell = self._lstm(layer, inputs, state[0, index], state[1, index])
                after[0, index], after[1, index] = hidden, cell
            else:
                hidden = self._gru(layer, inputs, state[index])
                after[index] = hidden
            inputs = hidden
        return inputs, after

    @staticmethod
    def _lstm(
        layer: DenseCellLayer, inputs: np.ndarray, hidden: np.ndarray, cell: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        gates = inputs @ layer.weight_ih.T
        gates += hidden @ layer.weight_hh.T
        gates += layer.bias_ih
        gates += layer.bias_hh
        # One tanh for the four gates: sigmoid(x) = (1 + tanh(x / 2)) / 2, so the input,
        # forget and output gates' pre-activations are halved and the candidate's kept.
        size = hidden.shape[1]
        squashed = np.tanh(gates * _lstm_tanh_scale(size))
        input_gate, forget_gate = squashed[:, :size], squashed[:, size : 2 * size]
        candidate, output_gate = squashed[:, 2 * size : 3 * size], squashed[:, 3 * size :]
        cell_after = 0.5 * ((1.0 + forget_gate) * cell + (1.0 + input_gate) * candidate)
        return 0.5 * (1.0 + output_gate) * np.tanh(cell_after), cell_after

    @staticmethod
    def _gru(layer: DenseCellLayer, inputs: np.ndarray, hidden: np.ndarray) -> np.ndarray:
        from_input = inputs @ layer.weight_ih.T
        from_input += layer.bias_ih
        from_hidden = hidden @ layer.weight_hh.T
        from_hidden += layer.bias_hh
        size = hidden.shape[1]
        gates = from_input[:, : 2 * size] + from_hidden[:, : 2 * size]
        reset, update = _sigmoid(gates[:, :size]), _sigmoid(gates[:, size:])
        new = np.tanh(from_input[:, 2 * size :] + reset * from_hidden[:, 2 * size :])
        return (1.0 - update) * new + update * hidden
