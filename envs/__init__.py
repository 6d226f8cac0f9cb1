"""Physics tasks: the tabletop suite on a batched MuJoCo backend (``worldsim.envs``)."""

from worldsim.envs.reset_schedule import ResetSchedule
from worldsim.envs.single_env import TabletopEnv
from worldsim.envs.tasks import SUITES, TASKS, Suite, TaskSpec, get_suite, get_task
from worldsim.envs.vector_env import TabletopVectorEnv

__all__ = ["SUITES", "TASKS", "ResetSchedule", "Suite", "TabletopEnv", "TabletopVectorEnv",
           "TaskSpec", "get_suite", "get_task"]
