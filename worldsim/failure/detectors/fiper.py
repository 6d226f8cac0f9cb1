"""FIPER (Römer et al., 2025): failure prediction without failure data.

Two scores, each summed over a sliding window of the last ``window`` steps:

- RND on the policy's observation embedding: a frozen, randomly initialised target network
  ``f`` and a predictor ``g`` trained to match it on the features of successful rollouts; the
  per-step score ``||f(e_t) - g(e_t)||`` is large on embeddings unlike those seen in success.
- Action-chunk entropy (ACE): the ``S`` sampled chunks of a step, each action dimension of each
  chunk step binned into ``bins`` bins over [-1, 1]; the per-step score is the sum over chunk
  steps and dimensions of the entropy of those bins: large where the policy is unsure.

Each score gets its own conformal threshold from successful rollouts, and the alarm fires when
both exceed theirs (the AND rule of :class:`~worldsim.failure.detectors.base.Detector`). The
paper calibrates each threshold at ``alpha``; by default the two are calibrated jointly here
(``joint=True``: functional bands with one shared width, calibrated on the smaller of the two
normalised exceedances), so the AND rule's false-alarm rate is bounded by ``alpha`` tightly
instead of very loosely.
``rnd`` and ``ace`` are the two halves alone (baselines of the FIPER paper).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from worldsim.failure.detectors.base import Detector, DetectorStream, required
from worldsim.failure.rollouts import Rollout

PARTS: tuple[str, ...] = ("rnd", "ace")


@dataclass
class FiperConfig:
    """Scores of a FIPER detector and training of its RND predictor."""

    parts: tuple[str, ...] = PARTS
    """Which scores to use ('rnd', 'ace' or both)."""
    window: int = 5
    """Steps summed into each score."""
    joint: bool = True
    """Calibrate the two thresholds jointly (one shared band width, false-alarm rate <= alpha
    for the AND rule itself) rather than each at alpha as in the paper, which bounds the AND
    rule's false alarms far more loosely and so alarms much less."""
    bins: int = 10
    """Bins per action dimension for the chunk entropy."""
    rnd_hidden: int = 128
    """Hidden width of the RND target and predictor."""
    rnd_dim: int = 64
    """Output width of the RND target and predictor."""
    epochs: int = 100
    """Passes of the RND predictor over the successful training steps."""
    batch_size: int = 512
    lr: float = 1e-3

    def __post_init__(self) -> None:
        self.parts = tuple(self.parts)
        if (
            not self.parts
            or any(p not in PARTS for p in self.parts)
            or len(set(self.parts)) != len(self.parts)
        ):
            raise ValueError(f"parts={self.parts!r} must be distinct names from {PARTS}")
        if self.window < 1 or self.bins < 2:
            raise ValueError(f"window={self.window!r} must be >= 1 and bins={self.bins!r} >= 2")


def _rnd_net(feature_dim: int, hidden: int, out: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(feature_dim, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, out),
    )


def chunk_entropy(action_samples: np.ndarray, bins: int) -> np.ndarray:
    """``(B, S, K, A)`` sampled chunks -> ``(B,)`` summed per-dimension binned entropy (nats)."""
    index = np.clip(((np.clip(action_samples, -1.0, 1.0) + 1.0) * 0.5 * bins).astype(np.int64), 0, bins - 1)
    counts = (index[..., None] == np.arange(bins)).sum(axis=1)  # (B, K, A, bins)
    p = counts / action_samples.shape[1]
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=(1, 2, 3))


