"""The detector interface: fit on rollouts, calibrate at level alpha, score step by step, alarm.

A detector turns what the policy computed at each step (its features ``(D,)`` and ``S`` sampled
action chunks ``(S, K, A)``) into one or more score curves ("components"; FIPER has two), each
non-decreasing in how likely a failure is. Every detector is written once, as a *stream*: a
:class:`DetectorStream` holds per-env state (running sums, LSTM state, windows) and maps one
step of a batch of envs to their scores. Offline scoring (:meth:`Detector.score_rollouts`) runs
the same stream over padded rollouts, so online (:class:`~worldsim.failure.DetectorWrapper`)
and offline scores are the same numbers.

Life cycle::

    detector = make_detector("safe-mlp")
    detector.fit(train_rollouts)                       # successes (and failures, for SAFE)
    detector.calibrate(calibration_successes, alpha=0.1)
    detector.alarm_curve(detector.score_rollouts([r])[0])   # (T,) bool

Calibration gives each component a conformal threshold curve (:mod:`~worldsim.failure.conformal`);
the alarm fires at step ``t`` when *every* component exceeds its threshold (the AND rule: the
false-alarm rate on successes stays <= alpha). :meth:`Detector.detection_score` is the one curve
ROC-AUC reads: the raw score for one component; for several, the smallest calibrated margin.
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from safetensors.numpy import load_file, save_file

from worldsim.failure.conformal import Threshold, calibrate_components, check_alpha
from worldsim.failure.rollouts import Rollout
from worldsim.runtime.atomic import atomic_path
from worldsim.runtime.run_logging import to_jsonable

BATCH_ROLLOUTS = 256
"""Rollouts scored side by side offline."""
CONFIG_FILE = "detector.json"
STATE_FILE = "detector.safetensors"


class DetectorStream(ABC):
    """Per-env online state of a fitted detector for ``num_envs`` envs."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    @abstractmethod
    def step(self, inputs: Mapping[str, np.ndarray], new_episode: np.ndarray) -> np.ndarray:
        """Scores ``(num_envs, C)`` for the current step. ``inputs`` maps each key the detector
        :attr:`~Detector.needs` to what was computed on the current observations: ``features``
        ``(B, D)`` and ``action_samples`` ``(B, S, K, A)`` by the policy, ``foresight`` ``(B, H)``
        by the world model (:mod:`~worldsim.failure.foresight`); ``new_episode`` ``(B,)`` marks
        envs whose episode starts at this observation (their state is cleared first)."""


