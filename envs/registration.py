"""Gymnasium registration of every task as ``worldsim/<Task>-v0``.

Each id has a single-env entry point (``gym.make``) and a native ``vector_entry_point``
(``gym.make_vec``). The time limit lives inside the env, so no ``TimeLimit`` wrapper is
registered.
"""

from __future__ import annotations

import gymnasium as gym

from worldsim.envs.tasks import TASKS

NAMESPACE = "worldsim"


def register_envs() -> None:
    """Register every task (idempotent)."""
    for name in TASKS:
        env_id = f"{NAMESPACE}/{name}"
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="worldsim.envs.single_env:TabletopEnv",
            vector_entry_point="worldsim.envs.vector_env:TabletopVectorEnv",
            kwargs={"task": name},
        )
