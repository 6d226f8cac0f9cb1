"""Keyframe-initialised starts: where imagined episodes begin (WoVR's keyframe rollouts).

An imagined episode starts from a real state of a recorded episode, with its real preceding
frames as context: either an episode start (``t = 0``) or a mid-episode **keyframe**.
Imagination errors grow with depth, so starting near the states that decide the task trains
the policy there on sharp, real-looking inputs.

The rule (:func:`select_keyframes`): in each recorded episode, only steps before its first
success (with an action left) are candidates, and a keyframe is placed ``lead`` steps before
each of these task-critical events:

1. **gripper events**: the gripper command changes sign (open <-> close);
2. **motion onset**: the task object first moves more than ``motion_threshold`` metres from where
   it started (contact: it was pushed or lifted). Read from the ``state`` observation; files
   without ``state`` skip this event;
3. **failure divergence** (failed episodes): the step at which the task object was closest to
   its goal, after which the failed episode drifts away from success; the keyframe goes
   ``failure_lead`` steps before it (``state`` needed as for 2).

Every keyframe of a failed episode weighs ``failure_weight`` (successful: 1), so a keyframe
file made of the current policy's rollouts favours the states where that policy fails. A
reset draws a keyframe (by weight) with probability ``ratio``, else an episode start (uniform
over episodes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldsim.envs.observations import STATE_LAYOUT
from worldsim.world_models.data import EpisodeBank

KINDS = ("gripper", "motion_onset", "failure")


@dataclass(frozen=True)
class KeyframeRule:
    """How keyframes are chosen and how often a reset uses one (see the module docstring)."""

    ratio: float = 0.5
    """Share of resets that start at a keyframe (the rest start at an episode start)."""
    lead: int = 3
    """Steps before a gripper event or motion onset at which its keyframe sits."""
    failure_lead: int = 5
    """Steps before a failed episode's closest approach at which its keyframe sits."""
    failure_weight: float = 2.0
    """Sampling weight of a failed episode's keyframes (a successful episode's weigh 1)."""
    motion_threshold: float = 0.005
    """Metres the task object must move for its motion onset."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.ratio <= 1.0:
            raise ValueError(f"keyframe ratio={self.ratio!r} must be in [0, 1]")
        if self.lead < 0 or self.failure_lead < 0:
            raise ValueError(f"lead={self.lead!r} and failure_lead={self.failure_lead!r} must be >= 0")
        if not self.failure_weight > 0:
            raise ValueError(f"failure_weight={self.failure_weight!r} must be > 0")
        if not self.motion_threshold > 0:
            raise ValueError(f"motion_threshold={self.motion_threshold!r} must be > 0")


@dataclass
class Keyframes:
    """Keyframes of a bank: selected-episode index, step, sampling weight and kind (index into
    :data:`KINDS`) of each, as equal-length arrays."""

    episode: np.ndarray
    step: np.ndarray
    weight: np.ndarray
    kind: np.ndarray

    def __len__(self) -> int:
        return len(self.episode)

    def counts(self) -> dict[str, int]:
        """How many keyframes of each kind."""
        return {name: int((self.kind == k).sum()) for k, name in enumerate(KINDS)}


def select_keyframes(bank: EpisodeBank, rule: KeyframeRule) -> Keyframes:
    """Apply the rule of the module docstring to every episode of ``bank``."""
    found: dict[tuple[int, int], tuple[float, int]] = {}
    obj = STATE_LAYOUT["object_pos"]
    gap = STATE_LAYOUT["goal_minus_object"]
    for j, info in enumerate(bank.infos):
        steps = int(bank.lengths[j])
        success = bank.episode(j, "success")
        hits = np.flatnonzero(success)
        last = min(int(hits[0]) if len(hits) else steps, steps) - 1  # last candidate step
        if last < 1:
            continue
        weight = 1.0 if info.success else rule.failure_weight
        events: list[tuple[int, int]] = []  # (step, kind)
        gripper = np.sign(bank.episode(j, "actions")[:, 3])
        for t in np.flatnonzero(gripper[1:] * gripper[:-1] < 0) + 1:
            events.append((int(t) - rule.lead, 0))
        if bank.has_state:
            state = bank.episode(j, "state")
            moved = np.linalg.norm(state[:, obj] - state[0, obj], axis=1) > rule.motion_threshold
            if moved.any():
                events.append((int(np.argmax(moved)) - rule.lead, 1))
            if not info.success:
                closest = int(np.argmin(np.linalg.norm(state[:last + 1, gap], axis=1)))
                events.append((closest - rule.failure_lead, 2))
        for event, kind in events:
            found.setdefault((j, min(max(int(event), 1), last)), (weight, kind))
    keys = sorted(found)
    return Keyframes(np.array([k[0] for k in keys], np.int64), np.array([k[1] for k in keys], np.int64),
                     np.array([found[k][0] for k in keys], np.float64),
                     np.array([found[k][1] for k in keys], np.int64))
