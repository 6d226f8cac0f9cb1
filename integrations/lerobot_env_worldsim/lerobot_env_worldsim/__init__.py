"""worldsim's tasks as a LeRobot environment (``--env.type=worldsim``).

Importing this package registers the gym ids LeRobot makes (``lerobot_env_worldsim/<task>`` and
``lerobot_env_worldsim/Imagined-<task>``, :mod:`worldsim.envs.lerobot`) and, where lerobot is
installed, the environment config :class:`~lerobot_env_worldsim.config.WorldsimEnv`.
"""

from __future__ import annotations

import importlib.util

from worldsim.envs.lerobot import register_lerobot_envs

register_lerobot_envs()

if importlib.util.find_spec("lerobot") is not None:
    from lerobot_env_worldsim.config import WorldsimEnv

    __all__ = ["WorldsimEnv"]
