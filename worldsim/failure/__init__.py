"""Failure detection for robot policies: SAFE, FIPER and baselines, conformal calibration,
the SAFE evaluation protocol and an online vector-env wrapper.

- :mod:`~worldsim.failure.rollouts`: recorded rollouts (features, sampled chunks) read from an
  episode file written with ``worldsim collect --record-features``.
- :mod:`~worldsim.failure.detectors`: the detectors (``make_detector(name)``), each fitted on
  rollouts, calibrated at ``alpha`` on successes, and scored step by step.
- :mod:`~worldsim.failure.foresight`: the world model looking ahead under the policy from the
  real frames, the input of the ``foresight`` detector (``worldsim foresight`` adds it to rollouts).
- :mod:`~worldsim.failure.conformal`: functional and constant conformal thresholds.
- :mod:`~worldsim.failure.protocol`: seen/unseen splits, ROC-AUC without length leaks, TPR,
  TNR, balanced accuracy, detection time, over seeds.
- :mod:`~worldsim.failure.wrapper`: :class:`DetectorWrapper`, ``info["failure_score"]`` and
  ``info["failure_alarm"]`` during rollouts.
- ``worldsim detect`` (:mod:`~worldsim.failure.detect`) runs it all and writes the report.
"""

from worldsim.failure.conformal import Threshold, constant_threshold, functional_threshold
from worldsim.failure.detectors import DETECTORS, Detector, load_detector, make_detector
from worldsim.failure.foresight import Foresight, ForesightConfig, record_foresight
from worldsim.failure.protocol import ProtocolConfig, evaluate_detector
from worldsim.failure.rollouts import Rollout, load_rollouts
from worldsim.failure.wrapper import DetectorWrapper

__all__ = [
    "DETECTORS",
    "Detector",
    "DetectorWrapper",
    "Foresight",
    "ForesightConfig",
    "ProtocolConfig",
    "Rollout",
    "Threshold",
    "constant_threshold",
    "evaluate_detector",
    "functional_threshold",
    "load_detector",
    "load_rollouts",
    "make_detector",
    "record_foresight",
]
