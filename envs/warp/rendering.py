"""Batched rendering on the Warp device: every world's camera images in one ray-traced launch.

MuJoCo Warp's renderer traces each pixel of each world against a BVH of the scene's geoms. It
is set up as the CPU renderer (:mod:`worldsim.envs.rendering`) sets MuJoCo's OpenGL scene:
shadows, the skybox and reflections off (Warp's renderer has no reflections), no
multisampling (one ray per pixel), and the scene's own lights and headlight. Frames come back
as ``(N, H, W, 3)`` uint8 torch tensors on the device, built from the renderer's packed pixels
without a host copy.
"""

from __future__ import annotations

import mujoco_warp as mjw
import torch
import warp as wp

from worldsim.envs.warp.physics import WarpPhysics

_BGR_TO_RGB = [2, 1, 0]  # the packed pixels' bytes are blue, green, red, alpha (little-endian)


class WarpRenderer:
    """Renders the worlds of ``physics`` from ``cameras`` (scene camera names) at ``height`` x
    ``width``."""

    def __init__(self, physics: WarpPhysics, cameras: tuple[str, ...], height: int, width: int) -> None:
        model = physics.mj_model
        max_w, max_h = model.vis.global_.offwidth, model.vis.global_.offheight
        if width > max_w or height > max_h:
            raise ValueError(f"image size {height}x{width} exceeds the scene's offscreen buffer "
                             f"{max_h}x{max_w}; allowed: height <= {max_h}, width <= {max_w}")
        self.physics = physics
        self.cameras = cameras
        self.shape = (height, width, 3)
        with wp.ScopedDevice(physics.wp_device):
            self._context = mjw.create_render_context(
                model, nworld=physics.data.nworld, cam_res=(width, height), render_rgb=True, render_depth=False,
                render_seg=False, cam_active=list(cameras), use_shadows=False, render_skybox=False)
        self._offsets = [int(a) for a in self._context.rgb_adr.numpy()]
        self._pixels = wp.to_torch(self._context.rgb_data)  # (N, pixels of every camera) packed uint32

    def render(self) -> dict[str, torch.Tensor]:
        """Every camera's frames of the worlds' current ``qpos``, ``{camera: (N, H, W, 3) uint8}``."""
        physics = self.physics
        physics.forward_kinematics()
        with physics.launching():
            mjw.refit_bvh(physics.model, physics.data, self._context)
            mjw.render(physics.model, physics.data, self._context)
        height, width, _ = self.shape
        size = height * width
        raw = self._pixels.view(torch.uint8).reshape(len(self._pixels), -1, 4)
        return {camera: raw[:, start:start + size, _BGR_TO_RGB].reshape(-1, height, width, 3)
                for camera, start in zip(self.cameras, self._offsets, strict=True)}

