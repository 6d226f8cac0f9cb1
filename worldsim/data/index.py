"""The selected episodes of an episode file as flat rows: the one indexer that training-window
readers stand on (:class:`~worldsim.data.windows.WindowDataset` for behaviour cloning,
:class:`~worldsim.world_models.data.EpisodeBank` for world models), and the split of episodes
into training and validation sets (:func:`split_episodes`).

Rows. The selected episodes' arrays are concatenated in file order, one flat array per key. An
array with one row per observation (:data:`~worldsim.data.episode.PER_OBSERVATION`: the obs keys
and ``success``) holds ``T + 1`` rows per episode, those of the ``j``-th selected episode from
``obs_start[j]``; every other array (actions, rewards, flags, policy outputs) holds ``T`` rows
from ``step_start[j]``.

Items. Item ``i`` is ``(item_episode[i], item_step[i]) = (j, t)``: the ``j``-th selected
episode at observation ``t``, for every ``t`` in ``[0, T)``, one item per action, so that the
action ``t`` and the observation ``t + 1`` after it always exist.

Windows around an item, as rows within its episode: :meth:`EpisodeIndex.context_steps`
(observations ``t-C+1 .. t``, observation 0 repeated before the start),
:meth:`EpisodeIndex.chunk_steps` (actions ``t .. t+K-1``, the last action repeated past the end)
and :meth:`EpisodeIndex.future_steps` (observations ``t+1 .. t+F``, the final one repeated past
the end), the last two with a mask of the real rows; :meth:`EpisodeIndex.context_rows` gives the
context as flat rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from worldsim.data.episode import PER_OBSERVATION
from worldsim.data.reader import EpisodeInfo, EpisodeReader


class EpisodeIndex:
    """The episodes of ``reader`` selected by task and file index, their row offsets, their
    ``(episode, t)`` items and, for ``keys``, their arrays loaded into flat buffers (see the
    module docstring for the layout).

    Args:
        reader: the open episode file.
        tasks: only episodes of these tasks (a name or a sequence; default: all). Every task
            named must be in the file.
        episodes: only these file indices (after the task filter; default: all).
        keys: arrays to load (obs keys, ``success`` or arrays with one row per action, as
            :meth:`EpisodeReader.load` names them); none by default, for readers that read
            windows from the file lazily.
        argument: the name of the argument the file came from, used in error messages.

    Raises ``ValueError`` naming the file and the allowed tasks for a task the file lacks, and
    when the selection is empty.

    Attributes:
        path: the file.
        infos: the selected episodes' metadata, in file order (``j`` indexes them).
        lengths: ``(E,)`` ``T`` of each selected episode.
        obs_start, step_start: ``(E,)`` first flat row of each episode's per-observation and
            per-action arrays.
        item_episode, item_step: ``(N,)`` ``j`` and ``t`` of every item, episode by episode.
        arrays: the loaded arrays, one flat buffer per key of ``keys``.
    """

    def __init__(self, reader: EpisodeReader, *, tasks: Sequence[str] | str | None = None,
                 episodes: Sequence[int] | None = None, keys: Sequence[str] = (), argument: str = "data") -> None:
        self.path = reader.path
        self.infos: list[EpisodeInfo] = _select(reader, tasks, episodes, argument)
        self.lengths = np.array([info.num_samples for info in self.infos], np.int64)
        self.obs_start = np.concatenate([[0], np.cumsum(self.lengths + 1)[:-1]]).astype(np.int64)
        self.step_start = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.item_episode = np.repeat(np.arange(len(self.infos)), self.lengths)
        self.item_step = np.concatenate([np.arange(n) for n in self.lengths])
        self.arrays: dict[str, np.ndarray] = {
            key: np.concatenate([reader.load(info.index, key) for info in self.infos])
            for key in dict.fromkeys(keys)}

    def __len__(self) -> int:
        """The number of selected episodes."""
        return len(self.infos)

    @property
    def num_items(self) -> int:
        """The number of ``(episode, t)`` items: the selected episodes' actions."""
        return len(self.item_step)

    @property
    def file_index(self) -> np.ndarray:
        """``(E,)`` index in the file of each selected episode."""
        return np.array([info.index for info in self.infos], np.int64)

    @property
    def tasks(self) -> list[str]:
        """Distinct tasks of the selected episodes, in order of first appearance."""
        return list(dict.fromkeys(info.task for info in self.infos))

    def starts(self, key: str) -> np.ndarray:
        """``(E,)`` first flat row of each episode in ``key``'s buffer: ``obs_start`` for arrays
        with a row per observation, else ``step_start``."""
        return self.obs_start if key in PER_OBSERVATION else self.step_start

    def episode_rows(self, j: int, key: str) -> slice:
        """The flat rows of ``key`` in the ``j``-th selected episode: ``T + 1`` for arrays with a
        row per observation, else ``T``."""
        start = int(self.starts(key)[j])
        return slice(start, start + int(self.lengths[j]) + (key in PER_OBSERVATION))

    @staticmethod
    def context_steps(t: np.ndarray | int, context: int) -> np.ndarray:
        """Observations ``t-context+1 .. t`` within an episode, ``(..., context)`` for ``t`` of
        any shape: observation 0 stands for those before the episode's start."""
        return np.maximum(np.asarray(t)[..., None] + np.arange(1 - context, 1), 0)

    def context_rows(self, j: np.ndarray | int, t: np.ndarray | int, context: int) -> np.ndarray:
        """Flat observation rows ``(..., context)`` of :meth:`context_steps` in episodes ``j``."""
        return self.obs_start[j][..., None] + self.context_steps(t, context)

    def chunk_steps(self, j: np.ndarray | int, t: np.ndarray | int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """Actions ``t .. t+chunk-1`` within episodes ``j``, ``(..., chunk)``: the rows, the last
        action ``T - 1`` standing for those past the end, and the mask of real actions."""
        wanted = np.asarray(t)[..., None] + np.arange(chunk)
        steps = np.asarray(self.lengths[j])[..., None]
        return np.minimum(wanted, steps - 1), wanted < steps

    def future_steps(self, j: np.ndarray | int, t: np.ndarray | int, future: int) -> tuple[np.ndarray, np.ndarray]:
        """Observations ``t+1 .. t+future`` within episodes ``j``, ``(..., future)``: the rows, the
        final observation ``T`` standing for those past the end, and the mask of real ones."""
        ahead = np.asarray(t)[..., None] + np.arange(1, future + 1)
        steps = np.asarray(self.lengths[j])[..., None]
        return np.minimum(ahead, steps), ahead <= steps


def _select(reader: EpisodeReader, tasks: Sequence[str] | str | None, episodes: Sequence[int] | None,
            argument: str) -> list[EpisodeInfo]:
    """The episodes of ``reader`` of ``tasks`` (all if None) whose file index is in ``episodes``
    (all if None), in file order; ``ValueError`` for a task the file lacks or an empty result."""
    infos = reader.episode_info()
    where = f"{argument}={str(reader.path)!r}"
    if tasks is not None:
        tasks = [tasks] if isinstance(tasks, str) else list(tasks)
        if not tasks:
            raise ValueError(f"tasks=[] selects nothing from {where}; name some of {', '.join(reader.tasks)} "
                             "(or pass None for all)")
        unknown = [t for t in tasks if t not in reader.tasks]
        if unknown:
            raise ValueError(f"tasks={tasks!r}: {unknown} not in {where}, which holds no episodes of task(s) "
                             f"{', '.join(unknown)}; it holds {', '.join(reader.tasks) or 'no episodes'}")
        infos = [info for info in infos if info.task in tasks]
    if episodes is not None:
        wanted = {int(e) for e in episodes}
        infos = [info for info in infos if info.index in wanted]
    if not infos:
        what = f" of task(s) {', '.join(tasks)}" if tasks is not None else ""
        raise ValueError(f"{where} holds no episodes{what} to use (it has {len(reader)} episodes of "
                         f"{', '.join(reader.tasks) or 'no task'})")
    return infos


def split_episodes(num_episodes: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Episode indices for training and validation (at least one each when possible)."""
    order = np.random.default_rng(seed).permutation(num_episodes)
    n_val = min(num_episodes - 1, max(1, round(val_fraction * num_episodes))) if val_fraction > 0 else 0
    return np.sort(order[n_val:]), np.sort(order[:n_val])
