import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from worldsim.envs.observations import STATE_DIM, STATE_LAYOUT
from worldsim.envs.vector_env import TabletopVectorEnv


@pytest.mark.parametrize("obs_mode", ["state", "pixels", "pixels+state"])
def test_single_env_passes_gymnasium_check_env(obs_mode):
    env = gym.make("worldsim/PushCube-v0", obs_mode=obs_mode, wrist_camera=obs_mode == "pixels")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_state_obs_is_a_flat_float32_box_with_named_layout():
    env = gym.make("worldsim/PushCube-v0")
    assert isinstance(env.observation_space, gym.spaces.Box)
    assert env.observation_space.shape == (STATE_DIM,) == (56,)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs in env.observation_space
    # the task's object is the red cube, its goal the blue zone
    np.testing.assert_allclose(obs[STATE_LAYOUT["object_pos"]], obs[STATE_LAYOUT["red_cube_pos"]])
    np.testing.assert_allclose(obs[STATE_LAYOUT["goal_pos"]][:2], obs[STATE_LAYOUT["blue_zone_xy"]])
    env.close()


def test_pixel_observation_keys_shapes_and_instruction(make_vec):
    envs = make_vec("StackCube-v0", 3, obs_mode="pixels+state", image_size=(48, 40), wrist_camera=True)
    obs, _ = envs.reset(seed=0)
    assert obs["image"].shape == (3, 48, 40, 3) and obs["image"].dtype == np.uint8
    assert obs["wrist_image"].shape == (3, 48, 40, 3)
    assert obs["proprio"].shape == (3, 4) and obs["state"].shape == (3, STATE_DIM)
    assert obs["instruction"] == ("stack the red cube on the green cube",) * 3
    assert obs["image"].std() > 10  # a real picture, not a blank buffer
    assert obs in envs.observation_space
    # different layouts give different pictures
    assert not np.array_equal(obs["image"][0], obs["image"][1])


def test_render_returns_frames_for_every_env(make_vec):
    envs = make_vec("ReachCube-v0", 2, render_mode="rgb_array", render_size=32)
    envs.reset(seed=0)
    assert envs.render().shape == (2, 32, 32, 3)


def test_same_seed_same_trajectory_and_other_seed_differs():
    def rollout(seed):
        env = TabletopVectorEnv("PickPlaceCube-v0", 4)
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(123)
        trace = [obs]
        for _ in range(20):
            obs, reward, *_ = env.step(rng.uniform(-1, 1, (4, 4)).astype(np.float32))
            trace += [obs, reward]
        env.close()
        return trace

    a, b, c = rollout(7), rollout(7), rollout(8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def test_batched_physics_matches_sequential_mj_step():
    import mujoco

    env = TabletopVectorEnv("PushCube-v0", 3)
    env.reset(seed=1)
    actions = np.tile(np.array([[0.5, -0.3, -0.8, 1.0]], np.float32), (3, 1))
    ctrl = env._controls(actions.astype(np.float64))
    model, data = env.model, mujoco.MjData(env.model)
    expected = []
    for i in range(3):
        mujoco.mj_resetData(model, data)
        data.qpos[:] = env.physics.qpos[i]
        data.ctrl[:] = ctrl[i]
        for _ in range(env.physics.frame_skip):
            mujoco.mj_step(model, data)
        expected.append(data.qpos.copy())
    env.step(actions)
    np.testing.assert_allclose(env.physics.qpos, np.array(expected), atol=1e-9)
    env.close()


def test_actions_move_the_end_effector_as_documented():
    env = TabletopVectorEnv("ReachCube-v0", 1)
    obs, _ = env.reset(seed=0)
    start = obs[0, STATE_LAYOUT["tcp_pos"]].copy()
    for _ in range(3):
        obs, *_ = env.step(np.array([[0.0, 0.0, 1.0, -1.0]], np.float32))
    rise = obs[0, STATE_LAYOUT["tcp_pos"]][2] - start[2]
    assert 0.06 < rise <= 0.09 + 1e-3  # up to 3 cm per step
    obs, *_ = env.step(np.array([[0.0, 0.0, 0.0, 1.0]], np.float32))
    obs, *_ = env.step(np.array([[0.0, 0.0, 0.0, 1.0]], np.float32))
    assert obs[0, STATE_LAYOUT["fingers"]].sum() < 0.005  # closed
    env.close()
