"""Physics replays of recorded pushes: what open-loop prediction of a push can reach at best.

:func:`record_pushes` runs noisy scripted-expert PushCube episodes and keeps every full physics
state; :func:`replay` starts from one of those states, optionally with the red cube a little off
(shifted or turned), and feeds the recorded actions again. A world model imagining a recorded
episode is in the same position with perfect dynamics: whatever it gets wrong at the start,
physics itself then amplifies (``push_divergence.py``: positions; ``outcome_ceiling.py``:
success agreement).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import worldsim.envs.families.base as family_base
import worldsim.envs.scene as scene_module
from worldsim.envs.families import TaskFamily, make_family
from worldsim.envs.layout import sample_layouts
from worldsim.envs.physics import BatchedPhysics
from worldsim.envs.scene import CONTROL_DT, Scene
from worldsim.envs.tasks import get_task
from worldsim.world_models.ceiling import run_outcomes, shift_task_cube

PERTURBATIONS = ("none", "shift", "yaw")


@dataclass
class Recording:
    """``N`` recorded episodes: full physics ``states`` ``(T + 1, N, nstate)``, ``actions``
    ``(T, N, 4)``, each episode's ``length`` (steps until its first success or failure, else
    ``T``: where the env would have ended it) and ``success``, and the policy's own randomness:
    the Gaussian ``noise`` ``(T, N, 3)`` added to the expert's moves and where a random action
    replaced the expert's (``random`` ``(T, N)``), so that the same policy can run again."""

    scene: Scene
    family: TaskFamily
    frame_skip: int
    states: np.ndarray
    actions: np.ndarray
    length: np.ndarray
    success: np.ndarray
    noise: np.ndarray
    random: np.ndarray

    def policy(self, qpos: np.ndarray, t: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The recorded policy's action at steps ``t`` of episodes ``rows`` from ``qpos``: the
        expert's move plus the same noise, or the same random action, as when it was recorded."""
        action = self.family.expert(qpos.copy())
        action[:, :3] += self.noise[t, rows]
        swapped = self.random[t, rows]
        action[swapped] = self.actions[t, rows][swapped]
        return np.clip(action, -1, 1)


def yaw_turn(quaternions: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Quaternions (w, x, y, z) turned by ``angles`` about the world's vertical axis."""
    c, s = np.cos(angles / 2), np.sin(angles / 2)
    w, x, y, z = quaternions.T
    return np.stack([c * w - s * z, c * x - s * y, c * y + s * x, c * z + s * w], axis=1)


def record_pushes(step_m: float, episodes: int, noise: float, epsilon: float, rng: np.random.Generator
                  ) -> Recording:
    """Run ``episodes`` PushCube episodes of the scripted expert with Gaussian action noise
    ``noise`` and a random action on an ``epsilon`` share of steps, at ``step_m`` metres of
    end-effector travel per unit action (the episode limit scaled to keep the same reach)."""
    scene_module.ACTION_SCALE = family_base.ACTION_SCALE = step_m  # servo_targets and the expert read these
    scene, spec = Scene.load(), get_task("PushCube-v0")
    family = make_family(spec, scene)
    steps = int(round(spec.max_episode_steps * 0.03 / step_m))
    frame_skip = round(CONTROL_DT / scene.model.opt.timestep)
    physics = BatchedPhysics(scene.model, episodes, frame_skip, 2)
    physics.set_state(np.arange(episodes), sample_layouts(scene, spec, rng, episodes))
    states, actions, noises, randoms = [physics.state.copy()], [], [], []
    ended, success, running = np.full(episodes, steps), np.zeros(episodes, bool), np.ones(episodes, bool)
    for t in range(steps):
        action = family.expert(physics.qpos.copy())
        noises.append(rng.normal(0, noise, (episodes, 3)))
        action[:, :3] += noises[-1]
        randoms.append(rng.random(episodes) < epsilon)
        action[randoms[-1]] = rng.uniform(-1, 1, (int(randoms[-1].sum()), 4))
        actions.append(np.clip(action, -1, 1))
        physics.step(scene.servo_targets(physics.qpos, actions[-1]))
        states.append(physics.state.copy())
        won = np.asarray(family.evaluate(physics.qpos).success, bool)
        ends = running & (won | np.asarray(scene.failed(physics.qpos, physics.qvel), bool))
        success |= ends & won
        ended[ends] = t + 1
        running &= ~ends
    physics.close()
    return Recording(scene, family, frame_skip, np.array(states), np.array(actions), ended, success,
                     np.array(noises), np.array(randoms))


def replay(recording: Recording, rows: np.ndarray, start: np.ndarray, steps: np.ndarray | int,
           perturb: str = "none", size: float = 0.0, rng: np.random.Generator | None = None,
           closed_loop: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Replay episodes ``rows`` from their steps ``start`` for ``steps`` recorded actions (per row
    or one for all), with the red cube first shifted by ``size`` metres in a random direction
    (``perturb="shift"``) or turned by ``size`` degrees either way (``"yaw"``). With
    ``closed_loop`` the recorded policy acts again (:meth:`Recording.policy`: it sees where the
    cube really is) instead of its recorded actions being replayed. Returns the final
    ``qpos`` ``(len(rows), nq)`` and whether each replay succeeded before it failed or ran out of
    its steps (the env's termination)."""
    if perturb not in PERTURBATIONS:
        raise ValueError(f"perturb={perturb!r}; known: {PERTURBATIONS}")
    scene, family = recording.scene, recording.family
    steps = np.broadcast_to(np.asarray(steps), rows.shape)
    cube = scene.cube("red")
    branch = BatchedPhysics(scene.model, len(rows), recording.frame_skip, 2)
    branch.state[:] = recording.states[start, rows]
    if perturb != "none":
        assert rng is not None, "a perturbation draws its direction"
    if perturb == "shift":  # PushCube's task object is the red cube
        shift_task_cube(scene, family, branch.qpos, size, rng)
    elif perturb == "yaw":
        turn = np.deg2rad(size) * rng.choice([-1.0, 1.0], len(rows))
        branch.qpos[:, cube.start + 3:cube.stop] = yaw_turn(branch.qpos[:, cube.start + 3:cube.stop], turn)
    last = len(recording.actions) - 1

    def action_at(k: int) -> np.ndarray:
        t = np.minimum(start + k, last)
        return recording.policy(branch.qpos, t, rows) if closed_loop else recording.actions[t, rows]

    success = run_outcomes(scene, family, branch, action_at, steps)
    qpos = branch.qpos.copy()
    branch.close()
    return qpos, success
