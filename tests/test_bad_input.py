"""Bad input gets a clear error naming what was wrong and what is allowed; nothing changes."""

import gymnasium as gym
import numpy as np
import pytest
from conftest import zero_actions

from worldsim.envs.single_env import TabletopEnv
from worldsim.envs.vector_env import TabletopVectorEnv


@pytest.fixture
def envs():
    env = TabletopVectorEnv("PushCube-v0", 3)
    env.reset(seed=0)
    yield env
    env.close()


@pytest.mark.parametrize(
    ("actions", "error", "match"),
    [
        (np.zeros((3, 3), np.float32), ValueError, r"shape \(num_envs, 4\) = \(3, 4\).*got shape \(3, 3\)"),
        (np.zeros(4, np.float32), ValueError, r"got shape \(4,\)"),
        (np.array([["a"] * 4] * 3), TypeError, "float array"),
        (np.array([[0, 0, np.nan, 0], [0] * 4, [np.inf, 0, 0, 0]], np.float32), ValueError,
         r"envs \[0, 2\] contain NaN or inf"),
    ],
)
def test_bad_actions_are_rejected_and_change_nothing(envs, actions, error, match):
    state = envs.physics.state.copy()
    steps = envs._elapsed.copy()
    with pytest.raises(error, match=match):
        envs.step(actions)
    np.testing.assert_array_equal(envs.physics.state, state)
    np.testing.assert_array_equal(envs._elapsed, steps)
    envs.step(zero_actions(3))  # still usable
    assert (envs._elapsed == steps + 1).all()


def test_out_of_range_finite_actions_are_clipped(envs):
    saved = envs.physics.state.copy()
    big, _, _, _, _ = envs.step(np.full((3, 4), 7.5, np.float32))
    envs.physics.state[:] = saved
    envs._elapsed[:] -= 1
    one, _, _, _, _ = envs.step(np.full((3, 4), 1.0, np.float32))
    np.testing.assert_array_equal(big, one)


def test_integer_actions_are_accepted(envs):
    envs.step(np.zeros((3, 4), np.int64))


@pytest.mark.parametrize("num_envs", [0, -2, 100_000, 2.5, True])
def test_num_envs_out_of_range(num_envs):
    with pytest.raises(ValueError, match="num_envs=.* out of range; allowed: an int from 1 to 65536"):
        TabletopVectorEnv("PushCube-v0", num_envs)


def test_unknown_kwargs_are_named_with_a_suggestion():
    with pytest.raises(TypeError, match=r"'obs_mod' \(did you mean 'obs_mode'\?\)"):
        gym.make_vec("worldsim/PushCube-v0", num_envs=2, obs_mod="state")
    with pytest.raises(TypeError, match="'colour'"):
        gym.make("worldsim/PushCube-v0", colour="red")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"obs_mode": "rgb"}, "obs_mode='rgb' is not a mode; allowed: state, pixels, pixels\\+state"),
        ({"reward_type": "shaped"}, "allowed: dense, sparse"),
        ({"autoreset_mode": "later"}, "autoreset_mode='later' is not a mode; allowed: 'NextStep'"),
        ({"image_size": 4, "obs_mode": "pixels"}, r"image_size=4 must be"),
        ({"render_mode": "human"}, "allowed: None, 'rgb_array'"),
        ({"max_episode_steps": -1}, "max_episode_steps=-1 must be an int >= 1"),
    ],
)
def test_bad_constructor_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TabletopVectorEnv("PushCube-v0", 2, **kwargs)


def test_unknown_task_id():
    with pytest.raises(KeyError, match="Unknown task 'PushBall-v0'"):
        TabletopVectorEnv("PushBall-v0", 2)


def test_step_before_reset_and_bad_reset_options():
    env = TabletopVectorEnv("PushCube-v0", 2)
    with pytest.raises(RuntimeError, match=r"call reset\(\) first"):
        env.step(zero_actions(2))
    with pytest.raises(RuntimeError, match="first reset"):
        env.reset(options={"reset_mask": np.array([True, False])})
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"bool array of shape \(2,\)"):
        env.reset(options={"reset_mask": np.array([1, 0])})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"mask": np.array([True, False])})
    env.close()


def test_single_env_rejects_batched_action_and_stepping_after_the_end():
    # gym.make would take max_episode_steps for its own TimeLimit wrapper; build it directly
    env = TabletopEnv("ReachCube-v0", max_episode_steps=2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action must have shape \(4,\)"):
        env.step(np.zeros((1, 4), np.float32))
    env.step(np.zeros(4, np.float32))
    _, _, terminated, truncated, _ = env.step(np.zeros(4, np.float32))
    assert truncated and not terminated
    with pytest.raises(RuntimeError, match="finished their episode"):
        env.step(np.zeros(4, np.float32))
    env.reset()
    env.step(np.zeros(4, np.float32))
    env.close()


def test_without_libegl_state_envs_run_and_rendering_says_what_is_missing():
    """A machine without libEGL (the GPU image this work was lent) failed at `import worldsim`:
    MuJoCo imports PyOpenGL's EGL with MUJOCO_GL=egl. There worldsim leaves MuJoCo's OpenGL off:
    state envs run, and a pixel env refuses with what to install."""
    import os
    import subprocess
    import sys

    script = """
import ctypes.util, os
ctypes.util.find_library = lambda name: None  # as on a machine without libEGL
import gymnasium as gym, numpy as np, worldsim
assert os.environ["MUJOCO_GL"] == "disable", os.environ["MUJOCO_GL"]
env = gym.make("worldsim/PushCube-v0", obs_mode="state")
env.reset(seed=0)
env.step(np.zeros(4, np.float32))
try:
    gym.make("worldsim/PushCube-v0", obs_mode="pixels").reset(seed=0)
except RuntimeError as err:
    print(err)
"""
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert "rendering needs OpenGL, and MUJOCO_GL='disable' switches it off" in out.stdout
    assert "apt install libegl1" in out.stdout
