"""SAFE (Gu et al., 2025): failure scores learned from the policy's features.

Both variants read the policy's last-layer features ``e_t`` (standardised with the training
statistics) and are trained on successful *and* failed rollouts of the seen tasks, with each
class weighted by its inverse frequency and L2 regularisation (Adam's weight decay):

- ``safe-mlp``: a 2-layer MLP with a sigmoid gives ``p_t``; the score is the running sum
  ``s_t = p_0 + ... + p_t``. The loss pushes ``s_t`` toward ``t + 1`` on failures and toward 0 on
  successes, normalised by ``t + 1`` so every step weighs the same.
- ``safe-lstm``: a 1-layer LSTM, a linear layer and a sigmoid; the score is its output ``p_t``,
  trained with per-step binary cross-entropy, failure as the positive class.

``foresight`` is SAFE-MLP on another input: the world model's foresight vector of each step
(:mod:`~worldsim.failure.foresight`), what it imagines the policy's next steps to achieve.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from worldsim.failure.detectors.base import Detector, DetectorStream, _pad, required
from worldsim.failure.rollouts import Rollout


@dataclass
class SafeConfig:
    """Training of a SAFE detector."""

    hidden_dim: int = 256
    """Width of the MLP's hidden layer / of the LSTM state."""
    epochs: int = 20
    """Passes over the training rollouts (more overfits the seen tasks)."""
    batch_rollouts: int = 32
    """Rollouts per optimiser step."""
    lr: float = 1e-3
    """Adam learning rate."""
    weight_decay: float = 1e-3
    """L2 regularisation (Adam weight decay)."""


