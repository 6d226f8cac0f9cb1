"""torch tensors on a device as the env core's array kit (:class:`TorchArrays`).

The MuJoCo Warp backend keeps its counters, flags, rewards and observations as torch tensors
on the device the physics runs on: Warp arrays share their memory with torch tensors, so
nothing is copied to the host. Actions may come from torch (moved to the env's device if they
are elsewhere), or from any DLPack producer — JAX, CuPy, Warp — taken without a copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from worldsim.envs.arrays import DeviceArrays, host_array

_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float32}


class TorchArrays(DeviceArrays):
    """torch tensors on ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...)."""

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)

    def zeros(self, num_envs: int, dtype: type) -> torch.Tensor:
        return torch.zeros(num_envs, dtype=_DTYPES[dtype], device=self.device)

    def from_numpy(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    def to_numpy(self, array: Any) -> np.ndarray:
        return host_array(array)

    def where(self, mask: Any, new: Any, old: Any) -> torch.Tensor:
        return torch.where(mask, new, old)

    def import_array(self, array: Any) -> torch.Tensor:
        tensor = array if isinstance(array, torch.Tensor) else torch.from_dlpack(array)
        return tensor.detach().to(self.device)

    def is_numeric(self, array: torch.Tensor) -> bool:
        return array.dtype != torch.bool and not array.is_complex()

    def all_finite(self, array: torch.Tensor) -> bool:
        return bool(torch.isfinite(array).all())

    def clip_float32(self, array: torch.Tensor) -> torch.Tensor:
        return array.to(torch.float32).clamp(-1.0, 1.0)
