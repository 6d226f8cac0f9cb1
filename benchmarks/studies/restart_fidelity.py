"""How exactly physics restarts at a recorded keyframe: from the keyframe's own ``state`` row, or
from the episode's first state with its recorded actions replayed up to the keyframe.

For every episode of each episode file long enough, and each keyframe step of ``--steps``, physics
restarts at the keyframe both ways (the MuJoCo env's ``reset`` options ``start_state`` alone, and
``start_state`` + ``replay_actions``), then executes the next ``--ahead`` recorded actions. The
figure is the task cube's distance from where the recording has it then: what a start-by-start
comparison (``worldsim imagined-vs-real``) would get wrong about the real outcome before any
policy acts differently. Prints one JSON line last (``benchmarks/studies/results/restart_fidelity.json``).

    python benchmarks/studies/restart_fidelity.py runs/bench_coevolve_push/coevolve_s{0,1,2}/round_0/data.h5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

import worldsim.envs  # noqa: F401  (registers the envs)
from worldsim.data.reader import EpisodeReader
from worldsim.envs.observations import STATE_DIM, STATE_LAYOUT

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

WAYS = ("keyframe_state", "replayed")
CUBE = STATE_LAYOUT["object_pos"]


def cube_errors(states: np.ndarray, actions: np.ndarray, lengths: np.ndarray, step: int, ahead: int,
                task: str) -> dict[str, np.ndarray]:
    """Cube error (m) ``ahead`` recorded steps after a restart at ``step``, both ways, for the
    episodes longer than ``step + ahead``. ``states`` ``(N, L + 1, 56)``, ``actions`` ``(N, L, 4)``."""
    n = len(lengths)
    long_enough = lengths > step + ahead
    rows = np.arange(n)
    env = gym.make_vec(f"worldsim/{task}", num_envs=n, vectorization_mode="vector_entry_point", obs_mode="state",
                       terminate_on_success=False)
    try:
        env.reset(seed=0)
        steps = np.where(long_enough, step, 0)
        starts = {"keyframe_state": {"start_state": states[rows, steps], "episode_step": steps},
                  "replayed": {"start_state": states[:, 0], "replay_actions": actions[:, :step], "replay_steps": steps}}
        errors = {}
        for way, options in starts.items():
            obs, _ = env.reset(options=options)
            for k in range(ahead):
                obs = env.step(actions[rows, np.minimum(steps + k, lengths - 1)].astype(np.float32))[0]
            target = states[rows, np.minimum(steps + ahead, lengths)]
            errors[way] = np.linalg.norm(obs[:, CUBE] - target[:, CUBE], axis=1)[long_enough]
    finally:
        env.close()
    return errors


def summary(errors: np.ndarray) -> dict[str, Any]:
    mm = errors * 1e3
    return {"restarts": len(mm), "median_mm": round(float(np.median(mm)), 4),
            "p90_mm": round(float(np.percentile(mm, 90)), 3),
            "over_1mm": round(float((mm > 1).mean()), 4), "over_1cm": round(float((mm > 10).mean()), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="episode files with the 'state' observation")
    parser.add_argument("--steps", type=int, nargs="+", default=[4, 8, 16, 24, 32, 48, 64],
                        help="keyframe steps to restart at")
    parser.add_argument("--ahead", type=int, default=16, help="recorded steps executed after the restart")
    args = parser.parse_args()
    pooled: dict[str, list[np.ndarray]] = {way: [] for way in WAYS}
    per_file = {}
    for path in args.files:
        with EpisodeReader(path) as reader:
            (task,) = reader.tasks
            lengths = np.array([info.num_samples for info in reader.episode_info()])
            states = np.zeros((len(reader), lengths.max() + 1, STATE_DIM))
            actions = np.zeros((len(reader), lengths.max(), 4))
            for i in range(len(reader)):
                states[i, :lengths[i] + 1] = reader.load(i, "state")
                actions[i, :lengths[i]] = reader.load(i, "actions")
        errors: dict[str, list[np.ndarray]] = {way: [] for way in WAYS}
        for step in tqdm(args.steps, desc=path.name, leave=False):
            for way, values in cube_errors(states, actions, lengths, step, args.ahead, task).items():
                errors[way].append(values)
        per_file[str(path)] = {way: summary(np.concatenate(values)) for way, values in errors.items()}
        print(path, per_file[str(path)])
        for way in WAYS:
            pooled[way] += errors[way]
    report("restart_fidelity", {"steps": args.steps, "ahead": args.ahead, "files": per_file,
                                "pooled": {way: summary(np.concatenate(values)) for way, values in pooled.items()}},
           args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
