"""Episode datasets: the worldsim HDF5 layout, an atomic writer, a lazy reader, and a torch
``Dataset`` of training windows (context frames + action chunks).

The layout (robomimic/LIBERO-style) is the contract every stage reads and writes::

    /                      attrs: format = "worldsim-episodes", version = 1,
                                  total = number of episodes,
                                  tasks = JSON list of the task names in the file,
                                  env_kwargs = JSON object of the env arguments used
    data/demo_<i>/         one episode, i = 0 .. total-1 in the order written
        attrs:             instruction, task, env_id ("worldsim/<task>"), seed (env seed),
                           env_index (which env of the vector env ran it), num_samples (T),
                           success (episode outcome: the success flag of the final observation),
                           policy (a short description of the policy that acted)
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

:class:`EpisodeWriter` writes a file atomically (temp file + rename); :class:`EpisodeReader`
reads one lazily and rejects files that are not in this layout with a ``ValueError`` naming
the file; :class:`WindowDataset` serves ``(episode, t)`` windows to a ``DataLoader``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
import torch
from torch.utils.data import Dataset

from worldsim.runtime.atomic import atomic_path

if TYPE_CHECKING:
    from typing_extensions import Self

FORMAT = "worldsim-episodes"
VERSION = 1
OBS_KEYS: tuple[str, ...] = ("image", "wrist_image", "proprio", "state")
IMAGE_KEYS: tuple[str, ...] = ("image", "wrist_image")
ACTION_DIM = 4
POLICY_KEYS: tuple[str, ...] = ("features", "action_samples")
POLICY_AXES = {"features": ("T", "D"), "action_samples": ("T", "S", "K", "A")}
"""The axes of each policy output: steps, then feature width or (samples, chunk, action)."""
PROPRIO_DIM = 4
STEP_ARRAYS: tuple[str, ...] = ("actions", "rewards", "terminated", "truncated", "dones")
EPISODE_ATTRS: tuple[str, ...] = ("instruction", "task", "env_id", "seed", "env_index", "num_samples",
                                  "success", "policy")
STD_FLOOR = 1e-6


# ---------------------------------------------------------------------------- one episode
@dataclass
class Episode:
    """One episode of ``T`` steps, as stored in a ``data/demo_<i>`` group.

    ``obs`` maps keys of :data:`OBS_KEYS` to arrays of ``T + 1`` observations; ``actions``
    ``(T, 4)``, ``rewards``, ``terminated`` and ``truncated`` ``(T,)``; ``success`` ``(T + 1,)``
    holds the per-observation success flags. ``policy_outputs`` (optional) maps keys of
    :data:`POLICY_KEYS` to what the policy computed at observations ``0 .. T-1``: ``features``
    ``(T, D)`` and ``action_samples`` ``(T, S, K, A)``. Construction converts dtypes (float32,
    bool) and raises ``ValueError`` naming the field for wrong shapes, non-finite numbers,
    unknown keys, or an episode that continues after it ended.
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
            self.env_id = f"worldsim/{self.task}"
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


def _obs_layout(episode: Episode) -> dict[str, tuple[tuple[int, ...], str]]:
    """Per obs key, the shape of one observation and the dtype: must agree across a file."""
    return {key: (array.shape[1:], array.dtype.str) for key, array in episode.obs.items()}


def _policy_layout(episode: Episode) -> dict[str, tuple[int, ...]]:
    """Per policy output, its shape beyond ``T``: must agree across a file."""
    return {key: array.shape[1:] for key, array in episode.policy_outputs.items()}


