"""worldsim: Gymnasium environments and learned simulators for embodied robot policies.

Importing the package registers every task with Gymnasium as ``worldsim/<Task>-v0``.
"""

import os

# Headless rendering defaults, read by MuJoCo and Mesa when they start: EGL offscreen
# rendering, and Mesa's software rasteriser on the calling thread (tiny frames render faster
# without its worker-thread hand-offs).
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("LP_NUM_THREADS", "0")

from worldsim.envs.registration import register_envs  # noqa: E402

register_envs()

__version__ = "0.1.0"
