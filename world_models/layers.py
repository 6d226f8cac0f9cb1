"""Small building blocks the world model's parts share."""

from __future__ import annotations

import torch
from torch import nn


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    """Two hidden SiLU layers of width ``hidden``."""
    return nn.Sequential(nn.Linear(inputs, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                         nn.Linear(hidden, outputs))


def randn(shape: tuple[int, ...] | torch.Size, generator: torch.Generator | None,
          like: torch.Tensor) -> torch.Tensor:
    """Standard normal noise on ``like``'s device and dtype, from ``generator`` (which must live
    on that device) or torch's global stream."""
    return torch.randn(shape, generator=generator, device=like.device, dtype=like.dtype)
