"""Gymnasium registration of every task as ``worldsim/<Task>-v0``.

Each id has a single-env entry point (``gym.make``) and a native ``vector_entry_point``
(``gym.make_vec``). The time limit lives inside the env, so no ``TimeLimit`` wrapper is
registered.

Each task also has an imagined twin, ``worldsim/Imagined-<Task>`` (e.g.
``worldsim/Imagined-PushCube-v0``, for ``gym.make`` and ``gym.make_vec``): the same spaces and
semantics, stepped by a learned world model (:class:`worldsim.world_models.env.ImaginedVectorEnv`;
pass ``world_model=`` and ``keyframes=``).
"""

from __future__ import annotations

import gymnasium as gym

from worldsim.envs.tasks import TASKS

NAMESPACE = "worldsim"


def register_envs() -> None:
    """Register every task (idempotent)."""
    for name in TASKS:
        env_id = f"{NAMESPACE}/{name}"
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="worldsim.envs.single_env:TabletopEnv",
                vector_entry_point="worldsim.envs.vector_env:TabletopVectorEnv",
                kwargs={"task": name},
            )
        imagined_id = f"{NAMESPACE}/Imagined-{name}"
        if imagined_id not in gym.registry:
            gym.register(id=imagined_id, entry_point="worldsim.world_models.env:ImaginedEnv",
                         vector_entry_point="worldsim.world_models.env:ImaginedVectorEnv",
                         kwargs={"task": name})
