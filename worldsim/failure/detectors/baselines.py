"""Baseline detectors of the SAFE and FIPER papers, each a per-step score aggregated into its
running mean over the episode (:class:`~worldsim.failure.detectors.base.RunningMean`):

- ``knn``: mean cosine distance of the features to their ``k`` nearest neighbours among the
  features of successful training rollouts.
- ``mahalanobis``: Mahalanobis distance of the features to the successful training features
  (mean and a Ledoit-Wolf shrunk covariance, from scikit-learn).
- ``action-variance``: sample consistency: the variance over the ``S`` sampled chunks, averaged
  over chunk steps and action dimensions.
- ``stac``: STAC's temporal consistency: the squared MMD (RBF kernel) between the sampled
  chunks of step ``t - 1``, shifted by one step, and those of step ``t`` on the steps both cover;
  the bandwidth is the median pairwise distance in the training samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.covariance import LedoitWolf

from worldsim.failure.detectors.base import Detector, DetectorStream, RunningMean
from worldsim.failure.rollouts import Rollout


@dataclass
class KNNConfig:
    k: int = 5
    """Neighbours averaged."""
    max_reference: int = 4096
    """Successful training steps kept as the reference set (a random subset beyond this)."""


class CosineKNN(Detector):
    """Cosine k-NN distance to successful training features."""

    name = "knn"
    needs = ("features",)

    def _fit(self, rollouts: Sequence[Rollout], rng: np.random.Generator) -> None:
        x = np.concatenate([r.features for r in rollouts if r.success])
        if len(x) > self.config.max_reference:
            x = x[rng.choice(len(x), self.config.max_reference, replace=False)]
        self.reference = x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-8)

    def per_step(self, features: np.ndarray, new_episode: np.ndarray) -> np.ndarray:
        unit = features / np.linalg.norm(features, axis=1, keepdims=True).clip(1e-8)
        distance = 1.0 - unit @ self.reference.T
        k = min(self.config.k, distance.shape[1])
        return np.partition(distance, k - 1, axis=1)[:, :k].mean(axis=1)

    def stream(self, num_envs: int) -> DetectorStream:
        self._check_fitted()
        return RunningMean(num_envs, self.per_step, self.needs)

    def _state(self) -> dict[str, np.ndarray]:
        return {"reference": self.reference}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        self.reference = state["reference"]


@dataclass
class NoConfig:
    """This detector has no settings."""


class Mahalanobis(Detector):
    """Mahalanobis distance to successful training features."""

    name = "mahalanobis"
    needs = ("features",)

    def _fit(self, rollouts: Sequence[Rollout], rng: np.random.Generator) -> None:
        x = np.concatenate([r.features for r in rollouts if r.success]).astype(np.float64)
        estimate = LedoitWolf().fit(x)
        self.center, self.precision = estimate.location_, estimate.precision_

    def per_step(self, features: np.ndarray, new_episode: np.ndarray) -> np.ndarray:
        d = features - self.center
        return np.sqrt(np.maximum(np.einsum("bi,ij,bj->b", d, self.precision, d), 0.0))

    def stream(self, num_envs: int) -> DetectorStream:
        self._check_fitted()
        return RunningMean(num_envs, self.per_step, self.needs)

    def _state(self) -> dict[str, np.ndarray]:
        return {"center": self.center, "precision": self.precision}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        self.center, self.precision = state["center"], state["precision"]


class ActionVariance(Detector):
    """Variance of the sampled action chunks."""

    name = "action-variance"
    needs = ("action_samples",)
    learns = False

    def _fit(self, rollouts: Sequence[Rollout], rng: np.random.Generator) -> None:
        """Nothing to learn: the score reads the samples directly."""

    @staticmethod
    def per_step(action_samples: np.ndarray, new_episode: np.ndarray) -> np.ndarray:
        return action_samples.var(axis=1).mean(axis=(1, 2))

    def stream(self, num_envs: int) -> DetectorStream:
        self._check_fitted()
        return RunningMean(num_envs, self.per_step, self.needs)


def squared_mmd(x: np.ndarray, y: np.ndarray, bandwidth: float) -> np.ndarray:
    """Biased squared MMD between sample sets ``x`` and ``y`` ``(B, S, F)`` with an RBF kernel."""

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        d2 = ((a[:, :, None] - b[:, None]) ** 2).sum(-1)
        return np.exp(-d2 / (2 * bandwidth**2)).mean(axis=(1, 2))

    return kernel(x, x) + kernel(y, y) - 2 * kernel(x, y)


class STAC(Detector):
    """Temporal consistency of consecutive sampled chunks (MMD on their overlap)."""

    name = "stac"
    needs = ("action_samples",)

    def _fit(self, rollouts: Sequence[Rollout], rng: np.random.Generator) -> None:
        samples = np.concatenate([r.action_samples for r in rollouts])
        if samples.shape[2] < 2:
            raise ValueError(
                f"stac compares consecutive chunks on their overlap and needs chunks of >= 2 steps; "
                f"the recorded chunks have {samples.shape[2]}"
            )
        pick = samples[rng.choice(len(samples), min(len(samples), 256), replace=False)]
        flat = pick[:, :, :-1].reshape(len(pick), pick.shape[1], -1)  # the overlap's length
        d = np.sqrt(((flat[:, :, None] - flat[:, None]) ** 2).sum(-1))
        off_diagonal = d[:, ~np.eye(d.shape[1], dtype=bool)]
        self.bandwidth = float(max(np.median(off_diagonal), 1e-6))

    def stream(self, num_envs: int) -> DetectorStream:
        self._check_fitted()
        return _STACStream(self, num_envs)

    def _state(self) -> dict[str, np.ndarray]:
        return {"bandwidth": np.array([self.bandwidth])}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        self.bandwidth = float(state["bandwidth"][0])


class _STACStream(RunningMean):
    def __init__(self, detector: STAC, num_envs: int) -> None:
        super().__init__(num_envs, self._mmd, detector.needs)
        self.detector = detector
        self.previous: np.ndarray | None = None

    def _mmd(self, action_samples: np.ndarray, new_episode: np.ndarray) -> np.ndarray:
        b, s = action_samples.shape[:2]
        now = action_samples[:, :, :-1].reshape(b, s, -1)
        score = np.zeros(b)
        if self.previous is not None:
            score = squared_mmd(self.previous, now, self.detector.bandwidth)
        score[new_episode] = 0.0  # no previous chunk in this episode
        self.previous = action_samples[:, :, 1:].reshape(b, s, -1)
        return score
