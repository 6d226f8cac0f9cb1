"""Action chunks, grouped resets and exact snapshots of the physics vector env."""

import numpy as np
import pytest

from worldsim.envs.wrappers import ActionChunk


def test_chunk_equals_the_same_actions_stepped_one_by_one(make_vec):
    rng = np.random.default_rng(0)
    chunks = rng.uniform(-1, 1, (6, 3, 5, 4)).astype(np.float32)
    a = make_vec("PushCube-v0", 3, autoreset_mode="SameStep")
    b = make_vec("PushCube-v0", 3, autoreset_mode="SameStep")
    a.reset(seed=1)
    b.reset(seed=1)
    for chunk in chunks:
        obs_a, rew_a, term_a, trunc_a, info_a = a.step(chunk)
        rew_b = np.zeros(3)
        for k in range(5):
            obs_b, r, term_b, trunc_b, _ = b.step(chunk[:, k])
            rew_b += r
        np.testing.assert_array_equal(obs_a, obs_b)
        np.testing.assert_allclose(rew_a, rew_b)
        assert (info_a["chunk_steps"] == 5).all()


def test_an_episode_ending_inside_a_chunk_stops_there(make_vec):
    env = make_vec("ReachCube-v0", 2, max_episode_steps=7, autoreset_mode="NextStep")
    env.reset(seed=0)
    _, _, _, truncated, info = env.step(np.zeros((2, 5, 4), np.float32))
    assert not truncated.any() and (info["episode_step"] == 5).all()
    _, reward, _, truncated, info = env.step(np.zeros((2, 5, 4), np.float32))
    assert truncated.all() and (info["chunk_steps"] == 2).all() and (info["episode_step"] == 7).all()


def test_action_chunk_wrapper_declares_and_checks_the_chunk_space(make_vec):
    env = ActionChunk(make_vec("ReachCube-v0", 2), 4)
    assert env.action_space.shape == (2, 4, 4) and env.single_action_space.shape == (4, 4)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    with pytest.raises(ValueError, match=r"action chunk must have shape \(2, 4, 4\)"):
        env.step(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match="chunk_size"):
        ActionChunk(make_vec("ReachCube-v0", 2), 0)


def test_group_size_gives_each_group_one_layout(make_vec):
    env = make_vec("StackCube-v0", 6)
    obs, _ = env.reset(seed=3, options={"group_size": 3})
    np.testing.assert_array_equal(obs[0], obs[2])
    np.testing.assert_array_equal(obs[3], obs[5])
    assert np.abs(obs[0] - obs[3]).max() > 1e-3
    with pytest.raises(ValueError, match="group_size=4 does not divide the 6 envs"):
        env.reset(options={"group_size": 4})


def test_snapshot_restores_the_batch_bit_for_bit(make_vec):
    env = make_vec("PickPlaceCube-v0", 4, autoreset_mode="SameStep", max_episode_steps=20)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(13):
        env.step(rng.uniform(-1, 1, (4, 4)))
    snapshot = env.unwrapped.get_state()
    actions = rng.uniform(-1, 1, (30, 4, 4))  # crosses autoresets, which draw from the env RNG
    first = [env.step(a)[0] for a in actions]
    env.unwrapped.set_state(snapshot)
    second = [env.step(a)[0] for a in actions]
    np.testing.assert_array_equal(np.stack(first), np.stack(second))
    with pytest.raises(ValueError, match="num_envs=2"):
        make_vec("PickPlaceCube-v0", 2).unwrapped.set_state(snapshot)
