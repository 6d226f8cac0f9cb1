import gymnasium as gym
import numpy as np
import pytest

import worldsim  # noqa: F401  (registers the envs)


@pytest.fixture
def make_vec():
    """gym.make_vec that closes what it made."""
    made = []

    def make(task: str = "PushCube-v0", num_envs: int = 4, **kwargs):
        env = gym.make_vec(f"worldsim/{task}", num_envs=num_envs, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def zero_actions(num_envs: int) -> np.ndarray:
    return np.zeros((num_envs, 4), np.float32)
