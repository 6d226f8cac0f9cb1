"""Pinhole model of a scene camera: world points to image pixels and back onto a table plane.

MuJoCo cameras look down their local -z axis with +y up; the vertical field of view ``fovy``
fixes the focal length in pixels, ``f = (height / 2) / tan(fovy / 2)``. Pixel coordinates are
continuous ``(column, row)`` with ``(0, 0)`` the top-left corner of the top-left pixel, so a
pixel's centre is at ``(i + 0.5, j + 0.5)``: the convention of a soft-argmax over pixel centres.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Number

import mujoco
import numpy as np

from worldsim.envs.xp import Array, constant, device, namespace


@dataclass(frozen=True)
class PinholeCamera:
    """A fixed camera: ``position`` (3,), ``rotation`` (3, 3) whose columns are the camera's
    axes in the world frame (MuJoCo's ``cam_xmat``), ``fovy`` in degrees, image ``height`` and
    ``width`` in pixels."""

    position: np.ndarray
    rotation: np.ndarray
    fovy: float
    height: int
    width: int

    @classmethod
    def from_scene(cls, model: mujoco.MjModel, name: str, height: int, width: int) -> PinholeCamera:
        """The camera ``name`` of ``model`` at its rest pose (the scene's cameras are fixed to
        the world, except the wrist camera)."""
        data = mujoco.MjData(model)
        mujoco.mj_kinematics(model, data)
        mujoco.mj_camlight(model, data)  # camera poses are computed here, not in mj_kinematics
        cam = model.camera(name).id
        return cls(data.cam_xpos[cam].copy(), data.cam_xmat[cam].reshape(3, 3).copy(),
                   float(model.cam_fovy[cam]), height, width)

    @property
    def focal(self) -> float:
        return (self.height / 2) / np.tan(np.deg2rad(self.fovy) / 2)

    def project(self, points: Array) -> Array:
        """World points ``(..., 3)`` -> pixel coordinates ``(..., 2)`` (column, row); points
        outside the view get coordinates outside ``[0, width) x [0, height)``. Numpy arrays or
        torch tensors (:mod:`worldsim.envs.xp`), answered in kind."""
        points = _floating(points)
        xp = namespace(points)
        local = (points - constant(self.position, points)) @ constant(self.rotation, points)
        depth = -local[..., 2]
        return xp.stack([self.width / 2 + self.focal * local[..., 0] / depth,
                         self.height / 2 - self.focal * local[..., 1] / depth], axis=-1)

    def unproject(self, pixels: Array, height: Array | float) -> Array:
        """Pixel coordinates ``(..., 2)`` -> the world points ``(..., 3)`` on the horizontal
        plane ``z = height`` (a number or an array of ``pixels``' leading shape) that they show:
        the inverse of :meth:`project` on that plane. Numpy arrays or torch tensors, in kind."""
        pixels = _floating(pixels)
        xp = namespace(pixels)
        ray = xp.stack([(pixels[..., 0] - self.width / 2) / self.focal,
                        -(pixels[..., 1] - self.height / 2) / self.focal,
                        -xp.ones(pixels.shape[:-1], dtype=pixels.dtype, device=device(pixels))], axis=-1)
        ray = ray @ constant(self.rotation.T, pixels)
        height = float(height) if isinstance(height, (int, float)) else xp.astype(_floating(height), pixels.dtype)
        position = constant(self.position, pixels)  # an array, not a float: torch.compile traces it whole
        t = (height - position[2]) / ray[..., 2]
        return position + t[..., None] * ray


def _floating(array: Array) -> Array:
    """``array`` as a floating array of its library (numpy input becomes float64, as before)."""
    if isinstance(array, (list, tuple, Number)) or type(array).__module__ == "numpy":
        return np.asarray(array, np.float64)
    xp = namespace(array)
    return array if xp.isdtype(array.dtype, "real floating") else xp.astype(array, xp.float32)
