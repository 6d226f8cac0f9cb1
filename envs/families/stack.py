"""Stack: put one cube on top of another and let go; the bottom cube stays on the table."""

from __future__ import annotations

import numpy as np

from worldsim.envs.families.base import RESTING_TOLERANCE, Evaluation, TaskFamily
from worldsim.envs.families.pick_place import RELEASE_DROP, carry_evaluation, carry_expert
from worldsim.envs.scene import CUBE_HALF
from worldsim.envs.xp import Array, constant, namespace

ON_TOP = np.array([0.0, 0.0, 2 * CUBE_HALF])  # top cube centre above the bottom one's when resting on it
CENTRED = 0.02  # top cube centre at most this far (x-y) from the bottom one's
SEATED = 0.008  # ... and within this height of resting on it
RELEASE_ABOVE = np.array([0.0, 0.0, RELEASE_DROP])  # the expert lets go just above the resting point


class Stack(TaskFamily):
    def object_and_goal(self, qpos: Array) -> tuple[Array, Array]:
        top = self.scene.cube_pos(qpos, str(self.spec.obj))
        return top, self.scene.cube_pos(qpos, str(self.spec.goal)) + constant(ON_TOP, qpos)

    def evaluate(self, qpos: Array) -> Evaluation:
        xp = namespace(qpos)
        norm = xp.linalg.vector_norm
        top, goal = self.object_and_goal(qpos)
        base_z = goal[:, 2] - 2 * CUBE_HALF
        held = self.scene.is_grasped(qpos, str(self.spec.obj))
        offset = top - goal
        stacked = (norm(offset[:, :2], axis=1) < CENTRED) & (xp.abs(offset[:, 2]) < SEATED)
        stacked &= base_z < CUBE_HALF + RESTING_TOLERANCE
        return carry_evaluation(held, stacked, norm(self.scene.tcp(qpos) - top, axis=1), norm(offset, axis=1))

    def expert(self, qpos: Array) -> Array:
        _, goal = self.object_and_goal(qpos)
        return carry_expert(self.scene, qpos, str(self.spec.obj), goal + constant(RELEASE_ABOVE, goal))
