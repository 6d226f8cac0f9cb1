import gymnasium as gym
import pytest

from worldsim.envs import SUITES, TASKS, get_suite, get_task
from worldsim.envs.tasks import FAMILIES


def test_every_task_is_registered_with_single_and_vector_entry_points():
    ids = [i for i in gym.registry if i.startswith("worldsim/")]
    assert len(ids) >= 16
    assert {"worldsim/PushCube-v0", "worldsim/ReachCube-v0"} <= set(ids)
    for env_id in ids:
        spec = gym.spec(env_id)
        assert spec.vector_entry_point is not None and spec.entry_point is not None
        assert spec.max_episode_steps is None  # the time limit lives inside the env


def test_suite_covers_four_families_with_instructions():
    assert {t.family for t in TASKS.values()} == set(FAMILIES)
    instructions = [t.instruction for t in TASKS.values()]
    assert "push the red cube onto the blue square" in instructions
    assert "stack the red cube on the green cube" in instructions
    assert "put the red cube in the bin" in instructions


def test_suites_split_seen_and_unseen_tasks():
    assert len(get_suite("tabletop-16").tasks) == 16
    assert set(get_suite("tabletop-16").tasks) == set(TASKS)
    assert len(get_suite("tabletop-4").tasks) == 4
    assert len(get_suite("tabletop-10").tasks) == 10
    for suite in SUITES.values():
        assert not set(suite.seen) & set(suite.unseen)
        assert set(suite.tasks) <= set(TASKS)


def test_unknown_task_and_suite_names_suggest_the_nearest():
    with pytest.raises(KeyError, match="Did you mean 'PushCube-v0'"):
        get_task("PushCub-v0")
    with pytest.raises(KeyError, match="tabletop-4"):
        get_suite("tabletop-5")
    with pytest.raises(gym.error.Error, match="PushCube"):
        gym.make("worldsim/PushCub-v0")
