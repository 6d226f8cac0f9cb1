"""What an anchored frame starts from besides the anchor itself: the empty scene the model learns
from its training frames, and the first frame without its starting arm.

A frame drawn as a change from an anchor (:mod:`~worldsim.world_models.frames`) keeps whatever
the anchor shows unless the denoiser erases it. Drawn from the episode's first frame, the arm
stands where it started and the pushed cube where it was; a small one-step denoiser erases
neither fully, and the frame shows a pale ghost of the starting arm and a second cube. So the
things that move are taken out of the anchor: the cubes are carried where the object pathway puts
them (:func:`~worldsim.world_models.objects.carry_objects`), the arm is left for the denoiser to
draw where the gripper is (its pixels carried as they are would be drawn sharp and wrong: the
camera sees a lowered arm differently), and each leaves the empty table behind.

- :func:`background_image`: the empty table, the per-pixel median of the training frames (the
  objects, zones and arm stand somewhere else in most of them);
- :func:`arm_appearance`: the arm's pixels around its TCP's image position and their colours,
  learned from the same frames: how often each pixel around the projected TCP differs from the
  empty table, and what it shows when it does;
- :func:`clear_arm`: the first frame with what looks like the arm within its footprint at its TCP
  cleared to the table; a cube or zone under the footprint stays.

The TCP is placed in the image by the calibrated camera, as the gripper planes place it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from worldsim.envs.camera import PinholeCamera
from worldsim.world_models.latents import frames_to_latents

ARM_DIFFERENCE = 24 / 127.5  # a pixel this far from the table (in the [-1, 1] scale, any channel) shows something
ARM_SHARE = 0.5  # a pixel is the arm's where it shows something in at least this share of the frames
ARM_LIKENESS = 80 / 127.5  # this near the arm's colour at its place (any channel): the arm; farther: a thing under it


def arm_radius(image_size: int) -> int:
    """The half-width in pixels of the window the arm's footprint is learned in: three eighths of
    the frame (24 px of 64), the arm's reach above its TCP as the front camera sees it when it
    stands high."""
    return max(1, 3 * image_size // 8)


def background_image(images: np.ndarray, patch: int, samples: int = 2048, seed: int = 0) -> torch.Tensor:
    """What the scene shows where nothing stands, learned from uint8 frames ``(N, H, W, 3)``:
    the per-pixel median of up to ``samples`` of them drawn at random, ``(3, H, W)`` in the
    frames' [-1, 1] scale. Where the objects, zones and arm are placed at random from episode to
    episode, each pixel shows the table in most frames, and the median is the empty table."""
    if images.ndim != 4 or images.shape[-1] != 3 or not len(images):
        raise ValueError(f"need uint8 frames (N, H, W, 3); got shape {images.shape}")
    median = np.median(images[_sample(len(images), samples, seed)], axis=0).round().astype(np.uint8)
    return F.pixel_shuffle(frames_to_latents(torch.from_numpy(median), patch)[None], patch)[0]


def arm_appearance(images: np.ndarray, tcp: np.ndarray, camera: PinholeCamera, background: torch.Tensor,
                   radius: int, samples: int = 2048, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The arm's pixels around its TCP and their colours, learned from uint8 frames ``(N, H, W, 3)``
    and their TCPs ``(N, 3)`` (metres), each ``2 radius + 1`` pixels square around the projected TCP:

    - the footprint ``(S, S)`` in {0, 1}: a pixel at an offset is the arm's where, in at least
      :data:`ARM_SHARE` of up to ``samples`` frames, it differs from the empty ``background``
      (:func:`background_image`), grown by one pixel. What stands near the gripper only now and
      then (a cube it pushes, a zone it passes) stays below that share;
    - the colour ``(3, S, S)`` in the frames' [-1, 1] scale: the per-offset median over the frames
      where that pixel differs from the table (over all of them where it never does), the arm's
      shading as the camera sees it, which tells the arm from a cube or zone under its footprint."""
    if len(images) != len(tcp):
        raise ValueError(f"{len(images)} frames but {len(tcp)} TCP positions")
    pick = _sample(len(images), samples, seed)
    frames = torch.from_numpy(images[pick]).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
    shows = ((frames - background[None]).abs().amax(dim=1, keepdim=True) > ARM_DIFFERENCE).float()
    where = np.floor(camera.project(tcp[pick].astype(np.float64))).astype(np.int64)  # the TCP's pixel
    seen = _windows(shows, where, radius, 0.0)[:, 0]  # beyond the frame nothing is the arm's
    core = (seen.mean(dim=0) >= ARM_SHARE).float()
    # grown by a pixel: the arm's outline shifts with where it stands (the camera's perspective), and
    # an outline left behind is a ghost; a pixel of table carried with it is not
    footprint = F.max_pool2d(core[None, None], 3, stride=1, padding=1)[0, 0]
    colours = _windows(frames, where, radius, float("nan"))  # (n, 3, S, S)
    shown = torch.where(seen[:, None] > 0, colours, torch.full_like(colours, float("nan")))
    colour = shown.nanmedian(dim=0).values
    colour = torch.where(colour.isnan(), colours.nanmedian(dim=0).values, colour)
    return footprint, colour.nan_to_num(0.0)


