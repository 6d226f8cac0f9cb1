"""Every variant is solvable: the scripted expert succeeds on (nearly) every episode.

The full >= 95% check over 500 episodes per variant is `benchmarks/expert_success.py`; here a
smaller batch per variant keeps the suite fast.
"""

import numpy as np
import pytest

from worldsim.envs import TASKS
from worldsim.envs.vector_env import TabletopVectorEnv


def expert_success_rate(task: str, episodes: int, seed: int = 0) -> float:
    env = TabletopVectorEnv(task, episodes, autoreset_mode="Disabled")
    env.reset(seed=seed)
    outcome = np.full(episodes, -1)
    while (outcome < 0).any():
        _, _, terminated, truncated, info = env.step(env.expert_action())
        done = terminated | truncated
        outcome[done & (outcome < 0)] = info["success"][done & (outcome < 0)]
        if done.any():
            env.reset(options={"reset_mask": done})
    env.close()
    return float(outcome.mean())


@pytest.mark.parametrize("task", list(TASKS))
def test_expert_solves_every_variant(task):
    assert expert_success_rate(task, 40) >= 0.9
