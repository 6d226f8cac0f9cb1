"""Task families: success, reward terms and a scripted expert for each kind of task."""

from worldsim.envs.families.base import Evaluation, TaskFamily
from worldsim.envs.families.pick_place import PickPlace
from worldsim.envs.families.push import Push
from worldsim.envs.families.reach import Reach
from worldsim.envs.families.stack import Stack
from worldsim.envs.scene import Scene
from worldsim.envs.tasks import TaskSpec

_FAMILIES: dict[str, type[TaskFamily]] = {
    "reach": Reach, "push": Push, "pick_place": PickPlace, "stack": Stack,
}


def make_family(spec: TaskSpec, scene: Scene) -> TaskFamily:
    """The task logic for ``spec``."""
    return _FAMILIES[spec.family](spec, scene)


__all__ = ["Evaluation", "TaskFamily", "make_family"]
