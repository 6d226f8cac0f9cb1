"""Recorded policy rollouts, as failure detectors read them.

A :class:`Rollout` is one episode of an episode file written with
``worldsim collect --record-features``: its task, its outcome and, per step ``t`` (each
observation where the policy acted), the policy's features ``(T, D)`` and ``S`` sampled
action chunks ``(T, S, K, A)``. Detectors never re-simulate: they are fitted, calibrated and
scored on these arrays, so any number of detectors, seeds and splits can be re-run on one
collection. Rollouts from the physics env and from an imagined env look the same here.
:func:`record_policy_outputs` (``worldsim record-features``) computes the same outputs on episodes
the policy did not act in (its expert demonstrations, say), for detectors fitted without its
rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from worldsim.data.episode import POLICY_KEYS
from worldsim.data.reader import EpisodeReader

if TYPE_CHECKING:
    from worldsim.policies.base import Policy

RECORDED_KEYS: tuple[str, ...] = POLICY_KEYS
HOW_TO_RECORD = {
    "features": "collect the rollouts with `worldsim collect --policy <checkpoint> --record-features`",
    "action_samples": "collect the rollouts with `worldsim collect --policy <checkpoint> --record-features`",
    "foresight": "add it with `worldsim foresight --data <rollouts> --world-model <run> --policy <checkpoint>`",
}


@dataclass(frozen=True)
class Rollout:
    """One recorded episode.

    Attributes:
        task: task name.
        success: the episode's outcome (``False``: a failure, the positive class of detection).
        features: ``(T, D)`` float32, or ``None`` when the file holds none.
        action_samples: ``(T, S, K, A)`` float32, or ``None`` when the file holds none.
        index: the episode's index in its file (to fetch its frames for videos).
        foresight: ``(T, H)`` float32, the world model's look-ahead at each step
            (:mod:`~worldsim.failure.foresight`), or ``None`` when the file holds none.
    """

    task: str
    success: bool
    features: np.ndarray | None
    action_samples: np.ndarray | None
    index: int = 0
    foresight: np.ndarray | None = None

    @property
    def length(self) -> int:
        """``T``, the number of steps the policy acted."""
        for array in (self.features, self.action_samples, self.foresight):
            if array is not None:
                return len(array)
        raise ValueError(f"rollout {self.index} ({self.task}) holds no recorded features, action samples or foresight")

    def recorded(self, key: str) -> np.ndarray:
        """A recorded key (:data:`RECORDED_KEYS`); ``ValueError`` saying how to record it if absent."""
        value = getattr(self, key)
        if value is None:
            raise ValueError(f"rollout {self.index} ({self.task}) has no recorded {key!r}; {HOW_TO_RECORD[key]}")
        return value


def load_rollouts(path: str | Path, tasks: Sequence[str] | None = None) -> list[Rollout]:
    """Read every episode of ``path`` (optionally only those of ``tasks``) as rollouts.

    Raises ``ValueError`` if the file holds no recorded policy outputs, or none of ``tasks``.
    """
    with EpisodeReader(path) as reader:
        keys = [k for k in RECORDED_KEYS if k in reader.policy_keys]
        if not keys:
            raise ValueError(
                f"{path} holds no recorded policy outputs (features, action samples); collect "
                f"it with `worldsim collect --policy <checkpoint> --record-features`"
            )
        wanted = set(tasks) if tasks is not None else None
        if wanted is not None and not wanted & set(reader.tasks):
            raise ValueError(f"{path} holds none of the tasks {sorted(wanted)}; it holds {reader.tasks}")
        rollouts = []
        for info in reader.episode_info():
            if wanted is not None and info.task not in wanted:
                continue
            arrays = {k: reader.load(info.index, k).astype(np.float32) for k in keys}
            rollouts.append(
                Rollout(info.task, info.success, arrays.get("features"), arrays.get("action_samples"), info.index,
                        arrays.get("foresight"))
            )
    return rollouts


def shortest_success_lengths(rollouts: Sequence[Rollout]) -> dict[str, int]:
    """Per task, the length of its shortest successful rollout (its shortest rollout if none
    succeeded): the step at which the protocol compares scores, so that "failures run to the
    time limit" cannot leak the label."""
    lengths: dict[str, int] = {}
    for task in dict.fromkeys(r.task for r in rollouts):
        mine = [r for r in rollouts if r.task == task]
        successes = [r.length for r in mine if r.success]
        lengths[task] = min(successes) if successes else min(r.length for r in mine)
    return lengths


