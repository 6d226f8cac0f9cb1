"""Measuring the scripted experts: success rate of one episode per env over a batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from worldsim.envs.core import BatchedEnv
from worldsim.envs.registration import make_vector_env


@dataclass(frozen=True)
class ExpertStats:
    task: str
    episodes: int
    success_rate: float
    failure_rate: float  # episodes ended by a failure (a cube left the table)
    mean_success_steps: float


def expert_success(task: str, episodes: int, seed: int = 0, backend: str = "mujoco", **env_options: Any) -> ExpertStats:
    """Run one expert episode in each of ``episodes`` parallel envs of ``backend`` (``"mujoco"``,
    ``"mjx"`` or ``"warp"``; ``env_options`` such as ``device`` go to the env) and count the outcomes."""
    env = make_vector_env(task, episodes, backend=backend, autoreset_mode="Disabled", **env_options).unwrapped
    assert isinstance(env, BatchedEnv)
    env.reset(seed=seed)
    success = np.full(episodes, -1)
    failure = np.zeros(episodes, bool)
    steps = np.zeros(episodes, np.int64)
    try:
        while (success < 0).any():
            _, _, terminated, truncated, info = env.step(env.expert_action())
            terminated, truncated = _host(terminated), _host(truncated)
            info = {key: _host(info[key]) for key in ("success", "failure", "episode_step")}
            done = terminated | truncated
            first = done & (success < 0)
            success[first] = info["success"][first]
            failure[first] = info["failure"][first]
            steps[first] = info["episode_step"][first]
            if done.any():
                env.reset(options={"reset_mask": done})
    finally:
        env.close()
    won = success == 1
    return ExpertStats(env.task.name, episodes, float(won.mean()), float(failure.mean()),
                       float(steps[won].mean()) if won.any() else float("nan"))


def _host(values: Any) -> np.ndarray:
    """A backend's array (numpy, JAX, or a torch tensor on any device) as a numpy array."""
    return values.cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
