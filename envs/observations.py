"""Observation spaces and the low-dimensional observation vectors, batched.

``obs_mode`` picks what an observation holds:

``"state"``
    the flat float32 ``state`` vector alone (a ``Box``), as in Gymnasium's MuJoCo envs.
``"pixels"``
    a ``Dict`` with ``image`` (uint8 H x W x 3, front camera), optionally ``wrist_image``,
    ``proprio`` and ``instruction``.
``"pixels+state"``
    the ``pixels`` dict plus ``state`` (for privileged critics and world models).

``state`` layout (56 floats; :data:`STATE_LAYOUT` names the slices):
TCP position (3), TCP velocity (3), finger openings (2), task object position (3), task goal
position (3), goal - object (3), object - TCP (3), then for the red, green and yellow cube in
turn position (3), quaternion (4) and linear velocity (3), the blue and orange zone centres
(2 each) and the bin centre (2). "Object" and "goal" are the task's (for reaching a zone the
object is the zone and the goal the point above it), so one layout serves every task.

``proprio``: TCP position (3) and gripper opening, the gap between the fingers (1).
"""

from __future__ import annotations

import string

import numpy as np
from gymnasium import spaces

from worldsim.envs.families import TaskFamily
from worldsim.envs.scene import BIN_FLOOR_TOP, CUBE_HALF, CUBES, ZONES, Scene
from worldsim.envs.tasks import TaskSpec
from worldsim.envs.xp import Array, columns, namespace

OBS_MODES: tuple[str, ...] = ("state", "pixels", "pixels+state")
INSTRUCTION_CHARSET = string.ascii_letters + string.digits + " ,.'-"
INSTRUCTION_MAX_LENGTH = 128

STATE_LAYOUT: dict[str, slice] = {}
_offset = 0
for _name, _size in [
    ("tcp_pos", 3), ("tcp_vel", 3), ("fingers", 2), ("object_pos", 3), ("goal_pos", 3),
    ("goal_minus_object", 3), ("object_minus_tcp", 3),
    *[(f"{c}_cube_{part}", n) for c in CUBES for part, n in (("pos", 3), ("quat", 4), ("vel", 3))],
    *[(f"{z}_zone_xy", 2) for z in ZONES], ("bin_xy", 2),
]:
    STATE_LAYOUT[_name] = slice(_offset, _offset + _size)
    _offset += _size
STATE_DIM = _offset

# The scene's objects whose image positions the world model's success head learns to find,
# with the height of the plane each rests on (cube centres, zone and bin floors).
ENTITIES: tuple[str, ...] = (*(f"{c}_cube" for c in CUBES), *(f"{z}_zone" for z in ZONES), "bin")
ENTITY_HEIGHTS = np.array([CUBE_HALF] * len(CUBES) + [0.0] * len(ZONES) + [BIN_FLOOR_TOP])


def entity_positions(state: np.ndarray) -> np.ndarray:
    """World positions ``(N, len(ENTITIES), 3)`` of the :data:`ENTITIES` in ``state`` rows
    ``(N, STATE_DIM)``: cube centres as they are, zones and the bin on their floor planes."""
    state = np.asarray(state)
    cubes = [state[:, STATE_LAYOUT[f"{c}_cube_pos"]] for c in CUBES]
    flat = [np.column_stack([state[:, STATE_LAYOUT[key]], np.full(len(state), z)])
            for key, z in zip([f"{z}_zone_xy" for z in ZONES] + ["bin_xy"], ENTITY_HEIGHTS[len(CUBES):], strict=True)]
    return np.stack(cubes + flat, axis=1).astype(np.float64)


def task_entities(spec: TaskSpec) -> tuple[int, int]:
    """Indices into :data:`ENTITIES` of a task's object and of its goal, as the ``state``'s
    ``object_pos`` and ``goal_pos`` define them (the family's ``object_and_goal``, less its fixed
    offsets): the cube acted on (the zone, when reaching a zone), and the zone, bin or cube it
    must reach (the object itself when reaching: the goal hovers above it)."""
    obj = f"{spec.obj}_cube" if spec.obj is not None else f"{spec.goal}_zone"
    if spec.family == "reach":
        goal = obj
    elif spec.goal == "bin":
        goal = "bin"
    else:
        goal = f"{spec.goal}_zone" if spec.goal in ZONES else f"{spec.goal}_cube"
    return ENTITIES.index(obj), ENTITIES.index(goal)


