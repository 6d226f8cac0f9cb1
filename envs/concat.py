"""Several vector envs stepped as one: the multi-task batch of a multi-task policy.

Example (a policy trained on two tasks at once; the same works for imagined envs)::

    >>> import gymnasium as gym, numpy as np, worldsim
    >>> from worldsim.envs.concat import ConcatVectorEnv
    >>> envs = ConcatVectorEnv([gym.make_vec(f"worldsim/{t}", num_envs=2, obs_mode="state",
    ...                                      autoreset_mode="SameStep")
    ...                         for t in ("ReachCube-v0", "PushCube-v0")])
    >>> obs, info = envs.reset(seed=0)
    >>> obs.shape, info["success"].shape
    ((4, 56), (4,))
    >>> envs.close()

Envs ``0 .. n_0 - 1`` are the first sub-env's, the next ``n_1`` the second's, and so on. Every
array in ``step``/``reset`` is the sub-envs' arrays concatenated in that order, including the
infos (nested dicts such as ``reward_terms`` too). A key that only some sub-envs reported this
step (``final_obs`` when only one task's episode ended) is filled for the others as gymnasium's
vector envs fill absent entries: ``None`` for object arrays, zeros/False otherwise, and its
``_key`` mask False. Instruction tuples are joined.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space

from worldsim.envs.core import snapshots


class ConcatVectorEnv(VectorEnv):
    """The vector envs ``envs`` as one batch of ``sum(env.num_envs)`` envs.

    Args:
        envs: vector envs with equal single observation and action spaces and equal autoreset
            modes (e.g. the same observation mode of different tasks).

    ``reset(seed=s)`` seeds sub-env ``k`` with ``s + k`` (different tasks get different layouts
    even when they share a seed). ``options["reset_mask"]`` is split between the sub-envs;
    other options (``group_size``) are passed to each sub-env whose part is being reset.
    """

    def __init__(self, envs: Sequence[VectorEnv]) -> None:
        if not envs:
            raise ValueError("ConcatVectorEnv needs at least one vector env")
        first = envs[0]
        for k, env in enumerate(envs[1:], 1):
            if env.single_observation_space != first.single_observation_space:
                raise ValueError(f"env {k} observes {env.single_observation_space}, env 0 "
                                 f"{first.single_observation_space}: concatenated envs must observe the same space")
            if env.single_action_space != first.single_action_space:
                raise ValueError(f"env {k} takes {env.single_action_space}, env 0 {first.single_action_space}")
            if env.metadata.get("autoreset_mode") != first.metadata.get("autoreset_mode"):
                raise ValueError("concatenated envs must share one autoreset mode")
        self.envs = list(envs)
        self.sizes = [env.num_envs for env in self.envs]
        self.bounds = np.cumsum([0, *self.sizes])
        self.num_envs = int(self.bounds[-1])
        self.single_observation_space = first.single_observation_space
        self.single_action_space = first.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = dict(first.metadata)
        self.render_mode = first.render_mode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray | dict[str, np.ndarray], dict[str, Any]]:
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != (self.num_envs,):
                raise ValueError(f"reset_mask must be a bool array of shape ({self.num_envs},); got {mask.shape}")
        results = []
        for k, env in enumerate(self.envs):
            part = dict(options)
            if mask is not None:
                part["reset_mask"] = mask[self.bounds[k]:self.bounds[k + 1]]
            results.append(env.reset(seed=None if seed is None else seed + k, options=part or None))
        observations, infos = zip(*results, strict=True)
        return self._concat_obs(observations), self._concat_info(infos)

    def step(self, actions: np.ndarray
             ) -> tuple[np.ndarray | dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions)
        if actions.shape[:1] != (self.num_envs,):
            raise ValueError(f"actions must have {self.num_envs} rows, one per env; got shape {actions.shape}")
        results = [env.step(actions[self.bounds[k]:self.bounds[k + 1]]) for k, env in enumerate(self.envs)]
        observations, rewards, terminated, truncated, infos = zip(*results, strict=True)
        return (self._concat_obs(observations), np.concatenate(rewards), np.concatenate(terminated),
                np.concatenate(truncated), self._concat_info(infos))

    # One (N, H, W, 3) batch, as worldsim's other vector envs render, not gymnasium's tuple of frames.
    def render(self) -> np.ndarray | None:  # type: ignore[override]
        frames = [env.render() for env in self.envs]
        return None if any(f is None for f in frames) else np.concatenate([np.asarray(f) for f in frames])

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()

    def get_state(self) -> list[Any]:
        """Every sub-env's :meth:`get_state` snapshot, in order."""
        return [snapshots(env).get_state() for env in self.envs]

    def set_state(self, state: list[Any]) -> None:
        """Restore a :meth:`get_state` snapshot of a ConcatVectorEnv of the same sub-envs."""
        if len(state) != len(self.envs):
            raise ValueError(f"the snapshot holds {len(state)} sub-envs; this env has {len(self.envs)}")
        for env, part in zip(self.envs, state, strict=True):
            snapshots(env).set_state(part)

    # ------------------------------------------------------------------ concatenation
    def _concat_obs(self, observations: Sequence[Any]) -> Any:
        if isinstance(observations[0], dict):
            return {key: (sum((tuple(o[key]) for o in observations), ()) if key == "instruction"
                          else np.concatenate([o[key] for o in observations]))
                    for key in observations[0]}
        return np.concatenate(observations)

    def _concat_info(self, infos: Sequence[dict[str, Any]]) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        keys = list(dict.fromkeys(k for info in infos for k in info))
        for key in keys:
            present = [info.get(key) for info in infos]
            example = next(v for v in present if v is not None)
            if isinstance(example, dict):
                merged[key] = self._concat_info([v if v is not None else {} for v in present])
                continue
            example = np.asarray(example)
            parts = []
            for value, size in zip(present, self.sizes, strict=True):
                if value is None:
                    value = np.full(size, None, object) if example.dtype == object \
                        else np.zeros((size, *example.shape[1:]), example.dtype)
                parts.append(np.asarray(value))
            merged[key] = np.concatenate(parts)
        return merged
