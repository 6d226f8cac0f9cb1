"""Initial-state distributions: batched sampling of scene layouts with clearances.

A layout places the three cubes (random yaw), the two goal zones, the bin and the gripper.
Rejection sampling, vectorised: candidate layouts are drawn in bulk and those that break a
clearance rule are discarded until enough pass. Rules: objects never overlap, no cube starts on a zone or in
the bin, and for ``push`` the corridor from the object to its goal (and the room behind the
object for the gripper) is free of other cubes and of the bin.

The sampler runs where its random stream lives: a numpy ``Generator`` gives float64 numpy
layouts on the host (the MuJoCo backend), a ``torch.Generator`` float32 tensors on the
generator's device (the MuJoCo Warp backend, on the GPU); :class:`Draws` is the one place
that tells them apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from worldsim.envs.scene import CUBES, FINGER_OPEN, ZONES, Scene
from worldsim.envs.tasks import TaskSpec
from worldsim.envs.xp import Array, columns, constant, device, namespace

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


class Draws:
    """Uniform draws and row permutations from a numpy ``Generator`` (float64 numpy arrays) or
    a ``torch.Generator`` (float32 tensors on its device)."""

    def __init__(self, rng: Any) -> None:
        self.rng = rng
        self.numpy = isinstance(rng, np.random.Generator)

    def uniform(self, low: Any, high: Any, shape: tuple[int, ...]) -> Any:
        """Uniform in ``[low, high)`` (numbers or arrays broadcast against ``shape``)."""
        if self.numpy:
            return self.rng.uniform(low, high, shape)
        import torch

        unit = torch.rand(shape, generator=self.rng, device=self.rng.device)
        low, high = (torch.as_tensor(v, dtype=unit.dtype, device=unit.device) for v in (low, high))
        return low + (high - low) * unit

    def permuted_rows(self, values: Any, n: int) -> Any:
        """``n`` rows, each a random permutation of ``values`` (a 1-d numpy array)."""
        if self.numpy:
            return self.rng.permuted(np.tile(values, (n, 1)), axis=1)
        import torch

        keys = torch.rand((n, len(values)), generator=self.rng, device=self.rng.device)
        return torch.as_tensor(values, dtype=keys.dtype, device=keys.device)[keys.argsort(dim=1)]

    @property
    def like(self) -> Any:
        """An empty array of the draws' library, dtype and device (for :func:`constant`)."""
        if self.numpy:
            return np.empty(0)
        import torch

        return torch.empty(0, device=self.rng.device)


