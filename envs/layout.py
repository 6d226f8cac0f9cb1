"""Initial-state distributions: batched sampling of scene layouts with clearances.

A layout places the three cubes (random yaw), the two goal zones, the bin and the gripper.
Rejection sampling runs on the whole batch at once: rows that break a clearance rule are
redrawn until every row passes. Rules: objects never overlap, no cube starts on a zone or in
the bin, and for ``push`` the corridor from the object to its goal (and the room behind the
object for the gripper) is free of other cubes and of the bin.
"""

from __future__ import annotations

import numpy as np

from worldsim.envs.scene import CUBES, FINGER_OPEN, ZONES, Scene
from worldsim.envs.tasks import TaskSpec

_X_RANGE = (-0.22, 0.22)
_Y_RANGE = (-0.17, 0.17)
_MAX_ROUNDS = 1000

# Minimum Chebyshev (max-norm) distance between item centres, by kind of pair (sorted names).
_CLEARANCE = {
    ("cube", "cube"): 0.07,
    ("cube", "zone"): 0.085,
    ("zone", "zone"): 0.11,
    ("bin", "cube"): 0.105,
    ("bin", "zone"): 0.12,
}


def _items() -> list[tuple[str, str]]:
    return [("cube", c) for c in CUBES] + [("zone", z) for z in ZONES] + [("bin", "bin")]


def _segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance from points p to segments [a, b], all shaped (N, 2)."""
    ab = b - a
    t = np.clip(((p - a) * ab).sum(1) / np.maximum((ab * ab).sum(1), 1e-12), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[:, None] * ab), axis=1)


def _draw(rng: np.random.Generator, n: int, layout: str) -> dict[str, np.ndarray]:
    """Item centres (xy) for n envs, before clearance checks."""
    names = [name for _, name in _items()]
    if layout == "scattered":
        xy = rng.uniform((_X_RANGE[0], _Y_RANGE[0]), (_X_RANGE[1], _Y_RANGE[1]), (len(names), n, 2))
        return dict(zip(names, xy))
    # row: cubes in a back row, zones and bin in a front row; order and jitter random
    slots = np.array([-0.15, 0.0, 0.15])
    out: dict[str, np.ndarray] = {}
    back = rng.permuted(np.tile(slots, (n, 1)), axis=1)
    front = rng.permuted(np.tile(slots, (n, 1)), axis=1)
    for k, cube in enumerate(CUBES):
        out[cube] = np.stack([back[:, k], np.full(n, 0.11)], 1) + rng.uniform(-0.015, 0.015, (n, 2))
    for k, name in enumerate([*ZONES, "bin"]):
        out[name] = np.stack([front[:, k], np.full(n, -0.1)], 1) + rng.uniform(-0.015, 0.015, (n, 2))
    return out


def _violations(pos: dict[str, np.ndarray], spec: TaskSpec) -> np.ndarray:
    items = _items()
    bad = np.zeros(len(next(iter(pos.values()))), dtype=bool)
    for i, (kind_a, a) in enumerate(items):
        for kind_b, b in items[i + 1:]:
            need = _CLEARANCE[tuple(sorted((kind_a, kind_b)))]  # type: ignore[index]
            bad |= np.abs(pos[a] - pos[b]).max(axis=1) < need
    if spec.family == "push":
        obj, goal = pos[str(spec.obj)], pos[str(spec.goal)]
        u = (goal - obj) / np.maximum(np.linalg.norm(goal - obj, axis=1, keepdims=True), 1e-9)
        start = obj - 0.09 * u  # the gripper needs room behind the object
        for _, name in items:
            if name in (spec.obj, spec.goal) or name in ZONES:
                continue
            room = 0.1 if name == "bin" else 0.06
            bad |= _segment_distance(pos[name], start, goal) < room
        bad |= np.abs(start).max(axis=1) > 0.28
    return bad


def sample_layouts(scene: Scene, spec: TaskSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """Draw ``n`` initial qpos rows for ``spec`` (shape ``(n, nq)``), gripper open above the table."""
    pos = _draw(rng, n, spec.layout)
    for _ in range(_MAX_ROUNDS):
        bad = _violations(pos, spec)
        if not bad.any():
            break
        redraw = _draw(rng, int(bad.sum()), spec.layout)
        for name in pos:
            pos[name][bad] = redraw[name]
    else:  # pragma: no cover - the clearances above leave ample free space
        raise RuntimeError(f"could not place objects for {spec.name} after {_MAX_ROUNDS} rounds")

    qpos = np.tile(scene.model.qpos0, (n, 1))
    qpos[:, scene.ee] = np.column_stack(
        [rng.uniform(-0.08, 0.08, n), rng.uniform(-0.12, -0.04, n), rng.uniform(0.12, 0.18, n)]
    )
    qpos[:, scene.fingers] = FINGER_OPEN * 0.9
    for cube in CUBES:
        yaw = rng.uniform(-np.pi / 6, np.pi / 6, n)
        sl = scene.cube(cube)
        qpos[:, sl] = np.column_stack(
            [pos[cube], np.full(n, 0.02), np.cos(yaw / 2), np.zeros((n, 2)), np.sin(yaw / 2)]
        )
    for zone in ZONES:
        qpos[:, scene.zone(zone)] = pos[zone]
    qpos[:, scene.bin] = pos["bin"]
    return qpos
