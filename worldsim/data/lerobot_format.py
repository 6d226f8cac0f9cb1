"""The LeRobot dataset layouts of codebase versions v3.0 (what ``lerobot`` 0.4 and later read and
write) and v2.1 (``lerobot`` 0.3.x), written and read natively with pyarrow, without importing
``lerobot``.

A v2.1 dataset is a folder::

    meta/info.json            codebase_version, fps, features (dtype, shape, names per column),
                              total_episodes, total_frames, total_tasks, total_chunks, chunks_size,
                              data_path, video_path, splits, robot_type
    meta/tasks.jsonl          {"task_index": i, "task": "<natural-language instruction>"} per line
    meta/episodes.jsonl       {"episode_index": e, "tasks": [...], "length": frames} per line
    meta/episodes_stats.jsonl {"episode_index": e, "stats": {column: {min, max, mean, std, count}}}
    data/chunk-CCC/episode_EEEEEE.parquet   one row per frame, chunk = episode // chunks_size
    videos/chunk-CCC/<key>/episode_EEEEEE.mp4   frames of "video" columns (reading only)

Every table has ``timestamp`` (frame_index / fps), ``frame_index``, ``episode_index``, ``index``
(frame position in the whole dataset) and ``task_index``. An ``image`` column holds PNG bytes in
a ``{bytes, path}`` struct, as the ``datasets`` library embeds images; each parquet file carries
the ``datasets`` description of its columns (schema metadata ``huggingface``), which is how
lerobot knows to decode those bytes into images. v2.0 differs only in keeping one
``meta/stats.json`` instead of per-episode statistics, so it is read too.

v3.0 keeps many episodes per file, and its metadata in parquet::

    meta/info.json            as above, without total_chunks; data_files_size_in_mb, video_files_size_in_mb
    meta/tasks.parquet        column task_index, indexed (pandas index) by the task string
    meta/stats.json           the statistics of every column over the whole dataset
    meta/episodes/chunk-CCC/file-FFF.parquet   one row per episode: episode_index, tasks, length,
                              data/chunk_index, data/file_index, dataset_from_index,
                              dataset_to_index, meta/episodes/chunk_index, meta/episodes/file_index,
                              stats/<column>/<min|max|mean|std|count>, and for each video column
                              videos/<key>/chunk_index, file_index, from_timestamp, to_timestamp
    data/chunk-CCC/file-FFF.parquet      the frames of consecutive episodes, a new file past
                              data_files_size_in_mb, chunk = file // chunks_size
    videos/<key>/chunk-CCC/file-FFF.mp4  consecutive episodes' frames of a "video" column (reading only)
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from PIL import Image

V21, V30 = "v2.1", "v3.0"
WRITABLE_VERSIONS: tuple[str, ...] = (V30, V21)
"""Versions :func:`~worldsim.data.lerobot.export_lerobot` writes, the default first."""
READABLE_VERSIONS: tuple[str, ...] = ("v2.0", V21, V30)
CHUNKS_SIZE = 1000
INFO_PATH = "meta/info.json"
TASKS_PATH = "meta/tasks.jsonl"
EPISODES_PATH = "meta/episodes.jsonl"
EPISODES_STATS_PATH = "meta/episodes_stats.jsonl"
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V30_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
V30_DATA_PATH = f"data/{V30_FILE}.parquet"
V30_VIDEO_PATH = "videos/{video_key}/" + V30_FILE + ".mp4"
V30_EPISODES_DIR = "meta/episodes"
V30_EPISODES_PATH = f"{V30_EPISODES_DIR}/{V30_FILE}.parquet"
V30_TASKS_PATH = "meta/tasks.parquet"
STATS_PATH = "meta/stats.json"
DATA_FILE_SIZE_MB = 100
"""v3.0: a data file takes episodes until it holds about this many megabytes (lerobot's default)."""
VIDEO_FILE_SIZE_MB = 200
INDEX_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
CAMERA_DTYPES = ("image", "video")
NUMERIC_DTYPES = ("bool", "float32", "float64", "int32", "int64", "uint8")
IMAGE_NAMES = ["height", "width", "channels"]
_IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def feature(dtype: str, shape: Sequence[int], names: list[str] | None = None) -> dict[str, Any]:
    """One entry of ``info.json``'s ``features``."""
    return {"dtype": dtype, "shape": [int(n) for n in shape], "names": names}


# ---------------------------------------------------------------------------- writing
def _hf_feature(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The ``datasets`` library's description of a column (what ``Features.to_dict`` gives)."""
    dtype, shape = spec["dtype"], tuple(spec["shape"])
    if dtype == "image":
        return {"_type": "Image"}
    if shape == (1,):
        return {"dtype": dtype, "_type": "Value"}
    if len(shape) == 1:
        return {"feature": {"dtype": dtype, "_type": "Value"}, "length": shape[0], "_type": "Sequence"}
    return {"shape": list(shape), "dtype": dtype, "_type": f"Array{len(shape)}D"}


def _png(frame: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def _arrow_column(spec: Mapping[str, Any], values: np.ndarray) -> pa.Array:
    shape = tuple(spec["shape"])
    if spec["dtype"] == "image":
        cells = [{"bytes": _png(frame), "path": f"frame_{i:06d}.png"} for i, frame in enumerate(values)]
        return pa.array(cells, type=_IMAGE_TYPE)
    flat = pa.array(np.ascontiguousarray(values, dtype=spec["dtype"]).reshape(-1))
    if shape == (1,):
        return flat
    if len(shape) == 1:
        return pa.FixedSizeListArray.from_arrays(flat, shape[0])
    # datasets stores ArrayND columns as plain nested lists; the schema metadata restores the shape
    for size in reversed(shape):
        flat = pa.ListArray.from_arrays(pa.array(np.arange(0, len(flat) + 1, size, dtype=np.int32)), flat)
    return flat


def frame_table(features: Mapping[str, Mapping[str, Any]], columns: Mapping[str, np.ndarray]) -> pa.Table:
    """One episode's frames as a table: ``columns[key]`` is ``(frames, *shape)`` for every feature
    (``(frames, H, W, 3)`` uint8 for images), in the order of ``features``."""
    arrays = [_arrow_column(features[key], columns[key]) for key in features]
    described = {key: _hf_feature(spec) for key, spec in features.items()}
    schema = pa.schema([pa.field(key, array.type) for key, array in zip(features, arrays, strict=True)],
                       metadata={"huggingface": json.dumps({"info": {"features": described}})})
    return pa.Table.from_arrays(arrays, schema=schema)


def write_table(path: Path, features: Mapping[str, Mapping[str, Any]],
                columns: Mapping[str, np.ndarray]) -> None:
    """Write one episode's frames (:func:`frame_table`) as one parquet file (v2.1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(frame_table(features, columns), path)


QUANTILES: dict[str, float] = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
"""v3.0's quantile statistics (lerobot 0.4 normalises some policies by them)."""


def column_stats(spec: Mapping[str, Any], values: np.ndarray, quantiles: bool = False) -> dict[str, Any]:
    """LeRobot's per-episode statistics of one column: min, max, mean, std (population) over the
    frames, and count; with ``quantiles`` (v3.0) also :data:`QUANTILES`, exact here (lerobot
    reads them from a histogram). Images get per-channel values in [0, 1] shaped (3, 1, 1),
    computed here over every frame (lerobot samples at most about a hundred)."""
    if spec["dtype"] == "image":
        wide = values.reshape(-1, values.shape[-1]).astype(np.float64) / 255.0
        narrow = wide
    else:
        narrow = values.reshape(len(values), *spec["shape"])
        wide = narrow.astype(np.float64)
    stats = {"min": narrow.min(0), "max": narrow.max(0), "mean": wide.mean(0), "std": wide.std(0)}
    if quantiles:
        stats |= {name: np.quantile(wide, q, axis=0) for name, q in QUANTILES.items()}
    if spec["dtype"] == "image":
        stats = {k: v.reshape(-1, 1, 1) for k, v in stats.items()}
    return {**{k: v.tolist() for k, v in stats.items()}, "count": [len(values)]}


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=4, ensure_ascii=False) + "\n")


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


# ---------------------------------------------------------------------------- reading
class LeRobotFolder:
    """A LeRobot dataset folder of codebase version v2.0, v2.1 or v3.0, its metadata checked on opening.

    ``info`` (``info.json``), ``features``, ``fps``, ``tasks`` (task index -> string) and
    ``episodes`` (their metadata rows by episode index, in index order: ``episodes.jsonl``, or
    v3.0's ``meta/episodes`` tables without the statistics) come from ``meta/``;
    :meth:`read_episode` loads columns of one episode. A missing folder raises
    ``FileNotFoundError``; anything else that is not such a dataset (no or unreadable metadata,
    another codebase version, missing fields, a corrupt or inconsistent parquet file, an
    undecodable frame) raises ``ValueError`` naming the file and the problem.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"no LeRobot dataset folder at {self.root}")
        self.info = self._load_info()
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self.fps = self.info["fps"]
        self.version: str = self.info["codebase_version"]
        self.tasks_path = V30_TASKS_PATH if self.version == V30 else TASKS_PATH
        self.episodes_path = V30_EPISODES_DIR if self.version == V30 else EPISODES_PATH
        self.tasks = self._load_tasks()
        self.episodes = self._load_episodes()
        self._table: tuple[str, pa.Table] | None = None  # v3.0: the data file read last

    def _fail(self, relative: str, problem: str) -> ValueError:
        return ValueError(f"{self.root / relative}: {problem}")

    def _json_lines(self, relative: str) -> list[dict[str, Any]]:
        path = self.root / relative
        if not path.is_file():
            raise self._fail(relative, "missing; not a LeRobot v2 dataset")
        rows = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise self._fail(relative, f"line {number} is not JSON ({err})") from err
            if not isinstance(row, dict):
                raise self._fail(relative, f"line {number} is not a JSON object")
            rows.append(row)
        return rows

    def _load_info(self) -> dict[str, Any]:
        path = self.root / INFO_PATH
        if not path.is_file():
            raise self._fail(INFO_PATH, "missing: this folder is not a LeRobot dataset")
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise self._fail(INFO_PATH, f"is not JSON ({err})") from err
        if not isinstance(info, dict):
            raise self._fail(INFO_PATH, "is not a JSON object")
        version = info.get("codebase_version")
        if version not in READABLE_VERSIONS:
            raise self._fail(INFO_PATH, f"codebase_version {version!r} is not supported; worldsim reads "
                                        f"LeRobot datasets of version {' and '.join(READABLE_VERSIONS)}")
        required = ("fps", "features", "data_path", "chunks_size", "total_episodes")
        missing = [k for k in required if k not in info]
        if missing:
            raise self._fail(INFO_PATH, f"lacks {', '.join(missing)}")
        if not isinstance(info["fps"], (int, float)) or info["fps"] <= 0:
            raise self._fail(INFO_PATH, f"fps must be a positive number; got {info['fps']!r}")
        features = info["features"]
        if not isinstance(features, dict):
            raise self._fail(INFO_PATH, "'features' is not an object")
        for key, spec in features.items():
            if not (isinstance(spec, dict) and isinstance(spec.get("shape"), list)
                    and spec.get("dtype") in (*CAMERA_DTYPES, *NUMERIC_DTYPES, "string")):
                raise self._fail(INFO_PATH, f"feature {key!r} needs a dtype (one of "
                                            f"{', '.join((*CAMERA_DTYPES, *NUMERIC_DTYPES))}) and a shape; "
                                            f"got {spec!r}")
        missing = [k for k in INDEX_FEATURES if k not in features]
        if missing:
            raise self._fail(INFO_PATH, f"features lack {', '.join(missing)}")
        if any(spec["dtype"] == "video" for spec in features.values()) and not info.get("video_path"):
            raise self._fail(INFO_PATH, "has video features but no video_path")
        return info

    def _parquet(self, relative: str) -> pa.Table:
        path = self.root / relative
        if not path.is_file():
            raise self._fail(relative, "missing")
        try:
            return pq.read_table(path)
        except (pa.ArrowException, OSError) as err:
            raise self._fail(relative, f"is not a readable parquet file ({err})") from err

    def _load_tasks(self) -> dict[int, str]:
        if self.version == V30:
            return self._load_tasks_v30()
        tasks = {}
        for row in self._json_lines(TASKS_PATH):
            if not isinstance(row.get("task_index"), int) or not isinstance(row.get("task"), str):
                raise self._fail(TASKS_PATH, f"each line needs an int task_index and a string task; "
                                             f"got {row}")
            tasks[row["task_index"]] = row["task"]
        return tasks

    def _load_tasks_v30(self) -> dict[int, str]:
        table = self._parquet(V30_TASKS_PATH)
        pandas = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
        index = [c for c in pandas.get("index_columns", []) if isinstance(c, str)]
        strings = "task" if "task" in table.column_names else (index[0] if index else None)
        if strings is None or "task_index" not in table.column_names:
            raise self._fail(V30_TASKS_PATH, f"needs a task_index column and the task strings (a 'task' column or "
                                             f"the pandas index); has {', '.join(table.column_names)}")
        indices, texts = table.column("task_index").to_pylist(), table.column(strings).to_pylist()
        if not all(isinstance(i, int) for i in indices) or not all(isinstance(t, str) for t in texts):
            raise self._fail(V30_TASKS_PATH, "task_index must hold ints and the tasks strings")
        return dict(zip(indices, texts, strict=True))

    def _load_episodes(self) -> dict[int, dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        if self.version == V30:
            files = sorted((self.root / V30_EPISODES_DIR).glob("chunk-*/file-*.parquet"))
            if not files:
                raise self._fail(V30_EPISODES_DIR, "holds no episode tables (chunk-*/file-*.parquet)")
            for path in files:
                table = self._parquet(str(path.relative_to(self.root)))
                table = table.select([c for c in table.column_names if not c.startswith("stats/")])
                rows += table.to_pylist()
            needed = ("data/chunk_index", "data/file_index", "tasks")
            for row in rows:
                lacking = [k for k in needed if k not in row]
                if lacking:
                    raise self._fail(V30_EPISODES_DIR, f"episode rows lack {', '.join(lacking)}")
                if isinstance(row.get("worldsim"), str):  # worldsim's own metadata, kept as JSON text
                    row["worldsim"] = json.loads(row["worldsim"])
        else:
            rows = self._json_lines(EPISODES_PATH)
        episodes = {}
        for row in rows:
            index, length = row.get("episode_index"), row.get("length")
            if not isinstance(index, int) or not isinstance(length, int) or length < 1:
                raise self._fail(self.episodes_path, f"each episode needs an int episode_index and a length >= 1; "
                                                     f"got {row}")
            if index in episodes:
                raise self._fail(self.episodes_path, f"episode {index} is listed twice")
            episodes[index] = row
        if len(episodes) != self.info["total_episodes"]:
            raise self._fail(self.episodes_path, f"lists {len(episodes)} episodes; info.json's total_episodes "
                                                 f"says {self.info['total_episodes']}")
        return dict(sorted(episodes.items()))

    def _chunk(self, episode: int) -> int:
        return episode // int(self.info["chunks_size"])

    def data_file(self, episode: int) -> str:
        """The parquet file of ``episode``, relative to the root."""
        if self.version == V30:
            row = self.episodes[episode]
            return self.info["data_path"].format(chunk_index=row["data/chunk_index"], file_index=row["data/file_index"])
        return self.info["data_path"].format(episode_chunk=self._chunk(episode), episode_index=episode)

    def _episode_table(self, relative: str, episode: int) -> pa.Table:
        """The rows of ``episode`` in its data file (the whole file in v2)."""
        if self.version != V30:
            return self._parquet(relative)
        if self._table is None or self._table[0] != relative:
            self._table = (relative, self._parquet(relative))
        table = self._table[1]
        if "episode_index" not in table.column_names:
            raise self._fail(relative, "lacks the episode_index column")
        return table.filter(pc.equal(table.column("episode_index"), episode))

    def read_episode(self, episode: int, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """Columns ``keys`` of ``episode`` (plus ``task_index``), each ``(length, *shape)`` in
        frame order: ``(length, H, W, 3)`` uint8 for cameras (decoded from the table's image
        bytes or the episode's video), ``(length, 1)`` for single values."""
        relative = self.data_file(episode)
        if not (self.root / relative).is_file():
            raise self._fail(relative, f"missing (the data file of episode {episode})")
        tabled = [k for k in dict.fromkeys((*keys, "frame_index", "timestamp", "task_index"))
                  if self.features[k]["dtype"] != "video"]
        table = self._episode_table(relative, episode)
        absent = [k for k in tabled if k not in table.column_names]
        if absent:
            raise self._fail(relative, f"lacks the column(s) {', '.join(absent)} that info.json lists")
        length = self.episodes[episode]["length"]
        if table.num_rows != length:
            raise self._fail(relative, f"holds {table.num_rows} frames of episode {episode}; its metadata "
                                       f"({self.episodes_path}) says {length}")
        columns = {k: self._column(relative, k, table.column(k)) for k in tabled}
        order = np.argsort(columns["frame_index"][:, 0], kind="stable")
        if not np.array_equal(columns["frame_index"][order, 0], np.arange(length)):
            raise self._fail(relative, f"frame_index is not 0..{length - 1}")
        columns = {k: v[order] for k, v in columns.items()}
        for key in keys:
            if self.features[key]["dtype"] == "video":
                columns[key] = self._video_frames(episode, key, columns["timestamp"][:, 0])
        return columns

    def _column(self, relative: str, key: str, column: pa.ChunkedArray) -> np.ndarray:
        spec = self.features[key]
        if spec["dtype"] == "image":
            cells = column.to_pylist()
            return np.stack([self._decode_image(relative, key, i, cell) for i, cell in enumerate(cells)])
        shape = tuple(spec["shape"])
        values = column.combine_chunks()
        try:
            while pa.types.is_list(values.type) or pa.types.is_fixed_size_list(values.type):
                values = values.flatten()
            flat = values.to_numpy(zero_copy_only=False)
            return flat.astype(spec["dtype"]).reshape(len(column), *shape)
        except (pa.ArrowException, ValueError, TypeError) as err:
            raise self._fail(relative, f"column {key!r} does not hold {spec['dtype']} values of shape "
                                       f"{shape} per frame ({err})") from err

    def _decode_image(self, relative: str, key: str, row: int, cell: Any) -> np.ndarray:
        if not isinstance(cell, dict) or not cell.get("bytes"):
            raise self._fail(relative, f"column {key!r} frame {row} holds no embedded image bytes")
        try:
            return np.asarray(Image.open(io.BytesIO(cell["bytes"])).convert("RGB"))
        except (OSError, ValueError) as err:
            raise self._fail(relative, f"column {key!r} frame {row} is not a decodable image "
                                       f"({err})") from err

    def _video_frames(self, episode: int, key: str, timestamps: np.ndarray) -> np.ndarray:
        import imageio.v2 as imageio

        start = 0.0
        if self.version == V30:
            row = self.episodes[episode]
            lacking = [f"videos/{key}/{k}" for k in ("chunk_index", "file_index", "from_timestamp")
                       if f"videos/{key}/{k}" not in row]
            if lacking:
                raise self._fail(V30_EPISODES_DIR, f"episode {episode} lacks {', '.join(lacking)}")
            relative = self.info["video_path"].format(video_key=key, chunk_index=row[f"videos/{key}/chunk_index"],
                                                      file_index=row[f"videos/{key}/file_index"])
            start = float(row[f"videos/{key}/from_timestamp"])
        else:
            relative = self.info["video_path"].format(episode_chunk=self._chunk(episode), video_key=key,
                                                      episode_index=episode)
        if not (self.root / relative).is_file():
            raise self._fail(relative, f"missing (the {key!r} video of episode {episode})")
        try:
            with imageio.get_reader(self.root / relative, format="ffmpeg") as reader:
                frames = np.stack([np.asarray(frame)[..., :3] for frame in reader])  # type: ignore[attr-defined]  # imageio's stubs: readers iterate
        except (OSError, RuntimeError, ValueError) as err:
            raise self._fail(relative, f"cannot be decoded ({err})") from err
        wanted = np.rint((start + timestamps) * self.fps).astype(np.int64)
        if len(wanted) and (wanted.min() < 0 or wanted.max() >= len(frames)):
            raise self._fail(relative, f"holds {len(frames)} frames; the table's timestamps need frames up "
                                       f"to {wanted.max()}")
        return frames[wanted]