# ---------------------------------------------------------------------------- writing
class EpisodeWriter:
    """Write episodes to a new HDF5 file, atomically.

    Use as a context manager::

        with EpisodeWriter("data/push.h5", env_kwargs={"obs_mode": "pixels+state"}) as writer:
            writer.add_episode(episode)

    Episodes go into a temporary file in the same folder, renamed to ``path`` when the block
    exits normally. If the block raises (or the process is killed) no file appears under
    ``path`` and a file already there is left untouched. An existing ``path`` is refused with
    ``FileExistsError`` unless ``overwrite=True``. Every episode of a file must have the same
    observation keys, shapes (apart from ``T``) and dtypes, and the same policy outputs (none,
    or the same keys with the same shapes apart from ``T``).
    """

    def __init__(self, path: str | Path, env_kwargs: dict[str, Any] | None = None, overwrite: bool = False):
        self.path = Path(path)
        if self.path.is_dir():
            raise IsADirectoryError(f"{self.path} is a folder; give the path of an .h5 file")
        if self.path.exists() and not overwrite:
            raise FileExistsError(f"{self.path} already exists; pass overwrite=True (--overwrite) to "
                                  "replace it")
        try:
            self._env_kwargs = json.dumps(env_kwargs or {}, sort_keys=True)
        except TypeError as err:
            raise ValueError(f"env_kwargs must be JSON-serialisable: {err}") from err
        self._atomic: Any = None
        self._file: h5py.File | None = None
        self._tasks: list[str] = []
        self._layout: dict[str, tuple[tuple[int, ...], str]] | None = None
        self._policy_layout: dict[str, tuple[int, ...]] | None = None
        self.count = 0  # episodes added so far

    def __enter__(self) -> Self:
        if self._file is not None:
            raise RuntimeError("this EpisodeWriter is already open")
        self._atomic = atomic_path(self.path)
        tmp = self._atomic.__enter__()
        try:
            self._file = h5py.File(tmp, "w")
            self._file.create_group("data")
        except BaseException as err:
            self._atomic.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    def add_episode(self, episode: Episode) -> int:
        """Append ``episode`` as ``data/demo_<i>``; returns ``i``."""
        if self._file is None:
            raise RuntimeError("EpisodeWriter is not open; use it in a `with EpisodeWriter(...) as writer:` "
                               "block")
        if not isinstance(episode, Episode):
            raise TypeError(f"add_episode takes an Episode; got {type(episode).__name__}")
        layout, policy_layout = _obs_layout(episode), _policy_layout(episode)
        if self._layout is None:
            self._layout, self._policy_layout = layout, policy_layout
        elif layout != self._layout:
            raise ValueError(f"episode {self.count} ({episode.task}) has observations {layout}; this file "
                             f"holds {self._layout}: every episode of a file must have the same keys and "
                             "shapes")
        elif policy_layout != self._policy_layout:
            raise ValueError(f"episode {self.count} ({episode.task}) has policy outputs "
                             f"{policy_layout or 'none'}; this file holds {self._policy_layout or 'none'}: "
                             "every episode of a file must have the same policy outputs and shapes")
        group = self._file["data"].create_group(f"demo_{self.count}")
        obs = group.create_group("obs")
        for key, array in episode.obs.items():
            if key in IMAGE_KEYS:
                obs.create_dataset(key, data=array, chunks=(1, *array.shape[1:]), compression="lzf")
            else:
                obs.create_dataset(key, data=array)
        group.create_dataset("actions", data=episode.actions)
        group.create_dataset("rewards", data=episode.rewards)
        group.create_dataset("terminated", data=episode.terminated)
        group.create_dataset("truncated", data=episode.truncated)
        group.create_dataset("dones", data=episode.dones)
        group.create_dataset("success", data=episode.success)
        if episode.policy_outputs:
            outputs = group.create_group("policy")
            for key, array in episode.policy_outputs.items():
                outputs.create_dataset(key, data=array)
        group.attrs.update({
            "instruction": episode.instruction, "task": episode.task, "env_id": episode.env_id,
            "seed": episode.seed, "env_index": episode.env_index, "num_samples": episode.num_samples,
            "success": episode.succeeded, "policy": episode.policy,
        })
        if episode.task not in self._tasks:
            self._tasks.append(episode.task)
        self.count += 1
        return self.count - 1

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        atomic, file = self._atomic, self._file
        self._atomic = self._file = None
        try:
            try:
                if exc_type is None:
                    file.attrs.update({"format": FORMAT, "version": VERSION, "total": self.count,
                                       "tasks": json.dumps(self._tasks), "env_kwargs": self._env_kwargs})
            finally:
                file.close()
        except BaseException as err:  # finishing failed: drop the temp file, report this error
            atomic.__exit__(type(err), err, err.__traceback__)
            raise
        atomic.__exit__(exc_type, exc, tb)  # renames into place, or deletes on error


# ---------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class EpisodeInfo:
    """An episode's metadata, read without loading its arrays."""

    index: int
    task: str
    instruction: str
    env_id: str
    seed: int
    env_index: int
    num_samples: int
    success: bool
    policy: str


