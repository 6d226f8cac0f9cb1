"""Judges of an imagined window's outcome beside the model's own, and what they read.

A world model judges whether an imagined episode has succeeded with its success head or with
the task's rule on the imagined positions. To tell a judge's errors from the dynamics' errors,
the same windows can be judged other ways: the rule with the zone widened (:func:`zone_excess`),
the head at the cut best on the very windows judged (:func:`best_cut`, an oracle upper bound),
or a judge trained on the model's own imagined steps (:func:`judge_features` of the states
:func:`imagined_states` rolls with the low-dimensional dynamics alone).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from worldsim.envs.families.base import ON_ZONE
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.imagined_step import Rollout
from worldsim.world_models.metrics import agreement, calibrate_threshold
from worldsim.world_models.model import WorldModel
from worldsim.world_models.objects import RELATION_UNIT_M


def zone_excess(cube_xy: np.ndarray, zone_xy: np.ndarray) -> np.ndarray:
    """How far (metres, max-norm) each cube centre lies outside the band the rule counts as on
    the zone; <= 0 means on it."""
    return np.abs(cube_xy - zone_xy).max(axis=-1) - ON_ZONE


def scored(judged: np.ndarray, real: np.ndarray) -> dict[str, Any]:
    """The agreement figures a row of the table needs."""
    a = agreement(judged, real)
    return {k: a[k] for k in ("accuracy", "recall", "specificity", "episodes")}


def best_cut(scores: np.ndarray, real: np.ndarray) -> dict[str, Any]:
    """The cut most accurate on these very windows (the one a calibration on them would pick),
    and its figures: an oracle."""
    cut = calibrate_threshold(scores, real)
    return {"cut": cut, **scored(scores >= cut, real)}


def judge_features(model: WorldModel, points: torch.Tensor, heights: torch.Tensor, proprio: torch.Tensor,
                   task: torch.Tensor) -> torch.Tensor:
    """What the judge trained on imagination reads of one imagined step ``(N, D)``: the keypoints
    ``(N, E, 2)``, the positions the rules place them at, the normalized proprio and the task."""
    assert model.rules is not None
    where = model.rules.positions(points, heights) / RELATION_UNIT_M
    return torch.cat([points.flatten(1) / model.config.image_size * 2 - 1, where.flatten(1), proprio,
                      model._one_hot(task)], dim=1)


@torch.no_grad()
def imagined_states(model: WorldModel, bank: EpisodeBank, episodes: np.ndarray, starts: np.ndarray, horizon: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's low-dimensional dynamics alone (the proprio head and the pathway: what the
    judges read, and neither reads frames) rolled ``horizon`` steps from the recorded starts with
    the recorded actions: each step's judge features ``(N, H, D)``, the head's success
    probability ``(N, H)``, the real success ``(N, H)`` and ``valid`` ``(N, H)``."""
    cfg = model.config
    context = bank.context_rows(episodes, starts, cfg.context)
    objects = bank.recorded_objects(context)
    assert objects is not None  # the held-out and training files have state (checked by held_out_bank's caller)
    proprio, points, heights = torch.from_numpy(bank.proprio[context]), objects[0].float(), objects[1].float()
    task = torch.tensor([model.task_index(bank.infos[e].task) for e in episodes])
    ahead = starts[:, None] + 1 + np.arange(horizon)[None]
    valid = ahead <= bank.lengths[episodes][:, None]
    actions = bank.step_start[episodes][:, None] + np.minimum(ahead - 1, bank.lengths[episodes][:, None] - 1)
    observed = bank.obs_start[episodes][:, None] + np.minimum(ahead, bank.lengths[episodes][:, None])
    no_frames = torch.zeros(0)  # the dynamics read the rollout's proprio and objects alone
    features, head = [], []
    for k in range(horizon):
        norm, moved, lifted = model._step_dynamics(Rollout(no_frames, no_frames, proprio, points, heights),
                                                   torch.from_numpy(bank.actions[actions[:, k]]), task)
        assert moved is not None and lifted is not None
        features.append(judge_features(model, moved, lifted, norm, task))
        head.append(torch.sigmoid(model.success_head.judge(moved, task, norm)[0]))
        proprio = torch.cat([proprio[:, 1:], (norm * model.proprio_std + model.proprio_mean)[:, None]], dim=1)
        points = torch.cat([points[:, 1:], moved[:, None]], dim=1)
        heights = torch.cat([heights[:, 1:], lifted[:, None]], dim=1)
    return (torch.stack(features, 1), torch.stack(head, 1), torch.from_numpy(bank.success[observed] & valid),
            torch.from_numpy(valid))
