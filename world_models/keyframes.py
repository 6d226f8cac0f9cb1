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
   it started (contact: it was pushed or lifted);
3. **failure divergence** (failed episodes): the step at which the task object was closest to
   its goal, after which the failed episode drifts away from success; the keyframe goes
   ``failure_lead`` steps before it.

Events 2 and 3 read where the task object and its goal are at every step: from the ``state``
observation when the bank has it, else from ``positions`` found in the real frames
(:func:`detected_positions`: the world model's keypoint detector, each object put back on its
resting plane, so the same rules apply in metres). A detector jitters (a pixel or so; many
pixels for a frame where the gripper hides the cube), so on detected positions the object has
moved when it is ``detected_motion_pixels`` pixels' worth of table away from where it started
for ``DETECTED_PERSISTENCE`` steps running. Only a detector trained on keypoints (a model
trained with ``state_supervision``) knows where the objects are; a model trained without state
(the ``video`` rung) is not asked. Without state or positions, only gripper events are found
(on PushCube, whose gripper never toggles: none, and every start is an episode start).

Every keyframe of a failed episode weighs ``failure_weight`` (successful: 1), so a keyframe
file made of the current policy's rollouts favours the states where that policy fails. A
reset draws a keyframe (by weight) with probability ``ratio``, else an episode start (uniform
over episodes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from worldsim.envs.observations import ENTITY_HEIGHTS, STATE_LAYOUT, task_entities
from worldsim.envs.tasks import get_task
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.latents import frames_to_latents

KINDS = ("gripper", "motion_onset", "failure")
DETECTED_PERSISTENCE = 2
"""Steps running a detected object must stay moved for its motion onset: a one-frame jump of
the detector (the gripper passing over the cube) is not a contact."""
DETECT_BATCH = 256
"""Frames per batch the detector reads in :func:`detected_positions`."""


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
    """Metres the task object must move for its motion onset (positions from ``state``)."""
    detected_motion_pixels: float = 1.5
    """Pixels' worth of table (at the bank's image size) a *detected* task object must move for
    its motion onset: a detector trained on keypoints finds a resting cube within about half a
    pixel (median), so 0.005 m (0.6 px at 64x64) would fire on its jitter."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.ratio <= 1.0:
            raise ValueError(f"keyframe ratio={self.ratio!r} must be in [0, 1]")
        if self.lead < 0 or self.failure_lead < 0:
            raise ValueError(f"lead={self.lead!r} and failure_lead={self.failure_lead!r} must be >= 0")
        if not self.failure_weight > 0:
            raise ValueError(f"failure_weight={self.failure_weight!r} must be > 0")
        if not self.motion_threshold > 0:
            raise ValueError(f"motion_threshold={self.motion_threshold!r} must be > 0")
        if not self.detected_motion_pixels > 0:
            raise ValueError(f"detected_motion_pixels={self.detected_motion_pixels!r} must be > 0")


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


class KeyframeStarts:
    """Where the imagined episodes of one ``task`` start: ``bank``'s episodes of it (episode starts)
    and its keyframes under ``rule`` (:func:`select_keyframes`). The objects' motion is read from
    the bank's ``state`` (``source`` ``"state"``), else where a keypoint detector ``locate`` finds
    them in the real frames (:func:`detected_positions`; ``"detector"``), else not at all (gripper
    events alone: ``"gripper"``)."""

    def __init__(self, bank: EpisodeBank, task: str, rule: KeyframeRule,
                 locate: Callable[[torch.Tensor], torch.Tensor] | None = None, patch: int = 4,
                 device: torch.device | str = "cpu") -> None:
        self.rule = rule
        self.episodes = np.array([j for j, info in enumerate(bank.infos) if info.task == task], np.int64)
        if len(self.episodes) == 0:
            raise ValueError(f"keyframes={str(bank.path)!r} holds no episodes of {task} (it has "
                             f"{', '.join(bank.tasks)})")
        positions, self.source = None, "state" if bank.has_state else "gripper"
        if not bank.has_state and locate is not None:
            positions, self.source = detected_positions(bank, locate, patch, device), "detector"
        keys = select_keyframes(bank, rule, positions)
        mine = np.isin(keys.episode, self.episodes)
        self.keyframes = Keyframes(keys.episode[mine], keys.step[mine], keys.weight[mine], keys.kind[mine])

    def draw(self, count: int, rng: np.random.Generator, keyframes: bool) -> tuple[np.ndarray, np.ndarray]:
        """Bank episode and step of ``count`` new starts: with ``keyframes`` (the keyframe schedule,
        when there are any), a keyframe (by weight) with probability ``rule.ratio``, else an episode
        start (uniform over the episodes)."""
        episodes = self.episodes[rng.integers(0, len(self.episodes), count)]
        steps = np.zeros(count, np.int64)
        if keyframes and len(self.keyframes):
            use = rng.random(count) < self.rule.ratio
            if use.any():
                p = self.keyframes.weight / self.keyframes.weight.sum()
                pick = rng.choice(len(self.keyframes), int(use.sum()), p=p)
                episodes[use], steps[use] = self.keyframes.episode[pick], self.keyframes.step[pick]
        return episodes, steps


def select_keyframes(bank: EpisodeBank, rule: KeyframeRule, positions: np.ndarray | None = None,
                     detected: bool = True) -> Keyframes:
    """Apply the rule of the module docstring to every episode of ``bank``.

    ``positions``: world positions ``(rows, 2, 3)`` (metres) of each row's task object and its
    goal, for every observation row of ``bank``, read instead of its ``state`` (which is read
    when they are None). ``detected`` (for positions given): they were found in frames
    (:func:`detected_positions`), so the motion onset uses ``rule.detected_motion_pixels`` and
    :data:`DETECTED_PERSISTENCE`; False applies ``rule.motion_threshold`` as to ``state``."""
    if positions is not None:
        positions = np.asarray(positions)
        if positions.shape != (len(bank.images), 2, 3):
            raise ValueError(f"positions has shape {positions.shape}; expected ({len(bank.images)}, 2, 3): the task "
                             "object's and its goal's world positions at every row of the bank")
    found: dict[tuple[int, int], tuple[float, int]] = {}
    threshold, persist = rule.motion_threshold, 1
    if positions is not None and detected:
        threshold, persist = rule.detected_motion_pixels * table_pixel(bank), DETECTED_PERSISTENCE
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
        track = _object_and_gap(bank, j, positions)
        if track is not None:
            where, gap = track
            moved = np.linalg.norm(where - where[0], axis=1) > threshold
            if persist > 1:
                moved = np.lib.stride_tricks.sliding_window_view(moved, persist).all(axis=1) \
                    if len(moved) >= persist else np.zeros(0, bool)
            if moved.any():
                events.append((int(np.argmax(moved)) - rule.lead, 1))
            if not info.success:
                closest = int(np.argmin(np.linalg.norm(gap[:last + 1], axis=1)))
                events.append((closest - rule.failure_lead, 2))
        for event, kind in events:
            found.setdefault((j, min(max(int(event), 1), last)), (weight, kind))
    keys = sorted(found)
    return Keyframes(np.array([k[0] for k in keys], np.int64), np.array([k[1] for k in keys], np.int64),
                     np.array([found[k][0] for k in keys], np.float64),
                     np.array([found[k][1] for k in keys], np.int64))


def _object_and_gap(bank: EpisodeBank, j: int, positions: np.ndarray | None
                    ) -> tuple[np.ndarray, np.ndarray] | None:
    """The task object's positions and goal-minus-object offsets over episode ``j``'s rows, from
    ``positions`` when given, else from the ``state`` (None without either)."""
    if positions is not None:
        rows = positions[bank.index.episode_rows(j, "image")]
        return rows[:, 0], rows[:, 1] - rows[:, 0]
    if not bank.has_state:
        return None
    state = bank.episode(j, "state")
    return state[:, STATE_LAYOUT["object_pos"]], state[:, STATE_LAYOUT["goal_minus_object"]]


def table_pixel(bank: EpisodeBank) -> float:
    """Metres of table one pixel of ``bank``'s images spans at the image centre, on the plane of
    a resting cube's centre."""
    camera, (h, w) = bank.camera, bank.image_shape[:2]
    ends = camera.unproject(np.array([[w / 2, h / 2], [w / 2 + 1, h / 2]]), float(ENTITY_HEIGHTS[0]))
    return float(np.linalg.norm(ends[1] - ends[0]))


@torch.no_grad()
def detected_positions(bank: EpisodeBank, locate: Callable[[torch.Tensor], torch.Tensor], patch: int,
                       device: torch.device | str = "cpu", batch_size: int = DETECT_BATCH) -> np.ndarray:
    """World positions ``(rows, 2, 3)`` of each row's task object and goal
    (:func:`~worldsim.envs.observations.task_entities` of its episode's task) found in ``bank``'s
    real frames by ``locate`` (a keypoint detector: latent frames ``(B, C, h, w)`` -> entity
    pixel positions ``(B, E, 2)``, as ``WorldModel.success_head.locate``; ``patch``: the model's
    latent patch), each object put back on its resting plane (cube centres half a cube up, the
    zones on the table, the bin on its floor). ``batch_size`` frames at a time."""
    points = np.concatenate([
        locate(frames_to_latents(torch.from_numpy(bank.images[i:i + batch_size]).to(device), patch)).cpu().numpy()
        for i in range(0, len(bank.images), batch_size)]).astype(np.float64)
    if points.shape[1:] != (len(ENTITY_HEIGHTS), 2):
        raise ValueError(f"the detector gave positions of shape {points.shape[1:]} per frame; expected "
                         f"({len(ENTITY_HEIGHTS)}, 2): one pixel position per scene entity")
    world = bank.camera.unproject(points, np.broadcast_to(ENTITY_HEIGHTS, points.shape[:2]))
    out = np.zeros((len(points), 2, 3))
    for j, info in enumerate(bank.infos):
        rows = bank.index.episode_rows(j, "image")
        out[rows] = world[rows][:, list(task_entities(get_task(info.task)))]
    return out
