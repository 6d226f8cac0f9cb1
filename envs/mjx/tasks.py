"""The task rules on MJX: the array-API families, observation vectors and failure check, run
on JAX batches.

There is one copy of every task rule: :mod:`worldsim.envs.families`, the
:class:`~worldsim.envs.scene.Scene` accessors and :func:`worldsim.envs.observations.state_vector`,
written against the array API (:mod:`worldsim.envs.xp`). The MuJoCo backend calls them on float64
numpy batches, MuJoCo Warp on torch tensors, and the MJX backend, through this module, on the
float32 ``jax.Array`` s of a whole batch inside its jitted functions.

The task is a static argument there (a :class:`~worldsim.envs.tasks.TaskSpec`, hashable): its
rules trace into straight-line code, which compiles in a fraction of a second per task, while
the physics step, the expensive compile, takes no task and serves every one. The other way, the
task as an array with ``lax.switch`` over every task the scene can pose (26 branches: the
families pick cubes and zones by name), measured worse on a 2-core CPU: the evaluation compiled
in 2.4-3.2 s instead of 0.2-0.4 s, in each jitted function holding it, and an evaluation of
1,024 envs ran in 0.10 ms instead of 0.04 ms.
"""

from __future__ import annotations

from functools import cache

import jax

from worldsim.envs.families import Evaluation, TaskFamily, make_family
from worldsim.envs.observations import state_vector as state_rows
from worldsim.envs.scene import Scene
from worldsim.envs.tasks import TaskSpec


@cache
def scene() -> Scene:
    """The scene whose accessors the JAX code reads (its slices are Python ints: static under jit)."""
    return Scene.load()


@cache
def family(spec: TaskSpec) -> TaskFamily:
    """The task logic of ``spec`` over :func:`scene`."""
    return make_family(spec, scene())


def evaluate(spec: TaskSpec, qpos: jax.Array) -> Evaluation:
    """Success and the family's named reward terms of a batch ``qpos`` (N, nq)."""
    return family(spec).evaluate(qpos)


def state_vector(spec: TaskSpec, qpos: jax.Array, qvel: jax.Array) -> jax.Array:
    """The ``state`` observations (N, 56) float32 of a batch."""
    return state_rows(scene(), family(spec), qpos, qvel)


def failed(qpos: jax.Array, qvel: jax.Array) -> jax.Array:
    """Rows whose episode cannot go on (:meth:`worldsim.envs.scene.Scene.failed`), (N,) bool."""
    return scene().failed(qpos, qvel)


__all__ = ["evaluate", "failed", "family", "scene", "state_vector"]
