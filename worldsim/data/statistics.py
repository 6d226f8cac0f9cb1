"""Normalisation statistics of an episode file: :func:`dataset_statistics`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from worldsim.data.episode import IMAGE_KEYS
from worldsim.data.reader import EpisodeReader, open_reader

STD_FLOOR = 1e-6


def dataset_statistics(data: EpisodeReader | str | Path,
                       keys: Sequence[str] | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-dimension ``(mean, std)`` (float32 numpy arrays) over every row of every episode,
    for normalisers.

    ``keys`` defaults to those of ``("proprio", "state", "actions")`` the file holds; an
    explicitly named key must exist and must not be an image. ``std`` is the population
    standard deviation floored at 1e-6, so dividing by it is safe for constant dimensions.
    """
    with open_reader(data) as reader:
        present = (*reader.obs_keys, "actions", "rewards")
        if keys is None:
            keys = [k for k in ("proprio", "state", "actions") if k in present]
        for key in keys:
            if key in IMAGE_KEYS or key not in present:
                allowed = [k for k in present if k not in IMAGE_KEYS]
                raise ValueError(f"no statistics for {key!r} in {reader.path}; allowed: {', '.join(allowed)}")
        stats = {}
        for key in keys:
            total, total_sq, count = np.zeros(()), np.zeros(()), 0
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
