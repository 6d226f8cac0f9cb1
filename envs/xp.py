"""The array namespace of a batch: one copy of the task logic for numpy, torch and JAX batches.

The scene accessors, task families, observation vectors and layout sampler are written once
against the Python array API (``xp = namespace(qpos)``, via ``array_api_compat``): the MuJoCo
backend calls them with float64 numpy batches on the host, the MuJoCo Warp backend with float32
torch tensors on its device, where they run without leaving it, and the MJX backend with float32
JAX arrays inside its jitted functions (:mod:`worldsim.envs.mjx.tasks`; the layout sampler has a
JAX counterpart there, as JAX's random numbers are keys, not generators). JAX arrays are
immutable, so the task rules assign to no item and index with no boolean mask (``xp.where``
instead). Constants (offsets, bounds) are numpy arrays and are brought to a batch's dtype and
device with :func:`constant`.
"""

from __future__ import annotations

from numbers import Number
from typing import Any, TypeAlias

import numpy as np
from array_api_compat import array_namespace, device

Array: TypeAlias = Any
"""A batch of the caller's array library: numpy on the MuJoCo backend, torch on MuJoCo Warp, JAX
on MJX. The task code's signatures use it; type checkers cannot follow the array API across
libraries."""


def namespace(*arrays: Any) -> Any:
    """The array-API namespace of ``arrays`` (numpy's, torch's or JAX's, through array_api_compat)."""
    return array_namespace(*arrays)


_ON_DEVICE: dict[tuple[Any, ...], Any] = {}  # constant()'s copies on accelerators


def constant(value: Any, like: Any) -> Any:
    """``value`` (a number or numpy array) as an array of ``like``'s library, dtype and device.
    On an accelerator each distinct constant is copied there once and the copy is kept (treat it
    as read-only): a copy from the host in every call would make the host wait for the device,
    and could not be recorded in a CUDA graph (``train-wm --cuda-graph``)."""
    where = device(like)
    if getattr(where, "type", "cpu") == "cpu":
        return namespace(like).asarray(value, dtype=like.dtype, device=where)
    array = np.asarray(value)
    key = (array.dtype.str, array.shape, array.tobytes(), str(like.dtype), str(where))
    if key not in _ON_DEVICE:
        _ON_DEVICE[key] = namespace(like).asarray(array, dtype=like.dtype, device=where)
    return _ON_DEVICE[key]


def column(value: Any, like: Any) -> Any:
    """A ``(N, 1)`` column of ``value`` (a number or an ``(N,)`` array) for the ``N`` rows of
    ``like``, in its dtype and on its device."""
    xp = namespace(like)
    if isinstance(value, Number):
        return xp.full((like.shape[0], 1), value, dtype=like.dtype, device=device(like))
    return xp.astype(value, like.dtype)[:, None]


def columns(*parts: Any, like: Any) -> Any:
    """``(N, k)`` from columns and ``(N, m)`` blocks (numbers give constant columns), the
    array-API ``column_stack``."""
    xp = namespace(like)
    blocks = [column(p, like) if isinstance(p, Number) or p.ndim == 1 else p for p in parts]
    return xp.concat(blocks, axis=1)


__all__ = ["column", "columns", "constant", "device", "namespace"]
