"""Behaviour-cloning training windows: :class:`WindowDataset`, a torch ``Dataset`` of context
frames and action chunks over the episodes of one file, built on
:class:`~worldsim.data.index.EpisodeIndex`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import Dataset

from worldsim.data.episode import IMAGE_KEYS
from worldsim.data.index import EpisodeIndex
from worldsim.data.reader import EpisodeReader, open_reader
from worldsim.runtime.validation import check_int


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
        data: an :class:`~worldsim.data.reader.EpisodeReader` or the path of an episode file.
        context: observation frames per item (>= 1).
        chunk: actions per item (>= 1).
        future: future image frames per item (>= 0).
        keys: obs keys to serve (default: all in the file).
        in_memory: load the selected arrays once (fast training); False reads each item from
            the file, opening it once per process, so ``DataLoader`` workers are safe.
        tasks: only episodes of these tasks (default: all); each must be in the file.
    """

    def __init__(self, data: EpisodeReader | str | Path, context: int = 1, chunk: int = 1, future: int = 0,
                 keys: Sequence[str] | None = None, in_memory: bool = True,
                 tasks: Sequence[str] | None = None) -> None:
        for name, value, low in (("context", context, 1), ("chunk", chunk, 1), ("future", future, 0)):
            check_int(name, value, low)
        self.context, self.chunk, self.future = int(context), int(chunk), int(future)
        self.in_memory = in_memory
        with open_reader(data) as reader:
            self.path = reader.path
            self.keys = self._select_keys(reader, keys)
            loaded = (*self.keys, "actions", "rewards") if in_memory else ()
            self.index = EpisodeIndex(reader, tasks=tasks, keys=loaded)
        self.infos = self.index.infos
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

    @property
    def instructions(self) -> list[str]:
        """Distinct instructions of the selected episodes (e.g. to cache their embeddings)."""
        return list(dict.fromkeys(info.instruction for info in self.infos))

    @property
    def tasks(self) -> list[str]:
        """Distinct tasks of the selected episodes."""
        return self.index.tasks

    def __len__(self) -> int:
        return self.index.num_items

    @property
    def episode_index(self) -> np.ndarray:
        """``(len(self),)`` file index of each item's episode (for splits by episode)."""
        return self.index.file_index[self.index.item_episode]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_h5"], state["_h5_pid"] = None, -1  # an open h5py file does not cross processes
        return state

    def _source(self, j: int, key: str) -> tuple[Any, int]:
        """Where key's rows of selected episode ``j`` live: (array or dataset, first row)."""
        if self.in_memory:
            return self.index.arrays[key], int(self.index.starts(key)[j])
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
        j, t = int(self.index.item_episode[index]), int(self.index.item_step[index])
        info = self.infos[j]
        item: dict[str, Any] = {}
        frames = self.index.context_steps(t, self.context)
        for key in self.keys:
            item[key] = torch.from_numpy(np.ascontiguousarray(self._gather(j, key, frames)))
        rows, mask = self.index.chunk_steps(j, t, self.chunk)
        item["actions"] = torch.from_numpy(self._gather(j, "actions", rows).astype(np.float32))
        item["action_mask"] = torch.from_numpy(mask)
        rewards = np.where(mask, self._gather(j, "rewards", rows), 0).astype(np.float32)
        item["rewards"] = torch.from_numpy(rewards)
        if self.future:
            ahead, real = self.index.future_steps(j, t, self.future)
            item["next_mask"] = torch.from_numpy(real)
            for key in self.keys:
                if key in IMAGE_KEYS:
                    item[f"next_{key}"] = torch.from_numpy(np.ascontiguousarray(self._gather(j, key, ahead)))
        item.update(instruction=info.instruction, task=info.task, episode=info.index, step=t,
                    success=info.success)
        return item


def window_obs(items: dict, keys: tuple[str, ...]) -> dict:
    """The current observation of a window batch (last context frame) in env-observation form."""
    obs = {k: items[k][:, -1] for k in keys}
    obs["instruction"] = tuple(items["instruction"])
    return obs
