"""An ensemble of the low-dimensional dynamics, whose disagreement says where imagination is guessing.

A policy trained in imagination finds what the world model rewards wrongly: at GRPO's lr 1e-4
on PushCube the imagined success of the training episodes climbed (8% to 32%) while the real
success fell 6.8 points below behaviour cloning's (README, "What limits the gain"). What the
reward reads, the gripper's and the cubes' imagined positions, comes from the proprio head and
the object pathway; with ``dynamics_members`` = M > 1 the model carries M - 1 more of them
(:class:`DynamicsMember`), each trained like the model's own on its own bootstrap resample of
every batch of state windows. Where the data pins a move down they agree; where the policy has
led the scene somewhere the data never went, they part. :func:`spread` measures how far, and
the imagined env subtracts it from the reward (``uncertainty_penalty``: MOPO, Yu et al. 2020;
the ensemble's disagreement as the uncertainty, as in MOReL and PETS). Only the model's own
member draws the frame and decides success: the others are read, never followed.
"""

from __future__ import annotations

import torch
from torch import nn

from worldsim.envs.scene import commanded_gripper
from worldsim.world_models.config import ACTION_DIM, PROPRIO_DIM, WorldModelConfig
from worldsim.world_models.layers import mlp
from worldsim.world_models.objects import ObjectDynamics


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


class DynamicsMember(nn.Module):
    """One more proprio head and (with the pathway) object pathway, shaped like the model's own.
    The model's own are attributes of :class:`~worldsim.world_models.model.WorldModel` itself, so
    that models saved before the ensemble load unchanged; both kinds answer to ``proprio_head``
    and ``objects``."""

    def __init__(self, config: WorldModelConfig) -> None:
        super().__init__()
        self.proprio_head = proprio_head(config)
        self.objects = ObjectDynamics(config) if config.object_pathway else None


def bootstrap(windows: dict[str, torch.Tensor], generator: torch.Generator | None) -> dict[str, torch.Tensor]:
    """The state ``windows`` resampled with replacement (as many as there are): each member sees
    its own draw of the data, so the members differ where the data is thin."""
    first = next(iter(windows.values()))
    index = torch.randint(len(first), (len(first),), generator=generator, device=first.device)
    return {name: value.index_select(0, index) for name, value in windows.items()}


def spread(positions: torch.Tensor) -> torch.Tensor:
    """The members' disagreement ``(B,)``: over the points ``(M, B, P, 3)`` the members predict
    (the TCP, the movable objects), the largest distance of one member's point from the
    members' mean point, in the points' unit."""
    return (positions - positions.mean(0)).norm(dim=-1).amax(dim=(0, 2))
