"""Videos of scripted-expert episodes, for looking at a task."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from worldsim.envs.single_env import TabletopEnv


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
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be >= 1")
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


def _frame(env: TabletopEnv, obs, wrist: bool) -> np.ndarray:
    front = env.render()
    return np.concatenate([front, obs["wrist_image"]], axis=1) if wrist else front
