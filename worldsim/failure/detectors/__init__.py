"""Failure detectors and their registry: ``make_detector(name, **config)``.

=================  ==========================  ======================================
name               reads                        score
=================  ==========================  ======================================
safe-mlp           features (+ failures)        running sum of MLP failure probabilities
safe-lstm          features (+ failures)        LSTM failure probability
foresight          foresight (+ failures)       running sum of MLP failure probabilities
fiper              features, action samples     RND AND action-chunk entropy (windowed)
rnd                features                     RND prediction error (windowed)
ace                action samples               action-chunk entropy (windowed)
knn                features                     cosine k-NN distance to successes
mahalanobis        features                     Mahalanobis distance to successes
action-variance    action samples               variance of the sampled chunks
stac               action samples               MMD between consecutive chunks
=================  ==========================  ======================================
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from worldsim.failure.detectors.base import Detector, DetectorStream, load_detector
from worldsim.failure.detectors.baselines import (
    STAC,
    ActionVariance,
    CosineKNN,
    KNNConfig,
    Mahalanobis,
    NoConfig,
)
from worldsim.failure.detectors.fiper import Fiper, FiperConfig
from worldsim.failure.detectors.safe import ForesightMLP, SafeConfig, SafeLSTM, SafeMLP

DETECTORS: dict[str, tuple[type[Detector], type, dict[str, Any]]] = {
    "safe-mlp": (SafeMLP, SafeConfig, {}),
    "safe-lstm": (SafeLSTM, SafeConfig, {}),
    "foresight": (ForesightMLP, SafeConfig, {}),
    "fiper": (Fiper, FiperConfig, {"parts": ("rnd", "ace")}),
    "rnd": (Fiper, FiperConfig, {"parts": ("rnd",)}),
    "ace": (Fiper, FiperConfig, {"parts": ("ace",)}),
    "knn": (CosineKNN, KNNConfig, {}),
    "mahalanobis": (Mahalanobis, NoConfig, {}),
    "action-variance": (ActionVariance, NoConfig, {}),
    "stac": (STAC, NoConfig, {}),
}
"""name -> (class, config class, config defaults of that name)."""


def make_detector(name: str, **config: Any) -> Detector:
    """A new, unfitted detector ``name`` (see the table above) with config fields ``config``."""
    if name not in DETECTORS:
        near = difflib.get_close_matches(name, list(DETECTORS), n=2)
        hint = f" Did you mean {', '.join(repr(n) for n in near)}?" if near else ""
        raise KeyError(f"unknown detector {name!r}.{hint} Known: {', '.join(DETECTORS)}")
    cls, config_class, defaults = DETECTORS[name]
    allowed = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise ValueError(
            f"detector {name!r} has no setting(s) {unknown}; allowed: {sorted(allowed) or 'none'}"
        )
    return cls(config_class(**{**defaults, **config}))


__all__ = ["DETECTORS", "Detector", "DetectorStream", "load_detector", "make_detector"]
