"""Small building blocks the world model's parts share."""

from __future__ import annotations

import torch
from torch import nn


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    """Two hidden SiLU layers of width ``hidden``."""
    return nn.Sequential(nn.Linear(inputs, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                         nn.Linear(hidden, outputs))


def task_one_hot(task: torch.Tensor, tasks: int) -> torch.Tensor:
    """Task ids ``(B,)`` as float one-hot rows ``(B, tasks)``: how every part reads the task."""
    return torch.nn.functional.one_hot(task, tasks).float()


def randn(shape: tuple[int, ...] | torch.Size, generator: torch.Generator | None,
          like: torch.Tensor) -> torch.Tensor:
    """Standard normal noise on ``like``'s device and dtype, from ``generator`` (which must live
    on that device) or torch's global stream."""
    return torch.randn(shape, generator=generator, device=like.device, dtype=like.dtype)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` where ``mask`` (broadcast to them) holds, 0 where it holds nowhere
    (still attached to the graph). Boolean indexing gives the same number, but it makes the host
    wait for the device to learn the selection's size, which no CUDA graph can hold."""
    weight = mask.expand_as(values)
    return torch.where(weight, values, 0.0).sum() / weight.sum().clamp_min(1)


def masked_step_mean(losses: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The mean over a rollout's steps of each step's mean loss over its valid windows
    (``losses`` and ``valid`` ``(B, H)``), steps with no valid window left out; 0 when none is."""
    counts = valid.sum(0)
    per_step = torch.where(valid, losses, 0.0).sum(0) / counts.clamp_min(1)
    return masked_mean(per_step, counts > 0)
