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
from scipy.optimize import least_squares
from scipy.spatial.transform import Rotation

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

    @classmethod
    def fit(cls, points: np.ndarray, pixels: np.ndarray, height: int, width: int) -> PinholeCamera:
        """The camera that sees world ``points`` ``(N, 3)`` at ``pixels`` ``(N, 2)`` in an image of
        ``height`` x ``width``: its pose and field of view, the principal point at the image's
        centre and square pixels, as the scene's cameras have. Started from the plane that
        ``points`` span (Zhang's closed form for a homography with one unknown focal length), then
        refined by robust least squares on the reprojection error (points on one plane suffice:
        the homography has more freedom than the camera). ``ValueError`` for fewer than 6 points,
        shapes that do not pair, or points the camera cannot be fitted to."""
        points, pixels = np.asarray(points, np.float64), np.asarray(pixels, np.float64)
        if points.ndim != 2 or points.shape[1] != 3 or pixels.shape != (len(points), 2):
            raise ValueError(f"points {points.shape} and pixels {pixels.shape} must be (N, 3) and (N, 2)")
        if len(points) < 6 or not (np.isfinite(points).all() and np.isfinite(pixels).all()):
            raise ValueError(f"a camera is fitted to at least 6 finite correspondences; got {len(points)}")

        def camera(x: np.ndarray) -> PinholeCamera:
            return cls(x[:3], Rotation.from_rotvec(x[3:6]).as_matrix(), float(x[6]), height, width)

        start = plane_camera(points, pixels, height, width)
        x0 = np.concatenate([start.position, Rotation.from_matrix(start.rotation).as_rotvec(), [start.fovy]])
        # soft-L1 with a scale of half a pixel: sightings a hand or another cube spoiled count little
        fit = least_squares(lambda x: (camera(x).project(points) - pixels).ravel(), x0, loss="soft_l1", f_scale=0.5,
                            bounds=([-np.inf] * 6 + [1.0], [np.inf] * 6 + [179.0]))
        fitted = camera(fit.x)
        if not fit.success or (fitted.depth(points) <= 0).any():
            raise ValueError(f"no camera fits these {len(points)} correspondences ({fit.message})")
        return fitted

    def depth(self, points: np.ndarray) -> np.ndarray:
        """Distance ``(...)`` of world ``points`` ``(..., 3)`` in front of the camera along its axis."""
        return -((np.asarray(points, np.float64) - self.position) @ self.rotation)[..., 2]

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


def plane_camera(points: np.ndarray, pixels: np.ndarray, height: int, width: int) -> PinholeCamera:
    """A first guess of the camera seeing ``points`` ``(N, 3)`` at ``pixels``, in closed form (no
    iterations: cheap enough to try many pairings): the homography from their mean height's plane
    to the image, decomposed with the principal point at the centre and one focal length (from
    the two constraints a plane puts on the rotation's first columns)."""
    z0 = float(points[:, 2].mean())
    scale_w, scale_p = _normaliser(points[:, :2]), _normaliser(pixels)
    xy, uv = _apply(scale_w, points[:, :2]), _apply(scale_p, pixels)
    ones, zeros = np.ones(len(xy)), np.zeros((len(xy), 3))
    world = np.c_[xy, ones]  # each pair gives two rows of the direct linear transform's system
    rows = np.concatenate([np.c_[world, zeros, -uv[:, :1] * world], np.c_[zeros, world, -uv[:, 1:] * world]])
    homography = np.linalg.inv(scale_p) @ np.linalg.svd(rows, full_matrices=False)[2][-1].reshape(3, 3) @ scale_w
    # image coordinates about the principal point, with y pointing up as in MuJoCo's camera frame
    a = np.array([[1.0, 0, -width / 2], [0, -1.0, height / 2], [0, 0, 1]]) @ homography
    a1, a2 = a[:, 0], a[:, 1]
    # r1 . r2 = 0 and |r1| = |r2| for r_i = (a_i[:2] / f, -a_i[2]) (the camera looks down its -z)
    terms = np.array([[a1[0] * a2[0] + a1[1] * a2[1], a1[2] * a2[2]],
                      [a1[0] ** 2 + a1[1] ** 2 - a2[0] ** 2 - a2[1] ** 2, a1[2] ** 2 - a2[2] ** 2]])
    weights = np.linalg.lstsq(terms[:, :1], -terms[:, 1], rcond=None)[0]  # 1 / f^2
    focal = 1.0 / np.sqrt(weights[0]) if weights[0] > 0 else float(height)
    g = a / np.array([[focal], [focal], [-1.0]])
    g /= np.linalg.norm(g[:, 0])
    if (g[:, 2] @ np.array([0, 0, 1.0])) > 0:  # the plane must lie in front: at negative camera z
        g = -g
    r1, r2 = g[:, 0], g[:, 1]
    u, _, vt = np.linalg.svd(np.stack([r1, r2, np.cross(r1, r2)], axis=1))
    world_to_camera = u @ vt  # rows: the camera's axes in the world frame
    offset = g[:, 2] - world_to_camera[:, 2] * z0  # the world origin in camera coordinates
    rotation = world_to_camera.T
    fovy = float(np.degrees(2 * np.arctan((height / 2) / focal)))
    return PinholeCamera(-rotation @ offset, rotation, fovy, height, width)


def _normaliser(points: np.ndarray) -> np.ndarray:
    """The similarity moving ``points`` ``(N, 2)`` to mean 0 and mean distance sqrt(2) (Hartley)."""
    mean = points.mean(0)
    spread = np.sqrt(2) / max(np.linalg.norm(points - mean, axis=1).mean(), 1e-12)
    return np.array([[spread, 0, -spread * mean[0]], [0, spread, -spread * mean[1]], [0, 0, 1.0]])


def _apply(transform: np.ndarray, points: np.ndarray) -> np.ndarray:
    moved = np.c_[points, np.ones(len(points))] @ transform.T
    return moved[:, :2] / moved[:, 2:]


def _floating(array: Array) -> Array:
    """``array`` as a floating array of its library (numpy input becomes float64, as before)."""
    if isinstance(array, (list, tuple, Number)) or type(array).__module__ == "numpy":
        return np.asarray(array, np.float64)
    xp = namespace(array)
    return array if xp.isdtype(array.dtype, "real floating") else xp.astype(array, xp.float32)
