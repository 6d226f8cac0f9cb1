"""The frame generator: the world model's part that draws the next frame, one per backbone (the
UNet, :mod:`~worldsim.world_models.frames_unet`; the video transformer,
:mod:`~worldsim.world_models.video_backbone`), on what this base class shares.

A new frame is drawn by EDM diffusion (:mod:`~worldsim.world_models.denoiser`) as the **change**
from an anchor frame: most of a tabletop frame does not move, so the static scene is carried
over exactly and the network spends itself on what moves. The anchor is the last context frame,
or (the UNet's ``anchor="first"``) the episode's first frame. With the object pathway the
generator reads where the objects are and go (one blob plane per object), and with ``carry`` its
anchor has the moving objects' pixels already carried there
(:func:`~worldsim.world_models.objects.carry_objects`; with ``clear``, the spots they left show
the empty table the model learned; with ``clear_arm``, the starting arm is cleared from the first
frame: :mod:`~worldsim.world_models.anchor`), which the denoiser corrects.

Training is teacher-forced: the true next proprio and, with the pathway, the true (slightly
noised) object positions condition the frame; the context frames are noised by a random level
in ``[0, context_noise]`` (GameNGen, WoVR), given to the network, so that it learns to read
imperfect (its own) frames.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from worldsim.envs.observations import ENTITIES
from worldsim.world_models.anchor import arm_appearance, arm_radius, background_image, clear_arm
from worldsim.world_models.config import WorldModelConfig
from worldsim.world_models.data import image_camera
from worldsim.world_models.denoiser import EDM
from worldsim.world_models.layers import randn, task_one_hot
from worldsim.world_models.objects import KEYPOINT_NOISE_PX, carry_objects
from worldsim.world_models.proprio import ProprioScale


@dataclass
class Conditions:
    """What a frame is drawn under, for ``B`` windows: the context proprio ``(B, C, 4)`` and the
    next proprio ``(B, 4)``, both normalised, the gripper's TCP now and next ``(B, 2, 3)`` (raw,
    metres), the ``action`` ``(B, 4)``, the task ids ``(B,)`` and their one-hot ``(B, T)``."""

    proprio: torch.Tensor
    next_proprio: torch.Tensor
    tcp: torch.Tensor
    action: torch.Tensor
    task: torch.Tensor
    task_one_hot: torch.Tensor

    @classmethod
    def of(cls, scale: ProprioScale, proprio: torch.Tensor, next_norm: torch.Tensor, action: torch.Tensor,
           task: torch.Tensor, tasks: int) -> Conditions:
        """The conditions of raw context ``proprio`` and the normalised next proprio ``next_norm``,
        read through the dataset's ``scale``, for a model of ``tasks`` tasks."""
        tcp = torch.stack([proprio[:, -1, :3], scale.raw(next_norm)[:, :3]], dim=1)
        return cls(scale.normalize(proprio), next_norm, tcp, action, task, task_one_hot(task, tasks))


