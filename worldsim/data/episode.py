"""One episode and the HDF5 layout episode files hold it in: the contract every stage reads and
writes (robomimic/LIBERO-style)::

    /                      attrs: format = "worldsim-episodes", version = 1,
                                  total = number of episodes,
                                  tasks = JSON list of the task names in the file,
                                  env_kwargs = JSON object of the env arguments used
    data/demo_<i>/         one episode, i = 0 .. total-1 in the order written
        attrs:             instruction, task, env_id ("worldsim/<task>", or the imagined twin's id),
                           seed (env seed), env_index (which env of the vector env ran it),
                           num_samples (T), success (episode outcome: the success flag of the final
                           observation), policy (a short description of the policy that acted)
        obs/image          uint8 (T+1, H, W, 3)   front camera            } any non-empty
        obs/wrist_image    uint8 (T+1, H, W, 3)   wrist camera            } subset of these
        obs/proprio        float32 (T+1, 4)       TCP xyz, gripper opening } keys, the same
        obs/state          float32 (T+1, 56)      full low-dim state       } in every episode
        actions            float32 (T, 4)   the executed (clipped) action taken at obs t
        rewards            float32 (T,)     reward received for action t
        terminated         bool (T,)        success or failure ended the episode at step t
        truncated          bool (T,)        the time limit ended it at step t
        dones              bool (T,)        terminated | truncated
        success            bool (T+1,)      the task's success flag at each observation
        policy/features        float32 (T, D)        policy features at obs t     } optional (collect
        policy/action_samples  float32 (T, S, K, A)  S sampled chunks of K        } --record-features):
                                                     actions at obs t             } in all episodes or none

Observation arrays hold ``T + 1`` observations: ``obs[T]`` is the final observation after the
last action, so ``(obs[t], actions[t], rewards[t], obs[t + 1])`` is a transition for every
``t < T`` (world models need the last one). Image arrays are stored one frame per chunk with
LZF compression (fast to write and to read one frame at a time). The ``policy`` group holds
what the acting policy computed at each observation it acted on, so that failure detectors
can be re-run offline on the rollouts; it is optional, so files without it are version 1 too.

:class:`Episode` is one episode in memory, checked on construction. Files are written by
:class:`~worldsim.data.writer.EpisodeWriter` and read by :class:`~worldsim.data.reader.EpisodeReader`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from worldsim.envs.registration import task_env_id

FORMAT = "worldsim-episodes"
VERSION = 1
OBS_KEYS: tuple[str, ...] = ("image", "wrist_image", "proprio", "state")
IMAGE_KEYS: tuple[str, ...] = ("image", "wrist_image")
ACTION_DIM = 4
POLICY_KEYS: tuple[str, ...] = ("features", "action_samples", "foresight")
POLICY_AXES = {"features": ("T", "D"), "action_samples": ("T", "S", "K", "A"), "foresight": ("T", "H")}
"""The axes of each policy output: steps, then feature width, (samples, chunk, action) or the
world model's look-ahead horizon."""
PROPRIO_DIM = 4
STEP_ARRAYS: tuple[str, ...] = ("actions", "rewards", "terminated", "truncated", "dones")
PER_OBSERVATION: tuple[str, ...] = (*OBS_KEYS, "success")
"""The arrays with one row per observation (``T + 1``); every other array has one per action (``T``)."""
EPISODE_ATTRS: tuple[str, ...] = ("instruction", "task", "env_id", "seed", "env_index", "num_samples",
                                  "success", "policy")


