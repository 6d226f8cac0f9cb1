"""Rewards of the physics backend at the end of an episode (the autoreset modes, time limit and
info keys of every backend are test_conformance.py's)."""

import numpy as np

from worldsim.envs.vector_env import TabletopVectorEnv


def finish_reach(env: TabletopVectorEnv, limit: int = 40):
    """Step the expert until some env succeeds; returns that step's results."""
    for _ in range(limit):
        out = env.step(env.expert_action())
        if (out[2] | out[3]).any():
            return out
    raise AssertionError("no env finished")


def test_success_terminates_and_rewards_one(make_vec):
    envs = make_vec("ReachCube-v0", 4, autoreset_mode="Disabled")
    envs.reset(seed=0)
    obs, reward, terminated, truncated, info = finish_reach(envs.unwrapped)
    assert (terminated == info["success"]).all() and not (terminated & truncated).any()
    assert (reward[terminated] == 1.0).all() and (reward[~terminated] < 1.0).all()


def test_sparse_reward_is_success_indicator(make_vec):
    envs = make_vec("ReachCube-v0", 4, reward_type="sparse", autoreset_mode="Disabled")
    envs.reset(seed=0)
    obs, reward, terminated, truncated, info = finish_reach(envs.unwrapped)
    np.testing.assert_array_equal(reward, info["success"].astype(float))


def test_same_step_final_obs_is_gymnasiums_object_array(make_vec):
    envs = make_vec("ReachCube-v0", 6, autoreset_mode="SameStep")
    envs.reset(seed=0)
    obs, reward, terminated, truncated, info = finish_reach(envs.unwrapped)
    done = terminated | truncated
    assert info["final_obs"].dtype == object
    assert all(info["final_obs"][i].shape == (56,) for i in np.flatnonzero(done))
    assert all(info["final_obs"][i] is None for i in np.flatnonzero(~done))
