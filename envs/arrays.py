"""Per-env arrays on a backend's device: what the env core needs to build and combine them.

The core (:mod:`worldsim.envs.core`) keeps its counters and flags, and returns rewards and
flags, in the array library of the backend that steps the envs: numpy for MuJoCo on the CPU
and the world model, JAX arrays for MJX, torch tensors for MuJoCo Warp. It writes every update
as ``where(mask, new, old)`` over whole rows, which all three libraries do alike, and asks its
:class:`Arrays` for the few operations that differ.

Accelerator kits (:class:`DeviceArrays`) never make the host wait for the device: they answer
"maybe" to :meth:`Arrays.maybe_any`, so the core does a masked (possibly empty) reset instead
of checking first, and they check actions from their metadata plus one on-device finiteness
test.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

ACTION_DIM = 4  # end-effector dx, dy, dz and gripper
MAX_CHUNK = 64  # longest action chunk one step() executes


def host_array(array: Any) -> np.ndarray:
    """``array`` as a numpy array on the host: numpy and array-likes as they are, torch tensors
    (on any device) and JAX arrays copied from their device."""
    if type(array).__module__.split(".")[0] == "torch":
        return array.detach().cpu().numpy()
    return np.asarray(array)


def check_actions(actions: Any, num_envs: int) -> np.ndarray:
    """``actions`` for ``num_envs`` envs, ``(N, 4)`` or a chunk ``(N, K, 4)`` (numpy, or a torch
    or JAX array, copied to the host), as float64 clipped to [-1, 1]; ``TypeError``/``ValueError``
    naming the expected shape, or the envs whose actions are not finite."""
    arr = host_array(actions)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"actions must be a float array of shape ({num_envs}, {ACTION_DIM}); "
                        f"got dtype {arr.dtype}")
    if not _well_shaped(arr.shape, num_envs):
        raise ValueError(f"actions must have shape (num_envs, {ACTION_DIM}) = ({num_envs}, "
                         f"{ACTION_DIM}) [end-effector dx, dy, dz, gripper], or ({num_envs}, K, "
                         f"{ACTION_DIM}) for a chunk of 1 <= K <= {MAX_CHUNK}; got shape {arr.shape}")
    finite = np.isfinite(arr.reshape(num_envs, -1)).all(axis=1)
    if not finite.all():
        raise ValueError(f"actions for envs {np.flatnonzero(~finite).tolist()} contain NaN or inf; "
                         "actions must be finite (values outside [-1, 1] are clipped)")
    return np.clip(arr.astype(np.float64), -1.0, 1.0)


def _well_shaped(shape: tuple[int, ...], num_envs: int) -> bool:
    return shape == (num_envs, ACTION_DIM) or (
        len(shape) == 3 and shape[0] == num_envs and shape[2] == ACTION_DIM and 1 <= shape[1] <= MAX_CHUNK)


class Arrays:
    """numpy on the host: the kit of the MuJoCo and world-model backends."""

    #: SameStep's ``final_obs`` is dense (the whole batch's observation) rather than Gymnasium's
    #: object array holding the last observation of each env that ended, and None elsewhere.
    dense_final_obs = False

    def zeros(self, num_envs: int, dtype: type) -> Any:
        """Zeros of a Python ``dtype`` (``bool``, ``int`` or ``float``) for every env."""
        return np.zeros(num_envs, {bool: np.bool_, int: np.int64, float: np.float64}[dtype])

    def from_numpy(self, array: np.ndarray) -> Any:
        return np.asarray(array)

    def to_numpy(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def where(self, mask: Any, new: Any, old: Any) -> Any:
        return np.where(mask, new, old)

    def maybe_any(self, mask: Any) -> bool:
        """Whether any entry of ``mask`` may be set (exact here; accelerator kits say True)."""
        return bool(mask.any())

    def actions(self, actions: Any, num_envs: int) -> Any:
        """Checked actions as a chunk ``(N, K, 4)`` clipped to [-1, 1] (:func:`check_actions`)."""
        arr = check_actions(actions, num_envs)
        return arr if arr.ndim == 3 else arr[:, None]

    def final_obs(self, obs: Any, done: Any) -> Any:
        """Gymnasium's SameStep ``final_obs``: an object array, env i's observation where it ended."""
        out = np.full(len(done), None, dtype=object)
        for i in np.flatnonzero(done):
            out[i] = obs[i].copy() if isinstance(obs, np.ndarray) else {
                k: (v[i] if k == "instruction" else v[i].copy()) for k, v in obs.items()}
        return out


class DeviceArrays(Arrays, ABC):
    """The part every accelerator kit shares: dense ``final_obs``, no host syncs on masks, and
    action checks done from metadata and one on-device test. Subclasses give the library's
    operations."""

    dense_final_obs = True

    def maybe_any(self, mask: Any) -> bool:
        return True

    def final_obs(self, obs: Any, done: Any) -> Any:
        return obs

    def actions(self, actions: Any, num_envs: int) -> Any:
        """Checked float32 actions ``(N, K, 4)`` on the device, from numpy arrays, or from any
        DLPack array (torch, JAX, CuPy) without a host copy; bad actions raise the errors of
        :func:`check_actions`."""
        if isinstance(actions, np.ndarray) or not hasattr(actions, "__dlpack__"):
            arr = self.from_numpy(check_actions(actions, num_envs).astype(np.float32))
        else:
            arr = self.import_array(actions)
            if not (self.is_numeric(arr) and _well_shaped(tuple(arr.shape), num_envs) and self.all_finite(arr)):
                check_actions(self.to_numpy(arr), num_envs)  # raises the error naming what is wrong
            arr = self.clip_float32(arr)
        return arr if arr.ndim == 3 else arr[:, None]

    @abstractmethod
    def import_array(self, array: Any) -> Any:
        """A DLPack array of another library as this library's array (no copy)."""

    @abstractmethod
    def is_numeric(self, array: Any) -> bool:
        """Whether ``array`` holds floats or integers."""

    @abstractmethod
    def all_finite(self, array: Any) -> bool:
        """Whether every entry is finite (one scalar comes back to the host)."""

    @abstractmethod
    def clip_float32(self, array: Any) -> Any:
        """``array`` as float32, clipped to [-1, 1]."""
