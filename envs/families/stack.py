"""Stack: put one cube on top of another and let go; the bottom cube stays on the table."""

from __future__ import annotations

import numpy as np

from worldsim.envs.families.base import Evaluation, TaskFamily, closeness
from worldsim.envs.families.pick_place import carry_expert
from worldsim.envs.scene import CUBE_HALF
from worldsim.envs.xp import constant, namespace

ON_TOP = np.array([0.0, 0.0, 2 * CUBE_HALF])


class Stack(TaskFamily):
    def object_and_goal(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        top = self.scene.cube_pos(qpos, str(self.spec.obj))
        return top, self.scene.cube_pos(qpos, str(self.spec.goal)) + constant(ON_TOP, qpos)

    def evaluate(self, qpos: np.ndarray) -> Evaluation:
        xp = namespace(qpos)
        norm = xp.linalg.vector_norm
        top, goal = self.object_and_goal(qpos)
        base_z = goal[:, 2] - 2 * CUBE_HALF
        held = self.scene.is_grasped(qpos, str(self.spec.obj))
        offset = top - goal
        stacked = (norm(offset[:, :2], axis=1) < 0.02) & (xp.abs(offset[:, 2]) < 0.008)
        stacked &= base_z < CUBE_HALF + 0.005
        grasp = xp.astype(held | stacked, qpos.dtype)
        terms = {
            "reach": closeness(norm(self.scene.tcp(qpos) - top, axis=1), 10.0),
            "grasp": grasp,
            "place": closeness(norm(offset, axis=1), 5.0) * grasp,
        }
        return Evaluation(stacked & ~held, terms)

    def expert(self, qpos: np.ndarray) -> np.ndarray:
        _, goal = self.object_and_goal(qpos)
        return carry_expert(self.scene, qpos, str(self.spec.obj), goal + constant([0.0, 0.0, 0.003], goal))
