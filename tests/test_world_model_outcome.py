"""Imagined outcomes by each task's rule: on the objects' recorded positions, the rule must give
exactly the outcome physics gave, frame by frame, for every task family."""

import numpy as np
import pytest
import torch

from worldsim.data.collect import collect_episodes
from worldsim.envs.families import make_family
from worldsim.envs.observations import ENTITY_HEIGHTS, qpos_from_state
from worldsim.envs.scene import Scene
from worldsim.envs.tasks import get_suite, get_task
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.world_models import EpisodeBank
from worldsim.world_models.data import image_camera
from worldsim.world_models.outcome import TaskRules

TASKS = get_suite("tabletop-4").tasks


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    path = tmp_path_factory.mktemp("outcome") / "suite.h5"
    collect_episodes(list(TASKS), lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.2, seed=3)), 3, path,
                     num_envs=3, image_size=32, progress=False)
    return EpisodeBank(path)


def test_the_rule_on_recorded_positions_gives_the_recorded_outcome_of_every_frame(bank):
    rules = TaskRules(TASKS, image_camera(32, 32))
    task = torch.tensor(np.concatenate([np.full(n + 1, TASKS.index(bank.infos[j].task))
                                        for j, n in enumerate(bank.lengths)]))
    success, failed = rules.outcome(task, torch.from_numpy(bank.proprio).double(),
                                    torch.from_numpy(bank.entity_pixels).double(),
                                    torch.from_numpy(bank.entity_heights).double())
    recorded = torch.from_numpy(bank.success)
    assert recorded.sum() >= 6  # successes of several families are among the frames
    assert torch.equal(success, recorded)
    scene = Scene.load()  # physics' own verdict on the recorded states: a cube off the table
    ended = scene.failed(qpos_from_state(scene, bank.state), np.zeros((len(bank.state), scene.model.nv)))
    assert ended.any() and np.array_equal(failed.numpy(), ended)


def test_positions_go_back_into_the_world_at_their_heights():
    camera = image_camera(64, 64)
    rules = TaskRules(("PushCube-v0",), camera)
    world = np.array([[[0.05, -0.1, 0.08], [0.0, 0.0, ENTITY_HEIGHTS[3]]]])  # a lifted cube and a zone
    back = rules.positions(torch.from_numpy(camera.project(world)), torch.from_numpy(world[..., 2]))
    np.testing.assert_allclose(back.numpy(), world, atol=1e-9)


def test_a_cube_imagined_off_the_table_fails_the_episode():
    camera = image_camera(64, 64)
    rules = TaskRules(("PushCube-v0",), camera)
    world = np.zeros((1, 6, 3))
    world[0, :, 2] = ENTITY_HEIGHTS
    world[0, 0, :2] = (0.45, 0.0)  # the red cube past the table's edge
    points, heights = torch.from_numpy(camera.project(world)), torch.from_numpy(world[..., 2])
    _, failed = rules.outcome(torch.zeros(1, dtype=torch.long), torch.zeros(1, 4), points, heights)
    assert failed.tolist() == [True]
    assert rules.failed(torch.zeros(1, 4), points, heights).tolist() == [True]  # without judging success


def test_the_dense_terms_on_recorded_positions_are_the_physics_env_terms(bank):
    """The imagined env's dense reward shapes on the positions the pathway carries: on the
    recorded ones it must be the physics env's shaping, for every family."""
    rules, scene = TaskRules(TASKS, image_camera(32, 32)), Scene.load()
    for j, info in enumerate(bank.infos[:: 3]):
        rows = np.arange(bank.obs_start[3 * j], bank.obs_start[3 * j] + bank.lengths[3 * j] + 1)
        physics = make_family(get_task(info.task), scene).evaluate(qpos_from_state(scene, bank.state[rows])).terms
        imagined = rules.terms(TASKS.index(info.task), torch.from_numpy(bank.proprio[rows]).double(),
                               torch.from_numpy(bank.entity_pixels[rows]).double(),
                               torch.from_numpy(bank.entity_heights[rows]).double())
        assert set(imagined) == set(physics) and len(physics) >= 1
        for name, value in physics.items():
            np.testing.assert_allclose(imagined[name].numpy(), value, atol=1e-4, err_msg=f"{info.task}: {name}")
