"""The tabletop suite on MuJoCo Warp: GPU physics and batched GPU rendering behind the env API.

``gym.make_vec("worldsim/<Task>", num_envs=N, backend="warp", device="cuda")`` makes a
:class:`~worldsim.envs.warp.vector_env.WarpVectorEnv`. Needs the ``warp`` extra:
``pip install "worldsim[warp]"``.

Modules, one job each: :mod:`~worldsim.envs.warp.arrays` (:class:`TorchArrays`, the core's
array kit for torch tensors on a device; needs torch only), :mod:`~worldsim.envs.warp.physics`
(the worlds' state and control step), :mod:`~worldsim.envs.warp.rendering` (batched camera
images), :mod:`~worldsim.envs.warp.vector_env` (the hooks on the shared env core).
"""

from typing import Any

__all__ = ["TorchArrays", "WarpVectorEnv"]


def __getattr__(name: str) -> Any:
    # Lazy: TorchArrays needs torch only, and the env MuJoCo Warp, which may not be installed.
    if name == "TorchArrays":
        from worldsim.envs.warp.arrays import TorchArrays

        return TorchArrays
    if name == "WarpVectorEnv":
        from worldsim.envs.warp.vector_env import WarpVectorEnv

        return WarpVectorEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