class EpisodeReader:
    """Read a worldsim episode file lazily (``h5py``, read-only).

    ``len(reader)`` episodes; ``reader[i]`` loads episode ``i`` as an :class:`Episode`;
    :meth:`load` reads one array of one episode; :attr:`env_kwargs` holds the env arguments
    the episodes were recorded with; :attr:`policy_keys` and :attr:`policy_shapes` describe
    the recorded policy outputs (none for a file collected without them). Opening checks the
    whole layout (format attribute, required groups, datasets and attributes, matching lengths,
    the same policy outputs in every episode) from metadata alone, and raises ``ValueError``
    naming the file if it is not HDF5, truncated, or not a worldsim episode file. A missing
    file raises ``FileNotFoundError``.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no dataset file at {self.path}")
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as err:
            raise ValueError(f"{self.path} is not a readable HDF5 file (not HDF5, truncated or corrupt): "
                             f"{err}") from err
        try:
            self._infos, self._obs_shapes, self._policy_shapes, self.env_kwargs = self._check_layout()
        except (OSError, KeyError, RuntimeError, TypeError) as err:
            self._file.close()
            raise ValueError(f"{self.path} is corrupt or truncated: {err}") from err
        except ValueError:
            self._file.close()
            raise

    def _fail(self, message: str) -> ValueError:
        return ValueError(f"{self.path} is not a valid worldsim episode file: {message}")

    def _check_layout(self) -> tuple[list[EpisodeInfo], dict[str, tuple[int, ...]],
                                     dict[str, tuple[int, ...]], dict[str, Any]]:
        attrs = self._file.attrs
        if attrs.get("format") != FORMAT:
            raise self._fail(f"its 'format' attribute is {attrs.get('format')!r}, expected {FORMAT!r}")
        version = int(attrs.get("version", -1))
        if not 1 <= version <= VERSION:
            raise self._fail(f"version {version} is not supported (this worldsim reads versions "
                             f"1..{VERSION})")
        for key in ("total", "tasks", "env_kwargs"):
            if key not in attrs:
                raise self._fail(f"the root attribute {key!r} is missing")
        try:
            env_kwargs = json.loads(attrs["env_kwargs"])
        except json.JSONDecodeError as err:
            raise self._fail(f"the 'env_kwargs' attribute is not JSON ({err})") from err
        if "data" not in self._file:
            raise self._fail("the 'data' group is missing")
        data = self._file["data"]
        total = int(attrs["total"])
        expected = [f"demo_{i}" for i in range(total)]
        if set(data.keys()) != set(expected):
            raise self._fail(f"'total' says {total} episodes (demo_0..demo_{total - 1}) but data/ holds "
                             f"{len(data)} groups; the file was cut short or edited")
        infos: list[EpisodeInfo] = []
        obs_shapes: dict[str, tuple[int, ...]] | None = None
        policy_shapes: dict[str, tuple[int, ...]] | None = None
        for i, name in enumerate(expected):
            group = data[name]
            missing = [k for k in ("obs", "success", *STEP_ARRAYS) if k not in group]
            missing += [f"attribute {a}" for a in EPISODE_ATTRS if a not in group.attrs]
            if missing:
                raise self._fail(f"data/{name} lacks {', '.join(missing)}")
            steps = int(group.attrs["num_samples"])
            want = {"actions": (steps, ACTION_DIM), "success": (steps + 1,),
                    **{k: (steps,) for k in STEP_ARRAYS if k != "actions"}}
            for key, shape in want.items():
                if group[key].shape != shape:
                    raise self._fail(f"data/{name}/{key} has shape {group[key].shape}; with "
                                     f"num_samples={steps} it must be {shape}")
            shapes = {k: group["obs"][k].shape[1:] for k in group["obs"]}
            if not shapes:
                raise self._fail(f"data/{name}/obs holds no observations")
            for key in shapes:
                if key not in OBS_KEYS:
                    raise self._fail(f"data/{name}/obs/{key} is not an observation key "
                                     f"({', '.join(OBS_KEYS)})")
                if group["obs"][key].shape[0] != steps + 1:
                    raise self._fail(f"data/{name}/obs/{key} holds {group['obs'][key].shape[0]} "
                                     f"observations; with num_samples={steps} it must hold {steps + 1}")
            if obs_shapes is None:
                obs_shapes = shapes
            elif shapes != obs_shapes:
                raise self._fail(f"data/{name}/obs has {shapes}, demo_0 has {obs_shapes}")
            outputs = self._check_policy_group(name, group, steps)
            if policy_shapes is None:
                policy_shapes = outputs
            elif outputs != policy_shapes:
                raise self._fail(f"data/{name} has policy outputs {outputs or 'none'}, demo_0 has "
                                 f"{policy_shapes or 'none'}; every episode must have the same")
            a = group.attrs
            infos.append(EpisodeInfo(i, str(a["task"]), str(a["instruction"]), str(a["env_id"]),
                                     int(a["seed"]), int(a["env_index"]), steps, bool(a["success"]),
                                     str(a["policy"])))
        return infos, obs_shapes or {}, policy_shapes or {}, env_kwargs

    def _check_policy_group(self, name: str, group: h5py.Group, steps: int) -> dict[str, tuple[int, ...]]:
        """The trailing shape of each policy output of episode ``name`` (empty without the group)."""
        if "policy" not in group:
            return {}
        if not isinstance(group["policy"], h5py.Group):
            raise self._fail(f"data/{name}/policy is not a group")
        shapes = {}
        for key, dataset in group["policy"].items():
            where = f"data/{name}/policy/{key}"
            if key not in POLICY_KEYS:
                raise self._fail(f"{where} is not a policy output ({', '.join(POLICY_KEYS)})")
            axes = POLICY_AXES[key]
            shape = f"({', '.join(axes)})"
            if not isinstance(dataset, h5py.Dataset) or dataset.dtype != np.float32:
                raise self._fail(f"{where} must be a float32 dataset {shape}")
            if dataset.ndim != len(axes) or dataset.shape[0] != steps:
                raise self._fail(f"{where} has shape {dataset.shape}; with num_samples={steps} it must be "
                                 f"{shape} with T={steps}")
            shapes[key] = dataset.shape[1:]
        return {key: shapes[key] for key in POLICY_KEYS if key in shapes}

    # -------------------------------------------------------------------- metadata
    def __len__(self) -> int:
        return len(self._infos)

    @property
    def obs_keys(self) -> tuple[str, ...]:
        """The observation keys every episode holds, in :data:`OBS_KEYS` order."""
        return tuple(k for k in OBS_KEYS if k in self._obs_shapes)

    @property
    def obs_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of one observation per key (e.g. ``{"image": (64, 64, 3), ...}``)."""
        return dict(self._obs_shapes)

    @property
    def policy_keys(self) -> tuple[str, ...]:
        """The policy outputs every episode holds, in :data:`POLICY_KEYS` order; ``()`` if none."""
        return tuple(self._policy_shapes)

    @property
    def policy_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of one step's policy output per key (e.g. ``{"features": (256,),
        "action_samples": (8, 4, 4)}``); empty if none were recorded."""
        return dict(self._policy_shapes)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(H, W, 3)`` of the ``image`` observation; ``ValueError`` for a file without images."""
        if "image" not in self._obs_shapes:
            raise ValueError(f"{self.path} holds no image observations (it has {', '.join(self.obs_keys)}); "
                             "collect with obs_mode='pixels' or 'pixels+state'")
        return tuple(self._obs_shapes["image"])  # type: ignore[return-value]

    @property
    def tasks(self) -> list[str]:
        """Task names in the file, in order of first appearance."""
        return list(dict.fromkeys(info.task for info in self._infos))

    @property
    def instructions(self) -> list[str]:
        """Distinct instructions in the file, in order of first appearance."""
        return list(dict.fromkeys(info.instruction for info in self._infos))

    def episode_info(self) -> list[EpisodeInfo]:
        """Per-episode metadata (task, instruction, T, outcome, ...) without loading arrays."""
        return list(self._infos)

    def summary(self) -> dict[str, Any]:
        """Episodes, steps and success rate, overall and per task (``summary()["tasks"][name]``
        has ``episodes``, ``steps``, ``mean_length`` and ``success_rate``), and the recorded
        ``policy_outputs`` (:attr:`policy_shapes`)."""
        tasks: dict[str, dict[str, Any]] = {}
        for task in self.tasks:
            infos = [info for info in self._infos if info.task == task]
            steps = sum(info.num_samples for info in infos)
            tasks[task] = {"episodes": len(infos), "steps": steps, "mean_length": steps / len(infos),
                           "success_rate": sum(info.success for info in infos) / len(infos)}
        episodes = len(self._infos)
        return {"episodes": episodes, "steps": sum(info.num_samples for info in self._infos),
                "success_rate": sum(info.success for info in self._infos) / episodes if episodes else 0.0,
                "tasks": tasks, "policy_outputs": self.policy_shapes}

    # -------------------------------------------------------------------- arrays
    def _index(self, index: int) -> int:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"episode index must be an int; got {type(index).__name__}")
        n = len(self._infos)
        if not -n <= index < n:
            raise IndexError(f"episode {index} is out of range: {self.path} holds {n} episodes")
        return int(index) % n

    def load(self, index: int, key: str) -> np.ndarray:
        """One array of episode ``index``: an observation key (``T + 1`` rows), one of
        ``actions``, ``rewards``, ``terminated``, ``truncated``, ``dones``, ``success``, or a
        recorded policy output (:attr:`policy_keys`, ``T`` rows)."""
        i = self._index(index)
        group = self._file[f"data/demo_{i}"]
        if key in self._obs_shapes:
            dataset = group["obs"][key]
        elif key in (*STEP_ARRAYS, "success"):
            dataset = group[key]
        elif key in self._policy_shapes:
            dataset = group["policy"][key]
        else:
            allowed = ", ".join((*self.obs_keys, *STEP_ARRAYS, "success", *self.policy_keys))
            raise KeyError(f"unknown array {key!r} for {self.path}; allowed: {allowed}")
        try:
            return dataset[()]
        except OSError as err:
            raise ValueError(f"{self.path}: data/demo_{i}/{key} cannot be read, the file is corrupt: "
                             f"{err}") from err

    def __getitem__(self, index: int) -> Episode:
        i = self._index(index)
        info = self._infos[i]
        return Episode(obs={key: self.load(i, key) for key in self.obs_keys},
                       actions=self.load(i, "actions"), rewards=self.load(i, "rewards"),
                       terminated=self.load(i, "terminated"), truncated=self.load(i, "truncated"),
                       success=self.load(i, "success"), instruction=info.instruction, task=info.task,
                       seed=info.seed, policy=info.policy, env_id=info.env_id, env_index=info.env_index,
                       policy_outputs={key: self.load(i, key) for key in self.policy_keys})

    def __iter__(self) -> Iterator[Episode]:
        for i in range(len(self)):
            yield self[i]

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def merge_episode_files(sources: Sequence[str | Path], out: str | Path, overwrite: bool = False) -> int:
    """Write every episode of ``sources``, in order, into one new episode file ``out``
    (atomically); returns the number of episodes. The sources must have been recorded with the
    same env arguments (``env_kwargs``), so that their observations mean the same thing. Recorded
    policy outputs are kept when every source has the same ones, else dropped (a file holds one
    layout; demonstrations and a learned policy's rollouts differ)."""
    if not sources:
        raise ValueError("merge_episode_files needs at least one source file")
    readers = [EpisodeReader(path) for path in sources]
    try:
        for reader in readers[1:]:
            if reader.env_kwargs != readers[0].env_kwargs:
                raise ValueError(f"{reader.path} was recorded with env arguments {reader.env_kwargs}, "
                                 f"{readers[0].path} with {readers[0].env_kwargs}: they cannot be merged")
        keep_outputs = all(reader.policy_shapes == readers[0].policy_shapes for reader in readers)
        count = 0
        with EpisodeWriter(out, env_kwargs=readers[0].env_kwargs, overwrite=overwrite) as writer:
            for reader in readers:
                for episode in reader:
                    if not keep_outputs:
                        episode.policy_outputs = {}
                    writer.add_episode(episode)
                    count += 1
        return count
    finally:
        for reader in readers:
            reader.close()


