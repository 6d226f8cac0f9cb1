"""Serving a chunk policy one action per env step: a per-env queue of planned actions.

A policy that predicts K actions at once is usually run with receding horizon: execute the
first ``execute_steps`` actions of a chunk, then re-plan (LeRobot's ``n_action_steps``,
OpenVLA-OFT's open-loop chunk). :class:`ChunkQueue` keeps one queue per env of a vector env,
asks the policy only for envs whose queue ran dry, and drops an env's queue when its episode
restarts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from worldsim.policies.base import Policy, PolicyOutput


def select_envs(obs: Any, index: np.ndarray) -> Any:
    """Rows ``index`` of a batched observation (array, or dict with an ``instruction`` tuple)."""
    if isinstance(obs, dict):
        return {k: (tuple(v[i] for i in index) if isinstance(v, (tuple, list)) else v[index])
                for k, v in obs.items()}
    return obs[index]


class ChunkQueue:
    """Turn ``policy`` into a per-step actor for ``num_envs`` envs.

    Args:
        policy: any :class:`Policy`.
        num_envs: batch size of the env it drives.
        execute_steps: actions executed from each chunk before re-planning (1 to
            ``policy.chunk_size``; default: the whole chunk).
        deterministic: take the policy's mode instead of sampling.

    Call it with the env's observation to get ``(num_envs, action_dim)`` float32 actions; call
    :meth:`restart` with the mask of envs whose episode just began. :attr:`last_output` holds
    the policy's output (features, value) from the latest planning call, for the envs planned.
    """

    def __init__(self, policy: Policy, num_envs: int, execute_steps: int | None = None,
                 deterministic: bool = False) -> None:
        k = policy.chunk_size
        execute_steps = k if execute_steps is None else execute_steps
        if not 1 <= execute_steps <= k:
            raise ValueError(f"execute_steps={execute_steps!r} must be between 1 and the chunk size {k}")
        self.policy = policy
        self.execute_steps = execute_steps
        self.deterministic = deterministic
        self._plan = np.zeros((num_envs, execute_steps, policy.action_dim), np.float32)
        self._left = np.zeros(num_envs, np.int64)  # actions still queued per env
        self.last_output: PolicyOutput | None = None
        self.last_planned = np.zeros(0, np.int64)

    def restart(self, mask: np.ndarray) -> None:
        """Forget the queued actions of envs in ``mask`` (their episode restarted)."""
        self._left[np.asarray(mask, bool)] = 0

    @torch.no_grad()
    def __call__(self, obs: Any) -> np.ndarray:
        dry = np.flatnonzero(self._left == 0)
        self.last_planned = dry
        if len(dry):
            batch = self.policy.preprocess(select_envs(obs, dry) if len(dry) < len(self._left) else obs)
            out = self.policy.act(batch, deterministic=self.deterministic)
            self.last_output = out
            self._plan[dry] = out.actions[:, : self.execute_steps].float().cpu().numpy()
            self._left[dry] = self.execute_steps
        step = self.execute_steps - self._left
        actions = self._plan[np.arange(len(self._left)), step]
        self._left -= 1
        return actions
