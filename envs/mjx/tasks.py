"""The task families in JAX: observations, success, reward terms and failure, for one env.

Line for line the same quantities as :mod:`worldsim.envs.families` and
:func:`worldsim.envs.observations.state_vector` (which work on numpy batches), written for a
single env's ``qpos``/``qvel`` so that the core ``vmap`` s them. The task is a
:class:`~worldsim.envs.mjx.state.TaskParams` of arrays; the family is picked with
``lax.switch`` on a scalar, so under ``vmap`` only the chosen family's code runs and one
compiled step serves every task.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import jax
import jax.numpy as jnp

from worldsim.envs.families.base import PLACE_SHAPING, REACH_SHAPING, RESTING_TOLERANCE
from worldsim.envs.families.pick_place import DOWN, IN_BIN
from worldsim.envs.families.pick_place import ON_ZONE as PLACED_ON_ZONE
from worldsim.envs.families.push import BEHIND, ON_ZONE, PUSH_HEIGHT
from worldsim.envs.families.reach import HOVER, SUCCESS_RADIUS, ZONE_HOVER
from worldsim.envs.families.stack import CENTRED, ON_TOP, SEATED
from worldsim.envs.mjx.state import TERM_NAMES, TaskParams
from worldsim.envs.scene import BIN_FLOOR_TOP, CUBE_HALF, CUBES, TABLE_LIMIT, ZONES, Scene


class Addresses(NamedTuple):
    """qpos/qvel start indices of the scene's parts (python ints: static under jit)."""

    ee: int
    ee_dof: int
    fingers: int
    cubes: tuple[int, ...]
    cube_dofs: tuple[int, ...]
    zones: tuple[int, ...]
    bin: int


@lru_cache(maxsize=1)
def addresses() -> Addresses:
    """The addresses of the shipped scene."""
    scene = Scene.load()
    return Addresses(
        ee=scene.ee.start, ee_dof=scene.ee_dof.start, fingers=scene.fingers.start,
        cubes=tuple(scene.cube(c).start for c in CUBES),
        cube_dofs=tuple(scene.cube_dof(c).start for c in CUBES),
        zones=tuple(scene.zone(z).start for z in ZONES), bin=scene.bin.start,
    )


class Evaluation(NamedTuple):
    """One env's task quantities: success and the three named terms (unused ones are 0)."""

    success: jax.Array  # () bool
    terms: dict[str, jax.Array]  # TERM_NAMES -> () float
    num_terms: jax.Array  # () int: how many of the terms the family defines

    def dense_reward(self) -> jax.Array:
        """Staged reward in [0, 1] (:meth:`worldsim.envs.families.Evaluation.dense_reward`)."""
        total = sum(self.terms.values()) / (self.num_terms + 1)
        return jnp.where(self.success, 1.0, total)


# ---------------------------------------------------------------- scene views (one env)
def tcp(qpos: jax.Array) -> jax.Array:
    a = addresses().ee
    return qpos[a:a + 3]


def gripper_width(qpos: jax.Array) -> jax.Array:
    a = addresses().fingers
    return qpos[a] + qpos[a + 1]


def cube_positions(qpos: jax.Array) -> jax.Array:
    """Centres of the red, green and yellow cube, (3, 3)."""
    return jnp.stack([qpos[a:a + 3] for a in addresses().cubes])


def zone_positions(qpos: jax.Array) -> jax.Array:
    """Centres of the goal zones on the table surface, (2, 3)."""
    return jnp.stack([jnp.concatenate([qpos[a:a + 2], jnp.zeros(1, qpos.dtype)]) for a in addresses().zones])


def bin_position(qpos: jax.Array) -> jax.Array:
    """Centre of the bin's floor surface, (3,)."""
    a = addresses().bin
    return jnp.concatenate([qpos[a:a + 2], jnp.full(1, BIN_FLOOR_TOP, qpos.dtype)])


def is_grasped(qpos: jax.Array, cube: jax.Array) -> jax.Array:
    """:meth:`worldsim.envs.scene.Scene.is_grasped` for cube position ``cube``."""
    width = gripper_width(qpos)
    offset = cube - tcp(qpos)
    between = (jnp.abs(offset[0]) < 0.02) & (jnp.abs(offset[1]) < 0.012)
    return between & (jnp.abs(offset[2]) < 0.03) & (width > 0.028) & (width < 0.0395)


def closeness(distance: jax.Array, scale: float) -> jax.Array:
    return 1.0 - jnp.tanh(scale * distance)


# ---------------------------------------------------------------- object and goal
def _reach_object_goal(task: TaskParams, qpos: jax.Array) -> tuple[jax.Array, jax.Array]:
    cube = cube_positions(qpos)[task.obj]
    zone = zone_positions(qpos)[task.goal_zone]
    target = jnp.where(task.reach_zone, zone, cube)
    return target, target + jnp.where(task.reach_zone, jnp.asarray(ZONE_HOVER), jnp.asarray(HOVER))


def _push_object_goal(task: TaskParams, qpos: jax.Array) -> tuple[jax.Array, jax.Array]:
    return cube_positions(qpos)[task.obj], zone_positions(qpos)[task.goal_zone]


def _place_object_goal(task: TaskParams, qpos: jax.Array) -> tuple[jax.Array, jax.Array]:
    lift = jnp.array([0.0, 0.0, CUBE_HALF])
    goal = jnp.where(task.goal_is_bin, bin_position(qpos), zone_positions(qpos)[task.goal_zone])
    return cube_positions(qpos)[task.obj], goal + lift


def _stack_object_goal(task: TaskParams, qpos: jax.Array) -> tuple[jax.Array, jax.Array]:
    cubes = cube_positions(qpos)
    return cubes[task.obj], cubes[task.goal_cube] + jnp.asarray(ON_TOP)


