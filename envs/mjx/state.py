"""The pytrees the MJX backend computes on: the batched env state and the task parameters.

Both are plain :class:`typing.NamedTuple` s of arrays, so ``jax.jit``, ``jax.vmap`` and
``jax.lax.scan`` take them as they are. The env state holds only what the next step needs
(joint positions and velocities, the solver's warm start and the RNG key; episode counters and
autoreset flags are the shared env core's); everything else MuJoCo XLA
computes (contacts, Jacobians) is rebuilt inside each
step, so a state of 4096 envs is a few megabytes.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from worldsim.envs.scene import CUBES, ZONES
from worldsim.envs.tasks import FAMILIES, TaskSpec


class EnvState(NamedTuple):
    """State of a batch of ``N`` envs (leading axis ``N`` except ``key``).

    Attributes:
        qpos: joint positions, (N, nq) float32, laid out as the scene's ``qpos``.
        qvel: joint velocities, (N, nv) float32.
        warmstart: the constraint solver's warm start (``qacc_warmstart``), (N, nv).
        key: the batch's PRNG key (new layouts), a raw ``uint32[2]`` key.
    """

    qpos: jax.Array
    qvel: jax.Array
    warmstart: jax.Array
    key: jax.Array


class TaskParams(NamedTuple):
    """What the layout sampler and the reward settings need of a task, as arrays, so that one
    compiled reset serves every task. The task's rules (success, reward terms, the observed
    object and goal) are its family's, with the task static: :mod:`worldsim.envs.mjx.tasks`.

    Attributes (int32 or bool scalars):
        family: index into :data:`worldsim.envs.tasks.FAMILIES` (push's layouts keep a corridor free).
        obj: index of the task's cube in :data:`~worldsim.envs.scene.CUBES` (0 when none).
        goal_zone: index of the goal zone in :data:`~worldsim.envs.scene.ZONES` (0 when none).
        row_layout: the ``row`` initial-state distribution rather than ``scattered``.
        sparse: sparse reward (1 on success, else 0) rather than dense.
        terminate_on_success: success ends the episode.
    """

    family: jax.Array
    obj: jax.Array
    goal_zone: jax.Array
    row_layout: jax.Array
    sparse: jax.Array
    terminate_on_success: jax.Array


def task_params(spec: TaskSpec, *, reward_type: str = "dense", terminate_on_success: bool = True) -> TaskParams:
    """The :class:`TaskParams` of ``spec`` with the env's reward settings."""
    obj = CUBES.index(spec.obj) if spec.obj is not None else 0
    goal_zone = ZONES.index(spec.goal) if spec.goal in ZONES else 0
    return TaskParams(
        family=jnp.int32(FAMILIES.index(spec.family)), obj=jnp.int32(obj),
        goal_zone=jnp.int32(goal_zone), row_layout=jnp.bool_(spec.layout == "row"),
        sparse=jnp.bool_(reward_type == "sparse"),
        terminate_on_success=jnp.bool_(terminate_on_success),
    )