class Detector(ABC):
    """Base class; subclasses set the class attributes and implement :meth:`fit` and :meth:`stream`.

    Attributes:
        name: the registry name (``make_detector(name)``).
        needs: recorded keys read (:data:`~worldsim.failure.rollouts.RECORDED_KEYS`): ``"features"``,
            ``"action_samples"`` or ``"foresight"``.
        components: names of the score curves (one threshold each).
        uses_failures: whether :meth:`fit` needs failed rollouts (supervised, like SAFE).
        joint_calibration: with several components, calibrate their thresholds jointly (one
            shared band width, :func:`~worldsim.failure.conformal.joint_functional_thresholds`)
            instead of each at ``alpha``.
        learns: whether :meth:`fit` learns anything from the rollouts (False: the score reads
            its inputs directly, so fitting it on other rollouts changes nothing).
    """

    # Set per class, except by detectors whose config picks them (FIPER's parts).
    name: str
    needs: tuple[str, ...]
    components: tuple[str, ...] = ("score",)
    uses_failures: ClassVar[bool] = False
    joint_calibration: bool = False
    learns: bool = True

    def __init__(self, config: Any) -> None:
        self.config = config
        self.fitted = False
        self.thresholds: list[Threshold] | None = None
        self.scales: np.ndarray | None = None

    # ------------------------------------------------------------------ to implement
    @abstractmethod
    def _fit(self, rollouts: Sequence[Rollout], rng: np.random.Generator) -> None:
        """Learn from ``rollouts`` (already checked to hold what :attr:`needs`)."""

    @abstractmethod
    def stream(self, num_envs: int) -> DetectorStream:
        """A fresh online scorer for ``num_envs`` envs (the detector must be fitted)."""

    def _state(self) -> dict[str, np.ndarray]:
        """Learned arrays to save (default: none)."""
        return {}

    def _load_state(self, state: dict[str, np.ndarray]) -> None:  # noqa: B027  (optional hook; default: nothing to restore)
        """Restore what :meth:`_state` returned."""

    # ------------------------------------------------------------------ fitting
    def check_rollouts(self, rollouts: Sequence[Rollout]) -> None:
        """``ValueError`` if ``rollouts`` is empty or lacks a key this detector reads."""
        if not rollouts:
            raise ValueError(f"{self.name}: no rollouts given")
        for key in self.needs:
            rollouts[0].recorded(key)

    def fit(self, rollouts: Sequence[Rollout], seed: int = 0) -> Detector:
        """Fit on training rollouts (successes, and failures where :attr:`uses_failures`)."""
        self.check_rollouts(rollouts)
        if not any(r.success for r in rollouts):
            raise ValueError(f"{self.name}: the training rollouts hold no success")
        if self.uses_failures and all(r.success for r in rollouts):
            raise ValueError(
                f"{self.name} is supervised and needs failed rollouts to fit; the training rollouts "
                f"are all successes"
            )
        self._fit(rollouts, np.random.default_rng(seed))
        self.fitted = True
        return self

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise RuntimeError(f"{self.name} is not fitted; call fit(rollouts) first")

    # ------------------------------------------------------------------ scoring
    def score_rollouts(self, rollouts: Sequence[Rollout]) -> list[np.ndarray]:
        """Score curves ``(T_i, C)`` of each rollout, computed by the online stream."""
        self._check_fitted()
        if not rollouts:
            return []
        self.check_rollouts(rollouts)
        out: list[np.ndarray] = []
        for start in range(0, len(rollouts), BATCH_ROLLOUTS):
            batch = rollouts[start : start + BATCH_ROLLOUTS]
            inputs = {key: _pad([r.recorded(key) for r in batch]) for key in self.needs}
            horizon = max(r.length for r in batch)
            stream = self.stream(len(batch))
            scores = np.zeros((len(batch), horizon, len(self.components)))
            for t in range(horizon):
                scores[:, t] = stream.step({key: value[:, t] for key, value in inputs.items()},
                                           np.full(len(batch), t == 0))
            out += [scores[i, : r.length] for i, r in enumerate(batch)]
        return out

    # ------------------------------------------------------------------ calibration
    def calibrate(
        self, successes: Sequence[Rollout], alpha: float, method: str = "functional", seed: int = 0
    ) -> Detector:
        """Conformal thresholds, one per component, from successful rollouts (failures among
        ``successes`` are refused: the guarantee is about successes)."""
        check_alpha(alpha)
        if any(not r.success for r in successes):
            raise ValueError(f"{self.name}: calibrate on successful rollouts only")
        if not successes:
            raise ValueError(
                f"{self.name}: the calibration set holds no successful rollouts; conformal "
                f"calibration needs successes"
            )
        curves = self.score_rollouts(successes)
        self.thresholds = self.recalibrate(curves, alpha, method, seed)
        pooled = np.concatenate(curves)
        self.scales = np.maximum(pooled.std(axis=0), 1e-8)
        return self

    def recalibrate(
        self, curves: Sequence[np.ndarray], alpha: float, method: str = "functional", seed: int = 0
    ) -> list[Threshold]:
        """Thresholds at another ``alpha`` from already computed success curves (for sweeps)."""
        components = [[c[:, k] for c in curves] for k in range(len(self.components))]
        rng = np.random.default_rng(seed)
        return calibrate_components(components, alpha, method, rng, self.joint_calibration)

    def margins(
        self,
        scores: np.ndarray,
        thresholds: Sequence[Threshold] | None = None,
        steps: np.ndarray | None = None,
    ) -> np.ndarray:
        """Smallest over components of ``(s - delta_t) / scale`` for scores ``(N, C)``: > 0
        where all components exceed their thresholds. Row ``i`` is at episode step
        ``steps[i]``; by default the rows are one rollout's steps ``0 .. N-1``."""
        thresholds = thresholds or self.thresholds
        if thresholds is None or self.scales is None:
            raise RuntimeError(f"{self.name} is not calibrated; call calibrate(successes, alpha) first")
        steps = np.arange(len(scores)) if steps is None else np.asarray(steps)
        return np.min(
            np.stack(
                [
                    (scores[:, k] - thresholds[k].at(steps)) / self.scales[k]
                    for k in range(len(self.components))
                ]
            ),
            axis=0,
        )

    def alarm_curve(self, scores: np.ndarray, thresholds: Sequence[Threshold] | None = None) -> np.ndarray:
        """``(T,)`` bool: the alarm condition at each step."""
        return self.margins(scores, thresholds) > 0

    def detection_score(self, scores: np.ndarray) -> np.ndarray:
        """The single curve ROC-AUC reads: the raw score, or the calibrated margin for several components."""
        return scores[:, 0] if scores.shape[1] == 1 else self.margins(scores)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write ``detector.json`` (name, config, thresholds) and ``detector.safetensors`` to ``path``."""
        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        document = {
            "name": self.name,
            "config": to_jsonable(self.config),
            "thresholds": [t.to_json() for t in self.thresholds] if self.thresholds else None,
            "scales": self.scales.tolist() if self.scales is not None else None,
        }
        state = {k: np.ascontiguousarray(v) for k, v in self._state().items()}
        with atomic_path(path / STATE_FILE) as tmp:
            save_file(state, str(tmp))
        with atomic_path(path / CONFIG_FILE) as tmp:
            Path(tmp).write_text(json.dumps(document, indent=2))
        return path


def load_detector(path: str | Path) -> Detector:
    """Rebuild a detector saved with :meth:`Detector.save` (fitted, and calibrated if it was)."""
    from worldsim.failure.detectors import DETECTORS

    path = Path(path)
    if not (path / CONFIG_FILE).is_file() or not (path / STATE_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a saved detector: it needs {CONFIG_FILE} and {STATE_FILE}")
    try:
        document = json.loads((path / CONFIG_FILE).read_text())
        state = load_file(str(path / STATE_FILE))
    except (json.JSONDecodeError, OSError, ValueError) as err:
        raise ValueError(f"the detector in {path} is corrupt: {err}") from err
    name = document.get("name")
    if name not in DETECTORS:
        raise ValueError(f"{path}: unknown detector {name!r}; known: {', '.join(DETECTORS)}")
    cls, config_class, defaults = DETECTORS[name]
    fields = {f.name for f in dataclasses.fields(config_class)}
    config = config_class(
        **{
            **defaults,
            **{
                k: tuple(v) if isinstance(v, list) else v
                for k, v in document["config"].items()
                if k in fields
            },
        }
    )
    detector = cls(config)
    detector._load_state(state)
    detector.fitted = True
    if document.get("thresholds"):
        detector.thresholds = [Threshold.from_json(t) for t in document["thresholds"]]
        detector.scales = np.asarray(document["scales"])
    return detector


def required(inputs: Mapping[str, np.ndarray], key: str) -> np.ndarray:
    """``inputs[key]``, or a ``ValueError`` naming the missing input (``check_rollouts`` says it
    earlier for recorded rollouts; an online stream learns it here)."""
    if inputs.get(key) is None:
        raise ValueError(f"this detector reads {key!r}, and none were given")
    return inputs[key]


def _pad(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Arrays ``(T_i, ...)`` as one zero-padded ``(n, T_max, ...)`` array."""
    out = np.zeros((len(arrays), max(len(a) for a in arrays), *arrays[0].shape[1:]), dtype=np.float32)
    for i, array in enumerate(arrays):
        out[i, : len(array)] = array
    return out


class RunningMean(DetectorStream):
    """Aggregates a per-step score into its running mean over the episode so far (the
    embedding-distance and sampling baselines: a single noisy step should not decide)."""

    def __init__(self, num_envs: int, per_step: Any, needs: tuple[str, ...]) -> None:
        super().__init__(num_envs)
        self.per_step, self.needs = per_step, needs
        self.total = np.zeros(num_envs)
        self.count = np.zeros(num_envs)

    def step(self, inputs: Mapping[str, np.ndarray], new_episode: np.ndarray) -> np.ndarray:
        self.total[new_episode] = 0.0
        self.count[new_episode] = 0.0
        self.total += self.per_step(*(required(inputs, key) for key in self.needs), new_episode)
        self.count += 1
        return (self.total / self.count)[:, None]
