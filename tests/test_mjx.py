"""The MJX (JAX) backend: equivalence with the MuJoCo backend, array interop and bad input (the
shared vector-env contract is test_conformance.py's).

Every MJX env here has 4 envs, so the whole module shares one compiled physics step, compiled
once per test run (the ``mjx_compiled`` fixture).
"""

import importlib.util

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import assert_follows_mujoco, backend_envs, host, same_start

from worldsim.envs.families import make_family
from worldsim.envs.layout import sample_layouts
from worldsim.envs.mjx import core
from worldsim.envs.mjx.state import EnvState, task_params
from worldsim.envs.observations import STATE_LAYOUT, state_vector
from worldsim.envs.scene import Scene
from worldsim.envs.tasks import TASKS

N = 4


@pytest.fixture(autouse=True)
def make(mjx_compiled, make_vec):
    """MJX envs (``backend=`` for another), 4 each: every test here shares one compiled physics step."""
    return backend_envs(make_vec, "mjx")


# ------------------------------------------------------------------ equivalence
@pytest.mark.parametrize("task", ["ReachCube-v0", "PushCube-v0", "PickPlaceCube-v0", "StackCube-v0"])
def test_mjx_matches_mujoco_over_a_short_horizon(make, task):
    """Same start, same actions (the expert's, so contacts happen), 6 steps (0.3 s): positions
    within 1.5 cm, rewards within 0.05, the same success and termination flags. In free space
    the backends agree to float32 precision; the slack is for contacts, which MJX generates
    with its own box-box routine (4 points per pair, float32). An env is compared until its
    episode ends: the layouts the two backends then draw come from different random numbers."""
    assert_follows_mujoco(make(task, backend="mujoco"), make(task))


def test_free_space_motion_matches_to_float32_precision(make):
    cpu, mjx_env = make(backend="mujoco"), make()
    same_start(cpu, mjx_env, seed=0)
    actions = np.array([[1.0, -0.5, 1.0, -1.0], [-1.0, 0.2, 0.5, 1.0], [0.3, 1.0, 0.8, 0.0], [0, 0, 1.0, 1.0]],
                       np.float32)
    for _ in range(4):  # upwards: nothing touches anything
        obs_c, rew_c, *_ = cpu.step(actions)
        obs_m, rew_m, *_ = host(mjx_env.step(actions))
    np.testing.assert_allclose(np.asarray(mjx_env.unwrapped.state.qpos), cpu.unwrapped.physics.qpos, atol=2e-4)
    np.testing.assert_allclose(obs_m, obs_c, atol=2e-3)  # velocities included
    np.testing.assert_allclose(rew_m, rew_c, atol=1e-4)


def test_jax_layouts_follow_the_mujoco_backends_rules(make):
    """Layouts are JAX's random numbers but the same distribution: clearances hold, gripper
    and cubes start where the MuJoCo backend puts them, seeds repeat."""
    env = make("PushCube-v0")
    obs_a, _ = env.reset(seed=5)
    obs_b, _ = env.reset(seed=5)
    np.testing.assert_array_equal(host(obs_a), host(obs_b))
    starts = []
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        obs = host(obs)
        starts.append(obs)
        assert not host(info["success"]).any() and not host(info["failure"]).any()
    obs = np.concatenate(starts)
    tcp = obs[:, STATE_LAYOUT["tcp_pos"]]
    assert (np.abs(tcp[:, 0]) <= 0.08).all() and ((tcp[:, 1] >= -0.12) & (tcp[:, 1] <= -0.04)).all()
    cubes = np.stack([obs[:, STATE_LAYOUT[f"{c}_cube_pos"]] for c in ("red", "green", "yellow")], 1)
    np.testing.assert_allclose(cubes[..., 2], 0.02)
    gaps = np.abs(cubes[:, :, None, :2] - cubes[:, None, :, :2]).max(-1)
    assert (gaps[:, [0, 0, 1], [1, 2, 2]] >= 0.07).all()
    assert len(np.unique(cubes[:, 0, 0])) == len(cubes)


@pytest.mark.parametrize("task", ["ReachCube-v0", "ReachZone-v0", "PushCube-v0", "PickPlaceCube-ToBlue-v0",
                                  "StackCube-YellowOnRed-v0"])
