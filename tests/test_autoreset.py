"""Vector semantics: autoreset modes, terminated vs truncated, time limit, info keys."""

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from worldsim.envs.vector_env import TabletopVectorEnv

from conftest import zero_actions


def finish_reach(env: TabletopVectorEnv, limit: int = 40):
    """Step the expert until some env succeeds; returns that step's results."""
    for _ in range(limit):
        out = env.step(env.expert_action())
        if (out[2] | out[3]).any():
            return out
    raise AssertionError("no env finished")


def test_time_limit_truncates_and_never_terminates(make_vec):
    envs = make_vec("PushCube-v0", 3, max_episode_steps=5, autoreset_mode="SameStep")
    envs.reset(seed=0)
    for step in range(1, 6):
        obs, reward, terminated, truncated, info = envs.step(zero_actions(3))
        assert not terminated.any()
        assert truncated.all() == (step == 5)
    # SAME_STEP: already reset, counters restart, last info kept in final_info
    assert (info["episode_step"] == 0).all()
    assert (info["final_info"]["episode_step"] == 5).all() and info["_final_info"].all()


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


def test_same_step_puts_final_obs_and_resets_in_place(make_vec):
    envs = make_vec("ReachCube-v0", 6, autoreset_mode=AutoresetMode.SAME_STEP)
    envs.reset(seed=0)
    obs, reward, terminated, truncated, info = finish_reach(envs.unwrapped)
    done = terminated | truncated
    np.testing.assert_array_equal(info["_final_obs"], done)
    for i in np.flatnonzero(done):
        final = info["final_obs"][i]
        assert final.shape == (56,) and not np.array_equal(final, obs[i])
        assert info["final_info"]["success"][i]
        assert info["episode_step"][i] == 0 and not info["success"][i]
    assert all(info["final_obs"][i] is None for i in np.flatnonzero(~done))


def test_next_step_resets_on_the_following_step_and_ignores_its_action(make_vec):
    envs = make_vec("ReachCube-v0", 6, autoreset_mode="NextStep")
    envs.reset(seed=0)
    obs, reward, terminated, truncated, info = finish_reach(envs.unwrapped)
    done = terminated | truncated
    assert "final_obs" not in info
    obs2, reward2, terminated2, truncated2, info2 = envs.step(np.full((6, 4), 1.0, np.float32))
    assert (reward2[done] == 0.0).all() and not (terminated2[done] | truncated2[done]).any()
    assert (info2["episode_step"][done] == 0).all()
    assert (info2["episode_step"][~done] == info["episode_step"][~done] + 1).all()


def test_disabled_mode_refuses_to_step_finished_envs_until_masked_reset(make_vec):
    envs = make_vec("ReachCube-v0", 6, autoreset_mode="Disabled")
    envs.reset(seed=0)
    obs, reward, terminated, truncated, info = finish_reach(envs.unwrapped)
    done = terminated | truncated
    with pytest.raises(RuntimeError, match=r"reset\(options=\{'reset_mask'"):
        envs.step(zero_actions(6))
    before = envs.unwrapped.physics.qpos.copy()
    obs2, info2 = envs.reset(options={"reset_mask": done})
    after = envs.unwrapped.physics.qpos
    np.testing.assert_array_equal(after[~done], before[~done])  # untouched
    assert not np.array_equal(after[done], before[done])
    assert (info2["episode_step"][done] == 0).all()
    envs.step(zero_actions(6))  # usable again


def test_metadata_reports_the_chosen_autoreset_mode(make_vec):
    for mode in AutoresetMode:
        assert make_vec("ReachCube-v0", 1, autoreset_mode=mode.value).metadata["autoreset_mode"] == mode
