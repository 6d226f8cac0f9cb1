"""The object-centric pathway: predict where the scene's objects go, then draw the frame there.

A small denoiser asked for the next frame of a push averages the cube's large, rare moves away
(the cube stays behind). With ``object_pathway`` on, the world model first predicts the next
image positions of the scene's objects (:data:`~worldsim.envs.observations.ENTITIES`: cubes,
zones, bin) from their positions over the context, the gripper's proprio (now and next), the
action, the task and where each object is relative to the gripper
(:class:`ObjectDynamics`, a residual MLP on normalised pixel coordinates),
kept at rest unless the gripper's path passes near them or they are already moving
(:meth:`ObjectDynamics.contact_gate`), then conditions the frame's denoiser on where they are
and where they go: one Gaussian blob per object at its current and at its next position, as
extra input planes (:func:`keypoint_planes`). The frame only has to draw the objects where the pathway puts them;
with ``carry_objects`` it starts from them already there: the last frame with each moving
object's pixels carried to its next position (:func:`carry_objects`), which the denoiser
corrects.

Training has two parts. The frame is teacher-forced, like the proprio: the true positions (the
data's ``state``, projected into the camera) with a little Gaussian noise are the context, and
the true next positions condition the frame, so the denoiser learns to follow the planes. The
pathway learns, with the proprio head, on its own, far larger batches of state windows
(:meth:`~worldsim.world_models.data.EpisodeBank.state_windows`: positions are cheap, frames are
not), rolled out ``dynamics_horizon`` steps on its own predictions with the recorded gripper
motion, so it learns to keep its errors from compounding (:func:`rollout_loss`). In
imagination the positions are carried from step to step
(:class:`~worldsim.world_models.model.Rollout`): at a real start they are the recorded ones
when the start's file has ``state``, else the success head's keypoint detector finds them in
the real context frames; the success head judges the carried positions rather than
re-detecting them in imagined frames.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from worldsim.envs.observations import ENTITIES
from worldsim.envs.scene import ACTION_SCALE
from worldsim.world_models.anchor import pixel_centres
from worldsim.world_models.config import ACTION_DIM, PROPRIO_DIM, WorldModelConfig
from worldsim.world_models.layers import masked_mean

PLANE_SIGMA = 0.75  # width (latent cells) of an object's blob on the denoiser's input planes
KEYPOINT_NOISE_PX = 0.5  # std of the noise on teacher-forced context positions (pixels)
HEIGHT_UNIT = 0.01  # metres: the pathway reads and writes heights in centimetres (about a pixel on the table)
# Where an object can be: positions within a frame's width beyond its edges (the table's edges
# project within it; further out, a cube has left the table and the episode has failed), heights
# from 10 cm below the table (fallen off: failed too) to half a metre above it. Unbounded, an
# imagined cube pushed out of the training distribution feeds ever larger inputs back to the MLP,
# and the rollout diverges.
POSITION_MARGIN = 1.0
HEIGHT_RANGE_M = (-0.1, 0.5)
# A cube's pixels lie within this share of the image's side from its centre (4 px at 64x64: a
# 4 cm cube seen from the front camera is about 5 px across).
OBJECT_EXTENT = 1 / 16
# Objects at rest stay at rest unless touched (ObjectDynamics.contact_gate): a cube moves when the
# gripper's TCP passes within CONTACT_REACH_M of its centre, or when it already moved more than
# MOVING_M on the step before (a pushed cube sliding on, a cube falling off the table); nearly every
# real cube move in the expert data meets one of the two, and a larger MOVING_M stops cubes that
# still slide.
CONTACT_REACH_M = 0.08
MOVING_M = 0.0005
RELATION_UNIT_M = 0.1  # the pathway reads objects' offsets from the TCP in tens of centimetres (the table is ~0.6 m)


class ObjectDynamics(nn.Module):
    """The next state of the scene's objects from their context states: image positions
    ``(B, C, E, 2)`` pixels and heights ``(B, C, E)`` metres, the normalised context and next
    proprio, the action and the task (one-hot). Returns the next positions ``(B, E, 2)`` and
    heights ``(B, E)``: the last ones plus a predicted change (for the cubes: the zones and the
    bin do not move), kept where an object can be
    (:data:`POSITION_MARGIN`, :data:`HEIGHT_RANGE_M`)."""

    movable: torch.Tensor
    movable_index: torch.Tensor

    def __init__(self, config: WorldModelConfig) -> None:
        super().__init__()
        from worldsim.world_models.data import image_camera

        self.camera = image_camera(config.image_size, config.image_size)
        self.entities = len(ENTITIES)
        self.scale = config.image_size / 2.0
        # only the cubes move: the zones and the bin are fixed for an episode, so they stay where they start
        self.register_buffer("movable", torch.tensor([name.endswith("_cube") for name in ENTITIES]), persistent=False)
        self.register_buffer("movable_index", self.movable.nonzero().flatten(), persistent=False)
        self.bounds = (-POSITION_MARGIN * config.image_size, (1 + POSITION_MARGIN) * config.image_size)
        inputs = (config.context * (3 * self.entities + PROPRIO_DIM) + PROPRIO_DIM + ACTION_DIM
                  + len(config.tasks) + 6 * self.entities + 3)
        if config.objects is None:
            raise ValueError("this world model's config has no object pathway (objects=None)")
        width = config.objects.hidden
        self.gated = config.objects.gate
        self.net = nn.Sequential(nn.Linear(inputs, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU(),
                                 nn.Linear(width, width), nn.SiLU(), nn.Linear(width, 3 * self.entities))
        with torch.no_grad():  # start from "nothing moves"
            last = self.net[-1]
            assert isinstance(last, nn.Linear)
            last.weight.zero_()
            last.bias.zero_()

    def forward(self, points: torch.Tensor, heights: torch.Tensor, proprio: torch.Tensor,
                next_proprio: torch.Tensor, action: torch.Tensor, task: torch.Tensor, tcp: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``proprio`` and ``next_proprio`` normalised; ``tcp`` ``(B, 2, 3)`` the gripper's TCP
        (metres) before and after the step, for :meth:`contact_gate` and :meth:`relation_features`."""
        b = len(points)
        normalized = points / self.scale - 1.0
        features = [normalized.flatten(1), (heights / HEIGHT_UNIT / 10.0).flatten(1), proprio.flatten(1),
                    next_proprio, action, task, *self.relation_features(points, heights, tcp)]
        change = self.net(torch.cat(features, dim=1)).view(b, self.entities, 3) * self.movable[:, None]
        if self.gated:
            change = change * self.contact_gate(points, heights, tcp)[..., None]
        # outputs: tenths of half the image for positions, centimetres for heights
        moved = (points[:, -1] + change[..., :2] * self.scale * 0.1).clamp(*self.bounds)
        return moved, (heights[:, -1] + change[..., 2] * HEIGHT_UNIT).clamp(*HEIGHT_RANGE_M)

    def relation_features(self, points: torch.Tensor, heights: torch.Tensor, tcp: torch.Tensor
                          ) -> list[torch.Tensor]:
        """Each object's offset ``(B, 6E)`` from the TCP before and after the step and the TCP's
        move ``(B, 3)``, in units of :data:`RELATION_UNIT_M` and of a control step."""
        where = self.camera.unproject(points[:, -1:], heights[:, -1:])[:, 0]  # (B, E, 3) metres
        offsets = torch.cat([where - tcp[:, :1], where - tcp[:, 1:]], dim=-1) / RELATION_UNIT_M
        return [offsets.flatten(1), (tcp[:, 1] - tcp[:, 0]) / ACTION_SCALE]

    def contact_gate(self, points: torch.Tensor, heights: torch.Tensor, tcp: torch.Tensor) -> torch.Tensor:
        """Which objects ``(B, E)`` may move this step: those whose centre the TCP's path
        ``tcp`` ``(B, 2, 3)`` passes within :data:`CONTACT_REACH_M` of, and those that moved more
        than :data:`MOVING_M` over the last context step. Learned from expert pushes alone, where
        the cube goes wherever the gripper heads, the pathway would otherwise slide a cube that a
        policy never reaches."""
        where = self.camera.unproject(points[:, -2:], heights[:, -2:])  # (B, 2 or 1, E, 3) metres
        moving = (where[:, -1] - where[:, 0]).norm(dim=-1) > MOVING_M
        start, path = tcp[:, :1], tcp[:, 1:] - tcp[:, :1]  # (B, 1, 3)
        along = ((where[:, -1] - start) * path).sum(-1) / (path * path).sum(-1).clamp_min(1e-12)
        nearest = start + along.clamp(0.0, 1.0)[..., None] * path
        return (((where[:, -1] - nearest).norm(dim=-1) <= CONTACT_REACH_M) | moving).to(points.dtype)