class Fiper(Detector):
    """FIPER (RND AND action-chunk entropy), or one of its halves."""

    uses_failures = False

    def __init__(self, config: FiperConfig) -> None:
        super().__init__(config)
        self.name = {("rnd", "ace"): "fiper", ("ace", "rnd"): "fiper", ("rnd",): "rnd", ("ace",): "ace"}[
            config.parts
        ]
        self.components = config.parts
        self.learns = "rnd" in config.parts  # ACE reads the sampled chunks as they are
        self.joint_calibration = config.joint
        self.needs = tuple(
            k for p, k in (("rnd", "features"), ("ace", "action_samples")) if p in config.parts
        )
        # RND's networks and feature statistics: None until fitted, and always for ACE alone
        self.target: nn.Module | None = None
        self.predictor: nn.Module | None = None
        self.mean = self.std = np.zeros(0)

    def _build(self, feature_dim: int) -> tuple[nn.Module, nn.Module]:
        c = self.config
        self.target = target = _rnd_net(feature_dim, c.rnd_hidden, c.rnd_dim).requires_grad_(False)
        self.predictor = predictor = _rnd_net(feature_dim, c.rnd_hidden, c.rnd_dim)
        return target, predictor

    def _rnd(self) -> tuple[nn.Module, nn.Module]:
        if self.target is None or self.predictor is None:
            raise RuntimeError(f"{self.name}: RND is not fitted")
        return self.target, self.predictor

    def _fit(self, rollouts: Sequence[Rollout], rng: np.random.Generator) -> None:
        if "rnd" not in self.config.parts:
            return
        x = np.concatenate([r.recorded("features") for r in rollouts if r.success])
        self.mean, self.std = x.mean(0), x.std(0) + 1e-6
        inputs = torch.from_numpy((x - self.mean) / self.std).float()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(rng.integers(2**31)))
            target, predictor = self._build(x.shape[1])
            optimizer = torch.optim.Adam(predictor.parameters(), lr=self.config.lr)
            for _ in range(self.config.epochs):
                for idx in np.array_split(rng.permutation(len(x)), max(1, len(x) // self.config.batch_size)):
                    batch = inputs[torch.from_numpy(idx)]
                    loss = ((predictor(batch) - target(batch)) ** 2).sum(1).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()

    def rnd_error(self, features: np.ndarray) -> np.ndarray:
        """Per-step RND prediction error ``(B,)`` of features ``(B, D)``."""
        target, predictor = self._rnd()
        x = torch.from_numpy(((features - self.mean) / self.std).astype(np.float32))
        with torch.no_grad():
            return (predictor(x) - target(x)).norm(dim=1).numpy().astype(np.float64)

    def stream(self, num_envs: int) -> DetectorStream:
        self._check_fitted()
        return _WindowStream(self, num_envs)

    def _state(self) -> dict[str, np.ndarray]:
        if self.target is None:
            return {}
        target, predictor = self._rnd()
        return {
            "mean": self.mean,
            "std": self.std,
            **{f"target.{k}": v.numpy() for k, v in target.state_dict().items()},
            **{f"predictor.{k}": v.numpy() for k, v in predictor.state_dict().items()},
        }

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        if "mean" not in state:
            return
        self.mean, self.std = state["mean"], state["std"]
        for prefix, net in zip(("target.", "predictor."), self._build(len(self.mean)), strict=True):
            net.load_state_dict(
                {k[len(prefix) :]: torch.from_numpy(v) for k, v in state.items() if k.startswith(prefix)}
            )


class _WindowStream(DetectorStream):
    """Sums of each part's per-step score over the last ``window`` steps of the episode."""

    def __init__(self, detector: Fiper, num_envs: int) -> None:
        super().__init__(num_envs)
        self.detector = detector
        self.history = np.zeros((num_envs, len(detector.components), detector.config.window))
        self.cursor = 0

    def step(self, inputs: Mapping[str, np.ndarray], new_episode: np.ndarray) -> np.ndarray:
        self.history[new_episode] = 0.0
        per_step = [
            self.detector.rnd_error(required(inputs, "features"))
            if part == "rnd"
            else chunk_entropy(required(inputs, "action_samples"), self.detector.config.bins)
            for part in self.detector.components
        ]
        self.history[:, :, self.cursor] = np.stack(per_step, axis=1)
        self.cursor = (self.cursor + 1) % self.history.shape[2]
        return self.history.sum(axis=2)
