"""Online failure detection: a vector-env wrapper that scores every step of every env.

:class:`DetectorWrapper` runs the policy's processor, features and (when the detector reads
them) ``S`` sampled chunks on each observation the env returns, advances the detector's stream
and adds to ``info``:

- ``failure_score`` ``(N,)`` float: the detector's score of the current observation (for
  several components, e.g. FIPER, the calibrated margin: > 0 means every component is over
  its threshold);
- ``failure_alarm`` ``(N,)`` bool: whether the alarm has fired in the current episode so far
  (it stays raised until the episode ends; a new episode starts with it lowered).

The ``foresight`` detector also needs the world model looking ahead (``foresight=``): its cost
per step, the look-aheads' share included, is in :attr:`DetectorWrapper.overhead_ms`.

Episode starts are read from ``info["episode_step"] == 0``, so every autoreset mode works. The
wrapper does not choose actions: the policy acting (e.g. through a
:class:`~worldsim.policies.runner.ChunkQueue`) is the caller's, and may be the same object.
:attr:`DetectorWrapper.overhead_ms` reports the time spent per env step, split into the
policy's forward passes and the detector itself.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from worldsim.failure.detectors import Detector
from worldsim.failure.foresight import Foresight
from worldsim.policies.base import Policy
from worldsim.runtime.validation import check_int


class DetectorWrapper(gym.vector.VectorWrapper):
    """Adds ``failure_score`` and ``failure_alarm`` to the info of a worldsim vector env.

    Args:
        env: the vector env (physics or imagined) the policy acts in.
        policy: the policy whose features / samples the detector reads.
        detector: a fitted and calibrated detector (see :func:`~worldsim.failure.load_detector`).
        num_samples: chunks sampled per step for sampling-based detectors (as recorded).
        foresight: the world model looking ahead for the ``foresight`` detector
            (:class:`~worldsim.failure.foresight.Foresight`, with the same settings as recorded).
    """

    def __init__(self, env: gym.vector.VectorEnv, policy: Policy, detector: Detector, num_samples: int = 8,
                 foresight: Foresight | None = None) -> None:
        super().__init__(env)
        if ("foresight" in detector.needs) != (foresight is not None):
            raise ValueError(f"detector {detector.name!r} reads {', '.join(detector.needs)}: pass foresight="
                             "Foresight(world_model, policy) exactly when it reads 'foresight'")
        self.foresight = foresight
        if not detector.fitted or detector.thresholds is None:
            raise ValueError(
                f"detector {detector.name!r} must be fitted and calibrated before online use "
                f"(fit(rollouts), calibrate(successes, alpha), or load_detector(path))"
            )
        check_int("num_samples", num_samples)
        self.policy, self.detector, self.num_samples = policy.eval(), detector, num_samples
        self._stream = detector.stream(self.num_envs)
        self._alarm = np.zeros(self.num_envs, dtype=bool)
        self._seconds = {"policy": 0.0, "detector": 0.0}
        self._steps = 0

    def reset(
        self,
        *,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._stream = self.detector.stream(self.num_envs)
        self._alarm[:] = False
        return obs, self._score(obs, info)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        return obs, reward, terminated, truncated, self._score(obs, info)

    def _score(self, obs: Any, info: dict[str, Any]) -> dict[str, Any]:
        steps = np.asarray(info["episode_step"])
        new_episode = steps == 0
        start = time.perf_counter()
        inputs: dict[str, np.ndarray] = {}
        with torch.no_grad():
            batch = self.policy.preprocess(obs)
            if "features" in self.detector.needs:
                inputs["features"] = self.policy.features(batch).cpu().numpy().astype(np.float32)
            if "action_samples" in self.detector.needs:
                inputs["action_samples"] = self.policy.sample(batch, self.num_samples).cpu().numpy().astype(np.float32)
        middle = time.perf_counter()
        if self.foresight is not None:
            inputs["foresight"] = self.foresight.observe(obs, steps)
        scores = self._stream.step(inputs, new_episode)
        margins = self.detector.margins(scores, steps=steps)
        self._alarm[new_episode] = False
        self._alarm |= margins > 0
        self._seconds["policy"] += middle - start
        self._seconds["detector"] += time.perf_counter() - middle
        self._steps += self.num_envs
        info = dict(info)
        info["failure_score"] = scores[:, 0] if scores.shape[1] == 1 else margins
        info["failure_alarm"] = self._alarm.copy()
        return info

    @property
    def overhead_ms(self) -> dict[str, float]:
        """Milliseconds per env step so far: ``policy`` (features and samples), ``detector``."""
        return {k: 1000 * v / max(self._steps, 1) for k, v in self._seconds.items()}
