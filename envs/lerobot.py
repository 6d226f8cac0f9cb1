"""worldsim tasks as LeRobot's evaluation loop (``lerobot-eval``) reads an environment.

LeRobot builds each env with ``gym.make(f"{package}/{task}")`` inside a synchronous vector env
(autoreset in the same step) and expects:

- observations ``pixels`` (a dict of cameras, uint8 HWC) -> ``observation.images.<camera>``,
  ``agent_pos`` -> ``observation.state``, ``environment_state`` -> ``observation.environment_state``;
- the instruction as the env's ``task_description`` attribute, read on the outermost env;
- success as ``info["is_success"]`` (and in ``final_info`` when an episode ends);
- the step limit as ``_max_episode_steps``.

:class:`LeRobotEnv` shows one worldsim env (physics or imagined) that way, under the same names
``worldsim export --format lerobot`` writes (camera ``front`` and ``wrist``, ``observation.state``
the proprioception), so a policy trained on an export reads the env with no renaming.
:func:`register_lerobot_envs` registers ``lerobot_env_worldsim/<task>`` and
``lerobot_env_worldsim/Imagined-<task>`` for every task, the ids the ``lerobot_env_worldsim``
distribution (``integrations/lerobot_env_worldsim``) hands to ``lerobot-eval``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from worldsim.data.lerobot import OBS_FEATURES
from worldsim.envs.registration import IMAGINED_PREFIX, task_env_id
from worldsim.envs.tasks import TASKS, get_task

NAMESPACE = "lerobot_env_worldsim"
"""The gym namespace of the LeRobot view (``lerobot_env_worldsim/PushCube-v0``)."""
CAMERAS: dict[str, str] = {"image": "front", "wrist_image": "wrist"}
"""worldsim image key -> LeRobot camera name (``observation.images.<camera>``)."""
STATES: dict[str, str] = {"proprio": "agent_pos", "state": "environment_state"}
"""worldsim state key -> LeRobot observation key (``observation.state``,
``observation.environment_state``)."""
FEATURES: dict[str, str] = {**{f"pixels/{camera}": OBS_FEATURES[key] for key, camera in CAMERAS.items()},
                             **{name: OBS_FEATURES[key] for key, name in STATES.items()}, "action": "action"}
"""Each LeRobot env key -> the policy feature LeRobot names it (an ``EnvConfig``'s ``features_map``):
the column ``worldsim export`` writes for the same observation."""


def lerobot_env_id(task: str, imagined: bool = False) -> str:
    """The gym id of ``task``'s LeRobot view: ``lerobot_env_worldsim/<task>``, or with ``imagined``
    ``lerobot_env_worldsim/Imagined-<task>``."""
    return f"{NAMESPACE}/{IMAGINED_PREFIX if imagined else ''}{task}"


class LeRobotEnv(gym.Wrapper):
    """One worldsim env with LeRobot's observation names, ``task_description`` (the instruction),
    ``task`` (the task's name), ``info["is_success"]`` and ``_max_episode_steps``.

    Args:
        env: a worldsim single env (``gym.make("worldsim/<task>")`` or its imagined twin).
        task: its task's name.
    """

    def __init__(self, env: gym.Env, task: str) -> None:
        super().__init__(env)
        spec = get_task(task)
        self.task = spec.name
        self.task_description = spec.instruction
        self._max_episode_steps = spec.max_episode_steps
        space = env.observation_space
        if isinstance(space, spaces.Box):  # obs_mode "state": the simulator's state vector
            self.observation_space = spaces.Dict({"environment_state": space})
        else:
            assert isinstance(space, spaces.Dict), space
            cameras = {camera: space[key] for key, camera in CAMERAS.items() if key in space.spaces}
            views: dict[str, spaces.Space] = {"pixels": spaces.Dict(cameras)} if cameras else {}
            views.update({name: space[key] for key, name in STATES.items() if key in space.spaces})
            self.observation_space = spaces.Dict(views)

    def observation(self, obs: Any) -> dict[str, Any]:
        """A worldsim observation under LeRobot's names (the instruction goes to ``task_description``)."""
        if not isinstance(obs, dict):
            return {"environment_state": obs}
        out: dict[str, Any] = {}
        cameras = {camera: obs[key] for key, camera in CAMERAS.items() if key in obs}
        if cameras:
            out["pixels"] = cameras
        out.update({name: obs[key] for key, name in STATES.items() if key in obs})
        return out

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return self.observation(obs), info

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(action, np.float32))
        info = {**info, "is_success": bool(info["success"])}
        return self.observation(obs), float(reward), terminated, truncated, info


def make_lerobot_env(task: str, imagined: bool = False, **kwargs: Any) -> LeRobotEnv:
    """``task``'s env (physics, or with ``imagined`` its world-model twin; ``kwargs`` go to it,
    e.g. ``obs_mode`` or the imagined env's ``world_model`` and ``keyframes``) as LeRobot reads it."""
    return LeRobotEnv(gym.make(task_env_id(task, imagined=imagined), **kwargs).unwrapped, task)


def feature_shapes(env: LeRobotEnv) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each LeRobot env key -> (LeRobot feature type, shape): what an ``EnvConfig`` declares as
    ``features`` (``VISUAL``, ``STATE``, ``ENV``, ``ACTION``)."""
    space = env.observation_space
    assert isinstance(space, spaces.Dict), space
    shapes = {key: tuple(box.shape or ()) for key, box in space.spaces.items() if key != "pixels"}
    if "pixels" in space.spaces:
        cameras = space["pixels"]
        assert isinstance(cameras, spaces.Dict), cameras
        shapes.update({f"pixels/{camera}": tuple(box.shape or ()) for camera, box in cameras.spaces.items()})
    kinds = {"agent_pos": "STATE", "environment_state": "ENV"}
    return {"action": ("ACTION", tuple(env.action_space.shape or ())),
            **{key: ("VISUAL" if key.startswith("pixels/") else kinds[key], shape) for key, shape in shapes.items()}}


def register_lerobot_envs() -> None:
    """Register ``lerobot_env_worldsim/<task>`` and ``lerobot_env_worldsim/Imagined-<task>`` for every
    task (idempotent). They are registered without gymnasium's wrappers (no time limit, no order
    check) so that the env LeRobot holds is the :class:`LeRobotEnv` whose attributes it reads;
    worldsim's envs end their episodes and check their inputs themselves."""
    for name in TASKS:
        for imagined in (False, True):
            env_id = lerobot_env_id(name, imagined)
            if env_id not in gym.registry:
                gym.register(id=env_id, entry_point="worldsim.envs.lerobot:make_lerobot_env",
                             kwargs={"task": name, "imagined": imagined}, order_enforce=False,
                             disable_env_checker=True)
