"""The world model: parts that predict the next step of a batch of imagined episodes, assembled,
and saved together as one ``config.json`` + ``model.safetensors``.

What it predicts, for a batch of envs at step ``t``::

    frame[t+1], proprio[t+1], objects[t+1], success[t+1]
        <-  frames[t-C+1 .. t], frame[0], proprio[t-C+1 .. t], objects[t-C+1 .. t], action[t]

The parts, each with its own config (:mod:`~worldsim.world_models.config`):

- the **proprio dynamics** (:class:`~worldsim.world_models.proprio.ProprioDynamics`): where the
  gripper goes, the commanded pose plus a learned correction;
- the **object pathway** (:class:`~worldsim.world_models.objects.ObjectDynamics`, optional): where
  the scene's objects go, kept at rest unless the gripper's path passes near them;
- the **frame generator** (:class:`~worldsim.world_models.frames.FrameGenerator`, one per
  backbone): the next frame drawn there by EDM diffusion, as a change from an anchor frame;
- the **judge** (:class:`~worldsim.world_models.judge.Judge`): success (the learned head, or each
  task's rule on the imagined positions) and failure;
- the **rollout** (:class:`~worldsim.world_models.imagined_step.Rollout`): what a batch carries
  from step to step.

Design, driven by speed (>= 200 imagined frames/s at batch 64 on 2 CPU cores for ``tiny``): a
64x64x3 frame becomes a 16x16x48 latent by lossless space-to-depth
(:mod:`~worldsim.world_models.latents`), so the networks run at 16x16 with no learned
autoencoder whose errors would cap fidelity. Training has two halves: the frames (teacher-forced
on the true next proprio and object positions; :meth:`WorldModel.loss`) and the low-dimensional
dynamics, on their own large batches of state windows rolled out on their own predictions
(:meth:`WorldModel.dynamics_loss`; trained one step at a time in the frame model's batches they
drift over a rollout). The dataset's proprio mean and std are buffers of the model, saved with
its weights.

Training batches (:meth:`WorldModel.loss`) hold, for ``B`` windows: ``context`` latents
``(B, C, 3p^2, h, w)`` (oldest first), ``first`` ``(B, 3p^2, h, w)``, ``proprio`` ``(B, C, 4)``
raw, ``action`` ``(B, 4)``, ``task`` ``(B,)`` long, ``target`` ``(B, 3p^2, h, w)``,
``next_proprio`` ``(B, 4)`` and ``success`` ``(B,)`` of the target frame; where the data has
``state``, ``goal_offset`` ``(B, 3)``, ``entity_pixels`` ``(B, E, 2)`` and ``entity_heights``
``(B, E)`` of the target frame, ``context_entity_pixels`` ``(B, C, E, 2)`` and ``first_entity_pixels`` ``(B, E, 2)``
(:meth:`~worldsim.world_models.data.EpisodeBank.sample`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from worldsim.envs.camera import PinholeCamera
from worldsim.envs.observations import ENTITIES
from worldsim.runtime.checkpoint import (
    PRETRAINED_CONFIG,
    PRETRAINED_WEIGHTS,
    load_pretrained_model,
    save_pretrained_model,
)
from worldsim.world_models.camera import camera_from_vector, camera_vector, fitted_camera
from worldsim.world_models.config import WorldModelConfig, from_legacy
from worldsim.world_models.data import image_camera
from worldsim.world_models.frames import Conditions, FrameGenerator
from worldsim.world_models.imagined_step import Prediction, Rollout
from worldsim.world_models.judge import Judge
from worldsim.world_models.latents import frames_to_latents
from worldsim.world_models.layers import randn, task_one_hot
from worldsim.world_models.objects import ObjectDynamics, rollout_loss
from worldsim.world_models.outcome import TaskRules
from worldsim.world_models.proprio import CUBES, ProprioDynamics, ProprioScale

CONFIG_FILE, WEIGHTS_FILE = PRETRAINED_CONFIG, PRETRAINED_WEIGHTS
MODEL_TYPE = "worldsim-world-model"
MODEL_DIR = "world_model"  # a train-wm run folder's model


def frame_generator(config: WorldModelConfig) -> FrameGenerator:
    """The frame generator of ``config``'s backbone, shown the object pathway's planes if it has one."""
    from worldsim.world_models.frames_unet import UNetFrames
    from worldsim.world_models.video_backbone import WanFrames

    generator = UNetFrames if config.frames.backbone == "unet" else WanFrames
    pathway = config.objects
    return generator(config, len(ENTITIES) if pathway is not None else 0, pathway is not None and pathway.carry)


class WorldModel(nn.Module):
    """The parts of the module docstring, assembled, with the dataset's proprio statistics: training
    through :meth:`loss` and :meth:`dynamics_loss`, imagination through :meth:`start` and
    :meth:`predict`."""

    config_class = WorldModelConfig  # what a saved model's config fields build (load_pretrained_model)
    camera_pose: torch.Tensor | None
    upgrade_config = staticmethod(from_legacy)  # a model saved before its parts had configs of their own

    def __init__(self, config: WorldModelConfig) -> None:
        super().__init__()
        self.config = config
        # built in this order, which draws their initial weights from torch's stream in this order
        self.frames = frame_generator(config)
        self.proprio = ProprioDynamics(config)
        rules = TaskRules(config.tasks, image_camera(config.image_size, config.image_size)) \
            if config.objects is not None else None
        self.judge = Judge(config, rules)
        self.objects = ObjectDynamics(config) if config.objects is not None else None
        self.scale = ProprioScale()
        # a fitted camera's pose and field of view (camera_vector): the scene's until learn_scene fits
        # it to the training frames; saved with the weights
        self.register_buffer("camera_pose", torch.from_numpy(camera_vector(image_camera(
            config.image_size, config.image_size))) if config.camera == "fitted" else None)
        self.register_load_state_dict_pre_hook(rename_legacy_keys)
        self.register_load_state_dict_post_hook(lambda module, _keys: module.use_camera())

    @property
    def camera(self) -> PinholeCamera:
        """The camera the model places things in the frame with (:mod:`~worldsim.world_models.camera`):
        the scene's, or the one fitted to its training frames."""
        size = self.config.image_size
        if self.camera_pose is None:
            return image_camera(size, size)
        return camera_from_vector(self.camera_pose.cpu().numpy(), size)

    def use_camera(self) -> None:
        """Give :attr:`camera` to the parts that place things with it (the pathway, the rules, the frames)."""
        camera = self.camera
        self.frames.image_camera = camera
        if self.objects is not None:
            self.objects.camera = camera
        if self.judge.rules is not None:
            self.judge.rules.camera = camera

    # ------------------------------------------------------------------ pieces
    @property
    def rules(self) -> TaskRules | None:  # the tasks' success rules on imagined positions (with the pathway)
        return self.judge.rules

    def set_normalization(self, mean: np.ndarray | torch.Tensor, std: np.ndarray | torch.Tensor) -> None:
        self.scale.set(mean, std)  # the dataset's proprio statistics, saved with the weights

    def learn_scene(self, images: np.ndarray, proprio: np.ndarray, episode_starts: np.ndarray,
                    state: np.ndarray | None = None) -> str | None:
        """The camera (with ``camera = "fitted"``, fitted to the cubes seen in uint8 training frames
        ``(N, H, W, 3)`` where their recorded ``state`` puts them:
        :func:`~worldsim.world_models.camera.fitted_camera`), then the empty scene and the arm's
        footprint learned from the frames, their raw proprio ``(N, 4)`` and the rows of the
        episodes' first frames (:meth:`FrameGenerator.learn_scene`; only a model that clears what it
        carries keeps them), all saved with the weights. Returns how well a fitted camera fits, or None."""
        fit = None
        if self.camera_pose is not None:
            if state is None:
                raise ValueError("camera='fitted' is fitted to the training frames with their recorded state; "
                                 "this data has none")
            camera, fit = fitted_camera(images, state, proprio)
            self.camera_pose.copy_(torch.from_numpy(camera_vector(camera)))
            self.use_camera()
        self.frames.learn_scene(images, proprio, episode_starts)
        return fit

    def task_index(self, task: str) -> int:
        """The id of ``task`` in the conditioning; ``ValueError`` listing the known tasks."""
        if task not in self.config.tasks:
            raise ValueError(f"this world model was trained on {', '.join(self.config.tasks)}; it cannot "
                             f"imagine task {task!r}")
        return self.config.tasks.index(task)

    # ------------------------------------------------------------------ training
    def loss(self, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None,
             success_weight: float = 1.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The frames' training loss and its named terms: the frame generator's denoising loss +
        ``success_weight`` times the judge's; the proprio dynamics and the pathway learn from
        :meth:`dynamics_loss`. The terms are detached 0-d tensors (reading them waits for the
        device, so a caller reads them only when it logs). Draws (:meth:`training_noise`), then
        :meth:`frame_loss`."""
        return self.frame_loss(batch, self.training_noise(batch, generator), success_weight)

    def training_noise(self, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None
                       ) -> dict[str, torch.Tensor]:  # the draws of one frame_loss: the frame generator's
        return self.frames.training_noise(batch, generator)

    def frame_loss(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor],
                   success_weight: float = 1.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`loss` with its draws given (:meth:`training_noise`): tensors alone, for ``torch.compile``."""
        wanted = self.scale.normalize(batch["next_proprio"])
        conditions = Conditions.of(self.scale, batch["proprio"], wanted, batch["action"], batch["task"],
                                   len(self.config.tasks))
        denoise, estimate = self.frames.loss(batch, noise, conditions)
        success, terms = self.judge.loss(batch["target"], estimate, batch, wanted)
        return denoise + success_weight * success, {"denoise": denoise.detach(), **terms}

    def dynamics_parameters(self) -> list[nn.Parameter]:
        """The low-dimensional dynamics' parameters (the proprio dynamics' and the object
        pathway's), trained by :meth:`dynamics_loss` with their own optimiser; the rest of the
        model trains on frames by :meth:`loss`."""
        modules = [self.proprio] if self.objects is None else [self.proprio, self.objects]
        return [p for module in modules for p in module.parameters()]

    def dynamics_loss(self, windows: dict[str, torch.Tensor], generator: torch.Generator | None = None
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The low-dimensional dynamics' loss on state ``windows`` and its named (detached) terms:
        the proprio dynamics' rollout loss (``proprio``) plus, with the object pathway,
        :func:`~worldsim.world_models.objects.rollout_loss` (``objects``; from data with ``state``).
        Draws (:meth:`dynamics_noise`), then :meth:`dynamics_terms`."""
        return self.dynamics_terms(windows, self.dynamics_noise(windows, generator))

    def dynamics_noise(self, windows: dict[str, torch.Tensor], generator: torch.Generator | None = None
                       ) -> torch.Tensor | None:
        """The random draws of one :meth:`dynamics_loss` on ``windows``: with the pathway, its
        keypoint noise (None without it, or for windows without the objects)."""
        if "points" not in windows or self.objects is None:
            return None
        return randn(windows["points"].shape, generator, windows["points"])

    def dynamics_terms(self, windows: dict[str, torch.Tensor], point_noise: torch.Tensor | None
                       ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`dynamics_loss` with its draws given (:meth:`dynamics_noise`): tensors alone."""
        losses = self.dynamics_losses(windows, point_noise)
        total = torch.stack(list(losses.values())).sum()
        return total, {name: value.detach() for name, value in losses.items()}

    def dynamics_losses(self, windows: dict[str, torch.Tensor], point_noise: torch.Tensor | None
                        ) -> dict[str, torch.Tensor]:
        """The terms of :meth:`dynamics_loss` on ``windows``, the keypoint noise's draws given,
        not detached: for ``torch.compile``, tensors alone."""
        one_hot = task_one_hot(windows["task"], len(self.config.tasks))
        cubes = None
        if self.proprio.sees_cubes:  # the recorded cubes before each step: the context's last, then the targets
            if "points" not in windows or self.objects is None:
                raise ValueError("proprio.sees_cubes learns from the cubes' recorded positions: the data needs the "
                                 "'state' observation (collect with obs_mode='pixels+state')")
            points = torch.cat([windows["points"][:, -1:], windows["target"][:, :-1]], dim=1)[:, :, CUBES]
            heights = torch.cat([windows["heights"][:, -1:], windows["target_heights"][:, :-1]], dim=1)[:, :, CUBES]
            cubes = self.objects.camera.unproject(points, heights)
        terms = {"proprio": self.proprio.rollout_loss(windows, one_hot, self.scale, cubes)}
        if self.objects is not None:
            terms["objects"] = rollout_loss(self.objects, windows, self.scale.normalize, one_hot,
                                            self.config.image_size, point_noise)
        return terms

    # ------------------------------------------------------------------ imagination
    @torch.no_grad()
    def start(self, frames: torch.Tensor, first: torch.Tensor, proprio: torch.Tensor,
              objects: tuple[torch.Tensor, torch.Tensor] | None = None, first_proprio: torch.Tensor | None = None
              ) -> Rollout:
        """The :class:`Rollout` of real starts: uint8 context frames ``(B, C, H, W, 3)``, first
        frames ``(B, H, W, 3)`` and raw context proprio ``(B, C, 4)``, on the model's device, and the
        first frames' raw proprio ``(B, 4)`` (where the arm is carried from; None: left where it stands).
        The object pathway's states are the recorded ``objects`` (positions ``(B, C, E, 2)``
        pixels, heights ``(B, C, E)`` metres) when given, else the judge's keypoint detector finds
        the objects in the frames (and reads their heights with ``[model.judge] heights``; else
        each is taken to rest on its plane)."""
        device, patch = self.device, self.config.patch
        context = frames_to_latents(frames.to(device), patch)
        points = heights = None
        if self.objects is not None and objects is not None:
            points, heights = objects[0].to(device).float(), objects[1].to(device).float()
        elif self.objects is not None:
            b, c = context.shape[:2]
            seen = self.scale.normalize(proprio.to(device).float()).flatten(0, 1)  # each context frame's own
            points, heights = self.judge.find(context.flatten(0, 1), seen)
            points, heights = points.view(b, c, -1, 2), heights.view(b, c, -1)
        first_latent = frames_to_latents(first.to(device), patch)
        first_points = None
        if self.objects is not None and self.frames.reads_first_positions:
            first_points = self.judge.locate(first_latent)
        first_at = None if first_proprio is None else first_proprio.to(device).float()
        return Rollout(context, first_latent, proprio.to(device).float(), points, heights, first_points, first_at)

    @torch.no_grad()
    def predict(self, rollout: Rollout, action: torch.Tensor, task: torch.Tensor, steps: int | None = None,
                generator: torch.Generator | None = None, draw: bool = True, outcome: str | None = None,
                objects_move: bool = True) -> Prediction:
        """Imagine the next step of a batch of rollouts under ``action`` ``(B, 4)`` for tasks ``(B,)``
        (:meth:`Rollout.advance` takes it in); ``draw=False`` leaves the frame out (``latent`` None:
        the pathway's state alone, drawn by :mod:`~worldsim.world_models.scene_frames`).
        ``outcome``: who judges success, ``"rule"`` (the pathway) or ``"head"`` (None: the judge's own);
        ``objects_move=False``: the placebo's static world (:meth:`step_dynamics`)."""
        outcome = self.judge.check(outcome)
        norm, points, heights = self.step_dynamics(rollout, action, task, objects_move)
        next_proprio = self.scale.raw(norm)
        latent = self.draw(rollout, action, task, norm, points, steps, generator) if draw else None
        success, failed = self.judge.verdict(outcome, latent, task, next_proprio, norm, points, heights)
        return Prediction(latent, next_proprio, success, points, heights, failed, norm)

    @torch.no_grad()
    def draw(self, rollout: Rollout, action: torch.Tensor, task: torch.Tensor, next_norm: torch.Tensor,
             next_points: torch.Tensor | None, steps: int | None = None, generator: torch.Generator | None = None
             ) -> torch.Tensor:
        """The frame (latent ``(B, 3p^2, h, w)``) of the step from ``rollout`` under ``action`` to the
        normalised proprio ``next_norm`` ``(B, 4)`` and, with the pathway, the objects' positions
        ``next_points`` ``(B, E, 2)``, which :meth:`step_dynamics` gave: the frame half of
        :meth:`predict`, also run on its own for a step whose frame was left undrawn."""
        conditions = Conditions.of(self.scale, rollout.proprio, next_norm, action, task, len(self.config.tasks))
        first_tcp = None if rollout.first_proprio is None else rollout.first_proprio[:, :3]
        return self.frames.draw(rollout.context, rollout.first, conditions, steps or self.config.sampling_steps,
                                generator, rollout.points, rollout.first_points, next_points, first_tcp)

    @property
    def frames_on_demand(self) -> bool:
        """Whether a frame may be drawn only when someone looks at it: each frame is drawn from the
        first frame and the step's state alone (not from earlier drawn frames) and, with the object
        pathway, success is judged on that state, never on the frame. The imagined env then draws
        only the frames it returns (once per action chunk, not once per step)."""
        return self.objects is not None and not self.frames.reads_context

    def step_dynamics(self, rollout: Rollout, action: torch.Tensor, task: torch.Tensor, objects_move: bool = True
                      ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """One step of the low-dimensional dynamics alone: the next normalised proprio and, with the
        pathway, the objects' next positions and heights (None without it). ``objects_move=False``
        keeps the objects where they are (the object pathway switched off; the gripper still moves)."""
        proprio, one_hot = rollout.proprio, task_one_hot(task, len(self.config.tasks))
        if self.objects is None:
            return self.proprio(action, proprio, one_hot, self.scale), None, None
        assert rollout.points is not None and rollout.heights is not None  # started with the pathway
        cubes = (self.objects.camera.unproject(rollout.points[:, -1, CUBES], rollout.heights[:, -1, CUBES])
                 if self.proprio.sees_cubes else None)
        norm = self.proprio(action, proprio, one_hot, self.scale, cubes)
        if not objects_move:
            return norm, rollout.points[:, -1].clone(), rollout.heights[:, -1].clone()
        tcp = torch.stack([proprio[:, -1, :3], self.scale.raw(norm)[:, :3]], dim=1)
        points, heights = self.objects(rollout.points, rollout.heights, self.scale.normalize(proprio), norm, action,
                                       one_hot, tcp)
        return norm, points, heights

    @torch.no_grad()
    def move_objects(self, points: torch.Tensor, heights: torch.Tensor, proprio: torch.Tensor,
                     next_proprio: torch.Tensor, action: torch.Tensor, task: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the object pathway alone, given the gripper's raw context proprio ``(B, C, 4)``
        and the proprio reached ``(B, 4)``: the objects' next positions and heights from their context
        ones. Fed the recorded motion, it says how far the pathway follows the real pushes."""
        if self.objects is None:
            raise ValueError("this world model has no object pathway (config.objects is None)")
        tcp = torch.stack([proprio[:, -1, :3], next_proprio[:, :3]], dim=1)
        return self.objects(points, heights, self.scale.normalize(proprio), self.scale.normalize(next_proprio),
                            action, task_one_hot(task, len(self.config.tasks)), tcp)

    @torch.no_grad()
    def success_prob(self, latent: torch.Tensor, task: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        """Success probability of latent frames ``(B, 3p^2, h, w)`` with their raw proprio ``(B, 4)``."""
        return torch.sigmoid(self.judge.success_head(latent, task, self.scale.normalize(proprio)))

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, path: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into folder ``path``, each atomically."""
        return save_pretrained_model(path, self, "model_type", MODEL_TYPE)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu") -> WorldModel:
        """Load a world model folder (or a training run folder holding one in ``world_model/``);
        errors name the file and what does not fit."""
        def model_class(kind: str, config_path: Path) -> type[WorldModel]:
            if kind != MODEL_TYPE:
                raise ValueError(f"{config_path} holds a {kind!r}, not a {MODEL_TYPE!r}")
            return cls

        return load_pretrained_model(path, MODEL_DIR, "model_type", "world model", model_class, device,
                                     " (give the folder written by `worldsim train-wm --out`, or its world_model/)")

    @property
    def device(self) -> torch.device:
        return self.scale.mean.device

    def aid_flags(self) -> dict[str, bool]:
        """The hand-written aids this model was built with, as
        :func:`~worldsim.envs.imagination.hand_written_aids`' keyword arguments: whether it places
        things through the scene's exact camera or one fitted to its frames, whether it clears
        the starting arm and the moved cubes' old spots from the first frame, gates cube motion by
        contact, moves the gripper by the servo formula, pastes the cubes' pixels and takes the
        objects it finds in real frames to rest on their planes (its judge reads no heights)."""
        objects = self.config.objects
        placed = objects is not None or self.frames.arm_footprint is not None or \
            getattr(self.config.frames, "gripper_planes", False)
        return {"camera": placed and self.camera_pose is None, "fitted_camera": placed and self.camera_pose is not None,
                "arm_cleared": self.frames.arm_footprint is not None,
                "gated": objects is not None and objects.gate, "commanded": self.config.proprio.commanded,
                "pasted": self.frames.carry and self.frames.paste,
                "cleared": self.frames.background is not None,  # carrying clears to it wherever there is one
                "resting": not self.config.judge.heights}

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


LEGACY_PREFIXES = (("denoiser.unet.", "frames.unet."), ("cond_mlp.", "frames.cond_mlp."),
                   ("denoiser.video.", "frames.video."), ("proprio_head.", "proprio.head."),
                   ("success_head.", "judge.success_head."), ("proprio_mean", "scale.mean"),
                   ("proprio_std", "scale.std"))
"""The weights' names before the model's parts had names of their own, and now."""


def rename_legacy_keys(module: nn.Module, state: dict[str, Any], prefix: str, *_: Any) -> None:
    """Rename, in place, a saved model's weights from before its parts had names of their own (a
    ``load_state_dict`` pre-hook)."""
    for key in [k for k in state if k.startswith(prefix)]:
        for old, new in LEGACY_PREFIXES:
            if key.startswith(prefix + old):
                state[prefix + new + key[len(prefix + old):]] = state.pop(key)
                break