def carry_objects(latent: torch.Tensor, points: torch.Tensor, next_points: torch.Tensor, movable: torch.Tensor,
                  patch: int, background: torch.Tensor | None = None, paste: bool = True) -> torch.Tensor:
    """The latent frame ``(B, 3p^2, h, w)`` with each movable object's pixels carried from its
    image position ``points`` ``(B, E, 2)`` to ``next_points`` (``movable``: the indices of the
    objects that can move; the zones and the bin cannot): the prior the denoiser corrects.
    Only those are carried, half the entities and half the resampling; indices rather than a
    mask, since selecting by a mask on a GPU makes the host wait for the device.

    The pixels within :data:`OBJECT_EXTENT` of where an object goes are read from one move back
    (bilinearly, at full resolution) and blended in over a one-pixel edge; the rest of the frame
    is kept, so what lies around the object (a zone, the table's edge) stays where it is, and
    the sliver it leaves is the denoiser's to fill. Asked to draw a move from two blobs a
    fraction of a latent cell apart, the denoiser alone moves the cube only part of the way.
    Only the object is carried: its neighbourhood would drag the zones along with the cube, and
    the gripper would leave trails the denoiser does not erase.

    With a ``background`` image ``(3, H, W)`` (in the frames' [-1, 1] scale: what the scene shows
    where nothing stands, :func:`~worldsim.world_models.anchor.background_image`), the spots the
    objects leave are cleared to it (where no carried object lands), so the old pixels are not left
    for the denoiser to erase: left there, they stay as a pale second copy of the cube. With
    ``paste=False`` (and a background) only that clearing is done: an object that has not moved
    keeps its pixels, one that has is left for the denoiser to draw where it goes."""
    points, next_points = points.index_select(1, movable), next_points.index_select(1, movable)
    frames = F.pixel_shuffle(latent, patch)
    b, c, h, w = frames.shape
    pixels = pixel_centres(h, w, latent)  # (h, w, 2): (column, row) like the points
    def coverage(where: torch.Tensor) -> torch.Tensor:  # (B, E, h, w): each object's share of each pixel
        distance = (pixels[None, None] - where[:, :, None, None]).norm(dim=-1)
        return (OBJECT_EXTENT * w + 0.5 - distance).clamp(0.0, 1.0)

    alpha = coverage(next_points)
    alpha = alpha / alpha.sum(1, keepdim=True).clamp_min(1.0)  # objects that overlap share their pixels
    base = frames
    if background is not None:  # what the objects left, minus where one lands: the background shows
        left = (coverage(points).sum(1).clamp(max=1.0) - alpha.sum(1)).clamp_min(0.0)[:, None]
        base = frames + left * (background[None].to(frames) - frames)
    if not paste:
        return F.pixel_unshuffle(base, patch)
    source = pixels[None, None] - (next_points - points)[:, :, None, None]  # (B, E, h, w, 2)
    grid = torch.stack([source[..., 0] / w, source[..., 1] / h], dim=-1) * 2.0 - 1.0
    e = points.shape[1]
    carried = F.grid_sample(frames.repeat_interleave(e, dim=0), grid.flatten(0, 1), mode="bilinear",
                            padding_mode="border", align_corners=False).view(b, e, c, h, w)
    blended = base + (alpha[:, :, None] * (carried - base[:, None])).sum(1)
    return F.pixel_unshuffle(blended, patch)


