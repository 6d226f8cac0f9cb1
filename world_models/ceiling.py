"""Physics' own agreement with recorded outcomes: the line a world model's agreement is read against.

``eval-wm`` replays recorded episodes open loop and asks whether the imagined episode ends as
the real one did. The recorded actions came from a closed-loop policy that reacted to where the
objects really went; replayed open loop, they no longer react, and a push amplifies any error of
the start. So even perfect dynamics disagree with the record when the start is slightly off.
:func:`physics_agreement` measures how often: it replays the held-out episodes in physics itself,
from their recorded starts (an episode starts at rest, so its full physics state is rebuilt from
``state``, to float32 rounding) with the recorded actions, the cube nearest the task's object
first shifted a fraction of a millimetre in a random direction. On PushCube a shift of 0.1 mm (a
hundredth of a pixel at 64x64) already ends a quarter of a balanced set's episodes the other way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from worldsim.envs.families import TaskFamily, make_family
from worldsim.envs.observations import qpos_from_state
from worldsim.envs.physics import BatchedPhysics, default_threads
from worldsim.envs.scene import CONTROL_DT, CUBES, Scene
from worldsim.envs.tasks import get_task
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.metrics import agreement

SHIFTS_MM = (0.1, 0.33, 1.0)


def run_outcomes(scene: Scene, family: TaskFamily, physics: BatchedPhysics, action_at: Callable[[int], np.ndarray],
                 steps: np.ndarray) -> np.ndarray:
    """Step ``physics`` (``N`` envs of ``family``'s task) ``steps.max()`` control steps, the
    ``k``-th under ``action_at(k)`` ``(N, 4)``; returns whether each env succeeded within its
    own ``steps`` before the episode ended by failure (a cube off the table), as the env ends it."""
    done, success = np.zeros(physics.num_envs, bool), np.zeros(physics.num_envs, bool)
    for k in range(int(steps.max(initial=0))):
        physics.step(scene.servo_targets(physics.qpos, action_at(k)))
        running = ~done & (k < steps)
        won = np.asarray(family.evaluate(physics.qpos).success, bool)
        success |= running & won
        done |= running & (won | np.asarray(scene.failed(physics.qpos, physics.qvel), bool))
    return success


def shift_task_cube(scene: Scene, family: TaskFamily, qpos: np.ndarray, distance_m: float,
                    rng: np.random.Generator) -> None:
    """Move, in place, the cube nearest each row's task object ``distance_m`` in a random
    horizontal direction."""
    target = family.object_and_goal(qpos)[0][:, :2]
    cubes = np.stack([qpos[:, scene.cube(c).start:scene.cube(c).start + 2] for c in CUBES], axis=1)
    nearest = np.linalg.norm(cubes - target[:, None], axis=-1).argmin(axis=1)
    angle = rng.uniform(0, 2 * np.pi, len(qpos))
    offset = distance_m * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    for i, c in enumerate(CUBES):
        rows = nearest == i
        start = scene.cube(c).start
        qpos[rows, start:start + 2] += offset[rows]


def physics_agreement(bank: EpisodeBank, shifts_mm: tuple[float, ...] = SHIFTS_MM, seed: int = 0
                      ) -> dict[str, dict]:
    """:func:`~worldsim.world_models.metrics.agreement` of physics' own full open-loop replays
    of ``bank``'s episodes with their recorded outcomes: ``exact`` (from the rebuilt start) and
    ``shift_<mm>mm`` for each of ``shifts_mm``. ``ValueError`` when the bank has no ``state``."""
    if bank.state is None:
        raise ValueError(f"{bank.path} holds no 'state' observations: the episodes' starts cannot be rebuilt")
    scene = Scene.load()
    frame_skip = round(CONTROL_DT / scene.model.opt.timestep)
    rng = np.random.default_rng(seed)
    real = np.array([bank.episode(j, "success").any() for j in range(len(bank))])
    tasks = np.array([info.task for info in bank.infos])
    outcomes = {name: np.zeros(len(bank), bool) for name in ("exact", *(f"shift_{mm:g}mm" for mm in shifts_mm))}
    for task in np.unique(tasks):
        rows = np.flatnonzero(tasks == task)
        family = make_family(get_task(str(task)), scene)
        start = qpos_from_state(scene, bank.state[bank.obs_start[rows]])
        lengths = bank.lengths[rows]
        actions = np.zeros((int(lengths.max()), len(rows), 4))
        for i, j in enumerate(rows):
            actions[:lengths[i], i] = bank.episode(int(j), "actions")
        physics = BatchedPhysics(scene.model, len(rows), frame_skip, default_threads(len(rows)))
        for name, mm in (("exact", 0.0), *((f"shift_{mm:g}mm", mm) for mm in shifts_mm)):
            qpos = start.copy()
            if mm:
                shift_task_cube(scene, family, qpos, mm / 1000, rng)
            physics.set_state(np.arange(len(rows)), qpos)  # at rest, time 0: the state a reset leaves
            outcomes[name][rows] = run_outcomes(scene, family, physics, actions.__getitem__, lengths)
        physics.close()
    return {name: agreement(replayed, real) for name, replayed in outcomes.items()}
