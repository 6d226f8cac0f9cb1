"""Writing the files of a LeRobot v3.0 dataset that v2.1 does not have: data files holding many
episodes (:class:`DataFiles`), the episodes' metadata table (:func:`write_episode_table`), the whole
dataset's statistics (:func:`aggregate_stats`) and
``meta/tasks.parquet``, a table pandas reads back indexed by the task strings
(:func:`write_pandas_indexed`). The layout is described in :mod:`worldsim.data.lerobot_format`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from worldsim.data import lerobot_format
from worldsim.data.lerobot_format import CHUNKS_SIZE, QUANTILES, V30_DATA_PATH


class DataFiles:
    """v3.0's data files: episodes' frame tables appended in order to ``data/chunk-C/file-F.parquet``,
    a new file once the open one holds :data:`~worldsim.data.lerobot_format.DATA_FILE_SIZE_MB`.
    Use as a context manager."""

    def __init__(self, root: Path, chunks_size: int = CHUNKS_SIZE) -> None:
        self.root, self.chunks_size = root, chunks_size
        self.file, self.frames_in_file, self.bytes_in_file = 0, 0, 0
        self._writer: pq.ParquetWriter | None = None

    def add(self, table: pa.Table) -> tuple[int, int]:
        """Append one episode's ``table``; its (chunk index, file index)."""
        if self._writer is not None and self.bytes_in_file + table.nbytes > lerobot_format.DATA_FILE_SIZE_MB * 2**20:
            self.close()
            self.file += 1
        chunk, file = divmod(self.file, self.chunks_size)
        if self._writer is None:
            path = self.root / V30_DATA_PATH.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(path, table.schema)
            self.bytes_in_file = 0
        self._writer.write_table(table)
        self.bytes_in_file += table.nbytes
        return chunk, file

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> DataFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def aggregate_stats(episodes: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The whole dataset's statistics from per-episode ones (:func:`column_stats`), as lerobot
    combines them: min of the minima, max of the maxima, the count-weighted mean, the pooled
    (population) standard deviation, the count-weighted mean of each quantile, and the total count."""
    out: dict[str, dict[str, Any]] = {}
    for key in episodes[0]:
        parts = [episode[key] for episode in episodes]
        counts = np.array([p["count"][0] for p in parts], dtype=np.float64)
        means = np.stack([np.asarray(p["mean"], dtype=np.float64) for p in parts])
        stds = np.stack([np.asarray(p["std"], dtype=np.float64) for p in parts])
        weights = (counts / counts.sum()).reshape(-1, *[1] * (means.ndim - 1))
        mean = (weights * means).sum(0)
        variance = (weights * (stds**2 + (means - mean) ** 2)).sum(0)
        out[key] = {"min": np.min(np.stack([np.asarray(p["min"]) for p in parts]), axis=0).tolist(),
                    "max": np.max(np.stack([np.asarray(p["max"]) for p in parts]), axis=0).tolist(),
                    "mean": mean.tolist(), "std": np.sqrt(variance).tolist(), "count": [int(counts.sum())]}
        for name in QUANTILES:
            if name in parts[0]:
                values = np.stack([np.asarray(p[name], dtype=np.float64) for p in parts])
                out[key][name] = (weights * values).sum(0).tolist()
    return out


def write_pandas_indexed(path: Path, index_name: str | None, index: Sequence[str],
                         columns: Mapping[str, Sequence[int]]) -> None:
    """A parquet table that ``pandas.read_parquet`` reads back with ``index`` as its index (how
    lerobot keeps ``meta/tasks.parquet``), written without pandas: the index is the column
    ``__index_level_0__`` and the schema carries pandas' description of the frame."""
    names = [*columns, "__index_level_0__"]
    arrays = [pa.array(list(values), pa.int64()) for values in columns.values()] + [pa.array(list(index), pa.string())]
    described = [{"name": name, "field_name": name, "pandas_type": "int64", "numpy_type": "int64",
                  "metadata": None} for name in columns]
    described.append({"name": index_name, "field_name": "__index_level_0__", "pandas_type": "unicode",
                      "numpy_type": "object", "metadata": None})
    pandas = {"index_columns": ["__index_level_0__"],
              "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                                  "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
              "columns": described, "creator": {"library": "pyarrow", "version": pa.__version__},
              "pandas_version": "2.2.3"}
    schema = pa.schema([pa.field(name, array.type) for name, array in zip(names, arrays, strict=True)],
                       metadata={"pandas": json.dumps(pandas)})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path)


def write_episode_table(path: Path, episodes: Sequence[Mapping[str, Any]],
                        stats: Sequence[Mapping[str, Mapping[str, Any]]]) -> None:
    """v3.0's episode metadata: one row per episode, its statistics as ``stats/<column>/<stat>``
    columns and worldsim's own metadata as JSON text (``worldsim``)."""
    rows = [{**{k: (json.dumps(v) if k == "worldsim" else v) for k, v in row.items()},
             **{f"stats/{key}/{name}": value for key, column in episode_stats.items()
                for name, value in column.items()}}
            for row, episode_stats in zip(episodes, stats, strict=True)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