def keypoint_planes(points: torch.Tensor, size: int, patch: int, sigma: float = PLANE_SIGMA) -> torch.Tensor:
    """One Gaussian blob per object, ``(B, E, size, size)`` in [0, 1], at pixel positions
    ``points`` ``(B, E, 2)`` (column, row) seen on the ``size`` x ``size`` latent grid."""
    centres = (torch.arange(size, device=points.device, dtype=points.dtype) + 0.5)
    cells = points / patch
    dx = centres[None, None, None, :] - cells[..., 0, None, None]
    dy = centres[None, None, :, None] - cells[..., 1, None, None]
    return torch.exp(-(dx**2 + dy**2) / (2 * sigma**2))


def object_loss(predicted: torch.Tensor, target: torch.Tensor, image_size: int,
                predicted_heights: torch.Tensor | None = None, target_heights: torch.Tensor | None = None,
                valid: torch.Tensor | None = None) -> torch.Tensor:
    """Smooth-L1 of predicted against true next positions ``(B, E, 2)`` (pixels) over the
    objects in view, plus, given heights ``(B, E)`` (metres), the smooth-L1 of theirs in
    centimetres (about a pixel on the table); given ``valid`` ``(B,)``, over the windows where it
    holds. 0 where no object is counted."""
    inside = ((target >= 0) & (target < image_size)).all(-1)
    if valid is not None:
        inside = inside & valid[:, None]
    loss = masked_mean(F.smooth_l1_loss(predicted, target, reduction="none"), inside[..., None])
    if predicted_heights is not None and target_heights is not None:
        loss = loss + masked_mean(F.smooth_l1_loss(predicted_heights / HEIGHT_UNIT, target_heights / HEIGHT_UNIT,
                                                   reduction="none"), inside)
    return loss


