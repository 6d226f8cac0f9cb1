"""``--env.type=worldsim``: the LeRobot environment config of worldsim's tasks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.envs.configs import EnvConfig

from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.lerobot import FEATURES, feature_shapes, lerobot_env_id, make_lerobot_env
from worldsim.envs.tasks import SUITES, get_task

PACKAGE = "lerobot_env_worldsim"


@EnvConfig.register_subclass("worldsim")
@dataclass
class WorldsimEnv(EnvConfig):
    """One worldsim task or a suite's tasks, in physics or imagined by a world model."""

    task: str | None = "PushCube-v0"
    """A task (``PushCube-v0``) or a suite (``tabletop-4``: one vector env per task)."""
    fps: int = 20
    obs_mode: str = "pixels"
    """worldsim's observation mode: pixels (camera and proprioception), pixels+state or state."""
    image_size: int | None = None
    """Camera resolution (None: 64 in physics, the world model's own in imagination)."""
    world_model: str | None = None
    """A `worldsim train-wm` folder: imagine the episodes with it instead of simulating them."""
    keyframes: str | None = None
    """The episode file whose real episode starts begin the imagined episodes."""
    rung: str = "pixels"
    """How much of the simulator imagination may use (see worldsim's imagination ladder)."""
    device: str = "auto"
    """Where the world model runs."""
    render_mode: str = "rgb_array"
    features: dict[str, PolicyFeature] = field(default_factory=dict)
    features_map: dict[str, str] = field(default_factory=lambda: dict(FEATURES))

    def __post_init__(self) -> None:
        env = make_lerobot_env(self.tasks[0], imagined=self.imagined, **self.gym_kwargs)
        try:
            shapes = feature_shapes(env)
        finally:
            env.close()
        self.features = {key: PolicyFeature(type=FeatureType[kind], shape=shape)
                         for key, (kind, shape) in shapes.items()}

    @property
    def imagined(self) -> bool:
        return self.world_model is not None

    @property
    def tasks(self) -> tuple[str, ...]:
        """The task, or the suite's tasks."""
        if self.task in SUITES:
            return SUITES[self.task].tasks
        return (get_task(str(self.task)).name,)

    @property
    def package_name(self) -> str:
        return PACKAGE

    @property
    def gym_id(self) -> str:
        return lerobot_env_id(self.tasks[0], self.imagined)

    @property
    def gym_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"obs_mode": self.obs_mode, "render_mode": self.render_mode}
        if self.image_size is not None:
            kwargs["image_size"] = self.image_size
        if self.imagined:
            imagination = ImaginationConfig(world_model=self.world_model, keyframes=self.keyframes, rung=self.rung,
                                            device=self.device)
            kwargs.update(imagination.for_evaluation().env_kwargs())
        return kwargs

    def make_envs(self, n_envs: int, use_async_envs: bool = False) -> dict[str, dict[int, gym.vector.VectorEnv]]:
        """LeRobot's ``make_env`` result: ``{suite or "worldsim": {task index: vector env}}``, one
        vector env of ``n_envs`` per task, autoreset in the same step (as lerobot builds them)."""
        if n_envs < 1:
            raise ValueError(f"n_envs={n_envs} must be at least 1")
        env_class = gym.vector.AsyncVectorEnv if use_async_envs else gym.vector.SyncVectorEnv
        group = self.task if self.task in SUITES else self.type
        envs = {}
        for index, task in enumerate(self.tasks):
            def make(task: str = task) -> gym.Env:
                return gym.make(lerobot_env_id(task, self.imagined), disable_env_checker=True, **self.gym_kwargs)

            envs[index] = env_class([make] * n_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        return {str(group): envs}
