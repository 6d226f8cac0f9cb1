"""Vector-env wrappers, one job each."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space

from worldsim.runtime.validation import check_int


class ActionChunk(VectorWrapper):
    """Make the env take a chunk of ``chunk_size`` actions per step, executed open loop.

    The action space becomes ``Box(-1, 1, (num_envs, chunk_size, action_dim))``. The wrapped
    env must execute chunks itself (the tabletop and imagined envs do): an env whose episode
    ends inside a chunk stays still for the rest of it, the reward is the sum over the steps
    it executed and ``info["chunk_steps"]`` counts them. Autoreset happens after the chunk, as
    for a single step.
    """

    def __init__(self, env: VectorEnv, chunk_size: int) -> None:
        super().__init__(env)
        check_int("chunk_size", chunk_size)
        single = env.single_action_space
        if not isinstance(single, gym.spaces.Box) or len(single.shape) != 1:
            raise TypeError(f"ActionChunk needs a flat Box action space; got {single}")
        self.chunk_size = int(chunk_size)
        self.single_action_space = gym.spaces.Box(
            np.repeat(single.low[None], chunk_size, 0), np.repeat(single.high[None], chunk_size, 0),
            dtype=single.dtype)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        shape = (self.num_envs, self.chunk_size, *(self.env.single_action_space.shape or ()))
        if np.shape(actions) != shape:
            raise ValueError(f"action chunk must have shape {shape}; got {np.shape(actions)}")
        return self.env.step(actions)