def rollout_loss(dynamics: ObjectDynamics, windows: dict[str, torch.Tensor], normalize: Callable[[torch.Tensor],
                 torch.Tensor], task_one_hot: torch.Tensor, image_size: int,
                 noise: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`object_loss` over ``H`` steps of ``dynamics`` rolled out on its own predictions from
    the context states of ``windows``, their points noised by ``KEYPOINT_NOISE_PX`` times
    ``noise`` (standard normal draws shaped like the points; None: not noised)
    (:meth:`~worldsim.world_models.data.EpisodeBank.state_windows`), with the recorded gripper
    motion; steps past an episode's end are left out. ``ValueError`` when the windows hold no
    objects (their bank has no ``state``)."""
    if "points" not in windows:
        raise ValueError("the object pathway trains on the objects' positions: the data needs the 'state' "
                         "observation (collect with obs_mode='pixels+state')")
    points, heights = windows["points"], windows["heights"]
    if noise is not None:
        points = points + KEYPOINT_NOISE_PX * noise
    proprio, tcp = normalize(windows["proprio"]), windows["proprio"][..., :3]
    context = points.shape[1]
    valid, losses = windows["valid"], []
    for k in range(windows["actions"].shape[1]):
        predicted, lifted = dynamics(points, heights, proprio[:, k:k + context], proprio[:, k + context],
                                     windows["actions"][:, k], task_one_hot, tcp[:, k + context - 1:k + context + 1])
        losses.append(object_loss(predicted, windows["target"][:, k], image_size, lifted,
                                  windows["target_heights"][:, k], valid[:, k]))
        points = torch.cat([points[:, 1:], predicted[:, None]], dim=1)
        heights = torch.cat([heights[:, 1:], lifted[:, None]], dim=1)
    return masked_mean(torch.stack(losses), valid.any(0))
