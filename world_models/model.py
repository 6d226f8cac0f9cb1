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
  the static scene is carried over exactly and the network spends itself on what moves.
- **Noise augmentation of the context** in training (GameNGen, WoVR): Gaussian noise of a
  random level in ``[0, context_noise]`` is added to the context frames and the level is part
  of the conditioning, so the model learns to read imperfect (its own) frames.
- **Proprio head**: an MLP predicts the change of the normalised proprio from the context
  proprio, the action and the task (the gripper pose follows the commands almost exactly);
  its prediction conditions the frame (training feeds the real next proprio: teacher forcing).
- **Success head**: a keypoint detector finds every scene object in one (space-to-depth,
  full-resolution) frame, and an MLP on the keypoints, the proprio and the task gives the
  success logit (see :class:`SuccessHead`). It is trained on the dataset's per-observation ``success`` flags
  (a set share of success frames per batch) and, where the data has ``state``, on the objects'
  projected pixel positions and the goal-minus-object offset; on the real next frames and on
  the denoiser's own (detached) estimates of them, so that it judges imagined frames as it
  judges real ones. The imagined env reads it on every new frame and cuts at the config's
  ``success_threshold``, calibrated by training on validation episodes.

The dataset's proprio mean and std are buffers of the model, saved with its weights.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from worldsim.runtime.checkpoint import (
    PRETRAINED_CONFIG,
    PRETRAINED_WEIGHTS,
    load_pretrained_weights,
    save_pretrained_folder,
)
from worldsim.envs.observations import ENTITIES
from worldsim.runtime.run_logging import to_jsonable

CONFIG_FILE, WEIGHTS_FILE = PRETRAINED_CONFIG, PRETRAINED_WEIGHTS
MODEL_TYPE = "worldsim-world-model"
ACTION_DIM = 4
PROPRIO_DIM = 4
SPATIAL_CHANNELS = 2 + 2 * PROPRIO_DIM  # x and y coordinates, current and next proprio
OFFSET_WEIGHT = 0.1  # the success head's goal-offset regression, against its cross-entropy
SUCCESS_PRIOR = 0.02  # the success head's initial probability
KEYPOINT_L1 = 0.1  # the detector's soft-argmax distance (pixels), against its heatmap cross-entropy


