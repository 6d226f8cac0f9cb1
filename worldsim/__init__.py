"""worldsim: Gymnasium environments and learned simulators for embodied robot policies.

Importing the package registers every task with Gymnasium as ``worldsim/<Task>-v0``.
"""

import ctypes.util
import os
from pathlib import Path

# In a source checkout, ``envs/``, ``world_models/``, ``policies/`` and ``assets/`` sit beside
# this folder and pyproject's package-dir maps them into the package. Python run from the
# checkout's root imports this folder rather than an installed (non-editable) copy, and would
# then find no ``worldsim.envs``: the checkout's root joins the package path so those folders
# resolve here too.
_checkout = Path(__file__).resolve().parent.parent
if not (Path(__file__).parent / "envs").is_dir() and (_checkout / "envs" / "__init__.py").is_file():
    __path__.append(str(_checkout))

# Headless rendering defaults, read by MuJoCo and Mesa when they start: EGL offscreen
# rendering, and Mesa's software rasteriser on the calling thread (tiny frames render faster
# without its worker-thread hand-offs). On a machine without libEGL (a GPU image, say) MuJoCo
# fails at import with egl; its OpenGL is left off there, so that state envs and training run,
# and rendering says what is missing (envs/rendering.py).
if "MUJOCO_GL" not in os.environ:
    os.environ["MUJOCO_GL"] = "egl" if ctypes.util.find_library("EGL") else "disable"
os.environ.setdefault("LP_NUM_THREADS", "0")

from worldsim.envs.registration import register_envs  # noqa: E402

register_envs()

__version__ = "0.1.0"
