"""The scripted expert as a policy: the task family's planner, read off the ``state`` observation.

It has no weights and no memory; noise options make it a demonstrator of varied quality, so
that datasets hold near-misses and failures as well as clean demos.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from worldsim.envs.families import make_family
from worldsim.envs.observations import qpos_from_state
from worldsim.envs.scene import Scene
from worldsim.envs.tasks import get_task
from worldsim.policies.base import Batch, Policy, PolicyOutput, register_policy

DEMO_NOISE = 0.3
"""The expert's displacement noise for demonstrations of reach and push, so that behaviour cloning
also sees recoveries."""
GRASP_DEMO_NOISE = 0.05
"""The same for a grasping task (:attr:`~worldsim.envs.tasks.TaskSpec.grasping`): grasps are
precise; at 0.1 the expert already fails three times in four, and at ``DEMO_NOISE``
PickPlaceCube's succeeds in 3 demonstrations of 300, too few to clone."""


def demonstration_noise(task: str) -> float:
    """The expert's displacement noise for demonstrations of ``task``."""
    return GRASP_DEMO_NOISE if get_task(task).grasping else DEMO_NOISE


@dataclass
class ScriptedExpertConfig:
    task: str = "PushCube-v0"
    """Task whose expert this is."""
    noise: float = 0.0
    """Std of Gaussian noise added to the end-effector displacement of every action (in action
    units, [-1, 1]). The gripper command is left alone: a noisy gripper drops held cubes, which
    would make every pick fail instead of some."""
    epsilon: float = 0.0
    """Probability of replacing an action by a uniformly random one, per step."""
    seed: int = 0
    """Seed of the noise."""

    def __post_init__(self) -> None:
        self.task = get_task(self.task).name
        if not (np.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"noise={self.noise!r} must be a finite number >= 0")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon={self.epsilon!r} must be in [0, 1]")


@register_policy
class ScriptedExpert(Policy):
    """The scripted expert of one task. Needs ``state`` in the observation (``obs_mode="state"``
    or ``"pixels+state"``).

    The log-probability is that of the Gaussian displacement noise around the expert's action
    (0 without noise); the value is 0 and the features are the state."""

    policy_type = "scripted_expert"
    obs_mode = "state"
    config_class = ScriptedExpertConfig
    chunk_size = 1

    def __init__(self, config: ScriptedExpertConfig) -> None:
        super().__init__()
        self.config = config
        self.spec = get_task(config.task)
        self.scene = Scene.load()
        self.family = make_family(self.spec, self.scene)
        self.rng = np.random.default_rng(config.seed)

    def check_task(self, instruction: str) -> None:
        if instruction != self.spec.instruction:
            raise ValueError(f"this scripted expert solves {self.spec.name} ({self.spec.instruction!r}), "
                             f"not {instruction!r}")

    def preprocess(self, obs: Any) -> Batch:
        state = obs.get("state") if isinstance(obs, dict) else obs
        if state is None:
            raise ValueError("the scripted expert reads the 'state' observation; make the env with "
                             "obs_mode='state' or 'pixels+state'")
        return {"state": torch.as_tensor(np.asarray(state), dtype=torch.float32)}

    def _mean(self, batch: Batch) -> torch.Tensor:
        qpos = qpos_from_state(self.scene, batch["state"].cpu().numpy())
        return torch.as_tensor(self.family.expert(qpos), dtype=torch.float32)

    def act(self, batch: Batch, deterministic: bool = False) -> PolicyOutput:
        mean = self._mean(batch)
        actions = mean.clone()
        if not deterministic:
            if self.config.noise > 0:
                noise = self.rng.normal(0, self.config.noise, (len(mean), 3))
                actions[:, :3] += torch.as_tensor(noise, dtype=torch.float32)
            if self.config.epsilon > 0:
                swap = torch.as_tensor(self.rng.random(len(mean)) < self.config.epsilon)
                random = torch.as_tensor(self.rng.uniform(-1, 1, mean.shape), dtype=torch.float32)
                actions[swap] = random[swap]
            actions = actions.clamp(-1, 1)
        log_prob, _, value = self._score(mean, actions[:, None])
        return PolicyOutput(actions[:, None], log_prob, value, batch["state"])

    def evaluate(self, batch: Batch, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self._score(self._mean(batch), actions)

    def _score(self, mean: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-density and entropy of the displacement noise (the gripper is deterministic), and a
        zero value: the expert has no critic."""
        zeros = torch.zeros(len(mean))
        if self.config.noise == 0:
            return zeros, zeros, zeros
        normal = torch.distributions.Normal(mean[:, None, :3], self.config.noise)
        return normal.log_prob(actions[..., :3]).sum((1, 2)), normal.entropy().sum((1, 2)), zeros

    def features(self, batch: Batch) -> torch.Tensor:
        return batch["state"]
