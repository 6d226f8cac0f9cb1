"""Videos of scripted-expert episodes, for looking at a task."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from worldsim.envs.single_env import TabletopEnv
from worldsim.envs.tasks import get_task
from worldsim.runtime.validation import check_int
from worldsim.runtime.video import check_video_path, write_video


@dataclass(frozen=True)
class EpisodeResult:
    seed: int
    success: bool
    steps: int
    ret: float


def expert_episodes(
    task: str, episodes: int = 1, seed: int = 0, size: int = 256, wrist: bool = False
) -> tuple[np.ndarray, list[EpisodeResult]]:
    """Run the scripted expert for ``episodes`` episodes (seeds ``seed``, ``seed + 1``, ...).

    Returns the front-camera frames of all episodes in order, (T, size, size, 3) uint8 (the
    wrist camera beside it when ``wrist``), and one result per episode.
    """
    check_int("episodes", episodes)
    env = TabletopEnv(task, render_mode="rgb_array", render_size=size,
                      obs_mode="pixels" if wrist else "state", image_size=size, wrist_camera=wrist)
    frames: list[np.ndarray] = []
    results: list[EpisodeResult] = []
    try:
        for k in tqdm(range(episodes), desc=f"{env.task.name} expert", unit="episode", leave=False):
            obs, info = env.reset(seed=seed + k)
            frames.append(_frame(env, obs, wrist))
            ret, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, info = env.step(env.expert_action())
                frames.append(_frame(env, obs, wrist))
                ret += reward
                done = terminated or truncated
            results.append(EpisodeResult(seed + k, bool(info["success"]), int(info["episode_step"]), ret))
    finally:
        env.close()
    return np.stack(frames), results


def render_expert(tasks: Sequence[str], out: str | Path, episodes: int = 1, seed: int = 0, size: int = 256,
                  wrist: bool = False, fps: int = 20) -> tuple[Path, dict[str, list[EpisodeResult]]]:
    """One video of the scripted expert: ``episodes`` episodes of each of ``tasks`` in turn (see
    :func:`expert_episodes`), written to ``out`` (.mp4, or .gif). Returns the path written
    (a .gif beside an .mp4 ``out`` without ffmpeg) and each task's episode results."""
    names = [get_task(task).name for task in tasks]  # KeyError for an unknown task, before any work
    if not names:
        raise ValueError("tasks is empty; name at least one task")
    check_video_path(out)
    clips, results = [], {}
    for name in names:
        frames, results[name] = expert_episodes(name, episodes, seed, size, wrist)
        clips.append(frames)
    return write_video(out, np.concatenate(clips), fps=fps), results


def _frame(env: TabletopEnv, obs: Any, wrist: bool) -> np.ndarray:
    front = env.render()
    if front is None:
        raise RuntimeError("the env renders nothing: make it with render_mode='rgb_array'")
    return np.concatenate([front, obs["wrist_image"]], axis=1) if wrist else front
