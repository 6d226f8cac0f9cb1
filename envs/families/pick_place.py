"""Pick and place: grasp a cube, carry it, and let go of it in the bin or on a goal zone.

:func:`carry_expert` is the scripted grasp-carry-release behaviour and :func:`carry_evaluation`
the success and reward terms of carrying a cube somewhere, both of which stacking reuses.
"""

from __future__ import annotations

from worldsim.envs.families.base import (
    ON_ZONE,
    PLACE_SHAPING,
    REACH_SHAPING,
    Evaluation,
    TaskFamily,
    closeness,
    move_towards,
)
from worldsim.envs.scene import BIN_INNER_HALF, CUBE_HALF, Scene
from worldsim.envs.xp import Array, columns, constant, namespace

HOVER_HEIGHT = 0.09  # TCP height above the table when moving towards a cube
CARRY_HEIGHT = 0.11  # held cube centre while travelling: clears other cubes and the bin walls
# Fraction of full speed while holding: fast moves make a held cube slide. Kept off 0.5, where a
# carry step starting at rest asks the TCP servos for exactly their force limit (kp 2000 x 1.5 cm
# = 30 N): MuJoCo's implicit integrator leaves a servo's damping out while its force is clamped,
# so rounding (float64 on the CPU, float32 on Warp) decided between a smooth start and a jolt that
# shakes the cube out of the fingers. At 0.45 the servos start at 27 N, inside the limit.
CARRY_SPEED = 0.45
BIN_RELEASE_HEIGHT = 0.065  # cube centre when let go over the bin: its bottom clears the walls
RELEASE_DROP = 0.003  # the expert lets go of a cube this far (3 mm) above where it comes to rest
ZONE_RELEASE_HEIGHT = CUBE_HALF + RELEASE_DROP  # cube centre when let go over a zone
TRAVEL_SLACK = 0.03  # TCP or held cube up to this below its travel height may still move sideways
OFF_TO_THE_SIDE = 0.02  # TCP this far (x-y) from the cube ...
TOO_LOW = HOVER_HEIGHT - TRAVEL_SLACK  # ... and below this: rise before moving over it
ABOVE_CUBE = 0.01  # TCP within this (x-y) of the cube centre: descend onto it
AT_CUBE = 0.01  # TCP within this height of the cube centre: close the fingers
OVER_PLACE = 0.015  # cube within this (x-y) of the place point: lower it
LIFT_BELOW = CARRY_HEIGHT - TRAVEL_SLACK  # a held cube lower than this, away from the place: lift first
AT_PLACE = 0.008  # cube centre within this height of the place point: open
BIN_SLACK = 0.005  # a cube up to this beyond touching an inner bin wall (leaning on it) still counts as in
IN_BIN = BIN_INNER_HALF - CUBE_HALF + BIN_SLACK  # cube centre at most this far (max-norm) from the bin centre
DOWN = 0.01  # cube centre at most this far above its resting height on the goal


def carry_evaluation(held: Array, placed: Array, reach: Array, place: Array) -> Evaluation:
    """Success once the cube is ``placed`` and let go of; the terms: the gripper's closeness to
    the cube (``reach``: their distance), ``grasp`` (1 while the cube is held or placed) and,
    while grasped, the cube's closeness to where it goes (``place``: their distance)."""
    grasp = namespace(reach).astype(held | placed, reach.dtype)
    terms = {
        "reach": closeness(reach, REACH_SHAPING),
        "grasp": grasp,
        "place": closeness(place, PLACE_SHAPING) * grasp,
    }
    return Evaluation(placed & ~held, terms)


def carry_expert(scene: Scene, qpos: Array, colour: str, place: Array) -> Array:
    """Grasp cube ``colour`` and let go of it once its centre is at ``place`` (N, 3).

    Stateless: each step it reads whether the cube is held and picks the next waypoint, so it
    recovers from slips and failed grasps by starting over. While carrying, waypoints are for
    the cube, not the TCP: a cube that slid in the fingers still lands where it should.
    """
    xp = namespace(qpos)
    norm = xp.linalg.vector_norm
    tcp = scene.tcp(qpos)
    cube = scene.cube_pos(qpos, colour)
    held = scene.is_grasped(qpos, colour)

    # Not held: hover above the cube (rising first if low and off to the side), descend, close.
    xy_to_cube = norm(tcp[:, :2] - cube[:, :2], axis=1)
    target = columns(cube[:, :2], HOVER_HEIGHT, like=qpos)
    rise = (xy_to_cube > OFF_TO_THE_SIDE) & (tcp[:, 2] < TOO_LOW)
    target = xp.where(rise[:, None], columns(tcp[:, :2], HOVER_HEIGHT, like=qpos), target)
    above = xy_to_cube < ABOVE_CUBE
    target = xp.where(above[:, None], cube, target)
    at_cube = above & (xp.abs(tcp[:, 2] - cube[:, 2]) < AT_CUBE)
    grip = xp.where(at_cube, 1.0, -1.0)

    # Held: lift, travel at carry height, lower the cube onto the place point, open.
    xy_to_place = norm(cube[:, :2] - place[:, :2], axis=1)
    carry = columns(place[:, :2], CARRY_HEIGHT, like=qpos)
    lift = (xy_to_place > OVER_PLACE) & (cube[:, 2] < LIFT_BELOW)
    carry = xp.where(lift[:, None], columns(cube[:, :2], CARRY_HEIGHT, like=qpos), carry)
    over = xy_to_place <= OVER_PLACE
    carry = xp.where(over[:, None], place, carry)
    release = over & (xp.abs(cube[:, 2] - place[:, 2]) < AT_PLACE)
    target = xp.where(held[:, None], carry + (tcp - cube), target)
    grip = xp.where(held, xp.where(release, -1.0, 1.0), grip)
    # Carry gently: fast moves make a held cube slide in the fingers.
    return move_towards(tcp, target, grip, xp.where(held, CARRY_SPEED, 1.0), action_scale=scene.action_scale)


class PickPlace(TaskFamily):
    def object_and_goal(self, qpos: Array) -> tuple[Array, Array]:
        cube = self.scene.cube_pos(qpos, str(self.spec.obj))
        goal = self.scene.bin_pos(qpos) if self.spec.goal == "bin" else self.scene.zone_pos(qpos, str(self.spec.goal))
        return cube, goal + constant([0.0, 0.0, CUBE_HALF], qpos)

    def evaluate(self, qpos: Array) -> Evaluation:
        xp = namespace(qpos)
        norm = xp.linalg.vector_norm
        cube, goal = self.object_and_goal(qpos)
        tcp = self.scene.tcp(qpos)
        held = self.scene.is_grasped(qpos, str(self.spec.obj))
        inside = IN_BIN if self.spec.goal == "bin" else ON_ZONE
        placed = (xp.max(xp.abs(cube[:, :2] - goal[:, :2]), axis=1) <= inside) & (cube[:, 2] < goal[:, 2] + DOWN)
        return carry_evaluation(held, placed, norm(tcp - cube, axis=1), norm(cube - goal, axis=1))

    def expert(self, qpos: Array) -> Array:
        _, goal = self.object_and_goal(qpos)
        height = BIN_RELEASE_HEIGHT if self.spec.goal == "bin" else ZONE_RELEASE_HEIGHT
        return carry_expert(self.scene, qpos, str(self.spec.obj), columns(goal[:, :2], height, like=qpos))
