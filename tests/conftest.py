import gymnasium as gym
import numpy as np
import pytest
import torch

import worldsim  # noqa: F401  (registers the envs)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The tests' networks are tiny: one torch thread is fastest and does not oversubscribe the
    two cores under ``pytest -n 2``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
