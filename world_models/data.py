"""Episodes in memory for world-model training, keyframe starts and evaluation.

:class:`EpisodeBank` loads the ``image``, ``proprio``, ``actions`` and ``success`` arrays (and
``state`` when the file has it: the keyframe rule reads the cube's motion from it) of the
selected episodes of a worldsim episode file into flat arrays (the rows and transitions of
:class:`~worldsim.data.index.EpisodeIndex`), and serves

- :meth:`EpisodeBank.sample`: random training windows ``(episode, t)``: the context frames
  ``t-C+1 .. t`` (frame 0 repeated before the start), the episode's first frame, the context
  proprio, action ``t``, frame, proprio and success flag ``t+1`` (and, when the file has
  ``state``, the task's goal-minus-object offset and the scene objects' pixel positions at
  ``t+1``, the success head's dense targets); a ``success_fraction`` share of the windows is
  drawn among those whose frame ``t+1`` is a success, the rest uniformly, so the success head sees both classes in a set
  balance (success frames are rare: episodes recorded with success ending them hold one each);
- :meth:`EpisodeBank.state_windows`: random windows of the low-dimensional state alone (the
  gripper's proprio and, with ``state``, the objects' positions) over a context and ``H`` steps
  ahead, for the gripper's and the objects' dynamics, trained on their own far larger batches
  (a state is a few numbers, a frame thousands);
- :meth:`EpisodeBank.start`: the real state an imagined episode starts from at ``(episode, t)``.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from worldsim.data.index import EpisodeIndex
from worldsim.data.reader import EpisodeReader, open_reader
from worldsim.envs.camera import PinholeCamera
from worldsim.envs.observations import STATE_LAYOUT, entity_positions
from worldsim.envs.scene import Scene
from worldsim.runtime.device import host_to_device
from worldsim.world_models.latents import frames_to_latents

IMAGE_CAMERA = "front"  # the camera of the ``image`` observation


@functools.lru_cache(maxsize=8)
def image_camera(height: int, width: int) -> PinholeCamera:
    """The camera of the ``image`` observation at this size (the scene is parsed once per size,
    not once per bank)."""
    return PinholeCamera.from_scene(Scene.load().model, IMAGE_CAMERA, height, width)


@dataclass
class Start:
    """The real state an imagined episode starts from, as numpy arrays: ``frames`` uint8
    ``(C, H, W, 3)`` (oldest first), ``first`` ``(H, W, 3)``, ``proprio`` ``(C, 4)``, ``step``
    (the real episode's step ``t``) and ``success`` (its flag at ``t``)."""

    frames: np.ndarray
    first: np.ndarray
    proprio: np.ndarray
    step: int
    success: bool


class EpisodeBank:
    """The selected episodes of one file, loaded into memory (flat rows and ``(episode, t)``
    transitions of :class:`~worldsim.data.index.EpisodeIndex`, the bank's :attr:`index`).

    Args:
        data: an episode file path or an open :class:`~worldsim.data.reader.EpisodeReader`.
        tasks: only episodes of these tasks (default: all); each must be in the file.
        episodes: only these file indices (after the task filter; default: all).
        argument: the name of the argument ``data`` came from, used in error messages.
        state: load the file's ``state`` observations when it has them; False treats the file
            as one without (imagination on the ``pixels`` and ``video`` rungs, training without
            state supervision), so nothing downstream can read them.

    Raises ``ValueError`` naming the file when it holds no ``image`` or ``proprio``
    observations, lacks a task named, or when the selection is empty.
    """

    def __init__(self, data: str | Path | EpisodeReader, tasks: Sequence[str] | None = None,
                 episodes: Sequence[int] | None = None, argument: str = "data", state: bool = True) -> None:
        with open_reader(data) as reader:
            missing = [k for k in ("image", "proprio") if k not in reader.obs_keys]
            if missing:
                raise ValueError(f"{argument}={str(reader.path)!r} has no {' or '.join(missing)} observations "
                                 f"(it holds {', '.join(reader.obs_keys)}); a world model needs both: "
                                 "collect with obs_mode='pixels' or 'pixels+state'")
            self.image_shape = reader.image_shape
            self.has_state = state and "state" in reader.obs_keys
            keys = ["image", "proprio", "actions", "success"] + (["state"] if self.has_state else [])
            self.index = EpisodeIndex(reader, tasks=tasks, episodes=episodes, keys=keys, argument=argument)
        index, arrays = self.index, self.index.arrays
        self.path, self.infos = index.path, index.infos
        self.lengths, self.obs_start, self.step_start = index.lengths, index.obs_start, index.step_start
        self.images = arrays["image"]
        self.proprio = arrays["proprio"].astype(np.float32, copy=False)
        self.actions = arrays["actions"].astype(np.float32, copy=False)
        self.success = arrays["success"].astype(bool, copy=False)
        self.state = arrays["state"] if self.has_state else None
        self.camera = image_camera(*self.image_shape[:2])
        positions = entity_positions(self.state) if self.state is not None else None
        self.entity_pixels = None if positions is None else self.camera.project(positions).astype(np.float32)
        self.entity_heights = None if positions is None else positions[..., 2].astype(np.float32)
        self.tasks = index.tasks
        self.instructions = {info.task: info.instruction for info in self.infos}
        targets = self.obs_start[index.item_episode] + index.item_step + 1
        self._success_transitions = np.flatnonzero(self.success[targets])
        self._tensors: dict[torch.device, dict[str, torch.Tensor]] = {}

    def __len__(self) -> int:
        return len(self.infos)

    def use_camera(self, camera: PinholeCamera) -> None:
        """Place the recorded objects in the image through ``camera`` (a world model's own,
        :attr:`~worldsim.world_models.model.WorldModel.camera`) instead of the scene's."""
        same = camera is self.camera or (np.array_equal(camera.position, self.camera.position)
                                         and np.array_equal(camera.rotation, self.camera.rotation)
                                         and camera.fovy == self.camera.fovy)
        if same:
            return
        self.camera = camera
        if self.state is not None:
            self.entity_pixels = camera.project(entity_positions(self.state)).astype(np.float32)
        self._tensors = {}

    def without_state(self) -> EpisodeBank:
        """This bank as if its file had no ``state`` (itself when it has none): the same
        episodes and arrays, the state and everything derived from it dropped."""
        if not self.has_state:
            return self
        bank = copy.copy(self)
        bank.index = copy.copy(self.index)
        bank.index.arrays = {k: v for k, v in self.index.arrays.items() if k != "state"}
        bank.has_state, bank.state, bank.entity_pixels, bank.entity_heights = False, None, None, None
        bank._tensors = {}
        return bank

    @property
    def num_transitions(self) -> int:
        return self.index.num_items

    def episode(self, j: int, key: str) -> np.ndarray:
        """Rows of ``key`` (``image``, ``proprio``, ``success``, ``state``: ``T + 1``; ``actions``: ``T``)
        of the ``j``-th selected episode."""
        array = {"image": self.images, "proprio": self.proprio, "actions": self.actions,
                 "success": self.success, "state": self.state}[key]
        if array is None:
            raise ValueError(f"{self.path} holds no {key!r} observations")
        return array[self.index.episode_rows(j, key)]

    def recorded_objects(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The scene objects' recorded image positions (pixels, ``(*rows.shape, E, 2)``) and
        heights above the table (metres, ``(*rows.shape, E)``) at observation ``rows``, or None
        when the file has no ``state``."""
        if self.entity_pixels is None or self.entity_heights is None:
            return None
        return torch.from_numpy(self.entity_pixels[rows]), torch.from_numpy(self.entity_heights[rows])

    def context_rows(self, j: np.ndarray, t: np.ndarray, context: int) -> np.ndarray:
        """Flat observation rows ``(B, context)`` of frames ``t-context+1 .. t`` (frame 0 repeated
        before the start) of episodes ``j``."""
        return self.index.context_rows(j, t, context)

    def start(self, j: int, t: int, context: int) -> Start:
        """The real state at step ``t`` of the ``j``-th selected episode, with its context."""
        rows = self.context_rows(np.array([j]), np.array([t]), context)[0]
        return Start(self.images[rows], self.images[self.obs_start[j]], self.proprio[rows], int(t),
                     bool(self.success[self.obs_start[j] + t]))

    def tensors(self, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """The bank's arrays as tensors on ``device``, made once per device (on the CPU they share
        the numpy arrays' memory; on a GPU the whole bank is copied there once, so training
        batches are gathered on the device and the host does not starve it)."""
        device = torch.device(device)
        if device not in self._tensors:
            arrays = {"image": self.images, "proprio": self.proprio, "actions": self.actions,
                      "success": self.success}
            if self.state is not None and self.entity_pixels is not None and self.entity_heights is not None:
                arrays["goal_offset"] = self.state[:, STATE_LAYOUT["goal_minus_object"]].astype(np.float32)
                arrays["entity_pixels"] = self.entity_pixels
                arrays["entity_heights"] = self.entity_heights
            self._tensors[device] = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in arrays.items()}
        return self._tensors[device]

    def sample(self, batch_size: int, context: int, patch: int, task_ids: dict[str, int],
               generator: torch.Generator, success_fraction: float = 0.25,
               device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """A random training batch (see the module docstring) as tensors on ``device``, latents
        already space-to-depth; ``round(success_fraction * batch_size)`` windows end in a success
        frame (none when the bank has no success). ``generator`` (a CPU one) draws the windows."""
        if not 0.0 <= success_fraction <= 1.0:
            raise ValueError(f"success_fraction={success_fraction!r} must be in [0, 1]")
        n_pos = round(success_fraction * batch_size) if len(self._success_transitions) else 0
        positive = torch.randint(0, max(len(self._success_transitions), 1), (n_pos,), generator=generator)
        uniform = torch.randint(0, self.num_transitions, (batch_size - n_pos,), generator=generator)
        pick = np.concatenate([self._success_transitions[positive.numpy()], uniform.numpy()])
        j, t = self.index.item_episode[pick], self.index.item_step[pick]
        bank = self.tensors(device)
        on = bank["image"].device

        def rows(index: np.ndarray) -> torch.Tensor:
            return host_to_device(np.ascontiguousarray(index), on)

        context_rows, target = rows(self.context_rows(j, t, context)), rows(self.obs_start[j] + t + 1)
        task = rows(np.array([task_ids[self.infos[e].task] for e in j], np.int64))
        batch = {
            "context": frames_to_latents(bank["image"][context_rows], patch),
            "first": frames_to_latents(bank["image"][rows(self.obs_start[j])], patch),
            "first_proprio": bank["proprio"][rows(self.obs_start[j])],
            "proprio": bank["proprio"][context_rows],
            "action": bank["actions"][rows(self.step_start[j] + t)],
            "task": task,
            "target": frames_to_latents(bank["image"][target], patch),
            "next_proprio": bank["proprio"][target],
            "success": bank["success"][target],
        }
        if self.state is not None:
            batch["goal_offset"] = bank["goal_offset"][target]
            batch["entity_pixels"] = bank["entity_pixels"][target]
            batch["entity_heights"] = bank["entity_heights"][target]
            batch["context_entity_pixels"] = bank["entity_pixels"][context_rows]
            batch["first_entity_pixels"] = bank["entity_pixels"][rows(self.obs_start[j])]
        return batch

    def state_windows(self, batch_size: int, context: int, horizon: int, task_ids: dict[str, int],
                      generator: torch.Generator, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """``batch_size`` random windows of the low-dimensional state, each starting at a step
        drawn uniformly over the bank's transitions: ``proprio`` ``(B, C + H, 4)`` raw (the
        context's and the next ``H`` steps'), ``actions`` ``(B, H, 4)``, ``valid`` ``(B, H)``
        (False past the episode's end, where the last observation repeats) and ``task``
        ``(B,)``; when the bank has ``state``, also the objects' context ``points``
        ``(B, C, E, 2)`` (pixels) and ``heights`` ``(B, C, E)`` (metres) and the next ``H``
        states, ``target`` ``(B, H, E, 2)`` and ``target_heights`` ``(B, H, E)``.
        ``generator`` (a CPU one) draws the windows."""
        lengths = self.lengths
        j = torch.multinomial(torch.from_numpy(lengths.astype(np.float64)), batch_size, replacement=True,
                              generator=generator).numpy()
        t = (torch.rand(batch_size, generator=generator).numpy() * lengths[j]).astype(np.int64)
        ahead = t[:, None] + 1 + np.arange(horizon)[None]
        valid = ahead <= lengths[j][:, None]
        future = self.obs_start[j][:, None] + np.minimum(ahead, lengths[j][:, None])
        context_rows = self.context_rows(j, t, context)
        action_rows = self.step_start[j][:, None] + np.minimum(ahead - 1, lengths[j][:, None] - 1)
        bank = self.tensors(device)
        on = bank["image"].device

        def rows(index: np.ndarray) -> torch.Tensor:
            return host_to_device(np.ascontiguousarray(index), on)

        windows = {"proprio": bank["proprio"][rows(np.concatenate([context_rows, future], axis=1))],
                   "actions": bank["actions"][rows(action_rows)], "valid": rows(valid),
                   "task": rows(np.array([task_ids[self.infos[e].task] for e in j], np.int64))}
        if self.state is not None:
            windows.update(points=bank["entity_pixels"][rows(context_rows)],
                           heights=bank["entity_heights"][rows(context_rows)],
                           target=bank["entity_pixels"][rows(future)],
                           target_heights=bank["entity_heights"][rows(future)])
        return windows
