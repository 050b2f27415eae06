"""Inference memory: what an actor declares (``inference_startup_memory_categories``) and what
its tensors really hold, in bytes, and how both are shown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def tensor_bytes(tensors: Any) -> int:
    """Bytes of every tensor in a (nested) state dict."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    if isinstance(tensors, dict):
        return sum(tensor_bytes(value) for value in tensors.values())
    return 0


def format_bytes(count: int) -> str:
    """``512 B``, ``17.5 KiB``, ``3.2 MiB``, ``7.4 GiB``."""
    if count < 1024:
        return f"{count} B"
    if count < 1024**2:
        return f"{count / 1024:.1f} KiB"
    if count < 1024**3:
        return f"{count / 1024**2:.1f} MiB"
    return f"{count / 1024**3:.1f} GiB"


def describe_memory(categories: Mapping[str, int]) -> str:
    """``parameters 17.5 KiB, buffers 48 B (declared)`` for inference memory per category."""
    parts = ", ".join(f"{name} {format_bytes(size)}" for name, size in categories.items())
    return f"{parts or 'nothing'} (declared)"


def module_memory_bytes(module: torch.nn.Module) -> dict[str, int]:
    """Bytes of a module's parameters and buffers: the usual answer of
    ``inference_startup_memory_categories()`` for an actor that needs nothing else, and what
    ``drl export`` measures an export module by."""
    return {
        "parameters": sum(p.numel() * p.element_size() for p in module.parameters()),
        "buffers": sum(b.numel() * b.element_size() for b in module.buffers()),
    }