@dataclass
class Episode:
    """One episode of ``T`` steps, as stored in a ``data/demo_<i>`` group.

    ``obs`` maps keys of :data:`OBS_KEYS` to arrays of ``T + 1`` observations; ``actions``
    ``(T, 4)``, ``rewards``, ``terminated`` and ``truncated`` ``(T,)``; ``success`` ``(T + 1,)``
    holds the per-observation success flags. ``policy_outputs`` (optional) maps keys of
    :data:`POLICY_KEYS` to what was computed at observations ``0 .. T-1``: by the policy,
    ``features`` ``(T, D)`` and ``action_samples`` ``(T, S, K, A)``; by a world model looking
    ahead under it, ``foresight`` ``(T, H)`` (:mod:`~worldsim.failure.foresight`).
    Construction converts dtypes (float32, bool) and raises ``ValueError`` naming the field for
    wrong shapes, non-finite numbers, unknown keys, or an episode that continues after it ended.
    """

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    success: np.ndarray
    instruction: str
    task: str
    seed: int
    policy: str
    env_id: str | None = None
    """Gymnasium id of the env; ``worldsim/<task>`` when not given."""
    env_index: int = 0
    policy_outputs: dict[str, np.ndarray] = field(default_factory=dict)
    """Per-step policy outputs (keys of :data:`POLICY_KEYS`); empty when none were recorded."""

    def __post_init__(self) -> None:
        self.actions = np.asarray(self.actions)
        if self.actions.ndim != 2 or self.actions.shape[1] != ACTION_DIM or len(self.actions) < 1:
            raise ValueError(f"episode actions must have shape (T, {ACTION_DIM}) with T >= 1; "
                             f"got {self.actions.shape}")
        steps = len(self.actions)
        self.actions = _finite("actions", self.actions.astype(np.float32))
        self.rewards = _finite("rewards", _shaped("rewards", self.rewards, (steps,)).astype(np.float32))
        self.terminated = _flags("terminated", self.terminated, steps)
        self.truncated = _flags("truncated", self.truncated, steps)
        self.success = _flags("success", self.success, steps + 1)
        early = np.flatnonzero(self.dones[:-1])
        if len(early):
            raise ValueError(f"the episode ends at step {early[0]} (terminated or truncated) but has "
                             f"{steps} actions; an episode ends at its last step")
        if not isinstance(self.obs, dict) or not self.obs:
            raise ValueError(f"episode obs must be a non-empty dict with keys from {OBS_KEYS}")
        unknown = sorted(set(self.obs) - set(OBS_KEYS))
        if unknown:
            raise ValueError(f"unknown observation key(s) {unknown}; allowed: {', '.join(OBS_KEYS)}")
        self.obs = {key: _check_obs(key, self.obs[key], steps + 1) for key in OBS_KEYS if key in self.obs}
        if not isinstance(self.instruction, str) or not self.instruction:
            raise ValueError(f"episode instruction must be a non-empty string; got {self.instruction!r}")
        if not isinstance(self.task, str) or not self.task:
            raise ValueError(f"episode task must be a non-empty string; got {self.task!r}")
        if self.env_id is None:
            self.env_id = task_env_id(self.task)
        self.seed, self.env_index = int(self.seed), int(self.env_index)
        if not isinstance(self.policy_outputs, dict):
            raise TypeError(f"episode policy_outputs must be a dict with keys from {POLICY_KEYS}; "
                             f"got {type(self.policy_outputs).__name__}")
        unknown = sorted(set(self.policy_outputs) - set(POLICY_KEYS))
        if unknown:
            raise ValueError(f"unknown policy output key(s) {unknown}; allowed: {', '.join(POLICY_KEYS)}")
        self.policy_outputs = {key: _check_policy_output(key, self.policy_outputs[key], steps)
                               for key in POLICY_KEYS if key in self.policy_outputs}

    @property
    def num_samples(self) -> int:
        """``T``, the number of actions."""
        return len(self.actions)

    @property
    def dones(self) -> np.ndarray:
        return self.terminated | self.truncated

    @property
    def succeeded(self) -> bool:
        """The episode's outcome: the success flag of the final observation."""
        return bool(self.success[-1])

    @property
    def obs_layout(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Per obs key, the shape of one observation and the dtype: must agree across a file."""
        return {key: (array.shape[1:], array.dtype.str) for key, array in self.obs.items()}

    @property
    def policy_layout(self) -> dict[str, tuple[int, ...]]:
        """Per policy output, its shape beyond ``T``: must agree across a file."""
        return {key: array.shape[1:] for key, array in self.policy_outputs.items()}


def _shaped(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    array = np.asarray(value)
    if array.shape != shape:
        raise ValueError(f"episode {name} must have shape {shape} (T={shape[0]} from actions); "
                         f"got {array.shape}")
    return array


def _finite(name: str, array: np.ndarray) -> np.ndarray:
    if not np.isfinite(array).all():
        raise ValueError(f"episode {name} contain NaN or inf")
    return array


def _flags(name: str, value: Any, length: int) -> np.ndarray:
    array = _shaped(name, value, (length,))
    zero_one = np.issubdtype(array.dtype, np.integer) and np.isin(array, (0, 1)).all()
    if not (array.dtype == np.bool_ or zero_one):
        raise ValueError(f"episode {name} must be booleans (or 0/1 integers); got dtype {array.dtype}")
    return array.astype(bool)


def _check_obs(key: str, value: Any, length: int) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim == 0 or len(array) != length:
        raise ValueError(f"episode obs[{key!r}] must hold T+1={length} observations (one more than the "
                         f"actions: the final observation is kept); got shape {array.shape}")
    if key in IMAGE_KEYS:
        if array.dtype != np.uint8 or array.ndim != 4 or array.shape[-1] != 3:
            raise ValueError(f"episode obs[{key!r}] must be uint8 of shape (T+1, H, W, 3); "
                             f"got {array.dtype} {array.shape}")
        return array
    if key == "proprio" and array.shape[1:] != (PROPRIO_DIM,):
        raise ValueError(f"episode obs['proprio'] must have shape (T+1, {PROPRIO_DIM}); got {array.shape}")
    if array.ndim != 2:
        raise ValueError(f"episode obs[{key!r}] must have shape (T+1, D); got {array.shape}")
    return _finite(f"obs[{key!r}]", array.astype(np.float32))


def _check_policy_output(key: str, value: Any, steps: int) -> np.ndarray:
    array = np.asarray(value)
    axes = POLICY_AXES[key]
    if array.ndim != len(axes) or len(array) != steps or 0 in array.shape:
        raise ValueError(f"episode policy_outputs[{key!r}] must have shape ({', '.join(axes)}) with "
                         f"T={steps} (one row per action) and no empty axis; got {array.shape}")
    return _finite(f"policy_outputs[{key!r}]", array.astype(np.float32))
