"""Physics replays of recorded pushes: what open-loop prediction of a push can reach at best.

:func:`record_pushes` runs noisy scripted-expert PushCube episodes and keeps every full physics
state; :func:`replay` starts from one of those states, optionally with the red cube a little off
(shifted or turned), and feeds the recorded actions again. A world model imagining a recorded
episode is in the same position with perfect dynamics: whatever it gets wrong at the start,
physics itself then amplifies. :func:`ceiling` is how often such replays, their start perturbed,
still end as the record did, per window of the episode; :func:`majority_ceiling` the same for the
majority of several replays, the best any predictor knowing the start only to within a shift can do.

A helper of the studies ``push_divergence.py`` and ``outcome_ceiling.py`` beside it (a script's
folder is on its import path).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldsim.envs.families import TaskFamily, make_family
from worldsim.envs.layout import sample_layouts
from worldsim.envs.physics import BatchedPhysics
from worldsim.envs.scene import ACTION_SCALE, CONTROL_DT, Scene
from worldsim.envs.tasks import get_task
from worldsim.evaluation.evaluate import wilson_interval
from worldsim.world_models.ceiling import run_outcomes, shift_task_cube

PERTURB_KINDS = ("none", "shift", "yaw")
# the windows of an episode replayed (eval-wm's), and the perturbations of its start: (name, kind, size)
WINDOWS = ("full", "last_8", "last_16", "last_40")
PERTURBATIONS = (("exact", "none", 0.0), ("shift_0.01mm", "shift", 0.01e-3), ("shift_0.1mm", "shift", 0.1e-3),
                 ("shift_0.33mm", "shift", 0.33e-3), ("shift_1mm", "shift", 1e-3),
                 ("shift_3mm", "shift", 3e-3), ("yaw_0.5deg", "yaw", 0.5), ("yaw_2deg", "yaw", 2.0))


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
    end-effector travel per unit action (the episode limit scaled to keep the same reach). The
    recording's scene carries that action scale (:attr:`~worldsim.envs.scene.Scene.action_scale`),
    so the expert and the replays of the recording move by it too."""
    scene, spec = Scene.load(action_scale=step_m), get_task("PushCube-v0")
    family = make_family(spec, scene)
    steps = int(round(spec.max_episode_steps * ACTION_SCALE / step_m))
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
    if perturb not in PERTURB_KINDS:
        raise ValueError(f"perturb={perturb!r}; known: {PERTURB_KINDS}")
    scene, family = recording.scene, recording.family
    steps = np.broadcast_to(np.asarray(steps), rows.shape)
    cube = scene.cube("red")
    branch = BatchedPhysics(scene.model, len(rows), recording.frame_skip, 2)
    branch.state[:] = recording.states[start, rows]
    if perturb != "none" and rng is None:
        raise ValueError(f"perturb={perturb!r} draws its direction: give an rng")
    if perturb == "shift" and rng is not None:  # PushCube's task object is the red cube
        shift_task_cube(scene, family, branch.qpos, size, rng)
    elif perturb == "yaw" and rng is not None:
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


def window_start(length: np.ndarray, window: str) -> np.ndarray:
    """The step each episode of ``length`` steps starts ``window`` at: 0 for ``full``, else the last ``k`` steps."""
    return np.zeros_like(length) if window == "full" else np.maximum(length - int(window.split("_")[1]), 0)


def ceiling(recording: Recording, rows: np.ndarray, rng: np.random.Generator, closed_loop: bool = False
            ) -> dict[str, dict[str, float | list[float]]]:
    """Agreement of perturbed replays with the recorded outcome, per window and perturbation."""
    length, real = recording.length[rows], recording.success[rows]
    out: dict[str, dict[str, float | list[float]]] = {}
    for window in WINDOWS:
        start = window_start(length, window)
        for name, perturb, size in PERTURBATIONS:
            replayed = replay(recording, rows, start, length - start, perturb, size, rng, closed_loop)[1]
            agree = int((replayed == real).sum())
            low, high = wilson_interval(agree, len(rows))
            out.setdefault(window, {})[name] = round(agree / len(rows), 4)
            out[window][f"{name}_ci"] = [round(low, 4), round(high, 4)]
            out[window][f"{name}_real_successes_kept"] = round(float(replayed[real].mean()), 4)
            out[window][f"{name}_real_failures_flipped"] = round(float(replayed[~real].mean()), 4)
    return out


def majority_ceiling(recording: Recording, rows: np.ndarray, rng: np.random.Generator, votes: int
                     ) -> dict[str, dict[str, object]]:
    """Per window and shift: the mean agreement of ``votes`` replays, each from its own random
    shift, and the agreement of their majority (the best a predictor uncertain by that shift can do)."""
    length, real = recording.length[rows], recording.success[rows]
    out: dict[str, dict[str, object]] = {}
    for window in WINDOWS:
        start = window_start(length, window)
        for name, perturb, size in PERTURBATIONS:
            if perturb != "shift":
                continue
            outcomes = np.stack([replay(recording, rows, start, length - start, perturb, size, rng)[1]
                                 for _ in range(votes)])
            agree = int(((outcomes.mean(0) > 0.5) == real).sum())
            out.setdefault(window, {})[name] = {
                "single_replay": round(float((outcomes == real).mean()), 4),
                "majority": round(agree / len(rows), 4),
                "majority_ci": [round(x, 4) for x in wilson_interval(agree, len(rows))]}
    return out