def median_success_lengths(rollouts: Sequence[Rollout]) -> dict[str, int]:
    """Per task, the (lower) median length of its successful rollouts (its shortest rollout if
    none succeeded): the step by which half the successes have ended. The protocol's second
    comparison step, where a weak policy's rollouts have had time to differ: the shortest success
    may end before the policy has touched the scene."""
    lengths: dict[str, int] = {}
    for task in dict.fromkeys(r.task for r in rollouts):
        mine = [r for r in rollouts if r.task == task]
        successes = sorted(r.length for r in mine if r.success)
        lengths[task] = successes[(len(successes) - 1) // 2] if successes else min(r.length for r in mine)
    return lengths


def record_policy_outputs(data: str | Path, policy: Policy, out: str | Path, tasks: Sequence[str] = (),
                          num_samples: int = 8, seed: int = 0, overwrite: bool = False,
                          progress: bool = True) -> int:
    """Copy the episodes of ``data`` (those of ``tasks``; default: all) to ``out`` with
    ``policy``'s features and ``num_samples`` sampled chunks at every step, computed on the
    recorded observations as ``collect --record-features`` computes them while the policy acts.
    Here the policy did not choose the frames (its expert demonstrations, say): detectors that
    learn what success looks like can then be fitted without any rollout of it. Returns the
    number of episodes written (atomically); ``ValueError`` for an ``out`` that exists without
    ``overwrite``, a policy that cannot read the file's observations, or tasks it does not hold."""
    from worldsim.data.collect import OutputRecorder, check_feature_recording, check_policy_observations
    from worldsim.data.writer import EpisodeWriter

    out = Path(out)
    if out.exists() and not overwrite:
        raise ValueError(f"--out {out} already exists; pass --overwrite to replace it")
    check_feature_recording(policy, num_samples)
    with EpisodeReader(data) as reader:
        missing = sorted(set(tasks) - set(reader.tasks))
        if missing:
            raise ValueError(f"{data} holds no episodes of {', '.join(missing)}; it holds {', '.join(reader.tasks)}")
        check_policy_observations(policy, reader.env_kwargs)
        chosen = [info for info in reader.episode_info() if not tasks or info.task in tasks]
        recorder = OutputRecorder(policy.eval(), num_samples, seed)
        with EpisodeWriter(out, env_kwargs=reader.env_kwargs) as writer:
            for info in tqdm(chosen, desc="record-features", unit="episode", disable=not progress):
                episode = reader[info.index]
                steps = len(episode.actions)
                obs = {**{key: value[:steps] for key, value in episode.obs.items()},
                       "instruction": (episode.instruction,) * steps}
                episode.policy_outputs = recorder(obs)
                writer.add_episode(episode)
    return len(chosen)


@dataclass
class RecordFeaturesRun:
    """``worldsim record-features``: a policy's features and sampled chunks on recorded episodes."""

    data: Path
    """Episode file whose observations the policy reads (e.g. its expert demonstrations)."""
    policy: Path
    """The policy (checkpoint or run folder) the detectors will watch."""
    out: Path
    """The episode file to write: the episodes with the policy's outputs at every step."""
    task: tuple[str, ...] = ()
    """Only episodes of this task (repeat --task for several; default: all): for ``worldsim detect
    --fit-data``, the seen tasks."""
    num_samples: int = 8
    """Action chunks sampled per step."""
    seed: int = 0
    """Seed of the sampled chunks."""
    overwrite: bool = False
    """Replace --out if it exists."""
