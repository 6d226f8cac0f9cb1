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

    python benchmarks/studies/push_divergence.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from physics_replay import record_pushes, replay  # beside this script

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

HORIZON = 16
ONSET_M = 0.005


def divergence(step_m: float, episodes: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    recording = record_pushes(step_m, episodes, 0.3, 0.2, rng)
    states, steps = recording.states, len(recording.actions)
    cube = recording.scene.cube("red")
    pos = states[:, :, 1 + cube.start:1 + cube.start + 3]
    moved = np.linalg.norm(pos - pos[0], axis=-1) > ONSET_M
    onset = np.argmax(moved, axis=0)
    keep = np.flatnonzero(moved.any(0) & (onset >= 1) & (onset - 1 + HORIZON <= steps))
    start = onset[keep] - 1
    truth = pos[start + HORIZON, keep, :2]

    def error(perturb: str, size: float) -> np.ndarray:
        qpos = replay(recording, keep, start, HORIZON, perturb, size, rng)[0]
        return 100 * np.linalg.norm(qpos[:, cube.start:cube.start + 2] - truth, axis=1)

    result = {"control_step_m": step_m, "contact_episodes": len(keep),
              "exact_replay_cm": float(np.median(error("none", 0.0))),
              "cube_travel_cm": float(np.median(100 * np.linalg.norm(truth - pos[start, keep, :2], axis=1)))}
    def summary(error: np.ndarray) -> dict[str, float]:
        return {"median": round(float(np.median(error)), 2), "mean": round(float(error.mean()), 2)}

    for mm in (0.1, 0.33, 1.0, 3.0):
        result[f"shift_{mm}mm_cm"] = summary(error("shift", mm / 1000))
    for degrees in (0.5, 2.0):
        result[f"yaw_{degrees}deg_cm"] = summary(error("yaw", degrees))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--control-steps", type=float, nargs="+", default=[0.03, 0.015])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    report("push_divergence", {"task": "PushCube-v0", "horizon": HORIZON, "expert_noise": 0.3, "expert_epsilon": 0.2,
                               "runs": [divergence(step, args.episodes, args.seed) for step in args.control_steps]},
           args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
