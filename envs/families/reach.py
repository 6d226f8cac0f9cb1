"""Reach: bring the gripper above a cube (or above a goal zone) and hold it there."""

from __future__ import annotations

import numpy as np

from worldsim.envs.families.base import REACH_SHAPING, Evaluation, TaskFamily, closeness, move_towards
from worldsim.envs.xp import Array, constant, namespace

HOVER = np.array([0.0, 0.0, 0.04])  # above a cube's centre: clear of its top face
ZONE_HOVER = np.array([0.0, 0.0, 0.06])  # above a zone's centre
SUCCESS_RADIUS = 0.025  # TCP within this of the hover point: reached


class Reach(TaskFamily):
    def object_and_goal(self, qpos: Array) -> tuple[Array, Array]:
        if self.spec.obj is not None:
            target = self.scene.cube_pos(qpos, self.spec.obj)
            return target, target + constant(HOVER, target)
        target = self.scene.zone_pos(qpos, str(self.spec.goal))
        return target, target + constant(ZONE_HOVER, target)

    def evaluate(self, qpos: Array) -> Evaluation:
        _, goal = self.object_and_goal(qpos)
        d = namespace(qpos).linalg.vector_norm(self.scene.tcp(qpos) - goal, axis=1)
        return Evaluation(success=d < SUCCESS_RADIUS, terms={"reach": closeness(d, REACH_SHAPING)})

    def expert(self, qpos: Array) -> Array:
        _, goal = self.object_and_goal(qpos)
        return move_towards(self.scene.tcp(qpos), goal, -1.0, action_scale=self.scene.action_scale)
