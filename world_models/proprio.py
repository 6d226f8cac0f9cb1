"""The proprio dynamics: where the gripper goes next, as the action's commanded pose plus a learned
correction (the position servos lag, and a cube or the table stops the fingers); and the
dataset's proprio statistics every part reads the proprio through."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from worldsim.envs.observations import ENTITIES
from worldsim.envs.scene import commanded_gripper
from worldsim.world_models.config import ACTION_DIM, PROPRIO_DIM, WorldModelConfig
from worldsim.world_models.layers import masked_step_mean, mlp
from worldsim.world_models.objects import RELATION_UNIT_M  # the pathway's unit for offsets from the TCP

CUBES = [i for i, name in enumerate(ENTITIES) if name.endswith("_cube")]
"""The scene entities a gripper can touch: the cubes (:data:`~worldsim.envs.observations.ENTITIES`)."""


def commanded_proprio(proprio: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Where ``action`` ``(B, 4)`` sends the gripper from raw ``proprio`` ``(B, 4)``: the
    position servos' TCP target and finger gap (:func:`worldsim.envs.scene.commanded_gripper`)."""
    tcp, gap = commanded_gripper(proprio[:, :3], action)
    return torch.cat([tcp, gap[:, None]], dim=1)


class ProprioScale(nn.Module):
    """The dataset's proprio mean and std (buffers, saved with the weights)."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(PROPRIO_DIM))
        self.register_buffer("std", torch.ones(PROPRIO_DIM))

    def set(self, mean: np.ndarray | torch.Tensor, std: np.ndarray | torch.Tensor) -> None:
        """Store the dataset's statistics."""
        self.mean.copy_(torch.as_tensor(np.asarray(mean), dtype=torch.float32))
        self.std.copy_(torch.as_tensor(np.asarray(std), dtype=torch.float32).clamp_min(1e-6))

    def normalize(self, proprio: torch.Tensor) -> torch.Tensor:
        return (proprio - self.mean) / self.std

    def raw(self, normalized: torch.Tensor) -> torch.Tensor:
        return normalized * self.std + self.mean


class ProprioDynamics(nn.Module):
    """The next proprio in normalised units: what the action commands (the position servos'
    targets, :func:`commanded_proprio`) plus an MLP's correction from the context proprio, the
    action, the commanded change and the task. Learning only the correction keeps the imagined
    gripper on the real one: the commanded target is most of the move, and a head predicting the
    whole change drifts. The MLP's last layer starts at zero ("the gripper goes where it is
    commanded"). With ``[model.proprio] commanded = false`` nothing is hand-written: the MLP
    predicts the change from the last proprio, from the action, the context proprio and the task
    (starting at "the gripper stays"). With ``[model.proprio] sees_cubes`` the MLP also reads each
    cube's offset from the TCP, what stops the fingers and the arm."""

    def __init__(self, config: WorldModelConfig) -> None:
        super().__init__()
        self.commanded = config.proprio.commanded
        self.sees_cubes = config.proprio.sees_cubes
        inputs = (ACTION_DIM + (config.context + self.commanded) * PROPRIO_DIM + len(config.tasks)
                  + 3 * len(CUBES) * self.sees_cubes)
        self.head = mlp(inputs, config.proprio.hidden, PROPRIO_DIM)
        with torch.no_grad():
            last = self.head[-1]
            assert isinstance(last, nn.Linear)
            last.weight.zero_()
            last.bias.zero_()

    def forward(self, action: torch.Tensor, proprio: torch.Tensor, task_one_hot: torch.Tensor, scale: ProprioScale,
                cubes: torch.Tensor | None = None) -> torch.Tensor:
        """The next normalised proprio ``(B, 4)`` from raw context ``proprio`` ``(B, C, 4)`` and, when
        the correction sees them, the cubes' world positions ``cubes`` ``(B, len(CUBES), 3)`` (metres)."""
        norm = scale.normalize(proprio)
        seen = []
        if self.sees_cubes:
            if cubes is None:
                raise ValueError("this proprio dynamics reads the cubes (sees_cubes): pass their positions")
            seen = [((cubes - proprio[:, -1:, :3]) / RELATION_UNIT_M).flatten(1)]
        if not self.commanded:
            return norm[:, -1] + self.head(torch.cat([action, norm.flatten(1), task_one_hot, *seen], dim=1))
        commanded = scale.normalize(commanded_proprio(proprio[:, -1], action))
        features = [action, norm.flatten(1), commanded - norm[:, -1], task_one_hot, *seen]
        return commanded + self.head(torch.cat(features, dim=1))

    def rollout_loss(self, windows: dict[str, torch.Tensor], task_one_hot: torch.Tensor, scale: ProprioScale,
                     cubes: torch.Tensor | None = None) -> torch.Tensor:
        """Mean squared error (normalised units) of the dynamics rolled out over the ``H`` steps of
        state ``windows`` (:meth:`~worldsim.world_models.data.EpisodeBank.state_windows`) on their
        own predictions, from the recorded context and with the recorded actions; steps past an
        episode's end are left out. Imagination feeds them their own predictions, so they learn to
        keep their errors from compounding. ``cubes`` ``(B, H, len(CUBES), 3)``: the recorded cubes
        before each step (metres), for a correction that sees them."""
        proprio, actions, valid = windows["proprio"], windows["actions"], windows["valid"]
        context = proprio.shape[1] - actions.shape[1]
        wanted = scale.normalize(proprio[:, context:])
        current, losses = proprio[:, :context], []
        for k in range(actions.shape[1]):
            predicted = self(actions[:, k], current, task_one_hot, scale, None if cubes is None else cubes[:, k])
            losses.append(((predicted - wanted[:, k]) ** 2).mean(-1))
            current = torch.cat([current[:, 1:], scale.raw(predicted)[:, None]], dim=1)
        return masked_step_mean(torch.stack(losses, dim=1), valid)