_OBJECT_GOAL = (_reach_object_goal, _push_object_goal, _place_object_goal, _stack_object_goal)


def object_and_goal(task: TaskParams, qpos: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Positions (3,) of the thing acted on and of where it must go."""
    return jax.lax.switch(task.family, _OBJECT_GOAL, task, qpos)


# ---------------------------------------------------------------- success and terms
def _terms(**named: jax.Array) -> dict[str, jax.Array]:
    return {name: jnp.asarray(named.get(name, 0.0), jnp.float32) for name in TERM_NAMES}


def _evaluate_reach(task: TaskParams, qpos: jax.Array) -> Evaluation:
    _, goal = _reach_object_goal(task, qpos)
    d = jnp.linalg.norm(tcp(qpos) - goal)
    return Evaluation(d < SUCCESS_RADIUS, _terms(reach=closeness(d, REACH_SHAPING)), jnp.int32(1))


def _evaluate_push(task: TaskParams, qpos: jax.Array) -> Evaluation:
    cube, zone = _push_object_goal(task, qpos)
    u = zone[:2] - cube[:2]
    u = u / jnp.maximum(jnp.linalg.norm(u), 1e-9)
    behind = cube[:2] - BEHIND * u
    hand = tcp(qpos)
    d_pose = jnp.linalg.norm(hand[:2] - behind) + jnp.abs(hand[2] - PUSH_HEIGHT)
    d_goal = jnp.linalg.norm(cube[:2] - zone[:2])
    on_zone = jnp.abs(cube[:2] - zone[:2]).max() <= ON_ZONE
    success = on_zone & (cube[2] < CUBE_HALF + RESTING_TOLERANCE)
    return Evaluation(success, _terms(reach=closeness(d_pose, REACH_SHAPING), place=closeness(d_goal, PLACE_SHAPING)),
                      jnp.int32(2))


def _evaluate_pick_place(task: TaskParams, qpos: jax.Array) -> Evaluation:
    cube, goal = _place_object_goal(task, qpos)
    held = is_grasped(qpos, cube)
    inside = jnp.where(task.goal_is_bin, IN_BIN, PLACED_ON_ZONE)
    placed = (jnp.abs(cube[:2] - goal[:2]).max() <= inside) & (cube[2] < goal[2] + DOWN)
    grasp = (held | placed).astype(jnp.float32)
    terms = _terms(reach=closeness(jnp.linalg.norm(tcp(qpos) - cube), REACH_SHAPING), grasp=grasp,
                   place=closeness(jnp.linalg.norm(cube - goal), PLACE_SHAPING) * grasp)
    return Evaluation(placed & ~held, terms, jnp.int32(3))


def _evaluate_stack(task: TaskParams, qpos: jax.Array) -> Evaluation:
    top, goal = _stack_object_goal(task, qpos)
    base_z = goal[2] - 2 * CUBE_HALF
    held = is_grasped(qpos, top)
    offset = top - goal
    stacked = ((jnp.linalg.norm(offset[:2]) < CENTRED) & (jnp.abs(offset[2]) < SEATED)
               & (base_z < CUBE_HALF + RESTING_TOLERANCE))
    grasp = (held | stacked).astype(jnp.float32)
    terms = _terms(reach=closeness(jnp.linalg.norm(tcp(qpos) - top), REACH_SHAPING), grasp=grasp,
                   place=closeness(jnp.linalg.norm(offset), PLACE_SHAPING) * grasp)
    return Evaluation(stacked & ~held, terms, jnp.int32(3))


_EVALUATE = (_evaluate_reach, _evaluate_push, _evaluate_pick_place, _evaluate_stack)


def evaluate(task: TaskParams, qpos: jax.Array) -> Evaluation:
    """Success and named reward terms of one env's state."""
    return jax.lax.switch(task.family, _EVALUATE, task, qpos)


def failed(qpos: jax.Array, qvel: jax.Array) -> jax.Array:
    """A cube left the table (or fell through it), or the physics diverged."""
    cubes = cube_positions(qpos)
    off_table = (jnp.abs(cubes[:, :2]).max(axis=1) > TABLE_LIMIT) | (cubes[:, 2] < -0.05)
    finite = jnp.isfinite(qpos).all() & jnp.isfinite(qvel).all()
    return off_table.any() | ~finite


# ---------------------------------------------------------------- observations
def state_vector(task: TaskParams, qpos: jax.Array, qvel: jax.Array) -> jax.Array:
    """The ``state`` observation (:data:`worldsim.envs.observations.STATE_LAYOUT`), (56,) float32."""
    adr = addresses()
    hand = tcp(qpos)
    obj, goal = object_and_goal(task, qpos)
    parts = [hand, qvel[adr.ee_dof:adr.ee_dof + 3], qpos[adr.fingers:adr.fingers + 2], obj, goal,
             goal - obj, obj - hand]
    for start, dof in zip(adr.cubes, adr.cube_dofs, strict=True):
        parts += [qpos[start:start + 7], qvel[dof:dof + 3]]
    parts += [qpos[a:a + 2] for a in adr.zones] + [qpos[adr.bin:adr.bin + 2]]
    return jnp.concatenate(parts).astype(jnp.float32)


def proprio_vector(qpos: jax.Array) -> jax.Array:
    """The ``proprio`` observation (TCP position and finger gap), (4,) float32."""
    return jnp.concatenate([tcp(qpos), gripper_width(qpos)[None]]).astype(jnp.float32)


__all__ = ["Addresses", "Evaluation", "addresses", "evaluate", "failed", "object_and_goal",
           "proprio_vector", "state_vector"]
