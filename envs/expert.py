"""Measuring the scripted experts: success rate of one episode per env over a batch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldsim.envs.vector_env import TabletopVectorEnv


@dataclass(frozen=True)
class ExpertStats:
    task: str
    episodes: int
    success_rate: float
    failure_rate: float  # episodes ended by a failure (a cube left the table)
    mean_success_steps: float


def expert_success(task: str, episodes: int, seed: int = 0) -> ExpertStats:
    """Run one expert episode in each of ``episodes`` parallel envs and count the outcomes."""
    env = TabletopVectorEnv(task, episodes, autoreset_mode="Disabled")
    env.reset(seed=seed)
    success = np.full(episodes, -1)
    failure = np.zeros(episodes, bool)
    steps = np.zeros(episodes, np.int64)
    try:
        while (success < 0).any():
            _, _, terminated, truncated, info = env.step(env.expert_action())
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
