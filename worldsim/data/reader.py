"""Reading episode files: :class:`EpisodeReader` opens a file in the layout of
:mod:`worldsim.data.episode` lazily, checks the whole layout from metadata on opening, and
loads episodes or single arrays on demand; :func:`open_reader` lets a function take a path or
a reader already open."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from worldsim.data.episode import (
    ACTION_DIM,
    EPISODE_ATTRS,
    FORMAT,
    OBS_KEYS,
    POLICY_AXES,
    POLICY_KEYS,
    STEP_ARRAYS,
    VERSION,
    Episode,
)

if TYPE_CHECKING:
    from typing_extensions import Self


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

    def __init__(self, path: str | Path) -> None:
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


@contextmanager
def open_reader(data: EpisodeReader | str | Path) -> Iterator[EpisodeReader]:
    """``data`` itself when it is an open :class:`EpisodeReader` (left open: it is the caller's),
    else the file at ``data``, opened for the block and closed after it."""
    if isinstance(data, EpisodeReader):
        yield data
        return
    with EpisodeReader(data) as reader:
        yield reader