def test_the_task_rules_on_jax_batches_are_the_numpy_rules(task):
    """MJX evaluates the families' own array-API code: on float32 JAX batches it gives the numpy
    (float64) success, terms, reward, failure and ``state`` to float32 precision."""
    scene, spec, rng = Scene.load(), TASKS[task], np.random.default_rng(0)
    qpos = sample_layouts(scene, spec, rng, 32)
    near = rng.random(32) < 0.5  # the gripper at the task's cube, half closed: grasps happen
    qpos[near, scene.ee] = scene.cube_pos(qpos, spec.obj or "red")[near] + rng.normal(0, 0.015, (near.sum(), 3))
    qpos[:, scene.fingers] = rng.uniform(0.01, 0.022, (32, 2))
    qvel = rng.normal(size=(32, scene.model.nv))
    state = EnvState(jnp.asarray(qpos, jnp.float32), jnp.asarray(qvel, jnp.float32), jnp.zeros(qvel.shape), None)
    success, failure, reward, terms = host(core.evaluate_envs(spec, task_params(spec), state))
    family = make_family(spec, scene)
    ref = family.evaluate(qpos)
    assert terms.keys() == ref.terms.keys()
    assert (success == ref.success).mean() > 0.95  # float32 may flip a threshold
    np.testing.assert_array_equal(failure, scene.failed(qpos, qvel))
    np.testing.assert_allclose(reward, ref.dense_reward(), atol=1e-5)
    for name, term in ref.terms.items():
        np.testing.assert_allclose(terms[name], term, atol=1e-5)
    np.testing.assert_allclose(host(core.observe(spec, state)), state_vector(scene, family, qpos, qvel), atol=1e-5)


# ------------------------------------------------------------------ backend-specific semantics
@pytest.mark.parametrize("backend", ["mujoco", "mjx"])
def test_staggered_warmup_moves_the_physical_state(make, backend):
    env = make("ReachCube-v0", backend=backend, max_episode_steps=20, reset_schedule="staggered-warmup")
    obs, info = host(env.reset(seed=0))
    steps = info["episode_step"]
    assert steps.max() > 0
    moved = np.abs(obs[:, STATE_LAYOUT["tcp_vel"]]).max(axis=1) > 1e-3
    np.testing.assert_array_equal(moved, steps > 0)  # warmed-up envs are in motion, fresh ones at rest


# ------------------------------------------------------------------ interop
def test_numpy_jax_and_torch_actions_give_the_same_step(make):
    env = make("PushCube-v0")
    env.reset(seed=0)
    snapshot = env.unwrapped.get_state()
    actions = np.random.default_rng(0).uniform(-1, 1, (N, 4)).astype(np.float32)
    results = []
    for converted in (actions, jnp.asarray(actions), torch.from_numpy(actions.copy()).requires_grad_()):
        env.unwrapped.set_state(snapshot)
        obs, reward, *_ = env.step(converted)
        assert isinstance(obs, jax.Array) and isinstance(reward, jax.Array)  # results stay on the device
        results.append((np.asarray(obs), np.asarray(reward)))
    for obs, reward in results[1:]:
        np.testing.assert_array_equal(obs, results[0][0])
        np.testing.assert_array_equal(reward, results[0][1])
    # DLPack the other way: observations into torch without a copy
    assert torch.from_dlpack(env.step(actions)[0]).shape == (N, 56)


# ------------------------------------------------------------------ bad input
def test_bad_actions_are_rejected_like_the_mujoco_backend(make):
    env = make("PushCube-v0")
    env.reset(seed=0)
    before = env.unwrapped.get_state()["qpos"]
    bad = np.zeros((N, 4), np.float32)
    bad[2, 1] = np.nan
    for given in (bad, jnp.asarray(bad), torch.from_numpy(bad)):
        with pytest.raises(ValueError, match=r"actions for envs \[2\] contain NaN"):
            env.step(given)
    np.testing.assert_array_equal(env.unwrapped.get_state()["qpos"], before)  # nothing changed
    with pytest.raises(ValueError, match=r"actions must have shape \(num_envs, 4\) = \(4, 4\)"):
        env.step(jnp.zeros((N, 3)))
    with pytest.raises(TypeError, match="dtype bool"):
        env.step(np.zeros((N, 4), bool))


def test_bad_arguments_name_what_is_allowed(make):
    with pytest.raises(ValueError, match="backend='jax' is not a backend; allowed: 'mujoco', 'mjx'"):
        make(backend="jax")
    with pytest.raises(ValueError, match="obs_mode='pixels' is not supported with backend='mjx'"):
        make(obs_mode="pixels")
    with pytest.raises(TypeError, match="did you mean 'reset_schedule'"):
        make(reset_schedul="staggered")
    env = make()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(np.zeros((N, 4), np.float32))


def test_missing_jax_gives_an_install_hint(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a))
    with pytest.raises(ImportError, match=r'pip install "worldsim\[mjx\]"'):
        gym.make_vec("worldsim/ReachCube-v0", num_envs=2, backend="mjx")
