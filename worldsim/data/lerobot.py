"""Episode files to and from the LeRobot dataset format, codebase version **v2.1** (the version
``lerobot`` 0.3.x reads and writes), natively: no ``lerobot`` import, so it runs beside any torch.

:func:`export_lerobot` turns a worldsim episode file into a LeRobot dataset folder that
``lerobot.datasets.lerobot_dataset.LeRobotDataset(repo_id, root=folder)`` loads offline and an
off-the-shelf LeRobot policy trains on; :func:`import_lerobot` turns a LeRobot v2.0/v2.1 folder
(exported by worldsim or recorded with lerobot) into a worldsim episode file that ``worldsim
train-wm --data`` trains on. The folder layout is described in :mod:`worldsim.data.lerobot_format`.

One worldsim episode of ``T`` actions becomes one LeRobot episode of ``T + 1`` frames; frame ``t``
holds observation ``t`` and what followed action ``t``:

=====================================  ====================================  ====================
worldsim                                LeRobot column (frame t = 0 .. T)     dtype, shape
=====================================  ====================================  ====================
obs/image[t]                           observation.images.front              image (H, W, 3)
obs/wrist_image[t]                     observation.images.wrist              image (H, W, 3)
obs/proprio[t]                         observation.state                     float32 (4,)
obs/state[t]                           observation.environment_state         float32 (D,)
actions[t]                             action                                float32 (4,)
rewards[t]                             next.reward                           float32 (1,)
dones[t]                               next.done                             bool (1,)
terminated[t], truncated[t]            next.terminated, next.truncated       bool (1,)
success[t + 1]                         next.success                          bool (1,)
policy/features[t]                     worldsim.policy_features              float32 (D,)
policy/action_samples[t]               worldsim.action_samples               float32 (S, K, A)
instruction                            the episode's task (tasks.jsonl)      string
task, env_id, seed, env_index, policy, episodes.jsonl ``worldsim`` object
outcome, success[0]
file env_kwargs, task names            info.json ``worldsim`` object
=====================================  ====================================  ====================

The final frame ``T`` is the final observation: no action was taken there, but every LeRobot
frame has one, so it repeats action ``T - 1`` (as lerobot pads action chunks past an episode's
end), as do ``next.terminated``, ``next.truncated``, ``next.success`` and the policy columns;
its ``next.reward`` is 0 and ``next.done`` True. Reading maps ``N`` frames back to ``N``
observations and the first ``N - 1`` frames' actions and outcomes, so the final frame's copies
are dropped and everything worldsim stores comes back exactly (images travel as PNG, lossless).
What the round trip does not keep: nothing a worldsim file holds; the LeRobot ``fps`` (worldsim
files do not record a rate; the envs step at 20 Hz, the default) is only written.

A dataset recorded with lerobot has no worldsim metadata. Its cameras and vectors map by the
names above (``image_key`` ... ``state_key`` override them; a dataset with a single camera uses
it as ``image``), it must provide an image and a 4-d proprio (what world models read) and a 4-d
action, and each episode gets: its LeRobot task string as instruction, ``task`` (or that string)
as task name, rewards from ``next.reward`` (else 0), ``success[t + 1]`` from ``next.success``
(else False), not terminated, truncated at its last step, seed 0, env id ``lerobot/<folder>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from worldsim.data.episode import ACTION_DIM, FORMAT, IMAGE_KEYS, OBS_KEYS, PROPRIO_DIM, VERSION, Episode
from worldsim.data.lerobot_format import (
    CAMERA_DTYPES,
    CHUNKS_SIZE,
    DATA_FILE_SIZE_MB,
    DATA_PATH,
    EPISODES_PATH,
    EPISODES_STATS_PATH,
    IMAGE_NAMES,
    INDEX_FEATURES,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    V30,
    V30_DATA_PATH,
    V30_EPISODES_PATH,
    V30_TASKS_PATH,
    VIDEO_FILE_SIZE_MB,
    WRITABLE_VERSIONS,
    LeRobotFolder,
    column_stats,
    feature,
    frame_table,
    write_json,
    write_jsonl,
    write_table,
)
from worldsim.data.lerobot_v30 import DataFiles, aggregate_stats, write_episode_table, write_pandas_indexed
from worldsim.data.reader import EpisodeReader
from worldsim.data.writer import EpisodeWriter
from worldsim.envs.observations import STATE_DIM, STATE_LAYOUT
from worldsim.runtime.atomic import atomic_dir
from worldsim.runtime.validation import check_int

OBS_FEATURES: dict[str, str] = {"image": "observation.images.front",
                                "wrist_image": "observation.images.wrist",
                                "proprio": "observation.state", "state": "observation.environment_state"}
"""The LeRobot column of each worldsim observation key."""
POLICY_FEATURES: dict[str, str] = {"features": "worldsim.policy_features",
                                   "action_samples": "worldsim.action_samples"}
"""The LeRobot column of each recorded policy output."""
ACTION_NAMES = ["dx", "dy", "dz", "gripper"]
PROPRIO_NAMES = ["tcp_x", "tcp_y", "tcp_z", "gripper_opening"]
ROBOT_TYPE = "worldsim"
FLAG_COLUMNS = ("next.done", "next.terminated", "next.truncated", "next.success")


@dataclass(frozen=True)
class LeRobotConversion:
    """What :func:`export_lerobot` or :func:`import_lerobot` wrote."""

    path: Path
    """The LeRobot folder or the episode file written."""
    episodes: int
    frames: int
    """LeRobot frames: ``T + 1`` per episode of ``T`` actions."""
    tasks: tuple[str, ...]
    """The worldsim task names of the episodes, in order of first appearance."""


# ---------------------------------------------------------------------------- export
def _state_names(width: int) -> list[str] | None:
    if width != STATE_DIM:
        return None
    return [f"{name}.{i}" for name, part in STATE_LAYOUT.items() for i in range(part.stop - part.start)]


def _export_features(reader: EpisodeReader, obs_keys: list[str]) -> dict[str, dict[str, Any]]:
    shapes = reader.obs_shapes
    features = {}
    for key in obs_keys:
        if key in IMAGE_KEYS:
            features[OBS_FEATURES[key]] = feature("image", shapes[key], IMAGE_NAMES)
        else:
            names = PROPRIO_NAMES if key == "proprio" else _state_names(shapes[key][0])
            features[OBS_FEATURES[key]] = feature("float32", shapes[key], names)
    features["action"] = feature("float32", (ACTION_DIM,), ACTION_NAMES)
    features["next.reward"] = feature("float32", (1,))
    features.update({name: feature("bool", (1,)) for name in FLAG_COLUMNS})
    for key, shape in reader.policy_shapes.items():
        features[POLICY_FEATURES[key]] = feature("float32", shape)
    return {**features, **INDEX_FEATURES}


def _then_last(steps: np.ndarray, last: Any = None) -> np.ndarray:
    """``T`` per-step rows followed by one row for the final frame: ``last``, else a repeat of
    the last step."""
    final = steps[-1:] if last is None else np.full_like(steps[-1:], last)
    return np.concatenate([steps, final])


def _frame_columns(episode: Episode, first_frame: int, index: int, task_index: int,
                   fps: int, obs_keys: list[str]) -> dict[str, np.ndarray]:
    frames = episode.num_samples + 1
    columns = {OBS_FEATURES[key]: episode.obs[key] for key in obs_keys}
    columns["action"] = _then_last(episode.actions)
    columns["next.reward"] = _then_last(episode.rewards, 0.0)
    columns["next.done"] = _then_last(episode.dones, True)
    columns["next.terminated"] = _then_last(episode.terminated)
    columns["next.truncated"] = _then_last(episode.truncated)
    columns["next.success"] = _then_last(episode.success[1:])
    for key, array in episode.policy_outputs.items():
        columns[POLICY_FEATURES[key]] = _then_last(array)
    frame_index = np.arange(frames, dtype=np.int64)
    columns.update(timestamp=(frame_index / fps).astype(np.float32), frame_index=frame_index,
                   episode_index=np.full(frames, index, np.int64), index=first_frame + frame_index,
                   task_index=np.full(frames, task_index, np.int64))
    return columns


def export_lerobot(data: str | Path, out: str | Path, *, fps: int = 20, version: str = V30,
                   state: bool = True, overwrite: bool = False) -> LeRobotConversion:
    """Write the worldsim episode file ``data`` as a LeRobot dataset folder ``out`` of codebase
    ``version`` v3.0 (lerobot 0.4 and later; the default) or v2.1 (lerobot 0.3).

    Columns, the final-frame convention and the metadata kept are in the module docstring:
    images are PNG-encoded ``image`` columns inside the parquet tables (no videos), so the
    export is lossless; the per-episode statistics lerobot normalises with are written too
    (v2.1: ``meta/episodes_stats.jsonl``; v3.0: the episode tables' ``stats/`` columns and
    ``meta/stats.json``). ``fps`` (>= 1) is the rate written to ``info.json`` and the frame
    timestamps; worldsim envs step at 20 Hz. ``state=False`` leaves out the simulator's state
    (``observation.environment_state``), which a real robot cannot observe and an imagined env
    cannot produce: a policy trained on such an export reads camera and proprioception only.

    The folder is written atomically (a temporary sibling renamed into place); an existing
    ``out`` is refused with ``FileExistsError`` unless ``overwrite``. A missing ``data`` raises
    ``FileNotFoundError``; a file that is not a worldsim episode file, or holds no episodes,
    ``ValueError`` naming it; an unknown ``version`` too.
    """
    check_int("fps", fps)
    if version not in WRITABLE_VERSIONS:
        raise ValueError(f"version={version!r}: worldsim writes LeRobot {' or '.join(WRITABLE_VERSIONS)}")
    out = Path(out)
    with EpisodeReader(data) as reader:
        if len(reader) == 0:
            raise ValueError(f"{reader.path} holds no episodes; nothing to export")
        obs_keys = [key for key in reader.obs_keys if state or key != "state"]
        env_kwargs = dict(reader.env_kwargs)
        if not state and env_kwargs.get("obs_mode") == "pixels+state":
            env_kwargs["obs_mode"] = "pixels"
        features = _export_features(reader, obs_keys)
        task_index = {text: i for i, text in enumerate(reader.instructions)}
        episodes, stats, frames = [], [], 0
        with atomic_dir(out, overwrite=overwrite) as tmp, DataFiles(tmp) as data_files:
            for i in range(len(reader)):
                episode = reader[i]
                columns = _frame_columns(episode, frames, i, task_index[episode.instruction], int(fps), obs_keys)
                length = episode.num_samples + 1
                row: dict[str, Any] = {"episode_index": i, "tasks": [episode.instruction], "length": length}
                if version == V30:
                    chunk, file = data_files.add(frame_table(features, columns))
                    row |= {"data/chunk_index": chunk, "data/file_index": file, "dataset_from_index": frames,
                            "dataset_to_index": frames + length, "meta/episodes/chunk_index": 0,
                            "meta/episodes/file_index": 0}
                else:
                    write_table(tmp / DATA_PATH.format(episode_chunk=i // CHUNKS_SIZE, episode_index=i), features,
                                columns)
                row["worldsim"] = {"task": episode.task, "env_id": episode.env_id, "seed": episode.seed,
                                   "env_index": episode.env_index, "policy": episode.policy,
                                   "success": episode.succeeded, "success_at_start": bool(episode.success[0])}
                episodes.append(row)
                stats.append({key: column_stats(spec, columns[key], quantiles=version == V30)
                              for key, spec in features.items()})
                frames += length
            info = {"codebase_version": version, "robot_type": ROBOT_TYPE, "total_episodes": len(reader),
                    "total_frames": frames, "total_tasks": len(task_index), "chunks_size": CHUNKS_SIZE,
                    "fps": int(fps), "splits": {"train": f"0:{len(reader)}"}, "features": features,
                    "worldsim": {"format": FORMAT, "version": VERSION, "env_kwargs": env_kwargs,
                                 "tasks": reader.tasks}}
            if version == V30:
                write_json(tmp / INFO_PATH, info | {"data_files_size_in_mb": DATA_FILE_SIZE_MB,
                                                    "video_files_size_in_mb": VIDEO_FILE_SIZE_MB,
                                                    "data_path": V30_DATA_PATH, "video_path": None})
                write_pandas_indexed(tmp / V30_TASKS_PATH, None, list(task_index),
                                     {"task_index": list(task_index.values())})
                write_episode_table(tmp / V30_EPISODES_PATH.format(chunk_index=0, file_index=0), episodes, stats)
                write_json(tmp / STATS_PATH, aggregate_stats(stats))
            else:
                write_json(tmp / INFO_PATH, info | {"total_videos": 0, "data_path": DATA_PATH, "video_path": None,
                                                    "total_chunks": (len(reader) - 1) // CHUNKS_SIZE + 1})
                write_jsonl(tmp / TASKS_PATH, ({"task_index": i, "task": text} for text, i in task_index.items()))
                write_jsonl(tmp / EPISODES_PATH, episodes)
                write_jsonl(tmp / EPISODES_STATS_PATH, ({"episode_index": i, "stats": episode_stats}
                                                        for i, episode_stats in enumerate(stats)))
        return LeRobotConversion(out, len(reader), frames, tuple(reader.tasks))


# ---------------------------------------------------------------------------- import
_EPISODE_META = ("task", "env_id", "seed", "env_index", "policy", "success_at_start")


def _worldsim_origin(folder: LeRobotFolder) -> dict[str, Any] | None:
    """The ``worldsim`` object of a dataset that worldsim exported (checked), else None."""
    block = folder.info.get("worldsim")
    if block is None:
        return None
    where = folder.root / INFO_PATH
    version = block.get("version") if isinstance(block, dict) else None
    if (not isinstance(block, dict) or block.get("format") != FORMAT or not isinstance(version, int)
            or not 1 <= version <= VERSION or not isinstance(block.get("env_kwargs"), dict)):
        raise ValueError(f"{where}: its 'worldsim' object is not worldsim metadata this worldsim reads "
                         f"(format {FORMAT!r}, version 1..{VERSION}, env_kwargs); got {block!r}")
    missing = [c for c in ("action", "next.reward", *FLAG_COLUMNS) if c not in folder.features]
    if missing:
        raise ValueError(f"{where}: exported by worldsim but its features lack {', '.join(missing)}")
    for index, row in folder.episodes.items():
        meta = row.get("worldsim")
        if not isinstance(meta, dict) or any(k not in meta for k in _EPISODE_META):
            raise ValueError(f"{folder.root / folder.episodes_path}: episode {index} lacks its 'worldsim' object "
                             f"({', '.join(_EPISODE_META)})")
    return block


def _check_obs_column(folder: LeRobotFolder, key: str, column: str) -> None:
    spec, where = folder.features[column], folder.root / INFO_PATH
    shape = tuple(spec["shape"])
    if key in IMAGE_KEYS:
        if spec["dtype"] not in CAMERA_DTYPES:
            raise ValueError(f"{where}: {column!r} ({spec['dtype']}) is not a camera (image or video) and "
                             f"cannot be worldsim's {key!r}")
    elif not spec["dtype"].startswith("float") or len(shape) != 1:
        raise ValueError(f"{where}: {column!r} is {spec['dtype']} {list(shape)}; worldsim's {key!r} is a "
                         "float vector")
    elif key == "proprio" and shape != (PROPRIO_DIM,):
        raise ValueError(f"{where}: {column!r} has shape {list(shape)}; worldsim's proprio is "
                         f"[{PROPRIO_DIM}] (TCP x, y, z and gripper opening): name a feature of that shape "
                         "with proprio_key")


def _obs_columns(folder: LeRobotFolder, chosen: dict[str, str | None], foreign: bool) -> dict[str, str]:
    """worldsim observation key -> LeRobot column: ``chosen`` ones, else by the names worldsim
    writes, else (a dataset not from worldsim) its only camera as ``image``."""
    features, where = folder.features, folder.root / INFO_PATH
    cameras = [k for k, spec in features.items() if spec["dtype"] in CAMERA_DTYPES]
    columns: dict[str, str] = {}
    for key in OBS_KEYS:
        column = chosen[key]
        if column is not None and column not in features:
            raise ValueError(f"{where}: {key}_key={column!r} is not one of its features "
                             f"({', '.join(features)})")
        if column is None and OBS_FEATURES[key] in features:
            column = OBS_FEATURES[key]
        if column is None and key == "image" and foreign:
            wrist = chosen["wrist_image"] or OBS_FEATURES["wrist_image"]
            others = [c for c in cameras if c != wrist]
            if len(others) > 1:
                raise ValueError(f"{where}: it has the cameras {', '.join(others)} and none is "
                                 f"{OBS_FEATURES['image']!r}: choose worldsim's image with image_key")
            column = others[0] if others else None
        if column is None:
            continue
        if column in columns.values():
            raise ValueError(f"{where}: {column!r} cannot be both {key!r} and another observation")
        _check_obs_column(folder, key, column)
        columns[key] = column
    if foreign:
        needed = {"image": "image (a camera)",
                  "proprio": f"proprio (a float feature of shape [{PROPRIO_DIM}])"}
        missing = [needed[key] for key in needed if key not in columns]
        if missing:
            raise ValueError(f"{where}: no {' and no '.join(missing)}, which world models need; its features "
                             f"are {', '.join(features)}: name them with image_key / proprio_key")
    if not columns:
        raise ValueError(f"{where}: none of its features maps to a worldsim observation "
                         f"({', '.join(features)})")
    spec = features.get("action")
    if spec is None or not spec["dtype"].startswith("float") or tuple(spec["shape"]) != (ACTION_DIM,):
        got = "no 'action' feature" if spec is None else f"'action' is {spec['dtype']} {spec['shape']}"
        raise ValueError(f"{where}: {got}; worldsim actions are float [{ACTION_DIM}] (end-effector dx, dy, "
                         "dz, gripper)")
    return columns


def _episode(folder: LeRobotFolder, index: int, obs_columns: dict[str, str], origin: dict[str, Any] | None,
             task: str | None) -> Episode:
    """Episode ``index`` of ``folder`` as a worldsim :class:`Episode` (see the module docstring)."""
    features, source = folder.features, folder.root / folder.data_file(index)
    extra = [c for c in ("next.reward", *FLAG_COLUMNS, *POLICY_FEATURES.values()) if c in features]
    columns = folder.read_episode(index, [*obs_columns.values(), "action", *extra])
    frames = len(columns["action"])
    if frames < 2:
        raise ValueError(f"{source}: episode {index} has {frames} frame; a worldsim episode needs two or "
                         "more (observations around at least one action)")
    task_indices = np.unique(columns["task_index"])
    if len(task_indices) != 1 or int(task_indices[0]) not in folder.tasks:
        raise ValueError(f"{source}: episode {index} has task_index {task_indices.tolist()}; worldsim needs "
                         f"one task per episode, listed in {folder.tasks_path}")
    instruction = folder.tasks[int(task_indices[0])]
    steps = frames - 1
    flag = {c: columns[c][:steps, 0].astype(bool) for c in FLAG_COLUMNS if c in columns}
    rewards = columns["next.reward"][:steps, 0] if "next.reward" in columns else np.zeros(steps, np.float32)
    after = flag.get("next.success", np.zeros(steps, bool))
    if origin is not None:
        meta = folder.episodes[index]["worldsim"]
        details = {"terminated": flag["next.terminated"], "truncated": flag["next.truncated"],
                   "success": np.concatenate([[bool(meta["success_at_start"])], after]),
                   "task": task or meta["task"], "env_id": meta["env_id"], "seed": meta["seed"],
                   "env_index": meta["env_index"], "policy": meta["policy"],
                   "policy_outputs": {key: columns[c][:steps] for key, c in POLICY_FEATURES.items()
                                      if c in columns}}
    else:
        details = {"terminated": np.zeros(steps, bool), "truncated": np.arange(steps) == steps - 1,
                   "success": np.concatenate([[False], after]), "task": task or instruction,
                   "env_id": f"lerobot/{folder.root.name}", "seed": 0, "env_index": 0,
                   "policy": f"LeRobot dataset {folder.root.name} (robot {folder.info.get('robot_type')})"}
    try:
        return Episode(obs={key: columns[c] for key, c in obs_columns.items()},
                       actions=columns["action"][:steps], rewards=rewards, instruction=instruction, **details)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{source}: episode {index} is not a valid worldsim episode: {err}") from err


def import_lerobot(root: str | Path, out: str | Path, *, task: str | None = None, overwrite: bool = False,
                   image_key: str | None = None, wrist_image_key: str | None = None,
                   proprio_key: str | None = None, state_key: str | None = None) -> LeRobotConversion:
    """Write the LeRobot dataset folder ``root`` (codebase version v2.0 or v2.1) as the worldsim
    episode file ``out``.

    A folder that :func:`export_lerobot` wrote comes back exactly as the file it came from. For
    any other dataset the mapping, the required image, 4-d proprio and 4-d action, and what
    each episode gets are in the module docstring. ``task`` names every episode's worldsim task
    (default: the worldsim task recorded at export, else the episode's LeRobot task string);
    ``image_key``, ``wrist_image_key``, ``proprio_key`` and ``state_key`` name the LeRobot feature
    to read as that worldsim observation instead of the default. Image and video cameras are
    both read (videos through imageio's ffmpeg, lossy as recorded).

    ``out`` is written atomically through :class:`~worldsim.data.writer.EpisodeWriter`; an
    existing one is refused with ``FileExistsError`` unless ``overwrite``. A missing ``root``
    raises ``FileNotFoundError``; a folder that is not such a LeRobot dataset, another codebase
    version, a missing or misshapen feature, a corrupt parquet or video file raise ``ValueError``
    naming the file and the problem.
    """
    if task is not None and (not isinstance(task, str) or not task):
        raise ValueError(f"task={task!r} must be a non-empty string")
    folder = LeRobotFolder(root)
    origin = _worldsim_origin(folder)
    chosen = {"image": image_key, "wrist_image": wrist_image_key, "proprio": proprio_key, "state": state_key}
    obs_columns = _obs_columns(folder, chosen, foreign=origin is None)
    frames, tasks = 0, []
    with EpisodeWriter(out, env_kwargs=origin["env_kwargs"] if origin else {}, overwrite=overwrite) as writer:
        for index in folder.episodes:
            episode = _episode(folder, index, obs_columns, origin, task)
            writer.add_episode(episode)
            frames += episode.num_samples + 1
            if episode.task not in tasks:
                tasks.append(episode.task)
    return LeRobotConversion(Path(out), len(folder.episodes), frames, tuple(tasks))