# ---------------------------------------------------------------------------- configuration
@dataclass
class WorldModelConfig:
    """Architecture of a :class:`WorldModel`; the tasks and image size come from the data."""

    tasks: tuple[str, ...] = ("PushCube-v0",)
    """Task names the model was trained on (index = task id in the conditioning)."""
    instructions: tuple[str, ...] = ("push the red cube onto the blue square",)
    """The instruction of each task, in the order of ``tasks``."""
    image_size: int = 64
    """Side of the square ``image`` observation, in pixels."""
    patch: int = 4
    """Space-to-depth factor: the UNet works on (image_size / patch)^2 cells of 3 * patch^2 channels."""
    context: int = 4
    """Latest frames the model sees (C), besides the episode's first frame."""
    channels: tuple[int, ...] = (32, 64, 64)
    """UNet block widths; each block but the last halves the resolution."""
    layers_per_block: int = 1
    """ResNet layers per UNet block."""
    norm_groups: int = 16
    """Group-norm groups (must divide every width)."""
    cond_hidden: int = 128
    """Hidden width of the conditioning and proprio MLPs."""
    sigma_data: float = 0.1
    """EDM: standard deviation of the data (the frame-to-frame change, in [-1, 1] units)."""
    sigma_min: float = 2e-3
    """EDM sampling: the last noise level."""
    sigma_max: float = 2.0
    """EDM sampling: the first noise level."""
    rho: float = 7.0
    """EDM sampling: the schedule's curvature."""
    p_mean: float = -1.2
    """EDM training: mean of log(sigma)."""
    p_std: float = 1.2
    """EDM training: std of log(sigma)."""
    sampling_steps: int = 1
    """Euler denoising steps per imagined frame (1-5)."""
    context_noise: float = 0.1
    """Training: the largest std of the Gaussian noise added to context frames (0: none)."""
    success_channels: int = 32
    """Width of the success head's keypoint-detector convolutions."""
    success_threshold: float = 0.5
    """Success probability at or above which a frame counts as a success (the imagined env's
    cut); ``train-wm`` calibrates it on its validation episodes."""

    def __post_init__(self) -> None:
        self.tasks, self.instructions = tuple(self.tasks), tuple(self.instructions)
        self.channels = tuple(int(c) for c in self.channels)
        if not self.tasks or len(self.tasks) != len(self.instructions):
            raise ValueError(f"tasks={self.tasks!r} and instructions={self.instructions!r} must be non-empty "
                             "and of equal length")
        if self.patch < 1 or self.image_size % self.patch:
            raise ValueError(f"patch={self.patch} must be >= 1 and divide image_size={self.image_size}")
        cells = self.image_size // self.patch
        if cells % 2 ** (len(self.channels) - 1):
            raise ValueError(f"channels={self.channels}: {len(self.channels) - 1} halvings do not divide "
                             f"the {cells}x{cells} latent (image_size / patch); use fewer blocks or a "
                             "smaller patch")
        for name in ("context", "layers_per_block", "norm_groups", "cond_hidden", "success_channels"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 1")
        if any(c % self.norm_groups for c in self.channels):
            raise ValueError(f"norm_groups={self.norm_groups} must divide every width of "
                             f"channels={self.channels}")
        if not 1 <= self.sampling_steps <= 50:
            raise ValueError(f"sampling_steps={self.sampling_steps!r} must be in [1, 50] (1-5 is the design)")
        if not 0 < self.sigma_min < self.sigma_max:
            raise ValueError(f"need 0 < sigma_min < sigma_max; got {self.sigma_min}, {self.sigma_max}")
        if self.context_noise < 0:
            raise ValueError(f"context_noise={self.context_noise!r} must be >= 0")
        if not 0.0 < self.success_threshold < 1.0:
            raise ValueError(f"success_threshold={self.success_threshold!r} must be in (0, 1)")

    @property
    def latent_channels(self) -> int:
        return 3 * self.patch**2

    @property
    def latent_size(self) -> int:
        return self.image_size // self.patch


PRESETS: dict[str, dict[str, Any]] = {
    # CPU: ~0.9M-parameter UNet at 16x16, one denoising step.
    "tiny": {"channels": (32, 64, 64), "layers_per_block": 1, "norm_groups": 16, "cond_hidden": 128,
             "sampling_steps": 1},
    # GPU: wider and deeper, three denoising steps (DIAMOND's count).
    "base": {"channels": (128, 256, 256), "layers_per_block": 2, "norm_groups": 32, "cond_hidden": 512,
             "sampling_steps": 3, "success_channels": 64},
}


def preset(name: str, **fields: Any) -> WorldModelConfig:
    """The ``tiny`` (CPU) or ``base`` (GPU) architecture, with data-given ``fields`` (tasks,
    instructions, image_size) and any overrides."""
    if name not in PRESETS:
        raise ValueError(f"config={name!r} is not a preset; allowed: {', '.join(PRESETS)}")
    return WorldModelConfig(**{**PRESETS[name], **fields})


# ---------------------------------------------------------------------------- frames <-> latents
def frames_to_latents(frames: torch.Tensor, patch: int) -> torch.Tensor:
    """uint8 frames ``(..., H, W, 3)`` -> float ``(..., 3 p^2, H/p, W/p)`` in [-1, 1] (space-to-depth)."""
    lead = frames.shape[:-3]
    x = frames.reshape(-1, *frames.shape[-3:]).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
    x = F.pixel_unshuffle(x, patch)
    return x.reshape(*lead, *x.shape[1:])


def latents_to_frames(latents: torch.Tensor, patch: int) -> torch.Tensor:
    """The inverse of :func:`frames_to_latents`: uint8 ``(..., H, W, 3)``, clamped and rounded."""
    lead = latents.shape[:-3]
    x = F.pixel_shuffle(latents.reshape(-1, *latents.shape[-3:]), patch)
    x = x.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
    return x.reshape(*lead, *x.shape[1:])


def _mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                         nn.Linear(hidden, outputs))