PROPRIO_DIM = 4


def state_vector(scene: Scene, family: TaskFamily, qpos: Array, qvel: Array) -> Array:
    """The ``state`` observation for a batch, shape (N, STATE_DIM), float32 (numpy, torch or JAX,
    as ``qpos``)."""
    tcp = scene.tcp(qpos)
    obj, goal = family.object_and_goal(qpos)
    parts = [tcp, qvel[:, scene.ee_dof], qpos[:, scene.fingers], obj, goal, goal - obj, obj - tcp]
    for cube in CUBES:
        parts += [qpos[:, scene.cube(cube)], qvel[:, scene.cube_dof(cube)][:, :3]]
    parts += [qpos[:, scene.zone(z)] for z in ZONES] + [qpos[:, scene.bin]]
    xp = namespace(qpos)
    return xp.astype(xp.concat(parts, axis=1), xp.float32)


def proprio_vector(scene: Scene, qpos: Array) -> Array:
    """The ``proprio`` observation, shape (N, 4), float32 (numpy, torch or JAX, as ``qpos``)."""
    xp = namespace(qpos)
    return xp.astype(columns(scene.tcp(qpos), scene.gripper_width(qpos), like=qpos), xp.float32)


def observation_space(obs_mode: str, image_shape: tuple[int, int], wrist_camera: bool) -> spaces.Space:
    """The single-env observation space for ``obs_mode``."""
    state = spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)
    if obs_mode == "state":
        return state
    image = spaces.Box(0, 255, (*image_shape, 3), np.uint8)
    keys: dict[str, spaces.Space] = {"image": image}
    if wrist_camera:
        keys["wrist_image"] = image
    keys["proprio"] = spaces.Box(-np.inf, np.inf, (PROPRIO_DIM,), np.float32)
    if obs_mode == "pixels+state":
        keys["state"] = state
    keys["instruction"] = spaces.Text(INSTRUCTION_MAX_LENGTH, charset=INSTRUCTION_CHARSET)
    return spaces.Dict(keys)


def qpos_from_state(scene: Scene, state: np.ndarray) -> np.ndarray:
    """Rebuild the scene's ``qpos`` (N, nq) from ``state`` observations (N, STATE_DIM): the
    state holds every joint position, so state-based scripted policies need nothing else."""
    state = np.asarray(state, dtype=np.float64)
    if state.ndim != 2 or state.shape[1] != STATE_DIM:
        raise ValueError(f"state must have shape (N, {STATE_DIM}); got {state.shape}")
    qpos = np.zeros((len(state), scene.model.nq))
    qpos[:, scene.ee] = state[:, STATE_LAYOUT["tcp_pos"]]
    qpos[:, scene.fingers] = state[:, STATE_LAYOUT["fingers"]]
    for cube in CUBES:
        start = scene.cube(cube).start
        qpos[:, start:start + 3] = state[:, STATE_LAYOUT[f"{cube}_cube_pos"]]
        qpos[:, start + 3:start + 7] = state[:, STATE_LAYOUT[f"{cube}_cube_quat"]]
    for zone in ZONES:
        qpos[:, scene.zone(zone)] = state[:, STATE_LAYOUT[f"{zone}_zone_xy"]]
    qpos[:, scene.bin] = state[:, STATE_LAYOUT["bin_xy"]]
    return qpos


def qvel_from_state(scene: Scene, state: np.ndarray) -> np.ndarray:
    """The scene's ``qvel`` (N, nv) as far as ``state`` observations (N, STATE_DIM) hold it: the
    end effector's and the cubes' linear velocities. The fingers' and the cubes' angular
    velocities are not observed and come back as 0, so a state rebuilt mid-push is off there."""
    state = np.asarray(state, dtype=np.float64)
    if state.ndim != 2 or state.shape[1] != STATE_DIM:
        raise ValueError(f"state must have shape (N, {STATE_DIM}); got {state.shape}")
    qvel = np.zeros((len(state), scene.model.nv))
    qvel[:, scene.ee_dof] = state[:, STATE_LAYOUT["tcp_vel"]]
    for cube in CUBES:
        start = scene.cube_dof(cube).start
        qvel[:, start:start + 3] = state[:, STATE_LAYOUT[f"{cube}_cube_vel"]]
    return qvel
