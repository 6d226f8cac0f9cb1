"""The single tabletop environment for ``gym.make``: one env of the batched backend.

It is a :class:`TabletopVectorEnv` with ``num_envs=1`` and autoreset disabled, seen through
the plain :class:`gymnasium.Env` API, so single and vector envs share every line of physics,
reward and observation code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from worldsim.envs.arrays import ACTION_DIM
from worldsim.envs.scene import CONTROL_DT
from worldsim.envs.tasks import TaskSpec
from worldsim.envs.vector_env import TabletopVectorEnv

if TYPE_CHECKING:
    import mujoco


class SingleEnv(gym.Env):
    """One env of a worldsim vector env (:attr:`vector_class`, built with ``num_envs=1`` and
    autoreset disabled) through the plain :class:`gymnasium.Env` API. Takes the vector env's
    keyword arguments except ``num_envs`` and ``autoreset_mode``; ``render()`` returns one frame.

    Actions are shape ``(4,)``; stepping after ``terminated`` or ``truncated`` without a
    ``reset()`` raises an error.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": int(1 / CONTROL_DT)}
    vector_class: type[Any]  # a worldsim vector env class: physics (TabletopVectorEnv) or imagined

    def __init__(self, task: str | TaskSpec = "PushCube-v0", render_mode: str | None = None, **kwargs: Any) -> None:
        for banned in ("num_envs", "autoreset_mode"):
            if banned in kwargs:
                raise TypeError(f"{banned!r} is not an argument of the single env; use gym.make_vec for "
                                "batches")
        self.vector_env = self.vector_class(
            task, num_envs=1, autoreset_mode=AutoresetMode.DISABLED, render_mode=render_mode, **kwargs)
        self.render_mode = render_mode
        self.observation_space = self.vector_env.single_observation_space
        self.action_space = self.vector_env.single_action_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray | dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.vector_env.reset(seed=seed, options=options)
        return self._first(obs), self._first(info)

    def step(self, action: np.ndarray) -> tuple[np.ndarray | dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        arr = np.asarray(action)
        if arr.shape != (ACTION_DIM,):
            raise ValueError(f"action must have shape ({ACTION_DIM},) [end-effector dx, dy, dz, gripper]; "
                             f"got shape {arr.shape}")
        obs, reward, terminated, truncated, info = self.vector_env.step(arr[None])
        return self._first(obs), float(reward[0]), bool(terminated[0]), bool(truncated[0]), self._first(info)

    def render(self) -> np.ndarray | None:
        frames = self.vector_env.render()
        return None if frames is None else frames[0]

    def close(self) -> None:
        self.vector_env.close()

    @staticmethod
    def _first(batch: Any) -> Any:
        if isinstance(batch, dict):
            return {k: SingleEnv._first(v) for k, v in batch.items()}
        if isinstance(batch, tuple):
            return batch[0]
        value = batch[0]
        return value.item() if isinstance(value, np.generic) else value


class TabletopEnv(SingleEnv):
    """One tabletop task (see :class:`SingleEnv`); physics by :class:`TabletopVectorEnv`."""

    vector_class = TabletopVectorEnv

    @property
    def task(self) -> TaskSpec:
        return self.vector_env.task

    @property
    def model(self) -> mujoco.MjModel:
        return self.vector_env.model

    @property
    def max_episode_steps(self) -> int:
        return self.vector_env.max_episode_steps

    def expert_action(self) -> np.ndarray:
        """The scripted expert's action for the current state, shape (4,)."""
        return self.vector_env.expert_action()[0]