def dataset_statistics(data: EpisodeReader | str | Path,
                       keys: Sequence[str] | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-dimension ``(mean, std)`` (float32 numpy arrays) over every row of every episode,
    for normalisers.

    ``keys`` defaults to those of ``("proprio", "state", "actions")`` the file holds; an
    explicitly named key must exist and must not be an image. ``std`` is the population
    standard deviation floored at 1e-6, so dividing by it is safe for constant dimensions.
    """
    reader = data if isinstance(data, EpisodeReader) else EpisodeReader(data)
    try:
        present = (*reader.obs_keys, "actions", "rewards")
        if keys is None:
            keys = [k for k in ("proprio", "state", "actions") if k in present]
        for key in keys:
            if key in IMAGE_KEYS or key not in present:
                allowed = [k for k in present if k not in IMAGE_KEYS]
                raise ValueError(f"no statistics for {key!r} in {reader.path}; allowed: {', '.join(allowed)}")
        stats = {}
        for key in keys:
            total, total_sq, count = 0.0, 0.0, 0
            for i in range(len(reader)):
                rows = reader.load(i, key).astype(np.float64)
                total = total + rows.sum(axis=0)
                total_sq = total_sq + np.square(rows).sum(axis=0)
                count += len(rows)
            if count == 0:
                raise ValueError(f"{reader.path} holds no episodes; cannot compute statistics")
            mean = total / count
            std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0))
            stats[key] = (mean.astype(np.float32), np.maximum(std, STD_FLOOR).astype(np.float32))
        return stats
    finally:
        if reader is not data:
            reader.close()


# ---------------------------------------------------------------------------- training windows
class WindowDataset(Dataset):
    """Every ``(episode, t)`` with ``t`` in ``[0, T)`` of an episode file, as a training window.

    Item ``(e, t)`` (``t`` is the index of the current observation) is a dict of:

    - each selected obs key: a tensor ``(context, ...)`` of frames ``t-context+1 .. t``; frames
      before the episode start repeat frame 0 (images stay uint8, vectors are float32);
    - ``actions`` ``(chunk, 4)``: actions ``t .. t+chunk-1``, past the episode end repeating the
      last action; ``action_mask`` ``(chunk,)`` bool, True for real actions; ``rewards``
      ``(chunk,)``, 0 past the end;
    - if ``future > 0``: ``next_<key>`` for each selected image key ``(future, H, W, 3)``,
      frames ``t+1 .. t+future`` (the last frame ``T`` repeated past the end) and
      ``next_mask`` ``(future,)``, True for real frames;
    - ``instruction`` and ``task`` (str), ``episode`` (index in the file), ``step`` (``t``),
      ``success`` (the episode's outcome, bool).

    Args:
        data: an :class:`EpisodeReader` or the path of an episode file.
        context: observation frames per item (>= 1).
        chunk: actions per item (>= 1).
        future: future image frames per item (>= 0).
        keys: obs keys to serve (default: all in the file).
        in_memory: load the selected arrays once (fast training); False reads each item from
            the file, opening it once per process, so ``DataLoader`` workers are safe.
        tasks: only episodes of these tasks (default: all).
    """

    def __init__(self, data: EpisodeReader | str | Path, context: int = 1, chunk: int = 1, future: int = 0,
                 keys: Sequence[str] | None = None, in_memory: bool = True,
                 tasks: Sequence[str] | None = None):
        for name, value, low in (("context", context, 1), ("chunk", chunk, 1), ("future", future, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{name}={value!r} must be an int >= {low}")
        self.context, self.chunk, self.future = int(context), int(chunk), int(future)
        reader = data if isinstance(data, EpisodeReader) else EpisodeReader(data)
        try:
            self.path = reader.path
            self.keys = self._select_keys(reader, keys)
            self.infos = self._select_episodes(reader, tasks)
            self.in_memory = in_memory
            lengths = np.array([info.num_samples for info in self.infos], np.int64)
            self._lengths = lengths
            self._item_episode = np.repeat(np.arange(len(self.infos)), lengths)
            self._item_step = np.concatenate([np.arange(n) for n in lengths])
            self._arrays: dict[str, np.ndarray] = {}
            if in_memory:  # one array per key over all selected episodes, rows found by offset
                self._obs_start = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]])
                self._step_start = np.concatenate([[0], np.cumsum(lengths)[:-1]])
                for key in (*self.keys, "actions", "rewards"):
                    self._arrays[key] = np.concatenate([reader.load(info.index, key) for info in self.infos])
        finally:
            if reader is not data:
                reader.close()
        self._h5: h5py.File | None = None
        self._h5_pid = -1

    @staticmethod
    def _select_keys(reader: EpisodeReader, keys: Sequence[str] | None) -> tuple[str, ...]:
        if keys is None:
            return reader.obs_keys
        unknown = [k for k in keys if k not in reader.obs_keys]
        if unknown:
            raise ValueError(f"unknown obs key(s) {unknown} for {reader.path}; it holds "
                             f"{', '.join(reader.obs_keys)}")
        return tuple(dict.fromkeys(keys))

    @staticmethod
    def _select_episodes(reader: EpisodeReader, tasks: Sequence[str] | None) -> list[EpisodeInfo]:
        infos = reader.episode_info()
        if tasks is None:
            if not infos:
                raise ValueError(f"{reader.path} holds no episodes")
            return infos
        tasks = [tasks] if isinstance(tasks, str) else list(tasks)
        unknown = [t for t in tasks if t not in reader.tasks]
        if unknown or not tasks:
            raise ValueError(f"tasks={tasks!r}: {unknown or 'none given'} not in {reader.path}; "
                             f"it holds {', '.join(reader.tasks)}")
        return [info for info in infos if info.task in tasks]

    @property
    def instructions(self) -> list[str]:
        """Distinct instructions of the selected episodes (e.g. to cache their embeddings)."""
        return list(dict.fromkeys(info.instruction for info in self.infos))

    @property
    def tasks(self) -> list[str]:
        """Distinct tasks of the selected episodes."""
        return list(dict.fromkeys(info.task for info in self.infos))

    def __len__(self) -> int:
        return len(self._item_step)

    @property
    def episode_index(self) -> np.ndarray:
        """``(len(self),)`` file index of each item's episode (for splits by episode)."""
        return np.array([info.index for info in self.infos], np.int64)[self._item_episode]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_h5"], state["_h5_pid"] = None, -1  # an open h5py file does not cross processes
        return state

    def _source(self, j: int, key: str) -> tuple[Any, int]:
        """Where key's rows of selected episode ``j`` live: (array or dataset, first row)."""
        if self.in_memory:
            start = self._obs_start[j] if key in self.keys else self._step_start[j]
            return self._arrays[key], int(start)
        if self._h5 is None or self._h5_pid != os.getpid():
            self._h5 = h5py.File(self.path, "r")  # one handle per process (DataLoader workers)
            self._h5_pid = os.getpid()
        group = self._h5[f"data/demo_{self.infos[j].index}"]
        return (group["obs"][key] if key in self.keys else group[key]), 0

    def _gather(self, j: int, key: str, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (sorted, possibly repeated) of ``key`` in episode ``j``, reading one
        contiguous block (h5py reads slices fast and fancy indices slowly)."""
        source, start = self._source(j, key)
        low, high = int(rows[0]), int(rows[-1]) + 1
        try:
            block = source[start + low:start + high]
        except OSError as err:
            raise ValueError(f"{self.path}: episode {self.infos[j].index} cannot be read: {err}") from err
        return block[rows - low]

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"window {index} is out of range; the dataset has {len(self)}")
        j, t = int(self._item_episode[index]), int(self._item_step[index])
        steps, info = int(self._lengths[j]), self.infos[j]
        item: dict[str, Any] = {}
        frames = np.maximum(np.arange(t - self.context + 1, t + 1), 0)
        for key in self.keys:
            item[key] = torch.from_numpy(np.ascontiguousarray(self._gather(j, key, frames)))
        wanted = np.arange(t, t + self.chunk)
        mask = wanted < steps
        rows = np.minimum(wanted, steps - 1)
        item["actions"] = torch.from_numpy(self._gather(j, "actions", rows).astype(np.float32))
        item["action_mask"] = torch.from_numpy(mask)
        rewards = np.where(mask, self._gather(j, "rewards", rows), 0).astype(np.float32)
        item["rewards"] = torch.from_numpy(rewards)
        if self.future:
            ahead = np.arange(t + 1, t + self.future + 1)
            item["next_mask"] = torch.from_numpy(ahead <= steps)
            for key in self.keys:
                if key in IMAGE_KEYS:
                    item[f"next_{key}"] = torch.from_numpy(
                        np.ascontiguousarray(self._gather(j, key, np.minimum(ahead, steps))))
        item.update(instruction=info.instruction, task=info.task, episode=info.index, step=t,
                    success=info.success)
        return item
