"""The proprio head: where the gripper goes next, as the action's commanded pose plus a learned
correction (the position servos lag, and a cube or the table stops the fingers)."""

from __future__ import annotations

import torch
from torch import nn

from worldsim.envs.scene import commanded_gripper
from worldsim.world_models.config import ACTION_DIM, PROPRIO_DIM, WorldModelConfig
from worldsim.world_models.layers import mlp


def commanded_proprio(proprio: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Where ``action`` ``(B, 4)`` sends the gripper from raw ``proprio`` ``(B, 4)``: the
    position servos' TCP target and finger gap (:func:`worldsim.envs.scene.commanded_gripper`)."""
    tcp, gap = commanded_gripper(proprio[:, :3], action)
    return torch.cat([tcp, gap[:, None]], dim=1)


def proprio_head(config: WorldModelConfig) -> nn.Sequential:
    """The proprio head's MLP: the correction to the commanded gripper from the action, the
    context proprio, the commanded change and the task; its last layer starts at zero ("the
    gripper goes where it is commanded")."""
    head = mlp(ACTION_DIM + (config.context + 1) * PROPRIO_DIM + len(config.tasks), config.cond_hidden, PROPRIO_DIM)
    with torch.no_grad():
        last = head[-1]
        assert isinstance(last, nn.Linear)
        last.weight.zero_()
        last.bias.zero_()
    return head
