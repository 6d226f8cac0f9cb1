"""Writing episode files: :class:`EpisodeWriter` puts episodes (:class:`~worldsim.data.episode.Episode`)
into a new file in the layout of :mod:`worldsim.data.episode`, atomically (temp file + rename)."""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import h5py

from worldsim.data.episode import FORMAT, IMAGE_KEYS, VERSION, Episode
from worldsim.runtime.atomic import atomic_path

if TYPE_CHECKING:
    from typing_extensions import Self


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

    def __init__(self, path: str | Path, env_kwargs: dict[str, Any] | None = None, overwrite: bool = False) -> None:
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
        layout, policy_layout = episode.obs_layout, episode.policy_layout
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
        if atomic is None or file is None:
            raise RuntimeError("EpisodeWriter: __exit__ without __enter__")
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