class _SafeDetector(Detector):
    needs = ("features",)
    uses_failures = True

    def __init__(self, config: SafeConfig) -> None:
        super().__init__(config)
        # fit() or loading replaces these; _check_fitted guards every use before
        self.net: nn.Module = nn.Identity()
        self.mean = self.std = np.zeros(0)

    @abstractmethod
    def _build(self, feature_dim: int) -> nn.Module:
        """The network for features of width ``feature_dim``."""

    @abstractmethod
    def _per_step(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, T, D)`` standardised features -> ``(N, T)`` per-step outputs in (0, 1)."""

    @abstractmethod
    def _loss(self, p: torch.Tensor, failed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per-rollout losses ``(N,)`` from per-step outputs ``p`` and the step ``mask`` ``(N, T)``."""

    def _fit(self, rollouts: Sequence[Rollout], rng: np.random.Generator) -> None:
        features = [r.recorded(self.needs[0]) for r in rollouts]
        stacked = np.concatenate(features)
        self.mean, self.std = stacked.mean(0), stacked.std(0) + 1e-6
        x = torch.from_numpy((_pad(features) - self.mean) / self.std).float()
        lengths = np.array([len(f) for f in features])
        mask = torch.from_numpy(np.arange(x.shape[1])[None] < lengths[:, None]).float()
        failed = torch.tensor([not r.success for r in rollouts], dtype=torch.float32)
        n_fail = float(failed.sum())
        weights = torch.where(
            failed.bool(), len(rollouts) / (2 * n_fail), len(rollouts) / (2 * (len(rollouts) - n_fail))
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(rng.integers(2**31)))
            self.net = self._build(x.shape[2])
            optimizer = torch.optim.Adam(
                self.net.parameters(), lr=self.config.lr, weight_decay=self.config.weight_decay
            )
            for _ in range(self.config.epochs):
                for idx in np.array_split(
                    rng.permutation(len(rollouts)), max(1, len(rollouts) // self.config.batch_rollouts)
                ):
                    idx_t = torch.from_numpy(idx)
                    horizon = int(lengths[idx].max())
                    p = self._per_step(x[idx_t, :horizon])
                    loss = (weights[idx_t] * self._loss(p, failed[idx_t], mask[idx_t, :horizon])).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
        self.net.eval()

    def _state(self) -> dict[str, np.ndarray]:
        return {
            "mean": self.mean,
            "std": self.std,
            **{f"net.{k}": v.numpy() for k, v in self.net.state_dict().items()},
        }

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        self.mean, self.std = state["mean"], state["std"]
        self.net = self._build(len(self.mean))
        self.net.load_state_dict(
            {k[4:]: torch.from_numpy(v) for k, v in state.items() if k.startswith("net.")}
        )
        self.net.eval()

    def _standardise(self, inputs: Mapping[str, np.ndarray]) -> torch.Tensor:
        x = required(inputs, self.needs[0])
        if x.shape[-1] != len(self.mean):
            raise ValueError(f"{self.name} was fitted on {self.needs[0]!r} of width {len(self.mean)}; got "
                             f"{x.shape[-1]}: compute them as for the fit rollouts")
        return torch.from_numpy(((x - self.mean) / self.std).astype(np.float32))


class SafeMLP(_SafeDetector):
    """SAFE-MLP: running sum of per-step MLP failure probabilities."""

    name = "safe-mlp"

    def _build(self, feature_dim: int) -> nn.Module:
        h = self.config.hidden_dim
        return nn.Sequential(nn.Linear(feature_dim, h), nn.ReLU(), nn.Linear(h, 1))

    def _per_step(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(x)).squeeze(-1)

    def _loss(self, p: torch.Tensor, failed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        running = torch.cumsum(p * mask, dim=1) / torch.arange(1, p.shape[1] + 1)
        per_step = torch.where(failed[:, None].bool(), 1.0 - running, running)
        return (per_step * mask).sum(1) / mask.sum(1)

    def stream(self, num_envs: int) -> DetectorStream:
        self._check_fitted()
        return _RunningSum(self, num_envs)


class ForesightMLP(SafeMLP):
    """SAFE-MLP's model and score on the world model's foresight (:mod:`~worldsim.failure.foresight`):
    the imagined success probabilities of the policy's next steps, instead of the policy's features."""

    name = "foresight"
    needs = ("foresight",)


class _RunningSum(DetectorStream):
    def __init__(self, detector: SafeMLP, num_envs: int) -> None:
        super().__init__(num_envs)
        self.detector = detector
        self.total = np.zeros(num_envs)

    def step(self, inputs: Mapping[str, np.ndarray], new_episode: np.ndarray) -> np.ndarray:
        self.total[new_episode] = 0.0
        with torch.no_grad():
            self.total += self.detector._per_step(self.detector._standardise(inputs)).numpy()
        return self.total[:, None].copy()


class _LSTMNet(nn.Module):
    def __init__(self, feature_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(feature_dim, hidden_dim, batch_first=True)
        self.head = nn.Linear(hidden_dim, 1)

    def forward(
        self,
        x: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        out, state = self.lstm(x, state)
        return torch.sigmoid(self.head(out)).squeeze(-1), state


class SafeLSTM(_SafeDetector):
    """SAFE-LSTM: an LSTM's per-step failure probability."""

    name = "safe-lstm"

    def _build(self, feature_dim: int) -> nn.Module:
        return _LSTMNet(feature_dim, self.config.hidden_dim)

    def _per_step(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)[0]

    def _loss(self, p: torch.Tensor, failed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        target = failed[:, None].expand_as(p)
        bce = nn.functional.binary_cross_entropy(p.clamp(1e-6, 1 - 1e-6), target, reduction="none")
        return (bce * mask).sum(1) / mask.sum(1)

    def stream(self, num_envs: int) -> DetectorStream:
        self._check_fitted()
        return _LSTMStream(self, num_envs)


class _LSTMStream(DetectorStream):
    def __init__(self, detector: SafeLSTM, num_envs: int) -> None:
        super().__init__(num_envs)
        self.detector = detector
        shape = (1, num_envs, detector.config.hidden_dim)
        self.state = (torch.zeros(shape), torch.zeros(shape))

    def step(self, inputs: Mapping[str, np.ndarray], new_episode: np.ndarray) -> np.ndarray:
        keep = torch.from_numpy(~np.asarray(new_episode, bool)).float()[None, :, None]
        state = (self.state[0] * keep, self.state[1] * keep)
        with torch.no_grad():
            p, self.state = self.detector.net(self.detector._standardise(inputs)[:, None], state)
        return p.numpy().reshape(-1, 1).astype(np.float64)
