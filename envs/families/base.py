"""What every task family provides, over batches of states.

A family turns a batch of scene states into the task's quantities: the object and goal
positions that go into observations, named dense-reward terms, success, and a scripted expert.
Everything is vectorised over the batch axis in the array API (numpy batches on the host, torch
tensors or JAX arrays on an accelerator; :mod:`worldsim.envs.xp`); nothing here keeps per-episode
memory, so the expert is a pure function of the current state (it re-plans every step).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from worldsim.envs.scene import ZONE_HALF, Scene
from worldsim.envs.tasks import TaskSpec
from worldsim.envs.xp import Array, column, columns, namespace


@dataclass(frozen=True)
class Evaluation:
    """Per-env task quantities for one batch of states."""

    success: Array  # (N,) bool
    terms: dict[str, Array]  # named dense-reward terms, each (N,) in [0, 1]

    def dense_reward(self) -> Array:
        """Staged reward in [0, 1]: the mean of the terms and a success stage; 1 on success."""
        total = sum(self.terms.values()) / (len(self.terms) + 1)
        return namespace(total).where(self.success, 1.0, total)


def move_towards(
    tcp: Array, target: Array, grip: Array | float, speed: Array | float = 1.0, *, action_scale: float
) -> Array:
    """Action that moves the TCP towards ``target`` at up to ``speed`` (fraction of the largest
    step, ``action_scale`` metres: the scene's :attr:`~worldsim.envs.scene.Scene.action_scale`),
    with gripper command ``grip``."""
    xp = namespace(tcp)
    limit = column(speed, tcp)
    delta = xp.clip((target - tcp) / action_scale, -limit, limit)
    return columns(delta, grip, like=tcp)


REACH_SHAPING = 10.0  # 1/m: the gripper-to-object shaping term fades over about 10 cm
PLACE_SHAPING = 5.0  # 1/m: the object-to-goal shaping term fades over about 20 cm
RESTING_TOLERANCE = 0.005  # a cube centre this far above its resting height still counts as resting
ZONE_INSET = 0.01  # a cube on a zone has its centre at least 1 cm inside the zone's edge
ON_ZONE = ZONE_HALF - ZONE_INSET  # cube centre at most this far (max-norm) from the zone centre


def closeness(distance: Array, scale: float) -> Array:
    """Shaping term in (0, 1]: 1 at zero distance, falling off over about ``1/scale`` metres."""
    return 1.0 - namespace(distance).tanh(scale * distance)


class TaskFamily(ABC):
    """Task logic for one :class:`TaskSpec` over the shared :class:`Scene`."""

    def __init__(self, spec: TaskSpec, scene: Scene) -> None:
        self.spec = spec
        self.scene = scene

    @abstractmethod
    def object_and_goal(self, qpos: Array) -> tuple[Array, Array]:
        """Positions (N, 3) of the thing acted on and of where it must go."""

    @abstractmethod
    def evaluate(self, qpos: Array) -> Evaluation:
        """Success and named reward terms for a batch of states."""

    @abstractmethod
    def expert(self, qpos: Array) -> Array:
        """Scripted expert actions (N, 4) in [-1, 1] for a batch of states."""
