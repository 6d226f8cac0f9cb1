"""Open-loop replay: a world model imagining recorded episodes from real states.

Start from a real state with its real context, feed the real episode's recorded actions (or a
policy's, on the imagined observations) one by one, and keep every imagined frame beside the
real one: what every fidelity figure (:mod:`~worldsim.world_models.metrics`) reads.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from worldsim.envs.imagination import DEFAULT_IMAGINATION, ImaginationConfig
from worldsim.policies.base import Policy
from worldsim.policies.runner import ChunkQueue
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.model import WorldModel
from worldsim.world_models.scene_frames import scene_frames, step_frames


@dataclass
class OpenLoop:
    """Open-loop replays of ``N`` real episodes over ``H`` steps: ``real`` and ``imagined``
    uint8 frames ``(N, H + 1, height, width, 3)`` (index 0: the real start frame in both),
    ``valid`` ``(N, H + 1)`` (False past the episode's end), imagined ``success_prob`` and
    real ``success`` ``(N, H + 1)``, the real and imagined ``proprio`` ``(N, H + 1, 4)`` (raw
    units: TCP metres, finger gap); with the object pathway, the imagined objects' image
    positions ``points`` ``(N, H + 1, E, 2)`` (pixels) and ``heights`` ``(N, H + 1, E)`` (metres)."""

    real: np.ndarray
    imagined: np.ndarray
    valid: np.ndarray
    success_prob: np.ndarray
    success: np.ndarray
    real_proprio: np.ndarray
    imagined_proprio: np.ndarray
    points: np.ndarray | None = None
    heights: np.ndarray | None = None

    def head(self, steps: int) -> OpenLoop:
        """The first ``steps`` imagined steps of these replays (and their start)."""
        cut: dict[str, Any] = {}
        for f in fields(self):
            array = getattr(self, f.name)
            cut[f.name] = None if array is None else array[:, :steps + 1]
        return OpenLoop(**cut)


@torch.no_grad()
def open_loop(model: WorldModel, bank: EpisodeBank, episodes: np.ndarray, starts: np.ndarray, steps: int, *,
              imagination: ImaginationConfig = DEFAULT_IMAGINATION, generator: torch.Generator | None = None,
              batch_size: int = 64, policy: Policy | None = None) -> OpenLoop:
    """Replay the recorded actions of bank episodes ``episodes`` from steps ``starts`` for
    ``steps`` steps (past an episode's end the last action repeats and ``valid`` is False).

    With a ``policy`` (one that reads pixels), the policy acts instead, on the imagined
    observations (``image``, ``proprio``, ``instruction``; its chunks are served by a
    :class:`~worldsim.policies.runner.ChunkQueue`); ``real`` still shows the recorded episode
    from the same start, for reference, and every step is ``valid``. ``imagination``: its rung,
    judge, sampling steps and placebo, as the imagined env takes them: on a rung that does not seed the
    objects the model finds them in the real start frames itself (the bank's state is still what
    the real side is measured by); on a seeded one they start at the recorded state; on a rendered
    one (``oracle``) the imagined frames are the imagined states drawn by the scene's renderer
    (:mod:`~worldsim.world_models.scene_frames`) and no frame is denoised."""
    cfg, rung, sampling_steps = model.config, imagination.rung, imagination.sampling_steps
    outcome = model.judge.check(imagination.judge)
    bank.use_camera(model.camera)  # the recorded objects placed in the image as the model places them
    rung.keyframes(model, bank)  # refuses what the rung cannot do, as the imagined env does
    imagination.check_placebo(model)
    scene = scene_frames(model, rung, min(batch_size, len(episodes)))
    device = model.device
    n, h = len(episodes), int(steps)
    proprio_size = bank.proprio.shape[1]
    out = OpenLoop(np.zeros((n, h + 1, *bank.image_shape), np.uint8), np.zeros((n, h + 1, *bank.image_shape),
                   np.uint8), np.zeros((n, h + 1), bool), np.zeros((n, h + 1)), np.zeros((n, h + 1), bool),
                   np.zeros((n, h + 1, proprio_size), np.float32), np.zeros((n, h + 1, proprio_size), np.float32))
    for begin in range(0, n, batch_size):
        j, t0 = episodes[begin:begin + batch_size], starts[begin:begin + batch_size]
        rows = slice(begin, begin + len(j))
        context_rows = bank.context_rows(j, t0, cfg.context)
        rollout = model.start(torch.from_numpy(bank.images[context_rows]),
                              torch.from_numpy(bank.images[bank.obs_start[j]]),
                              torch.from_numpy(bank.proprio[context_rows]),
                              bank.recorded_objects(context_rows) if rung.seeded else None,
                              torch.from_numpy(bank.proprio[bank.obs_start[j]]))
        task = torch.tensor([model.task_index(bank.infos[e].task) for e in j], device=device)
        steps_t = np.arange(h + 1)[None] + t0[:, None]
        valid = steps_t <= bank.lengths[j][:, None]
        real_rows = bank.obs_start[j][:, None] + np.minimum(steps_t, bank.lengths[j][:, None])
        out.real[rows], out.valid[rows] = bank.images[real_rows], valid
        out.success[rows], out.real_proprio[rows] = bank.success[real_rows], bank.proprio[real_rows]
        out.imagined[rows, 0] = bank.images[real_rows[:, 0]]
        if scene is not None:
            assert bank.state is not None  # checked by scene_frames
            scene.start(np.arange(len(j)), bank.state[real_rows[:, 0]])
        out.imagined_proprio[rows, 0] = bank.proprio[real_rows[:, 0]]
        out.success_prob[rows, 0] = model.success_prob(rollout.context[:, -1], task,
                                                       rollout.proprio[:, -1]).cpu().numpy()
        if rollout.points is not None and rollout.heights is not None:
            if out.points is None or out.heights is None:
                out.points = np.zeros((n, h + 1, *rollout.points.shape[2:]), np.float32)
                out.heights = np.zeros((n, h + 1, rollout.heights.shape[2]), np.float32)
            out.points[rows, 0], out.heights[rows, 0] = rollout.points[:, -1].cpu(), rollout.heights[:, -1].cpu()
        queue = None if policy is None else ChunkQueue(policy, len(j), deterministic=True)
        if queue is not None:
            out.valid[rows] = True
        for k in range(h):
            if queue is None:
                a_rows = bank.step_start[j] + np.minimum(t0 + k, bank.lengths[j] - 1)
                action = torch.from_numpy(bank.actions[a_rows]).to(device)
            else:
                obs = {"image": out.imagined[rows, k], "proprio": rollout.proprio[:, -1].cpu().numpy(),
                       "instruction": tuple(bank.infos[e].instruction for e in j)}
                action = torch.from_numpy(np.clip(queue(obs), -1.0, 1.0).astype(np.float32)).to(device)
            pred = model.predict(rollout, action, task, sampling_steps, generator, draw=scene is None, outcome=outcome,
                                 objects_move=imagination.placebo != "static")
            rollout = rollout.advance(pred)
            out.imagined[rows, k + 1] = step_frames(pred, cfg.patch, scene, np.arange(len(j)))
            out.success_prob[rows, k + 1] = pred.success_prob.cpu().numpy()
            out.imagined_proprio[rows, k + 1] = pred.proprio.cpu().numpy()
            if out.points is not None and out.heights is not None and pred.points is not None \
                    and pred.heights is not None:
                out.points[rows, k + 1], out.heights[rows, k + 1] = pred.points.cpu(), pred.heights.cpu()
    if scene is not None:
        scene.close()
    return out


@torch.no_grad()
def pathway_replay(model: WorldModel, bank: EpisodeBank, episodes: np.ndarray, starts: np.ndarray, horizon: int,
                   batch_size: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """The object pathway alone (:meth:`WorldModel.move_objects`) rolled over ``horizon`` steps
    from the recorded objects of bank episodes ``episodes`` at steps ``starts``, with the
    *recorded* gripper motion and actions: image positions ``(N, H + 1, E, 2)`` and heights
    ``(N, H + 1, E)``. Against :func:`open_loop`'s pathway, which moves with the gripper the model
    imagines, this splits the object error between the pathway and the imagined arm (a
    closed-loop policy's recorded motion also reacts to where the real cube went)."""
    context = model.config.context
    bank.use_camera(model.camera)
    points_out, heights_out = [], []
    for begin in range(0, len(episodes), batch_size):
        j, t0 = episodes[begin:begin + batch_size], starts[begin:begin + batch_size]
        recorded = bank.recorded_objects(bank.context_rows(j, t0, context))
        if recorded is None:
            raise ValueError("the pathway replays recorded objects: the episodes need state (obs_mode 'pixels+state')")
        points, heights = (value.to(model.device).float() for value in recorded)
        task = torch.tensor([model.task_index(bank.infos[e].task) for e in j], device=model.device)
        carried, lifted = [points[:, -1]], [heights[:, -1]]
        for k in range(horizon):
            t = np.minimum(t0 + k, bank.lengths[j])  # past the end, the last state holds
            proprio = torch.from_numpy(bank.proprio[bank.context_rows(j, t, context)]).to(model.device)
            reached = torch.from_numpy(bank.proprio[bank.obs_start[j] + np.minimum(t + 1, bank.lengths[j])])
            action = torch.from_numpy(bank.actions[bank.step_start[j] + np.minimum(t, bank.lengths[j] - 1)])
            step_points, step_heights = model.move_objects(points, heights, proprio, reached.to(model.device),
                                                           action.to(model.device), task)
            points = torch.cat([points[:, 1:], step_points[:, None]], dim=1)
            heights = torch.cat([heights[:, 1:], step_heights[:, None]], dim=1)
            carried.append(step_points)
            lifted.append(step_heights)
        points_out.append(torch.stack(carried, dim=1).cpu().numpy())
        heights_out.append(torch.stack(lifted, dim=1).cpu().numpy())
    return np.concatenate(points_out), np.concatenate(heights_out)


def side_by_side(run: OpenLoop, i: int, until: int | None = None) -> np.ndarray:
    """Frames ``(T, H, 2W + 2, 3)`` of replay ``i``: real on the left, imagined on the right,
    up to the episode's end (or ``until`` steps)."""
    last = int(np.flatnonzero(run.valid[i])[-1]) + 1
    last = last if until is None else min(last, until + 1)
    gap = np.full((last, run.real.shape[2], 2, 3), 255, np.uint8)
    return np.concatenate([run.real[i, :last], gap, run.imagined[i, :last]], axis=2)
