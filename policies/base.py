"""The policy protocol: what every trainer, evaluator and failure detector calls.

A policy is a config (a dataclass), a network (an ``nn.Module``) and a processor
(:meth:`Policy.preprocess`, which turns a batched Gymnasium observation into tensors). Every
policy, learned or scripted, answers the same five questions about a processed batch:

- :meth:`~Policy.act`: an action chunk ``(B, K, A)``, its log-probability ``(B,)``, the
  value ``(B,)`` and the features ``(B, D)``;
- :meth:`~Policy.evaluate`: log-probability, entropy and value of given chunks (PPO/GRPO);
- :meth:`~Policy.features`: the embedding a failure detector reads;
- :meth:`~Policy.sample`: ``S`` chunks per observation ``(B, S, K, A)`` (uncertainty scores);
- :meth:`~Policy.value`: the critic alone.

``K`` is :attr:`Policy.chunk_size` (1 for a single-step policy). Chunks are executed by the env
(:class:`worldsim.envs.wrappers.ActionChunk`) or one action at a time from a queue
(:class:`worldsim.policies.runner.ChunkQueue`).

Checkpoints are a folder with ``config.json`` (the policy type and its config) and
``model.safetensors``; :func:`load_policy` rebuilds any registered policy from one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from worldsim.runtime.checkpoint import (
    PRETRAINED_CONFIG,
    PRETRAINED_WEIGHTS,
    load_pretrained_model,
    save_pretrained_model,
)

Batch = dict[str, torch.Tensor]
"""A processed observation batch: tensor per key, batch axis first."""

POLICY_TYPES: dict[str, type[Policy]] = {}
CHECKPOINT_READERS: list[Callable[[str | Path, str | torch.device], Policy | None]] = []
"""Readers of checkpoints that other libraries wrote: each returns the policy, or None for a folder
it does not read (:func:`load_policy` asks them before worldsim's own format)."""
CONFIG_FILE, WEIGHTS_FILE = PRETRAINED_CONFIG, PRETRAINED_WEIGHTS


@dataclass
class PolicyOutput:
    """What :meth:`Policy.act` returns for a batch of B observations."""

    actions: torch.Tensor  # (B, K, A) float32, the sampled (or mean) chunk, not clipped
    log_prob: torch.Tensor  # (B,) log-probability of the whole chunk
    value: torch.Tensor  # (B,) value estimate of the observation
    features: torch.Tensor  # (B, D) the embedding detectors read


class Policy(nn.Module, ABC):
    """Base class of every worldsim policy. Subclasses set :attr:`policy_type`, take their
    config dataclass as the only constructor argument, and register with
    :func:`register_policy`."""

    policy_type: ClassVar[str]
    obs_mode: ClassVar[str] = "pixels"  # the env obs_mode this policy reads
    config: Any
    chunk_size: int
    action_dim: int = 4

    # ---------------------------------------------------------------- the protocol
    @abstractmethod
    def preprocess(self, obs: Any) -> Batch:
        """Turn a batched env observation (numpy array or dict of arrays, with
        ``instruction`` as a tuple of strings) into tensors on this policy's device."""

    @abstractmethod
    def act(self, batch: Batch, deterministic: bool = False) -> PolicyOutput:
        """Sample (or, if ``deterministic``, take the mode of) an action chunk."""

    @abstractmethod
    def evaluate(self, batch: Batch, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probability ``(B,)``, entropy ``(B,)`` and value ``(B,)`` of chunks ``(B, K, A)``."""

    @abstractmethod
    def features(self, batch: Batch) -> torch.Tensor:
        """The embedding ``(B, D)`` failure detectors read (SAFE, RND, embedding distance)."""

    def sample(self, batch: Batch, num_samples: int) -> torch.Tensor:
        """``num_samples`` chunks per observation, shape ``(B, S, K, A)``."""
        if num_samples < 1:
            raise ValueError(f"num_samples={num_samples!r} must be >= 1")
        return torch.stack([self.act(batch).actions for _ in range(num_samples)], dim=1)

    def value(self, batch: Batch) -> torch.Tensor:
        """Value estimate ``(B,)``."""
        return self.act(batch, deterministic=True).value

    @property
    def device(self) -> torch.device:
        for tensor in self.parameters():
            return tensor.device
        return torch.device("cpu")

    def env_kwargs(self) -> dict[str, Any]:
        """Env arguments that give this policy the observations it reads (``gym.make_vec(id,
        num_envs, **policy.env_kwargs())``): the obs mode and, for pixels, the image size and
        wrist camera from the config (``image_size``, ``use_wrist``)."""
        kwargs: dict[str, Any] = {"obs_mode": self.obs_mode}
        if self.obs_mode != "state":
            kwargs["image_size"] = getattr(self.config, "image_size", 64)
            kwargs["wrist_camera"] = bool(getattr(self.config, "use_wrist", False))
        return kwargs

    def check_task(self, instruction: str) -> None:
        """Raise ``ValueError`` if this policy cannot act on ``instruction`` (default: any)."""

    # ---------------------------------------------------------------- checkpoints
    def save_pretrained(self, path: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into folder ``path``, each atomically."""
        return save_pretrained_model(path, self, "policy_type", self.policy_type)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu") -> Policy:
        """Rebuild the policy saved in ``path``; errors name what does not match."""
        policy = load_policy(path, device)
        if not isinstance(policy, cls):
            raise TypeError(f"{path} holds a {type(policy).__name__}, not a {cls.__name__}")
        return policy


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make ``cls`` loadable by :func:`load_policy` under ``cls.policy_type``."""
    POLICY_TYPES[cls.policy_type] = cls
    return cls


def load_policy(path: str | Path, device: str | torch.device = "cpu") -> Policy:
    """Load any registered policy from a checkpoint folder (or a training run folder that holds
    one in ``policy/``), or a checkpoint another library wrote that a reader of
    :data:`CHECKPOINT_READERS` takes (a LeRobot policy, :mod:`~worldsim.policies.lerobot`)."""
    import worldsim.policies  # noqa: F401  (registers the built-in policy types and readers)

    for read in CHECKPOINT_READERS:
        policy = read(path, device)
        if policy is not None:
            return policy

    def policy_class(kind: str, config_path: Path) -> type[Policy]:
        if kind not in POLICY_TYPES:
            raise ValueError(f"{config_path}: unknown policy_type {kind!r}; known: {', '.join(sorted(POLICY_TYPES))}")
        return POLICY_TYPES[kind]

    return load_pretrained_model(path, "policy", "policy_type", "policy checkpoint", policy_class, device)
