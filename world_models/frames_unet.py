"""The ``unet`` frame generator: a diffusers ``UNet2DModel`` with the context on its channels.

- **Context on the channel axis** (DIAMOND): the noisy next frame, the ``C`` latest frames and
  the episode's first frame (first-frame anchoring, WoVR: the static scene never drifts) are
  stacked into one input of ``48 * (C + 2)`` channels (plus the planes below); with
  ``anchor="first"`` the context frames are left out and each frame is drawn from the first.
- **Conditioning through the time embedding**: an MLP embeds the action, the context proprio,
  the next proprio, the context-noise level and the task; the result enters as the UNet's
  ``class_labels`` (``class_embed_type="identity"``), added to the noise-level embedding and
  applied in every ResNet block through scale-and-shift group norm (DIAMOND's adaptive group
  norm). The gripper's move is also given **spatially**: the current and next normalised proprio
  as constant planes beside two coordinate planes (CoordConv); with the object pathway, one blob
  plane per object at its current and its next position; with ``gripper_planes``, one at the
  TCP's current and next position projected into the camera.
"""

from __future__ import annotations

from typing import Any

import torch

from worldsim.world_models.config import ACTION_DIM, PROPRIO_DIM, SPATIAL_CHANNELS, UNetConfig, WorldModelConfig
from worldsim.world_models.frames import Conditions, FrameGenerator
from worldsim.world_models.layers import mlp
from worldsim.world_models.objects import keypoint_planes


class UNetFrames(FrameGenerator):
    """The UNet frame generator (see the module docstring)."""

    def __init__(self, config: WorldModelConfig, planes: int, carry: bool) -> None:
        from diffusers import UNet2DModel  # here, not at import: diffusers costs seconds to import

        super().__init__(config, planes, carry)
        own = config.frames
        assert isinstance(own, UNetConfig)  # the assembler gives each generator its own config
        self.own = own
        c, blocks = config.latent_channels, len(own.channels)
        frames = config.context if own.context_frames else 0
        self.unet: Any = UNet2DModel(
            sample_size=config.latent_size, in_channels=c * (frames + 2) + SPATIAL_CHANNELS + 2 * planes
            + (2 if own.gripper_planes else 0), out_channels=c,
            block_out_channels=own.channels, layers_per_block=own.layers_per_block,
            down_block_types=("DownBlock2D",) * blocks, up_block_types=("UpBlock2D",) * blocks,
            norm_num_groups=own.norm_groups, class_embed_type="identity",
            resnet_time_scale_shift="scale_shift", add_attention=False)
        embed_dim = 4 * own.channels[0]  # UNet2DModel's time-embedding width
        cond_in = ACTION_DIM + (config.context + 1) * PROPRIO_DIM + 1 + len(config.tasks)
        self.cond_mlp = mlp(cond_in, own.cond_hidden, embed_dim)

    @property
    def context_noise(self) -> float:
        return self.own.context_noise if self.own.context_frames else 0.0  # no context frame to noise

    @property
    def reads_first_positions(self) -> bool:
        return not self.own.context_frames

    def anchored(self, last: torch.Tensor, first: torch.Tensor, points: torch.Tensor | None,
                 first_points: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """With ``anchor="first"``, the ``first`` frame and ``first_points`` ``(B, E, 2)`` (as a
        window of one); else the last frame and the context's points."""
        if not self.own.context_frames:
            return first, None if first_points is None else first_points[:, None]
        return last, points

    def network(self, x_scaled: torch.Tensor, sigma: torch.Tensor, inputs: Any) -> torch.Tensor:
        stack, cond = inputs
        # ln(sigma)/4 as in EDM, scaled so the UNet's sinusoidal (DDPM-style) embedding resolves it
        return self.unet(torch.cat([x_scaled, stack], dim=1), 250.0 * sigma.log(), class_labels=cond).sample

    def inputs(self, context: torch.Tensor, first: torch.Tensor, level: torch.Tensor, conditions: Conditions,
               points: torch.Tensor | None, next_points: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The stacked channels (:meth:`stack`) and the conditioning vector: action, context
        proprio, next proprio, context noise level and task, through the MLP."""
        features = torch.cat([conditions.action, conditions.proprio.flatten(1), conditions.next_proprio,
                              level[:, None], conditions.task_one_hot], dim=1)
        return self.stack(context, first, conditions, points, next_points), self.cond_mlp(features)

    def sample_like(self, inputs: Any) -> torch.Tensor:
        return inputs[0]

    def stack(self, context: torch.Tensor, first: torch.Tensor, conditions: Conditions,
              points: torch.Tensor | None = None, next_points: torch.Tensor | None = None) -> torch.Tensor:
        """The conditioning channels: context ``(B, C, c, h, w)`` (left out when drawing from the
        first frame) and first frame ``(B, c, h, w)`` stacked on the channel axis, then the
        coordinate planes and the current and next normalised proprio as constant planes; with the
        object pathway, one blob plane per object at its current (``points[:, -1]``) and its next
        position; with ``gripper_planes``, the TCP now and next."""
        b, size, patch = len(context), context.shape[-1], self.model_config.patch
        ramp = torch.linspace(-1.0, 1.0, size, device=context.device)
        coords = torch.stack(torch.meshgrid(ramp, ramp, indexing="ij"))[None].expand(b, -1, -1, -1)
        planes = torch.cat([conditions.proprio[:, -1], conditions.next_proprio], dim=1)
        planes = planes[:, :, None, None].expand(-1, -1, size, size)
        frames = [context.flatten(1, 2)] if self.own.context_frames else []
        stack = [*frames, first, coords, planes]
        if self.planes:
            assert points is not None and next_points is not None  # the pathway's positions come with it
            stack += [keypoint_planes(points[:, -1], size, patch), keypoint_planes(next_points, size, patch)]
        if self.own.gripper_planes:
            stack.append(keypoint_planes(self.image_camera.project(conditions.tcp), size, patch))
        return torch.cat(stack, dim=1)
