"""Imagined states drawn by the scene's own renderer: what a policy sees on the ``oracle`` rung
(:mod:`~worldsim.envs.imagination`), an upper bound for analysis rather than a world-model figure.

The world model's low-dimensional dynamics carry the whole imagined scene: the gripper (the
proprio head: TCP and finger gap) and, with the object pathway, every object's image position
and height, which :class:`~worldsim.world_models.outcome.TaskRules` turns back into the scene's
joint positions. The success rule already reads that state; :class:`SceneFrames` draws it with
the same renderer, camera and flags the physics env observes through, so the frame a policy acts
on and the state its outcome is judged on are one scene.

Why: a policy trained on real frames does not act on generated frames as it does on real ones
(the results page has the figures). The dynamics and the verdict are the same with either kind
of frame: what differs is only what the policy sees.

What is not imagined is not drawn: a cube keeps the orientation it had at the episode's real
start (the pathway imagines positions, not yaw). The renderer needs the task's scene, so this is
for worlds that have one: ranking checkpoints and training policies of this project's tasks; a
model of a real robot has only its frames.
"""

from __future__ import annotations

import numpy as np
import torch

from worldsim.envs.imagination import Rung
from worldsim.envs.observations import qpos_from_state
from worldsim.envs.rendering import BatchRenderer
from worldsim.envs.scene import CUBES
from worldsim.world_models.data import IMAGE_CAMERA
from worldsim.world_models.imagined_step import Prediction
from worldsim.world_models.latents import latents_to_frames
from worldsim.world_models.model import WorldModel
from worldsim.world_models.outcome import TaskRules


class SceneFrames:
    """Front-camera frames ``(n, size, size, 3)`` uint8 of ``num_envs`` imagined scenes.

    :meth:`start` keeps each env's cubes' real orientations (from a recorded ``state`` row);
    :meth:`draw` renders imagined gripper and object positions with them."""

    def __init__(self, rules: TaskRules, image_size: int, num_envs: int) -> None:
        self.rules = rules
        self.renderer = BatchRenderer(rules.scene.model, image_size, image_size)
        self._cubes = [rules.scene.cube(c) for c in CUBES]  # each cube's qpos slice
        self._quaternions = np.zeros((num_envs, len(CUBES), 4))
        self._quaternions[..., 0] = 1.0

    def start(self, index: np.ndarray, state: np.ndarray) -> None:
        """Envs ``index`` start from the recorded ``state`` rows ``(len(index), STATE_DIM)``."""
        qpos = qpos_from_state(self.rules.scene, state)
        for k, cube in enumerate(self._cubes):
            self._quaternions[index, k] = qpos[:, cube.start + 3:cube.stop]

    def draw(self, index: np.ndarray, proprio: torch.Tensor, points: torch.Tensor, heights: torch.Tensor
             ) -> np.ndarray:
        """The frames of envs ``index`` at raw ``proprio`` ``(n, 4)``, object ``points``
        ``(n, E, 2)`` (pixels) and ``heights`` ``(n, E)`` (metres)."""
        qpos = self.rules.qpos(proprio, points, heights).double().cpu().numpy()
        for k, cube in enumerate(self._cubes):
            qpos[:, cube.start + 3:cube.stop] = self._quaternions[index, k]
        return self.renderer.render(qpos, IMAGE_CAMERA)

    def close(self) -> None:
        self.renderer.close()


def scene_frames(model: WorldModel, rung: Rung, num_envs: int) -> SceneFrames | None:
    """What draws ``num_envs`` imagined scenes of ``model`` on ``rung``: a :class:`SceneFrames` on a
    rung whose frames the scene's renderer draws (``oracle``), None on the others (the model draws
    its frames). The rung has checked the model (:meth:`~worldsim.envs.imagination.Rung.check`)."""
    if not rung.rendered:
        return None
    assert model.rules is not None  # a rendered rung seeds the objects, which needs the pathway
    return SceneFrames(model.rules, model.config.image_size, num_envs)


def step_frames(pred: Prediction, patch: int, scene: SceneFrames | None, index: np.ndarray) -> np.ndarray:
    """The frames ``(len(index), H, W, 3)`` uint8 of one imagined step of envs ``index``: the
    model's latent decoded, or, for an undrawn step, the imagined state drawn by ``scene``."""
    if pred.latent is not None:
        return latents_to_frames(pred.latent, patch).cpu().numpy()
    assert scene is not None and pred.points is not None and pred.heights is not None
    return scene.draw(index, pred.proprio, pred.points, pred.heights)
