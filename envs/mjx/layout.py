"""Initial layouts in JAX: the distribution of :mod:`worldsim.envs.layout`, sampled on device.

The same items, ranges and clearance rules (including the free corridor of ``push``), drawn
by plain rejection sampling: each round draws :data:`CANDIDATES` candidate layouts and the
first that passes every rule is kept; a ``while_loop`` repeats rounds until one passes. So the
distribution is the MuJoCo backend's, but the random numbers are JAX's: the two backends give
different layouts for the same seed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from worldsim.envs.layout import _CLEARANCE, _X_RANGE, _Y_RANGE
from worldsim.envs.mjx.state import TaskParams
from worldsim.envs.mjx.tasks import scene
from worldsim.envs.scene import CUBES, FINGER_OPEN, ZONES
from worldsim.envs.tasks import FAMILIES

CANDIDATES = 64  # per round; push accepts about 2% of candidates, so most envs finish in 1-3 rounds
_KINDS = ["cube"] * len(CUBES) + ["zone"] * len(ZONES) + ["bin"]  # item order: cubes, zones, bin
_NEED = jnp.array([[_CLEARANCE[tuple(sorted((a, b)))] if i != j else 0.0  # type: ignore[index]
                    for j, b in enumerate(_KINDS)] for i, a in enumerate(_KINDS)])
_PUSH = FAMILIES.index("push")


def _draw(key: jax.Array, row: jax.Array) -> jax.Array:
    """One candidate: item centres (6, 2) in :data:`_KINDS` order."""
    k_uniform, k_back, k_front, k_jitter = jax.random.split(key, 4)
    low, high = jnp.array([_X_RANGE[0], _Y_RANGE[0]]), jnp.array([_X_RANGE[1], _Y_RANGE[1]])
    scattered = jax.random.uniform(k_uniform, (len(_KINDS), 2), minval=low, maxval=high)
    slots = jnp.array([-0.15, 0.0, 0.15])
    back = jnp.stack([jax.random.permutation(k_back, slots), jnp.full(3, 0.11)], axis=1)
    front = jnp.stack([jax.random.permutation(k_front, slots), jnp.full(3, -0.1)], axis=1)
    rows = jnp.concatenate([back, front]) + jax.random.uniform(k_jitter, (6, 2), minval=-0.015, maxval=0.015)
    return jnp.where(row, rows, scattered)


def _segment_distance(p: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    ab = b - a
    t = jnp.clip(((p - a) * ab).sum() / jnp.maximum((ab * ab).sum(), 1e-12), 0.0, 1.0)
    return jnp.linalg.norm(p - (a + t * ab))


def _valid(task: TaskParams, pos: jax.Array) -> jax.Array:
    """Whether one candidate passes every clearance rule of :mod:`worldsim.envs.layout`."""
    gap = jnp.abs(pos[:, None] - pos[None]).max(axis=-1)
    crowded = jnp.triu(gap < _NEED, k=1).any()
    # push: the corridor from behind the object to its goal is free of other cubes and the bin
    obj, goal = pos[task.obj], pos[len(CUBES) + task.goal_zone]
    u = (goal - obj) / jnp.maximum(jnp.linalg.norm(goal - obj), 1e-9)
    start = obj - 0.09 * u
    blocked = jnp.abs(start).max() > 0.28
    for i, kind in enumerate(_KINDS):
        if kind == "zone":
            continue
        room = 0.1 if kind == "bin" else 0.06
        near = _segment_distance(pos[i], start, goal) < room
        blocked |= near & (i != task.obj)
    return ~crowded & ~((task.family == _PUSH) & blocked)


def _positions(task: TaskParams, key: jax.Array) -> jax.Array:
    """Item centres (6, 2) of one accepted layout."""

    def round_(carry: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
        key, _, _ = carry
        key, sub = jax.random.split(key)
        candidates = jax.vmap(_draw, in_axes=(0, None))(jax.random.split(sub, CANDIDATES), task.row_layout)
        good = jax.vmap(_valid, in_axes=(None, 0))(task, candidates)
        return key, candidates[jnp.argmax(good)], good.any()

    first = round_((key, jnp.zeros((len(_KINDS), 2)), jnp.bool_(False)))
    return jax.lax.while_loop(lambda carry: ~carry[2], round_, first)[1]


def sample_qpos(task: TaskParams, key: jax.Array, qpos0: jax.Array) -> jax.Array:
    """One initial ``qpos`` for ``task``: gripper open above the table, random cube yaws
    (:func:`worldsim.envs.layout.sample_layouts` for one env)."""
    parts = scene()
    k_items, k_ee, k_yaw = jax.random.split(key, 3)
    pos = _positions(task, k_items)
    ee = jax.random.uniform(k_ee, (3,), minval=jnp.array([-0.08, -0.12, 0.12]),
                            maxval=jnp.array([0.08, -0.04, 0.18]))
    qpos = qpos0.at[parts.ee].set(ee)
    qpos = qpos.at[parts.fingers].set(FINGER_OPEN * 0.9)
    yaw = jax.random.uniform(k_yaw, (len(CUBES),), minval=-jnp.pi / 6, maxval=jnp.pi / 6)
    for i, colour in enumerate(CUBES):
        cube = jnp.concatenate([pos[i], jnp.array([0.02]), jnp.cos(yaw[i:i + 1] / 2), jnp.zeros(2),
                                jnp.sin(yaw[i:i + 1] / 2)])
        qpos = qpos.at[parts.cube(colour)].set(cube)
    for i, zone in enumerate(ZONES):
        qpos = qpos.at[parts.zone(zone)].set(pos[len(CUBES) + i])
    return qpos.at[parts.bin].set(pos[-1])


def default_qpos() -> jax.Array:
    """The scene's reference configuration (``model.qpos0``), float32."""
    return jnp.asarray(scene().model.qpos0, jnp.float32)
