"""Open-loop replay: a world model imagining recorded episodes from real states.

Start from a real state with its real context, feed the real episode's recorded actions (or a
policy's, on the imagined observations) one by one, and keep every imagined frame beside the
real one: what every fidelity figure (:mod:`~worldsim.world_models.metrics`) reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from worldsim.policies.base import Policy
from worldsim.policies.runner import ChunkQueue
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.latents import latents_to_frames
from worldsim.world_models.model import WorldModel


@dataclass
class OpenLoop:
    """Open-loop replays of ``N`` real episodes over ``H`` steps: ``real`` and ``imagined``
    uint8 frames ``(N, H + 1, height, width, 3)`` (index 0: the real start frame in both),
    ``valid`` ``(N, H + 1)`` (False past the episode's end), imagined ``success_prob`` and
    real ``success`` ``(N, H + 1)``."""

    real: np.ndarray
    imagined: np.ndarray
    valid: np.ndarray
    success_prob: np.ndarray
    success: np.ndarray


@torch.no_grad()
def open_loop(model: WorldModel, bank: EpisodeBank, episodes: np.ndarray, starts: np.ndarray, horizon: int, *,
              sampling_steps: int | None = None, generator: torch.Generator | None = None,
              batch_size: int = 64, policy: Policy | None = None) -> OpenLoop:
    """Replay the recorded actions of bank episodes ``episodes`` from steps ``starts`` for
    ``horizon`` steps (past an episode's end the last action repeats and ``valid`` is False).

    With a ``policy`` (one that reads pixels), the policy acts instead, on the imagined
    observations (``image``, ``proprio``, ``instruction``; its chunks are served by a
    :class:`~worldsim.policies.runner.ChunkQueue`); ``real`` still shows the recorded episode
    from the same start, for reference, and every step is ``valid``."""
    cfg = model.config
    device = model.device
    n, h = len(episodes), int(horizon)
    out = OpenLoop(np.zeros((n, h + 1, *bank.image_shape), np.uint8), np.zeros((n, h + 1, *bank.image_shape),
                   np.uint8), np.zeros((n, h + 1), bool), np.zeros((n, h + 1)), np.zeros((n, h + 1), bool))
    for begin in range(0, n, batch_size):
        j, t0 = episodes[begin:begin + batch_size], starts[begin:begin + batch_size]
        rows = slice(begin, begin + len(j))
        context_rows = bank.context_rows(j, t0, cfg.context)
        rollout = model.start(torch.from_numpy(bank.images[context_rows]),
                              torch.from_numpy(bank.images[bank.obs_start[j]]),
                              torch.from_numpy(bank.proprio[context_rows]), bank.recorded_points(context_rows))
        task = torch.tensor([model.task_index(bank.infos[e].task) for e in j], device=device)
        steps_t = np.arange(h + 1)[None] + t0[:, None]
        valid = steps_t <= bank.lengths[j][:, None]
        real_rows = bank.obs_start[j][:, None] + np.minimum(steps_t, bank.lengths[j][:, None])
        out.real[rows], out.valid[rows] = bank.images[real_rows], valid
        out.success[rows] = bank.success[real_rows]
        out.imagined[rows, 0] = bank.images[real_rows[:, 0]]
        out.success_prob[rows, 0] = model.success_prob(rollout.context[:, -1], task,
                                                       rollout.proprio[:, -1]).cpu().numpy()
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
            pred = model.predict(rollout, action, task, sampling_steps, generator)
            rollout = rollout.advance(pred)
            out.imagined[rows, k + 1] = latents_to_frames(pred.latent, cfg.patch).cpu().numpy()
            out.success_prob[rows, k + 1] = pred.success_prob.cpu().numpy()
    return out


def side_by_side(run: OpenLoop, i: int, until: int | None = None) -> np.ndarray:
    """Frames ``(T, H, 2W + 2, 3)`` of replay ``i``: real on the left, imagined on the right,
    up to the episode's end (or ``until`` steps)."""
    last = int(np.flatnonzero(run.valid[i])[-1]) + 1
    last = last if until is None else min(last, until + 1)
    gap = np.full((last, run.real.shape[2], 2, 3), 255, np.uint8)
    return np.concatenate([run.real[i, :last], gap, run.imagined[i, :last]], axis=2)
