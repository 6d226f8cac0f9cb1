"""Adapters that plug an external vision-language-action model into worldsim's policy protocol.

An external VLA maps camera image(s) + a language instruction + proprioception to a chunk of
actions. :class:`ExternalVLAAdapter` asks a subclass for exactly that and for an embedding,
and adds what worldsim's trainers and detectors need on top:

- :meth:`~ExternalVLAAdapter.predict_chunk` (subclass): images ``(B,3,S,S)`` float in [0, 1],
  wrist images or ``None``, the instructions as a list of B strings, proprio ``(B,P)`` as the
  env gives it -> the chunk ``(B,K,A)`` in the model's own action units;
- :meth:`~ExternalVLAAdapter.embed` (subclass): the same inputs -> features ``(B,D)``;
- the base maps the chunk to worldsim's convention (float32 in [-1, 1]: end-effector delta
  x, y, z in units of 3 cm per step, then the gripper, -1 open / +1 closed) with the affine map
  that sends ``action_low`` to -1 and ``action_high`` to +1 per dimension (``low > high``
  flips a dimension), puts a Gaussian with a learnable state-independent log-std around it
  (log-probabilities and entropies for PPO/GRPO, samples for uncertainty scores), and a value
  head on the features (RL critic, warmed up before policy updates);
- :meth:`~ExternalVLAAdapter.preprocess` validates the env's pixel observation (the same
  processor as TinyVLA) and carries the instructions as fixed-width UTF-8 bytes, so a
  :data:`~worldsim.policies.base.Batch` stays a dict of tensors that trainers can slice, stack
  and hand to any copy of the policy (any instruction is accepted: external VLAs are open
  vocabulary).

How the well-known VLAs plug in (a subclass each; load their weights in ``__init__`` from a
local path named in the config, never at import time):

- **OpenVLA-OFT** (Prismatic VLM on Llama 2 7B with fused DINOv2 + SigLIP vision; PyTorch,
  ``transformers`` remote code). Inputs: a third-person image and optionally a wrist image at
  224x224 (render the env with ``image_size=224`` or resize in ``predict_chunk``), the prompt
  ``"In: What action should the robot take to {instruction}?\\nOut:"``, and proprio projected
  into the LLM's embedding space by its own MLP. Output: a chunk of K=8 (LIBERO) or 25 (ALOHA)
  continuous actions decoded in parallel by an L1-regression MLP head, normalised to [-1, 1]
  with the training dataset's 1st/99th percentiles and un-normalised with those statistics. For
  worldsim, keep the normalised translation and gripper dimensions (drop rotation), and set
  ``action_low``/``action_high`` to the units that mean -3 cm / +3 cm per step and open/closed
  (flip the gripper if its convention is 1 = open). Features: the mean of the final-layer
  hidden states at the action-token positions.
- **pi0** (Physical Intelligence's openpi: PaliGemma 3B VLM + a 300M-parameter flow-matching
  action expert; JAX and PyTorch ports). Inputs: up to three 224x224 images (base, left wrist,
  right wrist; missing ones masked), the tokenised prompt, proprio padded to 32 dimensions.
  Output: a chunk of 50 actions (``action_horizon``) integrated over 10 flow-matching steps,
  z-score (mean/std) normalised with the fine-tuning data's statistics. Flow matching has no
  tractable likelihood, which is why the base's Gaussian around the predicted chunk is what
  PPO differentiates. Features: the mean-pooled prefix (image + language) embeddings of the VLM.
- **Octo** (27M/93M-parameter transformer, JAX). Inputs: ``image_primary`` at 256x256,
  ``image_wrist`` at 128x128, the instruction embedded by T5-base, and a history window of 2
  observations (keep the previous frame in the subclass). Output: a diffusion head predicting
  a chunk of 4 actions, normalised with the dataset's mean/std (``dataset_statistics``).
  Features: the ``readout_action`` token embeddings. A JAX model is called on numpy arrays
  without gradients, so only the log-std and the value head train (RL fine-tuning of the
  backbone needs a PyTorch port).

:class:`TransformersVLAAdapter` is a complete, trainable example built from ``transformers``
configs (a ViT for images, a byte-level BERT for the instruction, random weights, nothing
downloaded) with a linear chunk head; the tests run it through the protocol and a save/load
round trip, and it is a template for the subclasses above.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from worldsim.policies.base import Batch, Policy, PolicyOutput, register_policy
from worldsim.policies.tinyvla import ChunkGaussian, check_chunk, mlp, read_pixel_obs


@dataclass
class ExternalVLAConfig:
    """What every adapter shares; a subclass's config extends it with the model's own fields."""

    chunk_size: int = 4
    """Actions per predicted chunk (K); the model's own chunk length."""
    action_dim: int = 4
    """Action dimensions after mapping (worldsim: 4)."""
    image_size: int = 64
    """Side of the square env images the adapter accepts (render the env at the model's size)."""
    use_wrist: bool = False
    """Also pass the ``wrist_image`` observation to the model."""
    proprio_dim: int = 4
    """Width of the ``proprio`` observation (worldsim: 4)."""
    action_low: tuple[float, ...] = (-1.0, -1.0, -1.0, -1.0)
    """Per dimension, the model's action value that maps to worldsim's -1."""
    action_high: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
    """Per dimension, the model's action value that maps to worldsim's +1."""
    value_hidden: int = 128
    """Hidden width of the value head."""
    init_log_std: float = -1.0
    """Initial log-std of the Gaussian around the predicted chunk."""
    min_log_std: float = -5.0
    """Lower clamp of the log-std."""
    max_log_std: float = 1.0
    """Upper clamp of the log-std."""

    def __post_init__(self) -> None:
        for name in ("chunk_size", "action_dim", "image_size", "proprio_dim", "value_hidden"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        self.action_low, self.action_high = tuple(self.action_low), tuple(self.action_high)
        for name in ("action_low", "action_high"):
            bounds = getattr(self, name)
            if len(bounds) != self.action_dim or not all(math.isfinite(b) for b in bounds):
                raise ValueError(f"{name}={bounds!r} must hold {self.action_dim} finite numbers (action_dim)")
        same = [i for i, (lo, hi) in enumerate(zip(self.action_low, self.action_high, strict=True)) if lo == hi]
        if same:
            raise ValueError(f"action_low and action_high must differ in every dimension; equal in {same}")
        if not (math.isfinite(self.min_log_std) and math.isfinite(self.max_log_std)
                and self.min_log_std <= self.init_log_std <= self.max_log_std):
            raise ValueError(f"need finite min_log_std <= init_log_std <= max_log_std; got {self.min_log_std!r}, "
                             f"{self.init_log_std!r}, {self.max_log_std!r}")


MAX_INSTRUCTION_BYTES = 256


def encode_instructions(instructions: list[str]) -> torch.Tensor:
    """Instructions as UTF-8 bytes ``(B, MAX_INSTRUCTION_BYTES)`` uint8, zero-padded."""
    out = torch.zeros((len(instructions), MAX_INSTRUCTION_BYTES), dtype=torch.uint8)
    for i, text in enumerate(instructions):
        data = text.encode("utf-8")
        if not data or len(data) > MAX_INSTRUCTION_BYTES or 0 in data:
            raise ValueError(f"instruction {text!r} must be 1 to {MAX_INSTRUCTION_BYTES} UTF-8 bytes without NUL")
        out[i, : len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    return out


def decode_instructions(data: torch.Tensor) -> list[str]:
    """Inverse of :func:`encode_instructions`."""
    return [bytes(row).rstrip(b"\0").decode("utf-8") for row in data.cpu().numpy()]


class ExternalVLAAdapter(Policy):
    """Base of adapters for external VLAs (see the module docstring).

    Subclasses call ``super().__init__(config, feature_dim)`` and implement
    :meth:`predict_chunk` and :meth:`embed`; when both come from one backbone pass, override
    :meth:`predict_with_features` too so the backbone runs once.
    """

    config: ExternalVLAConfig

    # buffers: the affine map from the model's action units to worldsim's [-1, 1]
    action_scale: torch.Tensor
    action_shift: torch.Tensor

    def __init__(self, config: ExternalVLAConfig, feature_dim: int) -> None:
        super().__init__()
        self.config = config
        self.chunk_size = config.chunk_size
        self.action_dim = config.action_dim
        self.feature_dim = feature_dim
        self.action_dist = ChunkGaussian(config.chunk_size, config.action_dim, config.init_log_std,
                                         config.min_log_std, config.max_log_std)
        self.value_head = mlp([feature_dim, config.value_hidden, 1], out_gain=0.01)
        low = torch.tensor(config.action_low, dtype=torch.float32)
        high = torch.tensor(config.action_high, dtype=torch.float32)
        # env = scale * model + shift, sending low -> -1 and high -> +1
        self.register_buffer("action_scale", 2.0 / (high - low), persistent=False)
        self.register_buffer("action_shift", -(high + low) / (high - low), persistent=False)

    # ---------------------------------------------------------------- what a subclass provides
    @abstractmethod
    def predict_chunk(self, images: torch.Tensor, wrist_images: torch.Tensor | None, instructions: list[str],
                      proprio: torch.Tensor) -> torch.Tensor:
        """The model's action chunk ``(B, K, A)`` in its own action units."""

    @abstractmethod
    def embed(self, images: torch.Tensor, wrist_images: torch.Tensor | None, instructions: list[str],
              proprio: torch.Tensor) -> torch.Tensor:
        """The model's embedding ``(B, feature_dim)`` of the observation."""

    def predict_with_features(self, images: torch.Tensor, wrist_images: torch.Tensor | None,
                              instructions: list[str], proprio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(predict_chunk(...), embed(...))``; override to share one backbone pass."""
        return (self.predict_chunk(images, wrist_images, instructions, proprio),
                self.embed(images, wrist_images, instructions, proprio))

    # ---------------------------------------------------------------- processor
    def preprocess(self, obs: Any) -> Batch:
        """Pixel observation -> ``{"image" (B,3,S,S) float in [0,1], ["wrist_image"], "proprio" (B,P),
        "instruction_bytes" (B, 256) uint8}`` on the policy's device; errors as for TinyVLA."""
        cfg = self.config
        batch, instructions = read_pixel_obs(obs, cfg.image_size, cfg.use_wrist, self.device, cfg.proprio_dim)
        batch["instruction_bytes"] = encode_instructions(instructions).to(self.device)
        return batch

    def to_env_actions(self, model_actions: torch.Tensor) -> torch.Tensor:
        """Map a chunk in the model's units to worldsim's [-1, 1] convention (affine, per dimension)."""
        return model_actions * self.action_scale + self.action_shift

    def _mean_and_features(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        instructions = decode_instructions(batch["instruction_bytes"])
        chunk, features = self.predict_with_features(batch["image"], batch.get("wrist_image"), instructions,
                                                     batch["proprio"])
        name = type(self).__name__
        expected = (len(instructions), self.chunk_size, self.action_dim)
        if tuple(chunk.shape) != expected:
            raise ValueError(f"{name}.predict_chunk returned shape {tuple(chunk.shape)}; expected {expected}")
        if tuple(features.shape) != (len(instructions), self.feature_dim):
            raise ValueError(f"{name}.embed returned shape {tuple(features.shape)}; expected "
                             f"{(len(instructions), self.feature_dim)}")
        return self.to_env_actions(chunk.float()), features.float()

    # ---------------------------------------------------------------- protocol
    def act(self, batch: Batch, deterministic: bool = False) -> PolicyOutput:
        mean, features = self._mean_and_features(batch)
        dist = self.action_dist(mean)
        actions = dist.mean if deterministic else dist.sample()
        value = self.value_head(features).squeeze(-1)
        return PolicyOutput(actions, dist.log_prob(actions).sum((1, 2)), value, features)

    def evaluate(self, batch: Batch, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean, features = self._mean_and_features(batch)
        check_chunk(actions, len(mean), self.chunk_size, self.action_dim)
        dist = self.action_dist(mean)
        return dist.log_prob(actions).sum((1, 2)), dist.entropy().sum((1, 2)), self.value_head(features).squeeze(-1)

    def features(self, batch: Batch) -> torch.Tensor:
        return self._mean_and_features(batch)[1]

    def sample(self, batch: Batch, num_samples: int) -> torch.Tensor:
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples={num_samples!r} must be an int >= 1")
        return self.action_dist(self._mean_and_features(batch)[0]).sample((num_samples,)).transpose(0, 1)

    def value(self, batch: Batch) -> torch.Tensor:
        return self.value_head(self._mean_and_features(batch)[1]).squeeze(-1)


# Byte-level tokens: 0 pads, 1 and 2 open and close the sequence, byte b is b + 3.
PAD_TOKEN, CLS_TOKEN, SEP_TOKEN, BYTE_OFFSET = 0, 1, 2, 3


def byte_tokens(texts: list[str], max_length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """UTF-8 byte tokens ``(B, L)`` and attention mask of ``texts``, framed by CLS/SEP, padded to the
    longest, cut at ``max_length`` tokens (no vocabulary file needed)."""
    rows = [[CLS_TOKEN, *(b + BYTE_OFFSET for b in t.encode("utf-8")[: max_length - 2]), SEP_TOKEN] for t in texts]
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), PAD_TOKEN, dtype=torch.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    return ids.to(device), (ids != PAD_TOKEN).long().to(device)


@dataclass
class TransformersVLAConfig(ExternalVLAConfig):
    """A small VLA assembled from ``transformers`` model configs (random initial weights)."""

    patch_size: int = 16
    """ViT patch side in pixels (must divide image_size)."""
    hidden_size: int = 64
    """Width of the ViT and BERT transformers."""
    vision_layers: int = 2
    """ViT transformer layers."""
    text_layers: int = 1
    """BERT transformer layers."""
    num_heads: int = 2
    """Attention heads (must divide hidden_size)."""
    max_text_length: int = 128
    """Longest instruction in byte tokens (longer ones are cut)."""
    feature_dim: int = 128
    """Width of the fused features."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("patch_size", "hidden_size", "vision_layers", "text_layers", "num_heads", "feature_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        if self.image_size % self.patch_size:
            raise ValueError(f"patch_size={self.patch_size!r} must divide image_size={self.image_size!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads={self.num_heads!r} must divide hidden_size={self.hidden_size!r}")
        if self.max_text_length < 3:
            raise ValueError(f"max_text_length={self.max_text_length!r} must be >= 3 (CLS, one byte, SEP)")


@register_policy
class TransformersVLAAdapter(ExternalVLAAdapter):
    """ViT (image, and wrist image with shared weights) + byte-level BERT (instruction) + proprio
    projection, fused by an MLP into the features; a linear head gives the chunk. Built from
    ``transformers`` configs only, so it never touches the network."""

    policy_type = "transformers_vla"
    config_class = TransformersVLAConfig
    config: TransformersVLAConfig

    def __init__(self, config: TransformersVLAConfig) -> None:
        from transformers import BertConfig, BertModel, ViTConfig, ViTModel

        super().__init__(config, config.feature_dim)
        h = config.hidden_size
        common: dict[str, Any] = {"hidden_size": h, "num_attention_heads": config.num_heads, "intermediate_size": 4 * h,
                  "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
        self.vision = ViTModel(ViTConfig(image_size=config.image_size, patch_size=config.patch_size, num_channels=3,
                                         num_hidden_layers=config.vision_layers, **common), add_pooling_layer=False)
        self.text = BertModel(BertConfig(vocab_size=256 + BYTE_OFFSET, max_position_embeddings=config.max_text_length,
                                         num_hidden_layers=config.text_layers, pad_token_id=PAD_TOKEN, **common),
                              add_pooling_layer=False)
        self.proprio_proj = nn.Linear(config.proprio_dim, h)
        views = 2 if config.use_wrist else 1
        self.fusion = nn.Sequential(nn.Linear((views + 2) * h, config.feature_dim), nn.GELU(),
                                    nn.Linear(config.feature_dim, config.feature_dim), nn.LayerNorm(config.feature_dim))
        self.action_head = nn.Linear(config.feature_dim, config.chunk_size * config.action_dim)

    def embed(self, images: torch.Tensor, wrist_images: torch.Tensor | None, instructions: list[str],
              proprio: torch.Tensor) -> torch.Tensor:
        views = [images] if wrist_images is None else [images, wrist_images]
        # ViT's CLS token per view; ViT expects pixels normalised to about [-1, 1].
        parts = [self.vision(pixel_values=v * 2 - 1).last_hidden_state[:, 0] for v in views]
        ids, mask = byte_tokens(instructions, self.config.max_text_length, images.device)
        parts.append(self.text(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0])
        parts.append(self.proprio_proj(proprio))
        return self.fusion(torch.cat(parts, dim=1))

    def predict_chunk(self, images: torch.Tensor, wrist_images: torch.Tensor | None, instructions: list[str],
                      proprio: torch.Tensor) -> torch.Tensor:
        return self.predict_with_features(images, wrist_images, instructions, proprio)[0]

    def predict_with_features(self, images: torch.Tensor, wrist_images: torch.Tensor | None,
                              instructions: list[str], proprio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.embed(images, wrist_images, instructions, proprio)
        chunk = self.action_head(features).view(-1, self.chunk_size, self.action_dim)
        return chunk, features