class FrameGenerator(nn.Module, ABC):
    """The next frame of a batch of windows, drawn by a backbone's network (subclasses give
    :meth:`network` and :meth:`inputs`). ``planes``: the object pathway's entities shown to the
    network (0 without the pathway); ``carry``: the anchor's objects carried to where they go."""

    movable_index: torch.Tensor
    background: torch.Tensor | None
    arm_footprint: torch.Tensor | None
    arm_colour: torch.Tensor | None

    def __init__(self, config: WorldModelConfig, planes: int, carry: bool) -> None:
        super().__init__()
        self.model_config, self.planes, self.carry = config, planes, carry
        self.edm = EDM(config.diffusion)
        movable = [k for k, name in enumerate(ENTITIES) if name.endswith("_cube")]
        self.register_buffer("movable_index", torch.tensor(movable), persistent=False)
        # the empty scene the carried cubes' and the starting arm's spots are cleared to and the arm's
        # footprint, learned from the training frames (learn_scene) and saved with the weights
        pathway = config.objects
        from_first = getattr(config.frames, "anchor", "last") == "first"  # only the first frame has a starting arm
        clears_arm = carry and pathway is not None and pathway.clear_arm and from_first
        clears = carry and pathway is not None and (pathway.clear or pathway.clear_arm)
        self.paste = pathway is None or pathway.paste
        size, reach = config.image_size, arm_radius(config.image_size)
        self.register_buffer("background", torch.zeros(3, size, size) if clears else None)
        self.register_buffer("arm_footprint", torch.zeros(2 * reach + 1, 2 * reach + 1) if clears_arm else None)
        self.register_buffer("arm_colour", torch.zeros(3, 2 * reach + 1, 2 * reach + 1) if clears_arm else None)
        self.image_camera = image_camera(size, size)

    def learn_scene(self, images: np.ndarray, proprio: np.ndarray, episode_starts: np.ndarray) -> None:
        """Learn the empty scene (:func:`~worldsim.world_models.anchor.background_image`) and, for a
        generator that clears the arm, the arm's footprint and colours
        (:func:`~worldsim.world_models.anchor.arm_appearance`) from uint8 training frames
        ``(N, H, W, 3)`` and their raw proprio ``(N, 4)``; ``episode_starts``: the rows of the
        episodes' first frames, which the footprint is learned on (the arm is cleared from them; it
        stands high there, and the camera sees more of it than later). Nothing for a generator that
        keeps its anchor as it is."""
        if self.background is None:
            return
        self.background.copy_(background_image(images, self.model_config.patch))
        if self.arm_footprint is not None and self.arm_colour is not None:
            rows = np.asarray(episode_starts)
            footprint, colour = arm_appearance(images[rows], proprio[rows, :3], self.image_camera, self.background,
                                               arm_radius(self.model_config.image_size))
            self.arm_footprint.copy_(footprint)
            self.arm_colour.copy_(colour)

    def carried(self, anchor: torch.Tensor, points: torch.Tensor | None, next_points: torch.Tensor | None,
                first_tcp: torch.Tensor | None) -> torch.Tensor:
        """The ``anchor`` latent ``(B, c, h, w)`` with what moves taken out: the starting arm cleared
        at the first frame's TCP ``first_tcp`` ``(B, 3)`` (metres; with ``clear_arm``, when known),
        then the movable objects carried from ``points`` ``(B, E, 2)`` to ``next_points``."""
        patch = self.model_config.patch
        if (self.arm_footprint is not None and self.arm_colour is not None and self.background is not None
                and first_tcp is not None):
            frames = clear_arm(F.pixel_shuffle(anchor, patch), self.image_camera.project(first_tcp),
                               self.arm_footprint, self.arm_colour, self.background)
            anchor = F.pixel_unshuffle(frames, patch)
        if points is not None and next_points is not None:
            anchor = carry_objects(anchor, points, next_points, self.movable_index, patch, self.background,
                                   self.paste)
        return anchor

    # ------------------------------------------------------------------ what a backbone gives
    @abstractmethod
    def network(self, x_scaled: torch.Tensor, sigma: torch.Tensor, inputs: Any) -> torch.Tensor:
        """``F(c_in x; sigma, inputs)``: the network's raw output for the frame being made."""

    @abstractmethod
    def inputs(self, context: torch.Tensor, first: torch.Tensor, level: torch.Tensor, conditions: Conditions,
               points: torch.Tensor | None, next_points: torch.Tensor | None) -> Any:
        """What the network reads besides the noisy frame, from the context latents ``(B, C, c, h, w)``,
        the first frame ``(B, c, h, w)``, the context's noise ``level`` ``(B,)``, the ``conditions``
        and the positions the frame is drawn from and to (:meth:`anchored`)."""

    def anchored(self, last: torch.Tensor, first: torch.Tensor, points: torch.Tensor | None,
                 first_points: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What a new frame is drawn as a change from, and where the objects are in it ``(B, C', E, 2)``:
        the ``last`` frame and the context's ``points`` (the default)."""
        return last, points

    @property
    def reads_context(self) -> bool:
        """Whether a frame is drawn from the earlier (context) frames, so that every step's frame
        must be drawn for the next one to be."""
        return self.model_config.frames.context_frames

    @property
    def context_noise(self) -> float:
        """The largest noise level of the context frames in training."""
        return self.model_config.frames.context_noise

    @property
    def reads_first_positions(self) -> bool:
        """Whether a frame is drawn from the objects' positions in the first frame (which the
        rollout then carries)."""
        return False

    # ------------------------------------------------------------------ training
    def training_noise(self, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None
                       ) -> dict[str, torch.Tensor]:
        """The random draws of one :meth:`loss` on ``batch``: the context-noise level and the context
        noise, the objects' keypoint noise (with the pathway) and the denoiser's."""
        context = batch["context"]
        level = torch.rand(len(context), generator=generator, device=context.device)
        noise = {"level": self.context_noise * level, "context": randn(context.shape, generator, context)}
        if self.planes and "entity_pixels" in batch:
            # the positions the new frame is drawn from (the frames themselves do not matter here)
            seen = self.anchored(context, context, batch["context_entity_pixels"], batch.get("first_entity_pixels"))[1]
            if seen is not None:
                noise["points"] = randn(seen.shape, generator, seen)
            noise["next_points"] = randn(batch["entity_pixels"].shape, generator, batch["entity_pixels"])
        noise["sigma"], noise["frame"] = self.edm.training_noise(batch["target"], generator)
        return noise

    def loss(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor], conditions: Conditions
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """The denoising loss on ``batch`` with its draws ``noise`` (:meth:`training_noise`), the frame
        teacher-forced on ``conditions`` and, with the pathway, on the objects' true (noised)
        positions; also the denoiser's detached estimate of the target frame ``(B, c, h, w)``."""
        context, level = batch["context"], noise["level"]
        noisy_context = context + level[:, None, None, None, None] * noise["context"]
        # the change is taken from the (augmented) last frame, or from the first frame
        anchor, truth = self.anchored(noisy_context[:, -1], batch["first"], batch.get("context_entity_pixels"),
                                      batch.get("first_entity_pixels"))
        points = next_points = None
        if self.planes:
            if "entity_pixels" not in batch or truth is None:
                raise ValueError("the object pathway trains on the objects' positions: the data needs the "
                                 "'state' observation (collect with obs_mode='pixels+state')")
            points = truth + KEYPOINT_NOISE_PX * noise["points"]
            next_points = batch["entity_pixels"] + KEYPOINT_NOISE_PX * noise["next_points"]
        if self.carry and truth is not None:  # by the true move: the denoiser learns to trust where it is carried
            first_tcp = batch["first_proprio"][:, :3] if "first_proprio" in batch else None
            anchor = self.carried(anchor, truth[:, -1], batch["entity_pixels"], first_tcp)
        inputs = self.inputs(noisy_context, batch["first"], level, conditions, points, next_points)
        denoise, estimate = self.edm.loss(self.network, batch["target"] - anchor, inputs, (noise["sigma"],
                                                                                           noise["frame"]))
        return denoise, (estimate + anchor).clamp(-1.0, 1.0)

    # ------------------------------------------------------------------ imagination
    def draw(self, context: torch.Tensor, first: torch.Tensor, conditions: Conditions, steps: int,
             generator: torch.Generator | None, points: torch.Tensor | None = None,
             first_points: torch.Tensor | None = None, next_points: torch.Tensor | None = None,
             first_tcp: torch.Tensor | None = None) -> torch.Tensor:
        """The next latent frame ``(B, c, h, w)`` of windows of context latents ``(B, C, c, h, w)``
        and first frames, under ``conditions``, in ``steps`` Euler steps; with the pathway, the
        objects' context positions ``points``, their positions in the first frame and where they go,
        and the gripper's TCP in the first frame ``first_tcp`` ``(B, 3)`` (the starting arm is
        cleared there; None: not known, the arm is left where the first frame shows it)."""
        anchor, seen = self.anchored(context[:, -1], first, points, first_points)
        inputs = self.inputs(context, first, context.new_zeros(len(context)), conditions, seen, next_points)
        cfg = self.model_config
        shape = (len(context), cfg.latent_channels, cfg.latent_size, cfg.latent_size)
        change = self.edm.sample(self.network, inputs, shape, self.sample_like(inputs), steps, generator)
        if self.carry and seen is not None:
            anchor = self.carried(anchor, seen[:, -1], next_points, first_tcp)
        return (anchor + change).clamp(-1.0, 1.0)

    @abstractmethod
    def sample_like(self, inputs: Any) -> torch.Tensor:
        """A tensor of the inputs whose device and dtype the sample takes."""
