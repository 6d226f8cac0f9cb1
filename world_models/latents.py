"""Frames <-> the world model's latents: lossless space-to-depth, values in [-1, 1]."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def frames_to_latents(frames: torch.Tensor, patch: int) -> torch.Tensor:
    """uint8 frames ``(..., H, W, 3)`` -> float ``(..., 3 p^2, H/p, W/p)`` in [-1, 1] (space-to-depth)."""
    lead = frames.shape[:-3]
    x = frames.reshape(-1, *frames.shape[-3:]).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
    x = F.pixel_unshuffle(x, patch)
    return x.reshape(*lead, *x.shape[1:])


def latents_to_frames(latents: torch.Tensor, patch: int) -> torch.Tensor:
    """The inverse of :func:`frames_to_latents`: uint8 ``(..., H, W, 3)``, clamped and rounded."""
    lead = latents.shape[:-3]
    x = F.pixel_shuffle(latents.reshape(-1, *latents.shape[-3:]), patch)
    x = x.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
    return x.reshape(*lead, *x.shape[1:])
