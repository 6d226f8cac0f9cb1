"""Gymnasium registration of every task as ``worldsim/<Task>-v0``.

Each id has a single-env entry point (``gym.make``) and a native ``vector_entry_point``
(``gym.make_vec``). The time limit lives inside the env, so no ``TimeLimit`` wrapper is
registered.

Each task also has an imagined twin, ``worldsim/Imagined-<Task>`` (e.g.
``worldsim/Imagined-PushCube-v0``, for ``gym.make`` and ``gym.make_vec``): the same spaces and
semantics, stepped by a learned world model (:class:`worldsim.world_models.env.ImaginedVectorEnv`;
pass ``world_model=`` and ``keyframes=``).

``gym.make_vec`` of a physics task takes ``backend=``: ``"mujoco"`` (default, MuJoCo on the
CPU, :class:`~worldsim.envs.vector_env.TabletopVectorEnv`), ``"mjx"`` (MuJoCo XLA on the JAX
device, :class:`~worldsim.envs.mjx.MjxVectorEnv`; needs ``pip install "worldsim[mjx]"``) or
``"warp"`` (MuJoCo Warp physics and rendering on a GPU, torch tensors in and out,
:class:`~worldsim.envs.warp.vector_env.WarpVectorEnv`; needs ``pip install "worldsim[warp]"``).

Library code makes a task's envs through :func:`make_task_envs` (ids from :func:`task_env_id`),
physics or imagined, so the ids and the imagined env's arguments are spelled in one place.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Any

import gymnasium as gym

from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.tasks import TASKS

NAMESPACE = "worldsim"
IMAGINED_PREFIX = "Imagined-"
BACKENDS: tuple[str, ...] = ("mujoco", "mjx", "warp")
OPTIONAL_BACKENDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "mjx": (("jax", "mujoco.mjx"), "JAX and MuJoCo XLA", "worldsim.envs.mjx.vector_env:MjxVectorEnv"),
    "warp": (("warp", "mujoco_warp"), "NVIDIA Warp and MuJoCo Warp", "worldsim.envs.warp.vector_env:WarpVectorEnv"),
}
"""The backends behind an extra: the modules each needs, what they are (for the install hint)
and its vector env class (``module:Class``, imported on first use)."""


def task_env_id(task: str, *, imagined: bool = False) -> str:
    """The registered id of ``task``'s envs: ``worldsim/<task>``, or with ``imagined`` its
    world-model twin ``worldsim/Imagined-<task>``."""
    return f"{NAMESPACE}/{IMAGINED_PREFIX if imagined else ''}{task}"


def make_task_envs(task: str, num_envs: int, *, imagination: ImaginationConfig | None = None,
                   **env_kwargs: Any) -> gym.vector.VectorEnv:
    """``num_envs`` envs of ``task`` (``gym.make_vec``): physics, or with ``imagination`` (that
    names a world model) the task's imagined twin, made with
    :meth:`~worldsim.envs.imagination.ImaginationConfig.env_kwargs`. ``env_kwargs`` go to either
    env; a ``reset_schedule`` among them replaces the imagination's. ``ValueError`` when
    ``env_kwargs`` sets what ``imagination`` holds (an imagination setting, or another argument
    both set): which value was meant is unclear."""
    if imagination is not None and not isinstance(imagination, ImaginationConfig):
        raise TypeError(f"imagination must be an ImaginationConfig, not {type(imagination).__name__}")
    imagined = imagination.env_kwargs() if imagination is not None else {}
    if "reset_schedule" in env_kwargs:
        imagined.pop("reset_schedule", None)
    settings = {f.name for f in dataclasses.fields(ImaginationConfig)} if imagination is not None else set()
    both = sorted((set(imagined) | settings) & set(env_kwargs))
    if both:
        raise ValueError(f"imagination and env_kwargs both set {both}; give each argument once")
    return gym.make_vec(task_env_id(task, imagined=imagination is not None), num_envs=num_envs,
                        **env_kwargs, **imagined)


def make_vector_env(task: str, num_envs: int = 1, *, backend: str = "mujoco", **kwargs: Any) -> gym.vector.VectorEnv:
    """The vector entry point of every physics task: the env of ``task`` on ``backend``."""
    if backend == "mujoco":
        from worldsim.envs.vector_env import TabletopVectorEnv

        return TabletopVectorEnv(task, num_envs, **kwargs)
    if backend in OPTIONAL_BACKENDS:
        modules, needs, env_class = OPTIONAL_BACKENDS[backend]
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if missing:
            raise ImportError(f"backend={backend!r} needs {needs} ({', '.join(missing)} not installed): "
                              f'pip install "worldsim[{backend}]"')
        module, name = env_class.split(":")
        return getattr(importlib.import_module(module), name)(task, num_envs, **kwargs)
    raise ValueError(f"backend={backend!r} is not a backend; allowed: {', '.join(map(repr, BACKENDS))}")


def register_envs() -> None:
    """Register every task (idempotent)."""
    for name in TASKS:
        env_id = task_env_id(name)
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="worldsim.envs.single_env:TabletopEnv",
                vector_entry_point="worldsim.envs.registration:make_vector_env",
                kwargs={"task": name},
            )
        imagined_id = task_env_id(name, imagined=True)
        if imagined_id not in gym.registry:
            gym.register(id=imagined_id, entry_point="worldsim.world_models.env:ImaginedEnv",
                         vector_entry_point="worldsim.world_models.env:ImaginedVectorEnv",
                         kwargs={"task": name})
