"""The world model: an action-conditioned next-frame diffusion model, a proprio head and a
frame-level success classifier, saved together as one ``config.json`` + ``model.safetensors``.

What it predicts, for a batch of envs at step ``t``::

    frame[t+1], proprio[t+1], success[t+1]  <-  frames[t-C+1 .. t], frame[0], proprio[t-C+1 .. t], action[t]

Design, driven by speed (>= 200 imagined frames/s at batch 64 on 2 CPU cores for ``tiny``):

- **Space-to-depth.** A 64x64x3 frame becomes a 16x16x48 tensor (``pixel_unshuffle`` by 4,
  values in [-1, 1]) and back (``pixel_shuffle``): the UNet runs at 16x16, about 16x cheaper
  than at 64x64, with no learned autoencoder whose errors would cap fidelity.
- **Context on the channel axis** (DIAMOND): the noisy next frame, the ``C`` latest frames and
  the episode's first frame (first-frame anchoring, WoVR: the static scene never drifts) are
  stacked into one input of ``48 * (C + 2)`` channels (plus the 10 planes below) of a
  diffusers ``UNet2DModel``.
- **Conditioning through the time embedding**: an MLP embeds the action, the context proprio,
  the next proprio, the context-noise level and the task; the result enters as the UNet's
  ``class_labels`` (``class_embed_type="identity"``), added to the noise-level embedding and
  applied in every ResNet block through scale-and-shift group norm (DIAMOND's adaptive group
  norm). The gripper's move is also given **spatially**: the current and next normalised
  proprio as constant planes beside two coordinate planes (CoordConv), so the network can
  place the gripper where the proprio says instead of decoding a position from a vector.
- **EDM** (Karras et al. 2022) preconditioning and loss, few-step Euler sampling (1 step for
  ``tiny``: the denoiser's estimate from pure noise is the conditional mean, sharpest in PSNR),
  on the **change** from the last context frame: most of a tabletop frame does not move, so
  the static scene is carried over exactly and the network spends itself on what moves. With
  ``anchor="first"`` (``tiny``) the change is from the episode's first frame instead, its
  objects carried to where the pathway puts them, and the stack holds no context frame: each
  frame is drawn from the imagined state, and its errors are not read back.
- **Noise augmentation of the context** in training (GameNGen, WoVR): Gaussian noise of a
  random level in ``[0, context_noise]`` is added to the context frames and the level is part
  of the conditioning, so the model learns to read imperfect (its own) frames.
- **Proprio head**: the action's commanded gripper pose (the position servos' target) plus an
  MLP's correction from the context proprio, the action and the task (the servos lag; cubes
  stop the fingers); its prediction conditions the frame (training feeds the real next
  proprio: teacher forcing). The head itself learns, like the object pathway, on its own large
  batches of state windows rolled out on its own predictions (:meth:`WorldModel.dynamics_loss`;
  trained one step at a time in the frame model's batches it drifts over a rollout).
- **Success head**: a keypoint detector finds every scene object in one (space-to-depth,
  full-resolution) frame, and an MLP on the keypoints, the proprio and the task gives the
  success logit (see :class:`SuccessHead`). It is trained on the dataset's per-observation ``success`` flags
  (a set share of success frames per batch) and, where the data has ``state``, on the objects'
  projected pixel positions and the goal-minus-object offset; on the real next frames and on
  the denoiser's own (detached) estimates of them, so that it judges imagined frames as it
  judges real ones. Without the object pathway the imagined env reads it on every new frame
  and cuts at the config's ``success_threshold``, calibrated by training on validation episodes.
- **Object pathway** (:mod:`~worldsim.world_models.objects`, on in the presets): the objects'
  next image positions and heights are predicted first and the frame is drawn there (with
  ``carry_objects``, the denoiser corrects the last frame with the moving objects' pixels
  already carried there, rather than the last frame as it is); the success head judges those
  positions (or, with ``outcome="rule"``, each task's own success rule does,
  :mod:`~worldsim.world_models.outcome`), and a cube imagined off the table fails the episode
  as in physics. It trains with the proprio head on their state windows, with their own
  optimiser (:meth:`WorldModel.dynamics_loss`).

The dataset's proprio mean and std are buffers of the model, saved with its weights.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from worldsim.runtime.checkpoint import (
    PRETRAINED_CONFIG,
    PRETRAINED_WEIGHTS,
    load_pretrained_model,
    save_pretrained_model,
)
from worldsim.world_models.config import ACTION_DIM, OFFSET_WEIGHT, PROPRIO_DIM, WorldModelConfig
from worldsim.world_models.data import image_camera
from worldsim.world_models.denoiser import Context, Denoiser
from worldsim.world_models.imagined_step import Prediction, Rollout
from worldsim.world_models.latents import frames_to_latents
from worldsim.world_models.layers import masked_step_mean, mlp, randn
from worldsim.world_models.objects import (
    KEYPOINT_NOISE_PX,
    ObjectDynamics,
    carry_objects,
    keypoint_planes,
    resting_heights,
    rollout_loss,
)
from worldsim.world_models.outcome import TaskRules
from worldsim.world_models.proprio import commanded_proprio, proprio_head
from worldsim.world_models.success_head import SuccessHead, keypoint_loss
from worldsim.world_models.video_backbone import ClipInputs

CONFIG_FILE, WEIGHTS_FILE = PRETRAINED_CONFIG, PRETRAINED_WEIGHTS
MODEL_TYPE = "worldsim-world-model"
MODEL_DIR = "world_model"  # a train-wm run folder's model


class WorldModel(nn.Module):
    """Denoiser + proprio head + success head (+ the object pathway), with the dataset's proprio
    statistics.

    Training batches (:meth:`loss`) hold, for ``B`` windows: ``context`` latents
    ``(B, C, 3p^2, h, w)`` (oldest first), ``first`` ``(B, 3p^2, h, w)``, ``proprio``
    ``(B, C, 4)`` raw, ``action`` ``(B, 4)``, ``task`` ``(B,)`` long, ``target``
    ``(B, 3p^2, h, w)``, ``next_proprio`` ``(B, 4)`` and ``success`` ``(B,)``, the success flag
    of the target frame; where the data has ``state``, ``goal_offset`` ``(B, 3)`` and
    ``entity_pixels`` ``(B, E, 2)`` of the target frame and ``context_entity_pixels``
    ``(B, C, E, 2)`` of the context and ``first_entity_pixels`` ``(B, E, 2)`` of the first frame.
    Imagination goes through :meth:`start` and :meth:`predict`.
    """

    config_class = WorldModelConfig  # what a saved model's config fields build (load_pretrained_model)
    # buffers: proprio normalisation
    proprio_mean: torch.Tensor
    proprio_std: torch.Tensor

    def __init__(self, config: WorldModelConfig) -> None:
        super().__init__()
        self.config = config
        self.denoiser = Denoiser(config)
        n_tasks = len(config.tasks)
        if config.backbone == "unet":  # the video transformer conditions each frame itself
            cond_in = ACTION_DIM + (config.context + 1) * PROPRIO_DIM + 1 + n_tasks
            self.cond_mlp = mlp(cond_in, config.cond_hidden, self.denoiser.embed_dim)
        self.proprio_head = proprio_head(config)
        self.success_head = SuccessHead(config)
        self.objects = ObjectDynamics(config) if config.object_pathway else None
        self.camera = image_camera(config.image_size, config.image_size)
        self.rules = TaskRules(config.tasks, self.camera) if config.object_pathway else None
        self.register_buffer("proprio_mean", torch.zeros(PROPRIO_DIM))
        self.register_buffer("proprio_std", torch.ones(PROPRIO_DIM))

    # ------------------------------------------------------------------ pieces
    def set_normalization(self, mean: np.ndarray | torch.Tensor, std: np.ndarray | torch.Tensor) -> None:
        """Store the dataset's proprio mean and std (saved with the weights)."""
        self.proprio_mean.copy_(torch.as_tensor(np.asarray(mean), dtype=torch.float32))
        self.proprio_std.copy_(torch.as_tensor(np.asarray(std), dtype=torch.float32).clamp_min(1e-6))

    def task_index(self, task: str) -> int:
        """The id of ``task`` in the conditioning; ``ValueError`` listing the known tasks."""
        if task not in self.config.tasks:
            raise ValueError(f"this world model was trained on {', '.join(self.config.tasks)}; it cannot "
                             f"imagine task {task!r}")
        return self.config.tasks.index(task)

    def _one_hot(self, task: torch.Tensor) -> torch.Tensor:
        return F.one_hot(task, len(self.config.tasks)).float()

    def _normalized_proprio(self, proprio: torch.Tensor) -> torch.Tensor:
        return (proprio - self.proprio_mean) / self.proprio_std

    def conditioning(self, action: torch.Tensor, proprio: torch.Tensor, next_norm: torch.Tensor,
                     noise_level: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        """The vector added to the noise-level embedding: action, context proprio, next
        (normalised) proprio, context noise level and task, through an MLP."""
        features = torch.cat([action, self._normalized_proprio(proprio).flatten(1), next_norm,
                              noise_level[:, None], self._one_hot(task)], dim=1)
        return self.cond_mlp(features)

    def next_proprio(self, action: torch.Tensor, proprio: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        """The next proprio in normalised units: what the action commands (the position servos'
        targets, :func:`~worldsim.world_models.proprio.commanded_proprio`) plus the head's
        correction (the servos lag, and a cube or the table stops the fingers). Learning only the
        correction keeps the imagined gripper on the real one: the commanded target is most of
        the move, and a head predicting the whole change drifts."""
        norm = self._normalized_proprio(proprio)
        commanded = self._normalized_proprio(commanded_proprio(proprio[:, -1], action))
        features = [action, norm.flatten(1), commanded - norm[:, -1], self._one_hot(task)]
        correction = self.proprio_head(torch.cat(features, dim=1))
        return commanded + correction

    def _carried(self, latent: torch.Tensor, points: torch.Tensor, next_points: torch.Tensor) -> torch.Tensor:
        assert self.objects is not None  # carry_objects needs the pathway (checked by the config)
        return carry_objects(latent, points, next_points, self.objects.movable_index, self.config.patch)

    def _drawn_from(self, last: torch.Tensor, first: torch.Tensor, points: torch.Tensor | None,
                    first_points: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What a new frame is drawn as a change from (``config.anchor``), and where the objects
        are in it ``(B, C', E, 2)``: the ``last`` frame and the context's ``points``, or the
        ``first`` frame and ``first_points`` ``(B, E, 2)`` (as a window of one)."""
        if self.config.anchor == "first":
            return first, None if first_points is None else first_points[:, None]
        return last, points

    def frame_context(self, context: torch.Tensor, first: torch.Tensor, proprio: torch.Tensor,
                      next_norm: torch.Tensor, level: torch.Tensor, action: torch.Tensor, task: torch.Tensor,
                      points: torch.Tensor | None = None, next_points: torch.Tensor | None = None) -> Context:
        """What the frame network reads besides the noisy frame: for the UNet, the stacked
        channels (:meth:`stack_context`) and the :meth:`conditioning` vector; for the video
        transformer, the clip of first and context frames (with one blob plane per object at
        each frame's positions), each frame's noise level (``level`` for the context, 0 for the
        first frame) and features (its normalised proprio; for the new frame, the next proprio
        ``next_norm`` and the ``action``)."""
        if self.config.backbone == "unet":
            return (self.stack_context(context, first, proprio, next_norm, points, next_points),
                    self.conditioning(action, proprio, next_norm, level, task))
        b, c = context.shape[:2]
        size, patch = self.config.latent_size, self.config.patch
        frames = torch.cat([first[:, None], context], dim=1)
        target_planes = context.new_zeros(b, 0, size, size)
        if self.config.object_pathway:
            assert points is not None and next_points is not None  # the pathway's positions come with it
            planes = keypoint_planes(points.flatten(0, 1), size, patch).view(b, c, -1, size, size)
            planes = torch.cat([torch.zeros_like(planes[:, :1]), planes], dim=1)  # the first frame's are unknown
            frames = torch.cat([frames, planes], dim=2)
            target_planes = keypoint_planes(next_points, size, patch)
        known = context.new_ones(b, c, 1)
        no_action = torch.zeros_like(known).expand(-1, -1, ACTION_DIM)
        given = torch.cat([self._normalized_proprio(proprio), no_action, known], dim=2)
        features = torch.cat([torch.zeros_like(given[:, :1]), given,
                              torch.cat([next_norm, action, known[:, 0]], dim=1)[:, None]], dim=1)
        levels = torch.cat([torch.zeros_like(level[:, None]), level[:, None].expand(-1, c)], dim=1)
        return ClipInputs(frames, target_planes, levels, features, task)

    def stack_context(self, context: torch.Tensor, first: torch.Tensor, proprio: torch.Tensor,
                      next_norm: torch.Tensor, points: torch.Tensor | None = None,
                      next_points: torch.Tensor | None = None) -> torch.Tensor:
        """The UNet's conditioning channels: context ``(B, C, c, h, w)`` and first frame
        ``(B, c, h, w)`` stacked on the channel axis, then the coordinate planes and the
        current and next normalised proprio as constant planes; with the object pathway, one
        blob plane per object at its current (``points[:, -1]``) and its next position. With
        ``anchor="first"`` the context frames are left out, and the caller gives the objects'
        positions in the first frame as ``points[:, -1]``."""
        b, size = len(context), context.shape[-1]
        ramp = torch.linspace(-1.0, 1.0, size, device=context.device)
        coords = torch.stack(torch.meshgrid(ramp, ramp, indexing="ij"))[None].expand(b, -1, -1, -1)
        planes = torch.cat([self._normalized_proprio(proprio[:, -1]), next_norm], dim=1)
        planes = planes[:, :, None, None].expand(-1, -1, size, size)
        frames = [] if self.config.anchor == "first" else [context.flatten(1, 2)]
        stack = [*frames, first, coords, planes]
        patch = self.config.patch
        if self.config.object_pathway:
            assert points is not None and next_points is not None  # the pathway's positions come with it
            stack += [keypoint_planes(points[:, -1], size, patch), keypoint_planes(next_points, size, patch)]
        if self.config.gripper_planes:
            tcp = torch.stack([proprio[:, -1, :3], (next_norm * self.proprio_std + self.proprio_mean)[:, :3]], dim=1)
            stack.append(keypoint_planes(self.camera.project(tcp), size, patch))
        return torch.cat(stack, dim=1)

    # ------------------------------------------------------------------ training
    def loss(self, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None,
             success_weight: float = 1.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The frames' training loss and its named terms: denoising + ``success_weight`` times the success head's
        (binary cross-entropy of the success flag, plus, when the batch has ``goal_offset``
        ``(B, 3)`` in metres, the squared error of its offset estimate in decimetres, and when
        it has ``entity_pixels``, the detector's :func:`keypoint_loss`). The frame is
        teacher-forced on the true next proprio and, with the object pathway, on the true
        (slightly noised) positions of the objects; the proprio head and the pathway learn from
        :meth:`dynamics_loss`. The head judges both the real next frame and the denoiser's own
        detached estimate of it, so it learns to judge imagined frames as it judges real ones.
        The terms are detached 0-d tensors: reading them waits for the device, so the caller reads
        them only when it logs. Draws (:meth:`training_noise`), then :meth:`frame_loss`."""
        return self.frame_loss(batch, self.training_noise(batch, generator), success_weight)

    def training_noise(self, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None
                       ) -> dict[str, torch.Tensor]:
        """The random draws of one :meth:`frame_loss` on ``batch``: the context-noise level and
        the context noise, the objects' keypoint noise (with the pathway) and the denoiser's."""
        context = batch["context"]
        level = torch.rand(len(context), generator=generator, device=context.device)
        largest = 0.0 if self.config.anchor == "first" else self.config.context_noise  # no context frame to noise
        noise = {"level": largest * level, "context": randn(context.shape, generator, context)}
        if self.config.object_pathway and "entity_pixels" in batch:
            # the positions the new frame is drawn from (the frames themselves do not matter here)
            seen = self._drawn_from(context, context, batch["context_entity_pixels"],
                                    batch.get("first_entity_pixels"))[1]
            if seen is not None:
                noise["points"] = randn(seen.shape, generator, seen)
            noise["next_points"] = randn(batch["entity_pixels"].shape, generator, batch["entity_pixels"])
        noise["sigma"], noise["frame"] = self.denoiser.training_noise(batch["target"], generator)
        return noise

    def frame_loss(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor],
                   success_weight: float = 1.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`loss` with its draws given (:meth:`training_noise`): tensors alone, for ``torch.compile``."""
        cfg = self.config
        context, level = batch["context"], noise["level"]
        noisy_context = context + level[:, None, None, None, None] * noise["context"]
        wanted = self._normalized_proprio(batch["next_proprio"])
        # the change is taken from the (augmented) last frame, or from the first frame
        anchor, truth = self._drawn_from(noisy_context[:, -1], batch["first"], batch.get("context_entity_pixels"),
                                         batch.get("first_entity_pixels"))
        terms: dict[str, torch.Tensor] = {}
        points = next_points = None
        if cfg.object_pathway:
            if "entity_pixels" not in batch or truth is None:
                raise ValueError("the object pathway trains on the objects' positions: the data needs the "
                                 "'state' observation (collect with obs_mode='pixels+state')")
            points = truth + KEYPOINT_NOISE_PX * noise["points"]
            target_points = batch["entity_pixels"]
            next_points = target_points + KEYPOINT_NOISE_PX * noise["next_points"]
            if cfg.carry_objects:  # by the true move: the denoiser learns to trust where it is carried
                anchor = self._carried(anchor, truth[:, -1], target_points)
        inputs = self.frame_context(noisy_context, batch["first"], batch["proprio"], wanted, level, batch["action"],
                                    batch["task"], points, next_points)
        change = batch["target"] - anchor
        denoise, estimate = self.denoiser.loss(change, inputs, (noise["sigma"], noise["frame"]))
        terms["denoise"] = denoise.detach()
        labels = batch["success"].float().repeat(2)
        frames = torch.cat([batch["target"], (estimate + anchor).clamp(-1.0, 1.0)])
        logits, offsets, heatmaps, found = self.success_head.outputs(frames, batch["task"].repeat(2),
                                                                     wanted.repeat(2, 1))
        success = F.binary_cross_entropy_with_logits(logits, labels)
        terms["success_bce"] = success.detach()
        if "goal_offset" in batch:
            offset = F.mse_loss(offsets, 10.0 * batch["goal_offset"].repeat(2, 1))
            terms["success_offset"] = offset.detach()
            success = success + OFFSET_WEIGHT * offset
        if "entity_pixels" in batch:
            detector, distance = keypoint_loss(heatmaps, found, batch["entity_pixels"].repeat(2, 1, 1))
            terms["success_keypoints"], terms["keypoint_error_px"] = detector.detach(), distance
            success = success + detector
        with torch.no_grad():
            terms["success_acc"] = ((logits > 0) == labels.bool()).float().mean()
        return denoise + success_weight * success, terms

    def dynamics_parameters(self) -> list[nn.Parameter]:
        """The low-dimensional dynamics' parameters (the proprio head's and the object
        pathway's), trained by :meth:`dynamics_loss` with their own optimiser; the rest of the
        model trains on frames by :meth:`loss`."""
        modules = [self.proprio_head] if self.objects is None else [self.proprio_head, self.objects]
        return [p for module in modules for p in module.parameters()]

    def proprio_rollout_loss(self, windows: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean squared error (normalised units) of the proprio head rolled out over the ``H``
        steps of state ``windows`` (:meth:`~worldsim.world_models.data.EpisodeBank.state_windows`)
        on its own predictions, from the recorded context and with the recorded actions; steps
        past an episode's end are left out. Imagination feeds the head its own predictions, so
        it learns to keep its errors from compounding."""
        proprio, actions, valid = windows["proprio"], windows["actions"], windows["valid"]
        context = proprio.shape[1] - actions.shape[1]
        wanted = self._normalized_proprio(proprio[:, context:])
        current, losses = proprio[:, :context], []
        for k in range(actions.shape[1]):
            predicted = self.next_proprio(actions[:, k], current, windows["task"])
            losses.append(((predicted - wanted[:, k]) ** 2).mean(-1))
            current = torch.cat([current[:, 1:], (predicted * self.proprio_std + self.proprio_mean)[:, None]], dim=1)
        return masked_step_mean(torch.stack(losses, dim=1), valid)

    def dynamics_loss(self, windows: dict[str, torch.Tensor], generator: torch.Generator | None = None
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The low-dimensional dynamics' loss on state ``windows`` and its named terms: the proprio
        head's :meth:`proprio_rollout_loss` (``proprio``) plus, with the object pathway,
        :func:`~worldsim.world_models.objects.rollout_loss` (``objects``; the windows need the
        objects, from data with ``state``). The terms are detached 0-d tensors, as in
        :meth:`loss`. Draws (:meth:`dynamics_noise`), then :meth:`dynamics_terms`."""
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
        terms = {"proprio": self.proprio_rollout_loss(windows)}
        if self.objects is not None:
            terms["objects"] = rollout_loss(self.objects, windows, self._normalized_proprio,
                                            self._one_hot(windows["task"]), self.config.image_size, point_noise)
        return terms

    # ------------------------------------------------------------------ imagination
    @torch.no_grad()
    def start(self, frames: torch.Tensor, first: torch.Tensor, proprio: torch.Tensor,
              objects: tuple[torch.Tensor, torch.Tensor] | None = None) -> Rollout:
        """The :class:`Rollout` of real starts: uint8 context frames ``(B, C, H, W, 3)``, first
        frames ``(B, H, W, 3)`` and raw context proprio ``(B, C, 4)``, on the model's device.
        The object pathway's states are the recorded ``objects`` (positions ``(B, C, E, 2)``
        pixels, heights ``(B, C, E)`` metres) when given, else the success head's keypoint
        detector finds the objects in the frames and each is taken to rest on its plane."""
        device = self.device
        context = frames_to_latents(frames.to(device), self.config.patch)
        points = heights = None
        if self.config.object_pathway and objects is not None:
            points, heights = objects[0].to(device).float(), objects[1].to(device).float()
        elif self.config.object_pathway:
            b, c = context.shape[:2]
            points = self.success_head.locate(context.flatten(0, 1)).view(b, c, -1, 2)
            heights = resting_heights(points)
        first_latent = frames_to_latents(first.to(device), self.config.patch)
        first_points = None
        if self.config.object_pathway and self.config.anchor == "first":
            first_points = self.success_head.locate(first_latent)
        return Rollout(context, first_latent, proprio.to(device).float(), points, heights, first_points)

    def _step_dynamics(self, rollout: Rollout, action: torch.Tensor, task: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """One step of the low-dimensional dynamics: the next normalised proprio and, with the
        pathway, the objects' next positions and heights."""
        proprio = rollout.proprio
        norm = self.next_proprio(action, proprio, task)
        if self.objects is None:
            return norm, None, None
        assert rollout.points is not None and rollout.heights is not None  # started with the pathway
        tcp = torch.stack([proprio[:, -1, :3], (norm * self.proprio_std + self.proprio_mean)[:, :3]], dim=1)
        points, heights = self.objects(rollout.points, rollout.heights, self._normalized_proprio(proprio), norm,
                                       action, self._one_hot(task), tcp)
        return norm, points, heights

    @torch.no_grad()
    def predict(self, rollout: Rollout, action: torch.Tensor, task: torch.Tensor, steps: int | None = None,
                generator: torch.Generator | None = None, draw: bool = True, outcome: str | None = None
                ) -> Prediction:
        """Imagine the next step of a batch of rollouts under ``action`` ``(B, 4)`` for tasks ``(B,)``
        (:meth:`Rollout.advance` takes it in); ``draw=False`` leaves the frame out (``latent`` None:
        the pathway's state alone, drawn by :mod:`~worldsim.world_models.scene_frames`).
        ``outcome``: who judges success, ``"rule"`` (the pathway) or ``"head"`` (None: ``config.outcome``)."""
        outcome = self.config.outcome if outcome is None else outcome
        if outcome == "rule" and self.rules is None:
            raise ValueError("outcome='rule' judges the objects' imagined positions, which only the object pathway "
                             "carries: use outcome='head'")
        norm, points, heights = self._step_dynamics(rollout, action, task)
        next_proprio, latent = norm * self.proprio_std + self.proprio_mean, None
        if draw:
            context, proprio = rollout.context, rollout.proprio
            anchor, seen = self._drawn_from(context[:, -1], rollout.first, rollout.points, rollout.first_points)
            inputs = self.frame_context(context, rollout.first, proprio, norm, context.new_zeros(len(context)), action,
                                        task, seen, points)
            change = self.denoiser.sample(inputs, steps or self.config.sampling_steps, generator)
            if self.config.carry_objects and seen is not None and points is not None:
                anchor = self._carried(anchor, seen[:, -1], points)
            latent = (anchor + change).clamp(-1.0, 1.0)
        if self.rules is None or points is None or heights is None:
            if latent is None:
                raise ValueError("draw=False needs the object pathway: without it success is judged on the frame")
            return Prediction(latent, next_proprio, torch.sigmoid(self.success_head(latent, task, norm)))
        # judged where the pathway put the objects, as the frame was drawn there
        if outcome == "rule":
            success, failed = self.rules.outcome(task, next_proprio, points, heights)
            return Prediction(latent, next_proprio, success.float(), points, heights, failed)
        success_prob = torch.sigmoid(self.success_head.judge(points, task, norm)[0])
        return Prediction(latent, next_proprio, success_prob, points, heights,
                          self.rules.failed(next_proprio, points, heights))

    @torch.no_grad()
    def move_objects(self, points: torch.Tensor, heights: torch.Tensor, proprio: torch.Tensor,
                     next_proprio: torch.Tensor, action: torch.Tensor, task: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the object pathway alone, given the gripper's motion (context positions
        ``(B, C, E, 2)``, heights ``(B, C, E)``, raw context proprio ``(B, C, 4)``, the raw proprio
        reached ``(B, 4)``): the objects' next positions and heights. Fed the recorded motion, it
        says how far the pathway follows the real pushes (:meth:`predict` uses its own head's)."""
        if self.objects is None:
            raise ValueError("this world model has no object pathway (config.object_pathway is False)")
        return self.objects(points, heights, self._normalized_proprio(proprio),
                            self._normalized_proprio(next_proprio), action, self._one_hot(task),
                            torch.stack([proprio[:, -1, :3], next_proprio[:, :3]], dim=1))

    @torch.no_grad()
    def success_prob(self, latent: torch.Tensor, task: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        """Success probability of latent frames ``(B, 3p^2, h, w)`` with their raw proprio ``(B, 4)``."""
        return torch.sigmoid(self.success_head(latent, task, self._normalized_proprio(proprio)))

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
        return self.proprio_mean.device

    def num_parameters(self) -> int:
        return sum(math.prod(p.shape) for p in self.parameters())
