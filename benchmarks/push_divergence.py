"""How far physics itself lets an open-loop prediction of a push go: the pushed cube's divergence
16 steps after first contact when the cube starts a fraction of a millimetre (or degree) off.

For each control step (metres of end-effector travel per unit action), ``--episodes`` noisy
expert PushCube episodes (noise 0.3, random actions 20% of steps: the world-model study's
training policy) are run and recorded with their full physics state. From the state at first
contact (the step before the cube has moved 5 mm, as ``eval-wm`` takes it), the recorded actions
are replayed three ways: exactly (the same trajectory, a check), with the cube shifted by a
small distance in a random direction, and with it turned by a small yaw. The median distance
between the perturbed and the recorded cube 16 steps later is the error any model that gets
the state at contact that slightly wrong would make, with perfect dynamics after it.

    python benchmarks/push_divergence.py
"""

from __future__ import annotations

import argparse

import numpy as np
from common import report

import worldsim.envs.families.base as family_base
import worldsim.envs.scene as scene_module
from worldsim.envs.families import make_family
from worldsim.envs.layout import sample_layouts
from worldsim.envs.physics import BatchedPhysics
from worldsim.envs.scene import CONTROL_DT, Scene
from worldsim.envs.tasks import get_task

HORIZON = 16
ONSET_M = 0.005


def yaw_turn(quaternions: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Quaternions (w, x, y, z) turned by ``angles`` about the world's vertical axis."""
    c, s = np.cos(angles / 2), np.sin(angles / 2)
    w, x, y, z = quaternions.T
    return np.stack([c * w - s * z, c * x - s * y, c * y + s * x, c * z + s * w], axis=1)


def divergence(step_m: float, episodes: int, seed: int) -> dict:
    scene_module.ACTION_SCALE = family_base.ACTION_SCALE = step_m  # servo_targets and the expert read these
    scene, spec = Scene.load(), get_task("PushCube-v0")
    family = make_family(spec, scene)
    steps = int(round(spec.max_episode_steps * 0.03 / step_m))
    rng = np.random.default_rng(seed)
    frame_skip = round(CONTROL_DT / scene.model.opt.timestep)
    physics = BatchedPhysics(scene.model, episodes, frame_skip, 2)
    physics.set_state(np.arange(episodes), sample_layouts(scene, spec, rng, episodes))
    states, actions = [physics.state.copy()], []
    for _ in range(steps):
        action = family.expert(physics.qpos.copy())
        action[:, :3] += rng.normal(0, 0.3, (episodes, 3))
        swap = rng.random(episodes) < 0.2
        action[swap] = rng.uniform(-1, 1, (int(swap.sum()), 4))
        actions.append(np.clip(action, -1, 1))
        physics.step(scene.servo_targets(physics.qpos, actions[-1]))
        states.append(physics.state.copy())
    states, actions = np.array(states), np.array(actions)
    cube = scene.cube("red")
    pos = states[:, :, 1 + cube.start:1 + cube.start + 3]
    moved = np.linalg.norm(pos - pos[0], axis=-1) > ONSET_M
    onset = np.argmax(moved, axis=0)
    keep = np.flatnonzero(moved.any(0) & (onset >= 1) & (onset - 1 + HORIZON <= steps))
    start = onset[keep] - 1
    truth = pos[start + HORIZON, keep, :2]

    def replay(perturb: str, size: float) -> np.ndarray:
        branch = BatchedPhysics(scene.model, len(keep), frame_skip, 2)
        branch.state[:] = states[start, keep]
        if perturb == "shift":
            angle = rng.uniform(0, 2 * np.pi, len(keep))
            branch.qpos[:, cube.start:cube.start + 2] += size * np.stack([np.cos(angle), np.sin(angle)], axis=1)
        elif perturb == "yaw":
            turn = np.deg2rad(size) * rng.choice([-1.0, 1.0], len(keep))
            branch.qpos[:, cube.start + 3:cube.stop] = yaw_turn(branch.qpos[:, cube.start + 3:cube.stop], turn)
        for k in range(HORIZON):
            branch.step(scene.servo_targets(branch.qpos, actions[start + k, keep]))
        return 100 * np.linalg.norm(branch.qpos[:, cube.start:cube.start + 2] - truth, axis=1)

    result = {"control_step_m": step_m, "contact_episodes": len(keep),
              "exact_replay_cm": float(np.median(replay("none", 0.0))),
              "cube_travel_cm": float(np.median(100 * np.linalg.norm(truth - pos[start, keep, :2], axis=1)))}
    def summary(error: np.ndarray) -> dict[str, float]:
        return {"median": round(float(np.median(error)), 2), "mean": round(float(error.mean()), 2)}

    for mm in (0.1, 0.33, 1.0, 3.0):
        result[f"shift_{mm}mm_cm"] = summary(replay("shift", mm / 1000))
    for degrees in (0.5, 2.0):
        result[f"yaw_{degrees}deg_cm"] = summary(replay("yaw", degrees))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--control-steps", type=float, nargs="+", default=[0.03, 0.015])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    report("push_divergence", {"task": "PushCube-v0", "horizon": HORIZON, "expert_noise": 0.3, "expert_epsilon": 0.2,
                               "runs": [divergence(step, args.episodes, args.seed) for step in args.control_steps]})


if __name__ == "__main__":
    main()
