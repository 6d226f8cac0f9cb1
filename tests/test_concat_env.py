"""ConcatVectorEnv: several vector envs (tasks) stepped as one batch, with merged infos."""

import gymnasium as gym
import numpy as np
import pytest

from worldsim.envs.concat import ConcatVectorEnv


def make_pair(autoreset_mode="SameStep", obs_mode="state", **kwargs):
    return ConcatVectorEnv([
        gym.make_vec("worldsim/ReachCube-v0", num_envs=2, obs_mode=obs_mode, autoreset_mode=autoreset_mode,
                     max_episode_steps=3, **kwargs),
        gym.make_vec("worldsim/PushCube-v0", num_envs=3, obs_mode=obs_mode, autoreset_mode=autoreset_mode,
                     max_episode_steps=5, **kwargs)])


def test_concatenated_batch_matches_its_parts():
    env = make_pair()
    reach = gym.make_vec("worldsim/ReachCube-v0", num_envs=2, obs_mode="state", autoreset_mode="SameStep",
                         max_episode_steps=3)
    push = gym.make_vec("worldsim/PushCube-v0", num_envs=3, obs_mode="state", autoreset_mode="SameStep",
                        max_episode_steps=5)
    obs, info = env.reset(seed=7)
    np.testing.assert_array_equal(obs, np.concatenate([reach.reset(seed=7)[0], push.reset(seed=8)[0]]))
    assert env.observation_space.shape == (5, 56) and env.action_space.shape == (5, 4)
    actions = np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32)
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(actions)
        r_obs, r_reward, _, r_trunc, r_info = reach.step(actions[:2])
        p_obs, p_reward, _, _, _ = push.step(actions[2:])
        np.testing.assert_array_equal(reward, np.concatenate([r_reward, p_reward]))
    # reach ended at its 3-step limit (SameStep: final_obs), push did not: its rows are filled
    assert truncated.tolist() == [True, True, False, False, False]
    assert info["_final_obs"].tolist() == truncated.tolist()
    assert info["final_obs"][3] is None and info["final_obs"][0].shape == (56,)
    assert info["final_info"]["success"].shape == (5,) and info["reward_terms"]["reach"].shape == (5,)
    np.testing.assert_array_equal(info["episode_step"], [0, 0, 3, 3, 3])
    for e in (env, reach, push):
        e.close()


def test_pixel_instructions_chunks_snapshots_and_masks():
    env = make_pair(obs_mode="pixels", image_size=16)
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (5, 16, 16, 3) and len(obs["instruction"]) == 5
    assert obs["instruction"][0] != obs["instruction"][4]
    snapshot = env.get_state()
    chunk = np.zeros((5, 2, 4), np.float32)
    first = env.step(chunk)
    env.set_state(snapshot)
    again = env.step(chunk)
    np.testing.assert_array_equal(first[0]["image"], again[0]["image"])
    assert again[4]["chunk_steps"].tolist() == [2] * 5
    obs, _ = env.reset(options={"reset_mask": np.array([True, False, False, False, True])})
    np.testing.assert_array_equal(obs["image"][1:4], again[0]["image"][1:4])
    with pytest.raises(ValueError, match="5 rows"):
        env.step(np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="shape \\(5,\\)"):
        env.reset(options={"reset_mask": np.ones(3, bool)})
    env.close()


def test_mismatched_envs_are_refused():
    a = gym.make_vec("worldsim/ReachCube-v0", num_envs=1, obs_mode="state")
    b = gym.make_vec("worldsim/ReachCube-v0", num_envs=1, obs_mode="pixels", image_size=16)
    with pytest.raises(ValueError, match="must observe the same space"):
        ConcatVectorEnv([a, b])
    with pytest.raises(ValueError, match="at least one"):
        ConcatVectorEnv([])
    a.close()
    b.close()
