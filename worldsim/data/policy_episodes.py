"""Episodes of several policies in one file: each policy's own episodes of every task, collected
into one part file per policy (an interrupted collection resumes at the next policy) and merged."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from worldsim.data.collect import collect_episodes
from worldsim.data.merge import merge_episode_files
from worldsim.policies import load_policy
from worldsim.policies.base import Policy


def same_policy(policy: Policy) -> Callable[[str], Policy]:
    """A policy factory that gives ``policy`` for every task."""
    return lambda task: policy


def policy_episodes(tasks: list[str], policies: Sequence[Path], episodes: int, path: Path, seed: int,
                    first: Sequence[Path] = ()) -> None:
    """Each policy's own ``episodes`` of every task, executed as it is evaluated (its mode action,
    policy ``k`` from seed ``seed + 100 k``), merged into ``path`` after the episodes of the files
    ``first`` (nothing is done when ``path`` exists; the part files ``<path stem>_<k>.h5`` are kept)."""
    if path.exists():
        return
    parts = []
    for k, policy_path in enumerate(policies):
        part = path.with_name(f"{path.stem}_{k}.h5")
        if not part.exists():
            collect_episodes(tasks, same_policy(load_policy(policy_path).eval()), episodes, part, num_envs=episodes,
                             seed=seed + 100 * k, deterministic=True, progress=False)
        parts.append(part)
    merge_episode_files([*first, *parts], path)