# ---------------------------------------------------------------------------- the parts
class Denoiser(nn.Module):
    """EDM denoiser ``D(x; sigma, context, cond)`` around a diffusers ``UNet2DModel``."""

    def __init__(self, config: WorldModelConfig):
        from diffusers import UNet2DModel  # here, not at import: diffusers costs seconds to import

        super().__init__()
        self.config = config
        c = config.latent_channels
        blocks = len(config.channels)
        self.embed_dim = 4 * config.channels[0]  # UNet2DModel's time-embedding width
        self.unet = UNet2DModel(
            sample_size=config.latent_size, in_channels=c * (config.context + 2) + SPATIAL_CHANNELS,
            out_channels=c,
            block_out_channels=config.channels, layers_per_block=config.layers_per_block,
            down_block_types=("DownBlock2D",) * blocks, up_block_types=("UpBlock2D",) * blocks,
            norm_num_groups=config.norm_groups, class_embed_type="identity",
            resnet_time_scale_shift="scale_shift", add_attention=False)

    # Karras et al. 2022, Table 1 (EDM column): one method per preconditioning equation.
    def c_skip(self, sigma: torch.Tensor) -> torch.Tensor:
        return self.config.sigma_data**2 / (sigma**2 + self.config.sigma_data**2)

    def c_out(self, sigma: torch.Tensor) -> torch.Tensor:
        return sigma * self.config.sigma_data / (sigma**2 + self.config.sigma_data**2).sqrt()

    def c_in(self, sigma: torch.Tensor) -> torch.Tensor:
        return 1.0 / (sigma**2 + self.config.sigma_data**2).sqrt()

    def c_noise(self, sigma: torch.Tensor) -> torch.Tensor:
        # ln(sigma)/4 as in EDM, scaled so the UNet's sinusoidal (DDPM-style) embedding resolves it
        return 250.0 * sigma.log()

    def network(self, x_noisy: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor,
                cond: torch.Tensor) -> torch.Tensor:
        """``F(c_in x; c_noise, context, cond)``: the raw UNet output."""
        scale = self.c_in(sigma)[:, None, None, None]
        return self.unet(torch.cat([x_noisy * scale, context], dim=1), self.c_noise(sigma),
                         class_labels=cond).sample

    def denoise(self, x_noisy: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor,
                cond: torch.Tensor) -> torch.Tensor:
        """``D(x; sigma) = c_skip x + c_out F(c_in x; c_noise)``."""
        s = sigma[:, None, None, None]
        return self.c_skip(s) * x_noisy + self.c_out(s) * self.network(x_noisy, sigma, context, cond)

    def loss(self, target: torch.Tensor, context: torch.Tensor, cond: torch.Tensor,
             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """EDM training loss: sigma ~ logN(p_mean, p_std^2), the network regresses the
        preconditioned target ``(x0 - c_skip x) / c_out`` (the lambda-weighted denoising loss).
        Also returns the detached estimate ``D(x; sigma)`` of ``x0``."""
        b = len(target)
        log_sigma = self.config.p_mean + self.config.p_std * _randn((b,), generator, target)
        sigma = log_sigma.exp()
        s = sigma[:, None, None, None]
        x_noisy = target + s * _randn(target.shape, generator, target)
        wanted = (target - self.c_skip(s) * x_noisy) / self.c_out(s)
        output = self.network(x_noisy, sigma, context, cond)
        with torch.no_grad():
            estimate = self.c_skip(s) * x_noisy + self.c_out(s) * output
        return F.mse_loss(output, wanted), estimate

    def sigmas(self, steps: int, device: torch.device) -> torch.Tensor:
        """The Karras schedule from sigma_max down to sigma_min in ``steps`` levels, then 0."""
        cfg = self.config
        ramp = torch.linspace(0, 1, steps, device=device)
        inv = 1.0 / cfg.rho
        levels = (cfg.sigma_max**inv + ramp * (cfg.sigma_min**inv - cfg.sigma_max**inv)) ** cfg.rho
        return torch.cat([levels, torch.zeros(1, device=device)])

    def sample(self, context: torch.Tensor, cond: torch.Tensor, steps: int,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Euler sampling of the probability-flow ODE over :meth:`sigmas`."""
        b = len(context)
        shape = (b, self.config.latent_channels, self.config.latent_size, self.config.latent_size)
        sigmas = self.sigmas(steps, context.device)
        x = sigmas[0] * _randn(shape, generator, context)
        for sigma, following in zip(sigmas[:-1], sigmas[1:]):
            denoised = self.denoise(x, sigma.expand(b), context, cond)
            x = x + (following - sigma) * (x - denoised) / sigma  # dx/dsigma = (x - D) / sigma
        return x


class SuccessHead(nn.Module):
    """Frame-level success from where the scene's objects are in the frame.

    Success is a relation between object positions (the cube on the zone), decided at the
    scale of a pixel at 64x64, with one success frame per recorded episode to learn from; so
    the head first finds the objects, then judges them:

    - a fully convolutional **keypoint detector** over the latent (space-to-depth is lossless,
      so every pixel is seen) ends in ``patch^2`` logits per latent cell and entity, put back
      in place by depth-to-space: one heatmap over the full-resolution pixels per scene entity
      (:data:`~worldsim.envs.observations.ENTITIES`: the cubes, zones and bin); its soft-argmax
      is the entity's position in pixels. Where the data has ``state``, the entities' projected
      positions supervise the heatmaps on every frame (a dense target, translation-equivariant
      by construction: it generalises from a few hundred episodes, where a flattened feature
      map overfits);
    - an **MLP on the keypoints, the proprio and the task** gives the success logit and an
      estimate of the task's goal-minus-object offset (decimetres; trained where the data has
      ``state``). The proprio (the gripper's position and opening, normalised) is what reaching,
      placing and stacking are judged by besides the objects, and imagination predicts it
      almost exactly.
    """

    AUX_DIM = 3

    def __init__(self, config: WorldModelConfig):
        super().__init__()
        width, self.patch = config.success_channels, config.patch
        self.entities = len(ENTITIES)
        self.detector = nn.Sequential(
            nn.Conv2d(config.latent_channels, width, 3, padding=1), nn.SiLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.SiLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.SiLU(),
            nn.Conv2d(width, self.entities * config.patch**2, 1))
        self.num_tasks = len(config.tasks)
        self.classifier = _mlp(2 * self.entities + PROPRIO_DIM + self.num_tasks, config.cond_hidden,
                               1 + self.AUX_DIM)
        with torch.no_grad():  # success is rare: start at a 2% prior, not at 50% on every frame
            self.classifier[-1].bias[0] = math.log(SUCCESS_PRIOR / (1 - SUCCESS_PRIOR))
        centres = torch.arange(config.image_size, dtype=torch.float32) + 0.5
        self.register_buffer("pixel_centres", centres, persistent=False)

    def heatmaps(self, latent: torch.Tensor) -> torch.Tensor:
        """Per-entity logits over the pixels ``(B, entities, H, W)``."""
        return F.pixel_shuffle(self.detector(latent), self.patch)

    def keypoints(self, heatmaps: torch.Tensor) -> torch.Tensor:
        """Soft-argmax of ``heatmaps``: each entity's expected (column, row) in pixels ``(B, entities, 2)``."""
        b, n, h, w = heatmaps.shape
        p = heatmaps.flatten(2).softmax(-1).view(b, n, h, w)
        return torch.stack([(p.sum(2) * self.pixel_centres[:w]).sum(-1),
                            (p.sum(3) * self.pixel_centres[:h]).sum(-1)], dim=-1)

    def outputs(self, latent: torch.Tensor, task: torch.Tensor, proprio: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """For latent frames, tasks ``(B,)`` and normalised proprio ``(B, 4)``: the success logit
        ``(B,)``, the goal-offset estimate ``(B, 3)`` (decimetres), the heatmaps
        ``(B, entities, H, W)`` and the keypoints ``(B, entities, 2)`` (pixels)."""
        heat = self.heatmaps(latent)
        points = self.keypoints(heat)
        normalized = points / heat.shape[-1] * 2.0 - 1.0
        features = [normalized.flatten(1), proprio, F.one_hot(task, self.num_tasks).float()]
        out = self.classifier(torch.cat(features, dim=1))
        return out[:, 0], out[:, 1:], heat, points

    def forward(self, latent: torch.Tensor, task: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        return self.outputs(latent, task, proprio)[0]


def keypoint_loss(heatmaps: torch.Tensor, points: torch.Tensor, target: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The detector's loss against target pixel coordinates ``(B, entities, 2)``: cross-entropy
    of each heatmap against the pixel holding the target, plus ``KEYPOINT_L1`` times the smooth
    L1 distance of the soft-argmax (sub-pixel precision); entities out of view are left out.
    Also returns the mean distance in pixels of the entities in view."""
    b, n, h, w = heatmaps.shape
    inside = ((target >= 0) & (target < torch.tensor([w, h], device=target.device))).all(-1).flatten()
    if not inside.any():
        zero = heatmaps.sum() * 0.0
        return zero, zero.detach()
    cell = target.floor().long()
    index = (cell[..., 1].clamp(0, h - 1) * w + cell[..., 0].clamp(0, w - 1)).flatten()
    ce = F.cross_entropy(heatmaps.flatten(2).flatten(0, 1)[inside], index[inside])
    flat_points, flat_target = points.flatten(0, 1)[inside], target.flatten(0, 1)[inside]
    l1 = F.smooth_l1_loss(flat_points, flat_target, reduction="none").sum(-1).mean()
    return ce + KEYPOINT_L1 * l1, (flat_points - flat_target).norm(dim=-1).mean().detach()


def _randn(shape: tuple[int, ...] | torch.Size, generator: torch.Generator | None,
           like: torch.Tensor) -> torch.Tensor:
    return torch.randn(shape, generator=generator, device=like.device, dtype=like.dtype)


# ---------------------------------------------------------------------------- the model
@dataclass
class Prediction:
    """One imagined step for a batch: the next latent frame ``(B, 3p^2, h, w)``, the next
    proprio ``(B, 4)`` (raw units) and the success probability of the new frame ``(B,)``."""

    latent: torch.Tensor
    proprio: torch.Tensor
    success_prob: torch.Tensor


class WorldModel(nn.Module):
    """Denoiser + proprio head + success head, with the dataset's proprio statistics.

    Batches (:meth:`loss`, :meth:`predict`) hold, for ``B`` windows:
    ``context`` latents ``(B, C, 3p^2, h, w)`` (oldest first), ``first`` ``(B, 3p^2, h, w)``,
    ``proprio`` ``(B, C, 4)`` raw, ``action`` ``(B, 4)``, ``task`` ``(B,)`` long; for training
    also ``target`` ``(B, 3p^2, h, w)``, ``next_proprio`` ``(B, 4)`` and ``success`` ``(B,)``,
    the success flag of the target frame, and where the data has ``state``, ``goal_offset``
    ``(B, 3)`` and ``entity_pixels`` ``(B, entities, 2)`` of the target frame.
    """

    def __init__(self, config: WorldModelConfig):
        super().__init__()
        self.config = config
        self.denoiser = Denoiser(config)
        n_tasks = len(config.tasks)
        cond_in = ACTION_DIM + (config.context + 1) * PROPRIO_DIM + 1 + n_tasks
        self.cond_mlp = _mlp(cond_in, config.cond_hidden, self.denoiser.embed_dim)
        self.proprio_head = _mlp(ACTION_DIM + config.context * PROPRIO_DIM + n_tasks, config.cond_hidden,
                                 PROPRIO_DIM)
        self.success_head = SuccessHead(config)
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
        """The next proprio in normalised units: the last one plus the head's predicted change."""
        norm = self._normalized_proprio(proprio)
        delta = self.proprio_head(torch.cat([action, norm.flatten(1), self._one_hot(task)], dim=1))
        return norm[:, -1] + delta

    def stack_context(self, context: torch.Tensor, first: torch.Tensor, proprio: torch.Tensor,
                      next_norm: torch.Tensor) -> torch.Tensor:
        """The UNet's conditioning channels: context ``(B, C, c, h, w)`` and first frame
        ``(B, c, h, w)`` stacked on the channel axis, then the coordinate planes and the
        current and next normalised proprio as constant planes: ``(B, (C + 1) c + 10, h, w)``."""
        b, size = len(context), context.shape[-1]
        ramp = torch.linspace(-1.0, 1.0, size, device=context.device)
        coords = torch.stack(torch.meshgrid(ramp, ramp, indexing="ij"))[None].expand(b, -1, -1, -1)
        planes = torch.cat([self._normalized_proprio(proprio[:, -1]), next_norm], dim=1)
        planes = planes[:, :, None, None].expand(-1, -1, size, size)
        return torch.cat([context.flatten(1, 2), first, coords, planes], dim=1)

    # ------------------------------------------------------------------ training
    def loss(self, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None,
             success_weight: float = 1.0) -> tuple[torch.Tensor, dict[str, float]]:
        """Total training loss and its named terms: denoising + proprio + ``success_weight``
        times the success head's (binary cross-entropy of the success flag, plus, when the batch
        has ``goal_offset`` ``(B, 3)`` in metres, the squared error of its offset estimate in
        decimetres, and when it has ``entity_pixels``, the detector's :func:`keypoint_loss`).
        The head judges both the real next frame and the denoiser's own detached estimate of
        it, so it learns to judge imagined frames as it judges real ones."""
        context = batch["context"]
        b = len(context)
        level = self.config.context_noise * torch.rand(b, generator=generator, device=context.device)
        noisy_context = context + level[:, None, None, None, None] * _randn(context.shape, generator, context)
        wanted = self._normalized_proprio(batch["next_proprio"])
        proprio = F.mse_loss(self.next_proprio(batch["action"], batch["proprio"], batch["task"]), wanted)
        cond = self.conditioning(batch["action"], batch["proprio"], wanted, level, batch["task"])
        anchor = noisy_context[:, -1]  # the change is taken from the (augmented) last frame
        context_stack = self.stack_context(noisy_context, batch["first"], batch["proprio"], wanted)
        denoise, estimate = self.denoiser.loss(batch["target"] - anchor, context_stack, cond, generator)
        labels = batch["success"].float().repeat(2)
        frames = torch.cat([batch["target"], (estimate + anchor).clamp(-1.0, 1.0)])
        logits, offsets, heatmaps, points = self.success_head.outputs(frames, batch["task"].repeat(2),
                                                                      wanted.repeat(2, 1))
        success = F.binary_cross_entropy_with_logits(logits, labels)
        terms = {"denoise": denoise.item(), "proprio": proprio.item(), "success_bce": success.item()}
        if "goal_offset" in batch:
            offset = F.mse_loss(offsets, 10.0 * batch["goal_offset"].repeat(2, 1))
            terms["success_offset"] = offset.item()
            success = success + OFFSET_WEIGHT * offset
        if "entity_pixels" in batch:
            detector, distance = keypoint_loss(heatmaps, points, batch["entity_pixels"].repeat(2, 1, 1))
            terms["success_keypoints"], terms["keypoint_error_px"] = detector.item(), distance.item()
            success = success + detector
        with torch.no_grad():
            terms["success_acc"] = ((logits > 0) == labels.bool()).float().mean().item()
        return denoise + proprio + success_weight * success, terms

    # ------------------------------------------------------------------ imagination
    @torch.no_grad()
    def predict(self, context: torch.Tensor, first: torch.Tensor, proprio: torch.Tensor, action: torch.Tensor,
                task: torch.Tensor, steps: int | None = None,
                generator: torch.Generator | None = None) -> Prediction:
        """Imagine the next step of a batch (see the class docstring for shapes)."""
        steps = self.config.sampling_steps if steps is None else steps
        level = torch.zeros(len(context), device=context.device)
        norm = self.next_proprio(action, proprio, task)
        cond = self.conditioning(action, proprio, norm, level, task)
        inputs = self.stack_context(context, first, proprio, norm)
        change = self.denoiser.sample(inputs, cond, steps, generator)
        latent = (context[:, -1] + change).clamp(-1.0, 1.0)
        next_proprio = norm * self.proprio_std + self.proprio_mean
        success_prob = torch.sigmoid(self.success_head(latent, task, norm))
        return Prediction(latent, next_proprio, success_prob)

    @torch.no_grad()
    def success_prob(self, latent: torch.Tensor, task: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        """Success probability of latent frames ``(B, 3p^2, h, w)`` with their raw proprio ``(B, 4)``."""
        return torch.sigmoid(self.success_head(latent, task, self._normalized_proprio(proprio)))

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, path: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into folder ``path``, each atomically."""
        return save_pretrained_folder(path, self, {"model_type": MODEL_TYPE,
                                                   "config": to_jsonable(self.config)})

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu") -> WorldModel:
        """Load a world model folder (or a training run folder holding one in ``world_model/``);
        errors name the file and what does not fit."""
        path = Path(path)
        if (path / "world_model" / CONFIG_FILE).exists():
            path = path / "world_model"
        config_path = path / CONFIG_FILE
        if not config_path.exists():
            raise FileNotFoundError(f"no world model at {path}: {CONFIG_FILE} is missing (give the folder "
                                    "written by `worldsim train-wm --out`, or its world_model/)")
        try:
            document = json.loads(config_path.read_text())
            kind, fields = document["model_type"], document["config"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(f"{config_path} is not a worldsim world-model config ({err})") from err
        if kind != MODEL_TYPE:
            raise ValueError(f"{config_path} holds a {kind!r}, not a {MODEL_TYPE!r}")
        known = {f.name for f in dataclasses.fields(WorldModelConfig)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ValueError(f"{config_path}: unknown WorldModelConfig field(s) {unknown}; "
                             f"known: {sorted(known)}")
        model = cls(WorldModelConfig(**fields))
        load_pretrained_weights(path, model, f"the model of {config_path}")
        return model.to(device).eval()

    @property
    def device(self) -> torch.device:
        return self.proprio_mean.device

    def num_parameters(self) -> int:
        return sum(math.prod(p.shape) for p in self.parameters())