def _segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance from points p to segments [a, b], all shaped (N, 2)."""
    xp = namespace(p)
    ab = b - a
    t = xp.clip(xp.sum((p - a) * ab, axis=1) / xp.clip(xp.sum(ab * ab, axis=1), 1e-12, None), 0.0, 1.0)
    return xp.linalg.vector_norm(p - (a + t[:, None] * ab), axis=1)


def _draw(draws: Draws, n: int, layout: str) -> dict[str, np.ndarray]:
    """Item centres (xy) for n envs, before clearance checks."""
    names = [name for _, name in _items()]
    if layout == "scattered":
        xy = draws.uniform((_X_RANGE[0], _Y_RANGE[0]), (_X_RANGE[1], _Y_RANGE[1]), (len(names), n, 2))
        return {name: xy[k] for k, name in enumerate(names)}
    # row: cubes in a back row, zones and bin in a front row; order and jitter random
    slots = np.array([-0.15, 0.0, 0.15])
    out: dict[str, np.ndarray] = {}
    back = draws.permuted_rows(slots, n)
    front = draws.permuted_rows(slots, n)
    for k, cube in enumerate(CUBES):
        out[cube] = columns(back[:, k], 0.11, like=back) + draws.uniform(-0.015, 0.015, (n, 2))
    for k, name in enumerate([*ZONES, "bin"]):
        out[name] = columns(front[:, k], -0.1, like=front) + draws.uniform(-0.015, 0.015, (n, 2))
    return out


def _violations(pos: dict[str, np.ndarray], spec: TaskSpec) -> np.ndarray:
    items = _items()
    first = next(iter(pos.values()))
    xp = namespace(first)
    bad = xp.zeros(first.shape[0], dtype=xp.bool, device=device(first))
    for i, (kind_a, a) in enumerate(items):
        for kind_b, b in items[i + 1:]:
            need = _CLEARANCE[tuple(sorted((kind_a, kind_b)))]  # type: ignore[index]
            bad |= xp.max(xp.abs(pos[a] - pos[b]), axis=1) < need
    if spec.family == "push":
        obj, goal = pos[str(spec.obj)], pos[str(spec.goal)]
        u = (goal - obj) / xp.clip(xp.linalg.vector_norm(goal - obj, axis=1, keepdims=True), 1e-9, None)
        start = obj - 0.09 * u  # the gripper needs room behind the object
        for _, name in items:
            if name in (spec.obj, spec.goal) or name in ZONES:
                continue
            room = 0.1 if name == "bin" else 0.06
            bad |= _segment_distance(pos[name], start, goal) < room
        bad |= xp.max(xp.abs(start), axis=1) > 0.28
    return bad


def _accepted_positions(spec: TaskSpec, draws: Draws, n: int) -> dict[str, np.ndarray]:
    """Item centres for n envs that pass every clearance rule.

    Few candidates pass (about 2% for push), so each round draws enough candidates to finish
    in about one round at the acceptance rate seen so far; rows are accepted independently,
    so the distribution is that of plain rejection sampling.
    """
    kept: list[dict[str, np.ndarray]] = []
    need, rate = n, 0.05
    for _ in range(_MAX_ROUNDS):
        if need == 0:
            break
        count = int(min(max(2 * need / rate, 64), 200_000))
        candidates = _draw(draws, count, spec.layout)
        good = ~_violations(candidates, spec)
        xp = namespace(good)
        rate = max(0.5 * rate + 0.5 * float(xp.mean(xp.astype(good, candidates["bin"].dtype))), 1e-3)
        take = xp.nonzero(good)[0][:need]
        kept.append({name: xy[take, ...] for name, xy in candidates.items()})
        need -= int(take.shape[0])
    if need:  # pragma: no cover - the clearances above leave ample free space
        raise RuntimeError(f"could not place objects for {spec.name} after {_MAX_ROUNDS} rounds")
    return {name: xp.concat([k[name] for k in kept]) for name in kept[0]}


def sample_layouts(scene: Scene, spec: TaskSpec, rng: Any, n: int) -> Array:
    """Draw ``n`` initial qpos rows for ``spec`` (shape ``(n, nq)``), gripper open above the
    table: numpy rows from a numpy ``Generator``, tensors on its device from a ``torch.Generator``."""
    draws = Draws(rng)
    pos = _accepted_positions(spec, draws, n)
    like = draws.like
    xp = namespace(like)
    qpos = xp.tile(constant(scene.model.qpos0, like), (n, 1))
    qpos[:, scene.ee] = columns(draws.uniform(-0.08, 0.08, (n,)), draws.uniform(-0.12, -0.04, (n,)),
                                draws.uniform(0.12, 0.18, (n,)), like=like)
    qpos[:, scene.fingers] = FINGER_OPEN * 0.9
    for cube in CUBES:
        yaw = draws.uniform(-np.pi / 6, np.pi / 6, (n,))
        qpos[:, scene.cube(cube)] = columns(pos[cube], 0.02, xp.cos(yaw / 2), 0.0, 0.0, xp.sin(yaw / 2),
                                            like=qpos)
    for zone in ZONES:
        qpos[:, scene.zone(zone)] = pos[zone]
    qpos[:, scene.bin] = pos["bin"]
    return qpos
