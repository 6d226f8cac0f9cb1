"""The success head: a keypoint detector that finds the scene's objects, and an MLP that judges them."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from worldsim.envs.observations import ENTITIES, ENTITY_HEIGHTS
from worldsim.world_models.config import KEYPOINT_L1, PROPRIO_DIM, SUCCESS_PRIOR, WorldModelConfig
from worldsim.world_models.layers import masked_mean, mlp


class SuccessHead(nn.Module):
    """Frame-level success from where the scene's objects are in the frame.

    Success is a relation between object positions (the cube on the zone), decided at the
    scale of a pixel at 64x64, with one success frame per recorded episode to learn from; so
    the head first finds the objects, then judges them:

    - a fully convolutional **keypoint detector** over the latent (space-to-depth is lossless,
      so every pixel is seen) ends in ``patch^2`` logits per latent cell and entity, put back
      in place by depth-to-space: one heatmap over the full-resolution pixels per scene entity
      (:data:`~worldsim.envs.observations.ENTITIES`: the cubes, zones and bin); its soft-argmax
      is the entity's position in pixels. Where the data has ``state``, the entities' projected
      positions supervise the heatmaps on every frame (a dense target, translation-equivariant
      by construction: it generalises from a few hundred episodes, where a flattened feature
      map overfits);
    - an **MLP on the keypoints, the proprio and the task** gives the success logit and an
      estimate of the task's goal-minus-object offset (decimetres; trained where the data has
      ``state``). The proprio (the gripper's position and opening, normalised) is what reaching,
      placing and stacking are judged by besides the objects, and imagination predicts it
      almost exactly;
    - with ``[model.judge] heights``, an **MLP on the keypoints and the proprio** gives
      each object's height above its resting plane (centimetres, trained on the recorded heights):
      a cube held in the gripper is found where the frame shows it and put as high as the gripper
      holds it.
    """

    AUX_DIM = 3
    HEIGHT_UNIT = 0.01  # metres: the height MLP reads centimetres above each entity's resting plane

    pixel_centres: torch.Tensor  # buffer: 0.5, 1.5, ... (image_size,)
    resting: torch.Tensor  # buffer: each entity's resting height (metres), ENTITY_HEIGHTS

    def __init__(self, config: WorldModelConfig) -> None:
        super().__init__()
        width, self.patch = config.judge.detector_channels, config.patch
        self.entities = len(ENTITIES)
        self.detector = nn.Sequential(
            nn.Conv2d(config.latent_channels, width, 3, padding=1), nn.SiLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.SiLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.SiLU(),
            nn.Conv2d(width, self.entities * config.patch**2, 1))
        self.register_buffer("resting", torch.as_tensor(ENTITY_HEIGHTS, dtype=torch.float32), persistent=False)
        self.num_tasks = len(config.tasks)
        self.classifier = mlp(2 * self.entities + PROPRIO_DIM + self.num_tasks, config.judge.hidden, 1 + self.AUX_DIM)
        with torch.no_grad():  # success is rare: start at a 2% prior, not at 50% on every frame
            last = self.classifier[-1]
            assert isinstance(last, nn.Linear)
            last.bias[0] = math.log(SUCCESS_PRIOR / (1 - SUCCESS_PRIOR))
        # the heights from where every object and the gripper are: a cube in the closed gripper is as
        # high as the TCP, which the proprio holds and a single frame's pixels do not
        self.height_mlp = (mlp(2 * self.entities + PROPRIO_DIM, config.judge.hidden, self.entities)
                           if config.judge.heights else None)
        if self.height_mlp is not None:
            with torch.no_grad():  # start from "every object rests on its plane"
                last = self.height_mlp[-1]
                assert isinstance(last, nn.Linear)
                last.weight.zero_()
                last.bias.zero_()
        centres = torch.arange(config.image_size, dtype=torch.float32) + 0.5
        self.register_buffer("pixel_centres", centres, persistent=False)

    def heatmaps(self, latent: torch.Tensor) -> torch.Tensor:
        """Per-entity logits over the pixels ``(B, entities, H, W)``."""
        return F.pixel_shuffle(self.detector(latent), self.patch)

    def find(self, latent: torch.Tensor, proprio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every entity's heatmap logits ``(B, entities, H, W)``, position (pixels, ``(B, entities,
        2)``) and height (metres, ``(B, entities)``) in latent frames with normalised ``proprio``
        ``(B, 4)``: with ``[model.judge] heights`` read by an MLP on the positions and the proprio,
        else each entity's resting height."""
        heat = self.heatmaps(latent)
        points = self.keypoints(heat)
        if self.height_mlp is None:
            return heat, points, self.resting.expand(len(latent), -1)
        features = torch.cat([self.normalized(points).flatten(1), proprio], dim=1)
        return heat, points, self.resting + self.HEIGHT_UNIT * self.height_mlp(features)

    def normalized(self, points: torch.Tensor) -> torch.Tensor:
        """Pixel positions in [-1, 1] of the image."""
        return points / self.pixel_centres.numel() * 2.0 - 1.0

    def keypoints(self, heatmaps: torch.Tensor) -> torch.Tensor:
        """Soft-argmax of ``heatmaps``: each entity's expected (column, row) in pixels ``(B, entities, 2)``."""
        b, n, h, w = heatmaps.shape
        p = heatmaps.flatten(2).softmax(-1).view(b, n, h, w)
        return torch.stack([(p.sum(2) * self.pixel_centres[:w]).sum(-1),
                            (p.sum(3) * self.pixel_centres[:h]).sum(-1)], dim=-1)

    def outputs(self, latent: torch.Tensor, task: torch.Tensor, proprio: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """For latent frames, tasks ``(B,)`` and normalised proprio ``(B, 4)``: the success logit
        ``(B,)``, the goal-offset estimate ``(B, 3)`` (decimetres), the heatmaps
        ``(B, entities, H, W)``, the keypoints ``(B, entities, 2)`` (pixels) and the heights
        ``(B, entities)`` (metres: :meth:`find`)."""
        heat, points, heights = self.find(latent, proprio)
        logit, offset = self.judge(points, task, proprio)
        return logit, offset, heat, points, heights

    def locate(self, latent: torch.Tensor) -> torch.Tensor:
        """Every entity's position (pixels, ``(B, entities, 2)``) in latent frames."""
        return self.keypoints(self.heatmaps(latent))

    def height_loss(self, heights: torch.Tensor, target: torch.Tensor, points: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Smooth-L1 in centimetres of the read ``heights`` ``(B, entities)`` against the recorded
        ``target`` ones, over the entities in view (target ``points`` ``(B, entities, 2)`` inside
        the image), and their mean absolute error in centimetres."""
        size = self.pixel_centres.numel()
        inside = ((points >= 0) & (points < size)).all(-1)
        error = (heights - target) / self.HEIGHT_UNIT
        return (masked_mean(F.smooth_l1_loss(error, torch.zeros_like(error), reduction="none"), inside),
                masked_mean(error.abs(), inside).detach())

    def judge(self, points: torch.Tensor, task: torch.Tensor, proprio: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """The success logit ``(B,)`` and goal-offset estimate ``(B, 3)`` from entity positions
        ``(B, entities, 2)`` (pixels), tasks and normalised proprio."""
        features = [self.normalized(points).flatten(1), proprio, F.one_hot(task, self.num_tasks).float()]
        out = self.classifier(torch.cat(features, dim=1))
        return out[:, 0], out[:, 1:]

    def forward(self, latent: torch.Tensor, task: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        return self.outputs(latent, task, proprio)[0]


def keypoint_loss(heatmaps: torch.Tensor, points: torch.Tensor, target: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The detector's loss against target pixel coordinates ``(B, entities, 2)``: cross-entropy
    of each heatmap against the pixel holding the target, plus ``KEYPOINT_L1`` times the smooth
    L1 distance of the soft-argmax (sub-pixel precision); entities out of view are left out.
    Also returns the mean distance in pixels of the entities in view."""
    b, n, h, w = heatmaps.shape
    inside = ((target >= 0).all(-1) & (target[..., 0] < w) & (target[..., 1] < h)).flatten()
    cell = target.floor().long()
    index = (cell[..., 1].clamp(0, h - 1) * w + cell[..., 0].clamp(0, w - 1)).flatten()
    ce = masked_mean(F.cross_entropy(heatmaps.flatten(2).flatten(0, 1), index, reduction="none"), inside)
    flat_points, flat_target = points.flatten(0, 1), target.flatten(0, 1)
    l1 = masked_mean(F.smooth_l1_loss(flat_points, flat_target, reduction="none").sum(-1), inside)
    return ce + KEYPOINT_L1 * l1, masked_mean((flat_points - flat_target).norm(dim=-1), inside).detach()