def clear_arm(frames: torch.Tensor, tcp: torch.Tensor, footprint: torch.Tensor, colour: torch.Tensor,
              background: torch.Tensor) -> torch.Tensor:
    """``frames`` ``(B, 3, H, W)`` with the arm (:func:`arm_appearance`'s footprint and colour),
    placed on the pixel its TCP's image position ``tcp`` ``(B, 2)`` (column, row) falls in, cleared
    to the empty ``background`` ``(3, H, W)``: a first frame without its starting arm, which the
    denoiser then draws where the gripper is. Only pixels within :data:`ARM_LIKENESS` of the arm's
    colour there are cleared: a cube, zone or bin standing under the footprint stays (cleared
    with the arm, the cube would vanish from every frame drawn from this one)."""
    b, _, h, w = frames.shape
    radius = footprint.shape[-1] // 2
    offsets = pixel_centres(h, w, frames)[None] - tcp.to(frames).floor()[:, None, None] + radius
    side = 2 * radius + 1
    grid = offsets / side * 2.0 - 1.0  # footprint cell i spans [i, i + 1): its centre samples exactly
    mask = F.grid_sample(footprint.to(frames)[None, None].expand(b, 1, -1, -1), grid, mode="bilinear",
                         padding_mode="zeros", align_corners=False)
    arm = F.grid_sample(colour.to(frames)[None].expand(b, -1, -1, -1), grid, mode="nearest",
                        padding_mode="zeros", align_corners=False)
    mask = mask * ((frames - arm).abs().amax(dim=1, keepdim=True) <= ARM_LIKENESS)
    return frames + mask * (background[None].to(frames) - frames)


def pixel_centres(h: int, w: int, like: torch.Tensor) -> torch.Tensor:
    """The centres ``(h, w, 2)`` (column, row) of an ``h`` x ``w`` frame's pixels, in the image
    coordinates positions are given in (pixel ``i`` spans ``[i, i + 1)``), on ``like``'s device and dtype."""
    ys, xs = torch.meshgrid(torch.arange(h, device=like.device, dtype=like.dtype) + 0.5,
                            torch.arange(w, device=like.device, dtype=like.dtype) + 0.5, indexing="ij")
    return torch.stack([xs, ys], dim=-1)


def _windows(frames: torch.Tensor, where: np.ndarray, radius: int, fill: float) -> torch.Tensor:
    """The ``2 radius + 1`` pixels square of each of ``frames`` ``(n, C, H, W)`` centred on its pixel
    ``where`` ``(n, 2)`` (column, row; clipped to the frame), ``fill`` beyond the frame: ``(n, C, S, S)``."""
    size = 2 * radius + 1
    padded = F.pad(frames, (radius, radius, radius, radius), value=fill)
    col = np.clip(where[:, 0], 0, frames.shape[3] - 1)
    row = np.clip(where[:, 1], 0, frames.shape[2] - 1)
    return torch.stack([padded[k, :, r:r + size, c:c + size] for k, (r, c) in enumerate(zip(row, col, strict=True))])


def _sample(n: int, samples: int, seed: int) -> np.ndarray:
    return np.sort(np.random.default_rng(seed).permutation(n)[:samples])
