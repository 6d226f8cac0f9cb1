"""Batched offscreen rendering of scene states.

One MuJoCo renderer draws every env of the batch in turn from its qpos (kinematics only, no
dynamics). Shadows, reflections and the skybox are switched off and the scene has no
multisampling: on a CPU software rasteriser that is the difference between ~50 and several
thousand frames per second at 64x64.
"""

from __future__ import annotations

import os

import mujoco
import numpy as np

GL_OFF = ("disable", "disabled", "off", "false", "0")  # the MUJOCO_GL values that leave MuJoCo without OpenGL

_SLOW_FLAGS = (
    mujoco.mjtRndFlag.mjRND_SHADOW,
    mujoco.mjtRndFlag.mjRND_REFLECTION,
    mujoco.mjtRndFlag.mjRND_SKYBOX,
)


class BatchRenderer:
    """Renders ``(N, H, W, 3)`` uint8 images of a batch of qpos rows from one camera."""

    def __init__(self, model: mujoco.MjModel, height: int, width: int) -> None:
        max_w, max_h = model.vis.global_.offwidth, model.vis.global_.offheight
        if width > max_w or height > max_h:
            raise ValueError(f"image size {height}x{width} exceeds the scene's offscreen buffer "
                             f"{max_h}x{max_w}; allowed: height <= {max_h}, width <= {max_w}")
        if os.environ.get("MUJOCO_GL", "").lower() in GL_OFF:
            raise RuntimeError(f"rendering needs OpenGL, and MUJOCO_GL={os.environ['MUJOCO_GL']!r} switches it off "
                               "(worldsim does so where it finds no libEGL): install EGL (Debian: apt install "
                               "libegl1 libgl1-mesa-dri) or set MUJOCO_GL to a backend this machine has")
        self.model = model
        self._data = mujoco.MjData(model)
        self._renderer = mujoco.Renderer(model, height, width)
        for flag in _SLOW_FLAGS:
            self._renderer.scene.flags[flag] = 0
        self.shape = (height, width, 3)

    def render(self, qpos: np.ndarray, camera: str, out: np.ndarray | None = None) -> np.ndarray:
        out = np.empty((len(qpos), *self.shape), np.uint8) if out is None else out
        for i, q in enumerate(qpos):
            self._data.qpos[:] = q
            mujoco.mj_kinematics(self.model, self._data)
            mujoco.mj_camlight(self.model, self._data)
            self._renderer.update_scene(self._data, camera)
            self._renderer.render(out=out[i])
        return out

    def close(self) -> None:
        self._renderer.close()
