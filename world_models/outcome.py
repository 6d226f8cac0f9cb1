"""Imagined outcomes judged by each task's own rule, on the objects' imagined positions.

With the object pathway (:mod:`~worldsim.world_models.objects`) the world model carries where
every scene object is: its image position and its height above the table. The front camera
(:class:`~worldsim.envs.camera.PinholeCamera`) puts each back in the world, and with the imagined
gripper (the proprio: TCP position and finger gap) that is everything a task family's
``evaluate`` reads. With ``outcome="rule"`` an imagined frame succeeds exactly when the same scene would
succeed in physics: the cube's centre within the zone, resting; in the bin; seated on the other
cube; the gripper at its target. It needs no success frames to learn from (the learned head has
one per recorded episode, and never fired on pick-and-place or stacking frames of the tabletop
suite); its only error is the positions' error, so a cube imagined a centimetre short of the
zone fails where the calibrated head may still call it a success. Whatever decides success, a
cube imagined off the table ends the episode as a failure, as in physics, and the physics env's
dense shaping terms (:meth:`TaskRules.terms`) read the same imagined positions.
"""

from __future__ import annotations

import torch

from worldsim.envs.camera import PinholeCamera
from worldsim.envs.families import TaskFamily, make_family
from worldsim.envs.observations import ENTITIES
from worldsim.envs.scene import CUBES, ZONES, Scene
from worldsim.envs.tasks import get_task

IDENTITY_QUATERNION = (1.0, 0.0, 0.0, 0.0)  # no task's success reads a cube's orientation


class TaskRules:
    """The success rules of ``tasks`` (index = the world model's task id), over imagined scenes
    seen through ``camera``."""

    def __init__(self, tasks: tuple[str, ...], camera: PinholeCamera) -> None:
        self.scene = Scene.load()
        self.camera = camera
        self.families: list[TaskFamily] = [make_family(get_task(t), self.scene) for t in tasks]

    def positions(self, points: torch.Tensor, heights: torch.Tensor) -> torch.Tensor:
        """World positions ``(B, E, 3)`` (metres) of objects seen at ``points`` ``(B, E, 2)``
        (pixels) at ``heights`` ``(B, E)`` (metres above the table)."""
        return self.camera.unproject(points, heights)

    def qpos(self, proprio: torch.Tensor, points: torch.Tensor, heights: torch.Tensor) -> torch.Tensor:
        """The scene's joint positions ``(B, nq)`` of an imagined step: the TCP and the finger gap
        (split evenly between the fingers) from the raw ``proprio`` ``(B, 4)``, the cubes' centres
        (upright), the zones' and the bin's positions from the objects' imagined positions."""
        scene, where = self.scene, self.positions(points, heights)
        qpos = torch.zeros(len(proprio), scene.model.nq, dtype=where.dtype, device=where.device)
        qpos[:, scene.ee] = proprio[:, :3].to(where.dtype)
        qpos[:, scene.fingers] = proprio[:, 3:4].to(where.dtype) / 2
        for colour in CUBES:
            cube = scene.cube(colour)
            qpos[:, cube.start:cube.start + 3] = where[:, ENTITIES.index(f"{colour}_cube")]
            qpos[:, cube.start + 3:cube.stop] = where.new_tensor(IDENTITY_QUATERNION)
        for colour in ZONES:
            qpos[:, scene.zone(colour)] = where[:, ENTITIES.index(f"{colour}_zone"), :2]
        qpos[:, scene.bin] = where[:, ENTITIES.index("bin"), :2]
        return qpos

    def outcome(self, task: torch.Tensor, proprio: torch.Tensor, points: torch.Tensor, heights: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Whether each imagined scene ``(B,)`` meets its task's (``task`` ``(B,)``) success rule,
        and whether it has failed as physics would end it (:meth:`failed`)."""
        qpos = self.qpos(proprio, points, heights)
        success = torch.zeros(len(task), dtype=torch.bool, device=qpos.device)
        for index, family in enumerate(self.families):
            rows = task == index
            if rows.any():
                success[rows] = family.evaluate(qpos[rows]).success
        return success, self._failed(qpos)

    def terms(self, task: int, proprio: torch.Tensor, points: torch.Tensor, heights: torch.Tensor
              ) -> dict[str, torch.Tensor]:
        """The named dense-reward terms ``(B,)`` of task ``task`` (an index) on imagined scenes: the
        shaping terms of the physics env's ``dense`` reward (for a push, how close the gripper is
        to the cube's back and the cube to the zone)."""
        return self.families[task].evaluate(self.qpos(proprio, points, heights)).terms

    def failed(self, proprio: torch.Tensor, points: torch.Tensor, heights: torch.Tensor) -> torch.Tensor:
        """Whether each imagined scene ``(B,)`` has failed as physics would end it: a cube off the
        table (or fallen through it)."""
        return self._failed(self.qpos(proprio, points, heights))

    def _failed(self, qpos: torch.Tensor) -> torch.Tensor:
        return self.scene.failed(qpos, torch.zeros(len(qpos), self.scene.model.nv, dtype=qpos.dtype,
                                                   device=qpos.device))
