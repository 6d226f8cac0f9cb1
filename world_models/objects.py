"""The object-centric pathway: predict where the scene's objects go, then draw the frame there.

A small denoiser asked for the next frame of a push averages the cube's large, rare moves away
(the cube stays behind). With ``object_pathway`` on, the world model first predicts the next
image positions of the scene's objects (:data:`~worldsim.envs.observations.ENTITIES`: cubes,
zones, bin) from their positions over the context, the gripper's proprio (now and next), the
action and the task (:class:`ObjectDynamics`, a residual MLP on normalised pixel coordinates),
then conditions the frame's denoiser on where they are and where they go: one Gaussian blob
per object at its current and at its next position, as extra input planes
(:func:`keypoint_planes`). The frame only has to draw the objects where the pathway puts them.

Training is teacher-forced, like the proprio: the true positions (the data's ``state``,
projected into the camera) with a little Gaussian noise are the context, and the true next
positions condition the frame, so the denoiser learns to follow the planes; the pathway itself
learns the positions' change. In imagination, the positions are carried from step to step
(:class:`~worldsim.world_models.model.Rollout`), found at the start by the success head's
keypoint detector on the real context frames, and the success head judges the carried
positions rather than re-detecting them in imagined frames.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from worldsim.envs.observations import ENTITIES
from worldsim.world_models.config import ACTION_DIM, PROPRIO_DIM, WorldModelConfig

PLANE_SIGMA = 0.75  # width (latent cells) of an object's blob on the denoiser's input planes
KEYPOINT_NOISE_PX = 0.5  # std of the noise on teacher-forced context positions (pixels)


class ObjectDynamics(nn.Module):
    """The next image positions of the scene's objects, ``(B, E, 2)`` pixels, from their context
    positions ``(B, C, E, 2)`` pixels, the normalised context and next proprio, the action and
    the task (one-hot): the last positions plus a predicted change."""

    def __init__(self, config: WorldModelConfig):
        super().__init__()
        self.entities = len(ENTITIES)
        self.scale = config.image_size / 2.0
        inputs = (config.context * (2 * self.entities + PROPRIO_DIM) + PROPRIO_DIM + ACTION_DIM
                  + len(config.tasks))
        width = config.object_hidden
        self.net = nn.Sequential(nn.Linear(inputs, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU(),
                                 nn.Linear(width, width), nn.SiLU(), nn.Linear(width, 2 * self.entities))
        with torch.no_grad():  # start from "nothing moves"
            self.net[-1].weight.zero_()
            self.net[-1].bias.zero_()

    def forward(self, points: torch.Tensor, proprio: torch.Tensor, next_proprio: torch.Tensor,
                action: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        b = len(points)
        normalized = points / self.scale - 1.0
        features = torch.cat([normalized.flatten(1), proprio.flatten(1), next_proprio, action, task], dim=1)
        change = self.net(features).view(b, self.entities, 2)
        return points[:, -1] + change * self.scale * 0.1  # the network's outputs are tenths of half the image


def keypoint_planes(points: torch.Tensor, size: int, patch: int, sigma: float = PLANE_SIGMA) -> torch.Tensor:
    """One Gaussian blob per object, ``(B, E, size, size)`` in [0, 1], at pixel positions
    ``points`` ``(B, E, 2)`` (column, row) seen on the ``size`` x ``size`` latent grid."""
    centres = (torch.arange(size, device=points.device, dtype=points.dtype) + 0.5)
    cells = points / patch
    dx = centres[None, None, None, :] - cells[..., 0, None, None]
    dy = centres[None, None, :, None] - cells[..., 1, None, None]
    return torch.exp(-(dx**2 + dy**2) / (2 * sigma**2))


def object_loss(predicted: torch.Tensor, target: torch.Tensor, image_size: int) -> torch.Tensor:
    """Smooth-L1 (pixels) of predicted against true next positions ``(B, E, 2)``, over the
    objects in view."""
    inside = ((target >= 0) & (target < image_size)).all(-1)
    if not inside.any():
        return predicted.sum() * 0.0
    return F.smooth_l1_loss(predicted[inside], target[inside])
