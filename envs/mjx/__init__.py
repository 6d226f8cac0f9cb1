"""The tabletop suite on MuJoCo XLA (JAX): GPU-parallel physics behind the same env API.

``gym.make_vec("worldsim/<Task>", num_envs=N, backend="mjx")`` makes a
:class:`MjxVectorEnv`; :class:`TabletopBraxEnv` is the same task as a Brax ``Env`` for
``brax.training`` trainers. Needs the ``mjx`` extra: ``pip install "worldsim[mjx]"``.

Modules, one job each: :mod:`~worldsim.envs.mjx.state` (the state pytrees),
:mod:`~worldsim.envs.mjx.tasks` (the task rules every backend shares, on JAX batches),
:mod:`~worldsim.envs.mjx.layout` (initial layouts), :mod:`~worldsim.envs.mjx.physics` (the MJX
model and control step), :mod:`~worldsim.envs.mjx.core` (pure batched reset/step),
:mod:`~worldsim.envs.mjx.vector_env` (the Gymnasium edge), :mod:`~worldsim.envs.mjx.brax_env`
(the Brax edge).
"""

from typing import Any

from worldsim.envs.mjx.vector_env import MjxVectorEnv

__all__ = ["MjxVectorEnv", "TabletopBraxEnv"]


def __getattr__(name: str) -> Any:
    # The Brax adapter imports brax, which the Gymnasium env does not need.
    if name == "TabletopBraxEnv":
        from worldsim.envs.mjx.brax_env import TabletopBraxEnv

        return TabletopBraxEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
