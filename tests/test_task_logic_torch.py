"""The task logic (scene accessors, families, observation vectors, layouts) is one array-API
implementation: on float32 torch tensors it gives the numpy (float64) results to float32
precision, and layouts drawn from a ``torch.Generator`` obey the numpy sampler's rules."""

import numpy as np
import pytest
import torch

from worldsim.envs.families import make_family
from worldsim.envs.layout import _violations, sample_layouts
from worldsim.envs.observations import proprio_vector, state_vector
from worldsim.envs.scene import CUBES, ZONES, Scene
from worldsim.envs.tasks import TASKS

SCENE = Scene.load()
FAMILY_TASKS = ["ReachCube-v0", "ReachZone-v0", "PushCube-v0", "PickPlaceCube-v0", "PickPlaceCube-ToBlue-v0",
                "StackCube-v0"]


def states(task: str, n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Layouts with the gripper near the task's cube and half-closed, so every branch of the
    experts and grasp checks is taken somewhere."""
    rng = np.random.default_rng(0)
    qpos = sample_layouts(SCENE, TASKS[task], rng, n)
    near = rng.random(n) < 0.5
    qpos[near, SCENE.ee] = SCENE.cube_pos(qpos, "red")[near] + rng.normal(0, 0.015, (near.sum(), 3))
    qpos[:, SCENE.fingers] = rng.uniform(0.01, 0.022, (n, 2))
    return qpos, rng.normal(size=(n, SCENE.model.nv))


@pytest.mark.parametrize("task", FAMILY_TASKS)
def test_torch_batches_give_the_numpy_results(task):
    qpos, qvel = states(task)
    tq, tv = torch.as_tensor(qpos, dtype=torch.float32), torch.as_tensor(qvel, dtype=torch.float32)
    family = make_family(TASKS[task], SCENE)
    ref, out = family.evaluate(qpos), family.evaluate(tq)
    assert isinstance(out.success, torch.Tensor) and out.terms.keys() == ref.terms.keys()
    assert (out.success.numpy() == ref.success).mean() > 0.95  # float32 may flip a threshold
    for name in ref.terms:
        np.testing.assert_allclose(out.terms[name].numpy(), ref.terms[name], atol=1e-3)
    np.testing.assert_allclose(family.expert(tq).numpy(), family.expert(qpos), atol=1e-3)
    np.testing.assert_allclose(state_vector(SCENE, family, tq, tv).numpy(), state_vector(SCENE, family, qpos, qvel),
                               atol=1e-5)
    np.testing.assert_allclose(proprio_vector(SCENE, tq).numpy(), proprio_vector(SCENE, qpos), atol=1e-6)
    np.testing.assert_array_equal(SCENE.failed(tq, tv).numpy(), SCENE.failed(qpos, qvel))
    actions = np.random.default_rng(1).uniform(-1, 1, (len(qpos), 4))
    np.testing.assert_allclose(SCENE.servo_targets(tq, torch.as_tensor(actions, dtype=torch.float32)).numpy(),
                               SCENE.servo_targets(qpos, actions), atol=1e-6)


@pytest.mark.parametrize("task", ["PushCube-v0", "PickPlaceCube-Row-v0", "ReachCube-v0"])
def test_layouts_from_a_torch_generator_follow_the_rules(task):
    spec = TASKS[task]
    qpos = sample_layouts(SCENE, spec, torch.Generator().manual_seed(0), 300)
    again = sample_layouts(SCENE, spec, torch.Generator().manual_seed(0), 300)
    assert qpos.dtype == torch.float32 and qpos.shape == (300, SCENE.model.nq) and torch.equal(qpos, again)
    q = qpos.double().numpy()
    pos = {c: q[:, SCENE.cube(c)][:, :2] for c in CUBES} | {z: q[:, SCENE.zone(z)] for z in ZONES}
    assert not _violations(pos | {"bin": q[:, SCENE.bin]}, spec).any()
    reference = sample_layouts(SCENE, spec, np.random.default_rng(0), 300)
    # the same distribution: the mean start of every joint within a few standard errors
    se = reference.std(axis=0) / np.sqrt(300) + 1e-9
    assert (np.abs(q.mean(axis=0) - reference.mean(axis=0)) < 5 * np.sqrt(2) * se).all()
