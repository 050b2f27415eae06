"""What a recurrent core is, read without building it (ADR 0018): its ``(cell, size, layers)``
from a network's state dict, the shape of its state and the record ``drl verify`` and
``drl export`` give of it. No torch import: the registry's checks use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Core = tuple[str, int, int]
"""``(cell, size, layers)`` of a recurrent core: what its weights and its state depend on."""

CELLS = ("lstm", "gru")
STATE_PARTS = {"lstm": ("h", "c"), "gru": ("h",)}
"""The parts of each cell's state, as ONNX names them (``h_in``, ``c_in``, ...): an LSTM's hidden
and cell state, a GRU's hidden state."""
_GATES = {4: "lstm", 3: "gru"}  # rows of weight_hh per unit: an LSTM stacks 4 gates, a GRU 3


def state_shape(core: Core, batch: int) -> tuple[int, ...]:
    """The state of ``batch`` environments (ADR 0018 decision 2): ``[layers, batch, size]`` for
    a GRU, the two parts stacked, ``[2, layers, batch, size]``, for an LSTM."""
    cell, size, layers = core
    shape = (layers, batch, size)
    return (2, *shape) if cell == "lstm" else shape


def core_of(network_state: Mapping[str, Any]) -> Core | None:
    """The recurrent core a network's state dict holds (``core.rnn.*``, ``RecurrentCore``'s
    LSTM or GRU), or None for an MLP; a cell of neither kind is named by its weight rows."""
    layers = 0
    while f"core.rnn.weight_hh_l{layers}" in network_state:
        layers += 1
    if layers == 0:
        return None
    rows, size = (int(n) for n in network_state["core.rnn.weight_hh_l0"].shape)
    cell = _GATES.get(rows // size) if size and rows % size == 0 else None
    return (cell or f"an unknown cell of {rows} rows", size, layers)


def core_of_kwargs(kwargs: Mapping[str, Any]) -> Core:
    """The core a recurrent builder's kwargs ask for (``cell``, ``size``, ``layers``, with the
    builder's defaults)."""
    return (
        str(kwargs.get("cell", "lstm")),
        int(kwargs.get("size", 128)),
        int(kwargs.get("layers", 1)),
    )


def describe_core(core: Core | None) -> str:
    """``lstm of size 64, 1 layer``; ``none (an MLP)``."""
    if core is None:
        return "none (an MLP)"
    cell, size, layers = core
    return f"{cell} of size {size}, {layers} layer{'s' if layers > 1 else ''}"


def state_record(core: Core) -> dict[str, Any]:
    """The state as a deployment reads it: the cell, each part's shape with ``batch`` for the
    environments, and the reset rule."""
    cell, size, layers = core
    return {
        "cell": cell,
        "size": size,
        "layers": layers,
        "state": {part: [layers, "batch", size] for part in STATE_PARTS.get(cell, ())},
        "reset": "zeros at an episode's first observation; the previous step's state after that",
    }
