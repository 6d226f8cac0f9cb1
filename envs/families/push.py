"""Push: slide a cube across the table onto a goal zone without lifting it.

The expert closes its fingers into a paddle, goes round (above) to the side of the cube away
from the zone, comes down behind it, and pushes along the cube-to-zone line. When the paddle
drifts off the line it lifts and re-approaches.
"""

from __future__ import annotations

from worldsim.envs.families.base import (
    ON_ZONE,
    PLACE_SHAPING,
    REACH_SHAPING,
    RESTING_TOLERANCE,
    Evaluation,
    TaskFamily,
    closeness,
    move_towards,
)
from worldsim.envs.scene import CUBE_HALF
from worldsim.envs.xp import Array, columns, namespace

PUSH_HEIGHT = 0.02  # TCP height while pushing: fingertips just above the table
TRAVEL_HEIGHT = 0.075  # fingertips clear the cube tops
BEHIND = 0.055  # where the paddle waits behind the cube centre
LOW_SLACK = 0.015  # TCP up to this above the push height still counts as low enough to push
LOW = PUSH_HEIGHT + LOW_SLACK  # TCP below this: low enough to push
AT_WAITING_POINT = 0.012  # TCP within this (x-y) of the waiting point behind the cube: descend
ON_LINE = 0.015  # TCP at most this far sideways of the cube-to-zone line to push along it
BEHIND_CONTACT = 0.015  # ... and at least this far behind the cube centre
PUSH_PAST = 0.01  # the push aims this far past the cube centre: pushes through and re-centres
TRAVEL_SLACK = 0.02  # TCP up to this below the travel height still counts as clear of the cube tops
LIFT_BELOW = TRAVEL_HEIGHT - TRAVEL_SLACK  # off the line and lower than this: lift before moving sideways
MIN_PUSH_LENGTH = 1e-9  # floor on the cube-to-zone distance when normalising the push direction (no 0/0)


class Push(TaskFamily):
    def object_and_goal(self, qpos: Array) -> tuple[Array, Array]:
        return (self.scene.cube_pos(qpos, str(self.spec.obj)),
                self.scene.zone_pos(qpos, str(self.spec.goal)))

    def _push_frame(self, qpos: Array) -> tuple[Array, Array, Array]:
        xp = namespace(qpos)
        cube, zone = self.object_and_goal(qpos)
        u = zone[:, :2] - cube[:, :2]
        return cube, zone, u / xp.clip(xp.linalg.vector_norm(u, axis=1, keepdims=True), MIN_PUSH_LENGTH, None)

    def evaluate(self, qpos: Array) -> Evaluation:
        xp = namespace(qpos)
        norm = xp.linalg.vector_norm
        cube, zone, u = self._push_frame(qpos)
        behind = cube[:, :2] - BEHIND * u
        tcp = self.scene.tcp(qpos)
        d_pose = norm(tcp[:, :2] - behind, axis=1) + xp.abs(tcp[:, 2] - PUSH_HEIGHT)
        d_goal = norm(cube[:, :2] - zone[:, :2], axis=1)
        on_zone = xp.max(xp.abs(cube[:, :2] - zone[:, :2]), axis=1) <= ON_ZONE
        success = on_zone & (cube[:, 2] < CUBE_HALF + RESTING_TOLERANCE)
        return Evaluation(success, {"reach": closeness(d_pose, REACH_SHAPING),
                                    "place": closeness(d_goal, PLACE_SHAPING)})

    def expert(self, qpos: Array) -> Array:
        xp = namespace(qpos)
        cube, _, u = self._push_frame(qpos)
        tcp = self.scene.tcp(qpos)
        rel = tcp[:, :2] - cube[:, :2]
        along = xp.sum(rel * u, axis=1)
        lateral = xp.abs(rel[:, 0] * u[:, 1] - rel[:, 1] * u[:, 0])
        low = tcp[:, 2] < LOW
        behind = cube[:, :2] - BEHIND * u
        near_behind = xp.linalg.vector_norm(tcp[:, :2] - behind, axis=1) < AT_WAITING_POINT
        pushing = low & (lateral < ON_LINE) & (along < -BEHIND_CONTACT)

        target = columns(behind, TRAVEL_HEIGHT, like=qpos)
        # On the line behind the cube: aim just past the contact point, which also re-centres.
        push_xy = cube[:, :2] - PUSH_PAST * u
        target = xp.where(pushing[:, None], columns(push_xy, PUSH_HEIGHT, like=qpos), target)
        descend = ~pushing & near_behind
        target = xp.where(descend[:, None], columns(behind, PUSH_HEIGHT, like=qpos), target)
        # Off the line and low: lift straight up first so the paddle does not sweep the cube.
        lift = ~pushing & ~near_behind & (tcp[:, 2] < LIFT_BELOW)
        target = xp.where(lift[:, None], columns(tcp[:, :2], TRAVEL_HEIGHT, like=qpos), target)
        return move_towards(tcp, target, 1.0, action_scale=self.scene.action_scale)
