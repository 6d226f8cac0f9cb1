"""The vector-env contract (:mod:`worldsim.envs.core`), one suite run unchanged against every
backend: MuJoCo on the CPU, MJX (JAX), MuJoCo Warp (torch tensors, on Warp's CPU device here)
and the imagined env (an untrained world model: the contract does not depend on its weights).
Backend-specific behaviour is tested beside each backend (test_mjx.py, test_warp.py,
test_world_model_env.py, test_env_*.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import host
from gymnasium.vector import AutoresetMode

N = 4
BACKENDS = ["mujoco", "mjx", "warp", "imagined"]


def row(obs: Any, i: int) -> np.ndarray:
    """Env i's observation as one flat array (every key but the instruction)."""
    if isinstance(obs, dict):
        return np.concatenate([np.ravel(v[i]) for k, v in sorted(obs.items()) if k != "instruction"])
    return np.ravel(obs[i])


def same_snapshot(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_snapshot(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@dataclass
class Backend:
    """How the suite makes envs of one backend."""

    name: str
    make: Callable[..., gym.vector.VectorEnv]
    #: keyword arguments that make every episode end in success within a few steps, and the
    #: actions that get there
    succeeding: dict[str, Any]
    driver: Callable[[gym.vector.VectorEnv], Any]


@pytest.fixture(scope="module")
def imagined_files(tmp_path_factory):
    from conftest import NO_PATHWAY, small_config

    from worldsim.data.collect import collect_episodes
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
    from worldsim.world_models import WorldModel

    root = tmp_path_factory.mktemp("conformance")
    collect_episodes(["PushCube-v0", "ReachCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.3)),
                     8, root / "starts.h5", num_envs=4, image_size=32, progress=False)
    torch.manual_seed(0)
    WorldModel(small_config(NO_PATHWAY, tasks=("PushCube-v0", "ReachCube-v0"),
                            instructions=("push the red cube onto the blue square",
                                          "move the gripper above the red cube"))
               ).save_pretrained(root / "wm")
    return root / "wm", root / "starts.h5"


@pytest.fixture(params=BACKENDS)
def backend(request, make_vec) -> Backend:
    name = request.param
    if name == "mujoco":
        return Backend(name, lambda task="PushCube-v0", num_envs=N, **kw: make_vec(task, num_envs, **kw),
                       {}, lambda env: env.unwrapped.expert_action())
    if name == "mjx":
        request.getfixturevalue("mjx_compiled")
        return Backend(name, lambda task="PushCube-v0", num_envs=N, **kw: make_vec(task, num_envs, backend="mjx", **kw),
                       {}, lambda env: env.unwrapped.expert_action())
    if name == "warp":
        request.getfixturevalue("warp_compiled")
        return Backend(name, lambda task="PushCube-v0", num_envs=N, **kw: make_vec(task, num_envs, backend="warp",
                                                                                  device="cpu", **kw),
                       {}, lambda env: env.unwrapped.expert_action())
    world_model, starts = request.getfixturevalue("imagined_files")

    def make_imagined(task="PushCube-v0", num_envs=N, **kw):
        return make_vec(f"Imagined-{task}", num_envs, world_model=world_model, keyframes=starts, device="cpu",
                        **{"reset_schedule": "synchronous", **kw})

    # every imagined frame counts as a success
    return Backend(name, make_imagined, {"success_threshold": 1e-6}, lambda env: np.zeros((N, 4), np.float32))


def run_until_done(backend: Backend, env, limit: int = 40, driver: Callable[[Any], Any] | None = None):
    """Step ``env`` with ``driver``'s actions (the backend's by default) until some env finishes:
    that step's results, on the host."""
    driver = driver or backend.driver
    for _ in range(limit):
        out = host(env.step(driver(env)))
        if (out[2] | out[3]).any():
            return out
    raise AssertionError("no env finished")


def zeros() -> np.ndarray:
    return np.zeros((N, 4), np.float32)


# ------------------------------------------------------------------ spaces and info
def test_spaces_dtypes_and_info_keys(backend):
    env = backend.make()
    obs, info = host(env.reset(seed=0))
    assert env.action_space.shape == (N, 4) and env.single_action_space.shape == (4,)
    assert env.observation_space.contains(obs)
    assert sorted(info) == ["episode_step", "failure", "is_success", "reward_terms", "success"]
    assert info["success"].shape == info["failure"].shape == info["episode_step"].shape == (N,)
    obs, reward, terminated, truncated, info = host(env.step(zeros()))
    assert env.observation_space.contains(obs)
    assert sorted(k for k in info if not k.startswith("_") and "final" not in k) == [
        "episode_step", "failure", "is_success", "reward_terms", "success"]
    assert reward.shape == terminated.shape == truncated.shape == (N,)
    assert terminated.dtype == truncated.dtype == info["success"].dtype == bool
    assert np.issubdtype(info["episode_step"].dtype, np.integer) and (info["episode_step"] == 1).all()
    assert all(v.shape == (N,) for v in info["reward_terms"].values())


def test_is_success_stands_beside_success_in_info_and_final_info(backend):
    """Stable-Baselines3's evaluation and callbacks read ``is_success``."""
    env = backend.make(autoreset_mode="SameStep", **backend.succeeding)
    _, info = host(env.reset(seed=0))
    assert np.array_equal(info["is_success"], info["success"])
    _, _, terminated, truncated, info = run_until_done(backend, env)
    assert np.array_equal(info["is_success"], info["success"])
    done = terminated | truncated
    final = info["final_info"]
    assert np.array_equal(final["is_success"][done], final["success"][done])


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_metadata_reports_the_chosen_autoreset_mode(backend, mode):
    assert backend.make(autoreset_mode=mode.value).metadata["autoreset_mode"] == mode


# ------------------------------------------------------------------ episodes and autoreset
def test_time_limit_truncates_and_same_step_reports_final_obs_and_info(backend):
    env = backend.make(max_episode_steps=3, autoreset_mode="SameStep")
    env.reset(seed=0)
    for step in range(1, 4):
        obs, _, terminated, truncated, info = host(env.step(zeros()))
        assert not terminated.any() and truncated.all() == (step == 3)
    assert (info["episode_step"] == 0).all()
    assert (info["final_info"]["episode_step"] == 3).all() and info["_final_info"].all()
    assert info["_final_obs"].all()
    for i in range(N):
        assert not np.array_equal(_final_row(info, i), row(obs, i))  # the last observation, not the new start


def _final_row(info: dict[str, Any], i: int) -> np.ndarray:
    final = info["final_obs"]
    if isinstance(final, np.ndarray) and final.dtype == object:  # Gymnasium's object array
        item = final[i]
        return np.concatenate([np.ravel(v) for k, v in sorted(item.items()) if k != "instruction"]) \
            if isinstance(item, dict) else np.ravel(item)
    return row(final, i)  # dense (accelerator backends)


def test_success_terminates_and_rewards_one(backend):
    task = "PushCube-v0" if backend.name == "imagined" else "ReachCube-v0"
    env = backend.make(task, autoreset_mode="SameStep", **backend.succeeding)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = run_until_done(backend, env)
    done = terminated | truncated
    assert not (terminated & truncated).any()
    np.testing.assert_array_equal(info["_final_info"], done)
    assert (reward[terminated] == 1.0).all() and (reward[~terminated] < 1.0).all()
    for i in np.flatnonzero(terminated):
        assert info["final_info"]["success"][i] and info["episode_step"][i] == 0


def test_next_step_restarts_on_the_following_step_and_ignores_its_action(backend):
    env = backend.make(max_episode_steps=40, reset_schedule="staggered")
    env.reset(seed=0)
    _, _, terminated, truncated, info = run_until_done(backend, env, 12, lambda env: zeros())
    done = terminated | truncated
    assert done.any() and not done.all() and "final_obs" not in info
    _, reward, terminated2, truncated2, info2 = host(env.step(np.ones((N, 4), np.float32)))
    assert (reward[done] == 0.0).all() and not (terminated2[done] | truncated2[done]).any()
    assert (info2["episode_step"][done] == 0).all()
    assert (info2["episode_step"][~done] == info["episode_step"][~done] + 1).all()


def test_disabled_mode_refuses_finished_envs_until_a_masked_reset(backend):
    env = backend.make(max_episode_steps=40, reset_schedule="staggered", autoreset_mode="Disabled")
    env.reset(seed=0)
    obs, _, terminated, truncated, _ = run_until_done(backend, env, 12, lambda env: zeros())
    done = terminated | truncated
    assert done.any() and not done.all()
    with pytest.raises(RuntimeError, match=r"reset\(options=\{'reset_mask'"):
        env.step(zeros())
    obs2, info2 = host(env.reset(options={"reset_mask": done}))
    for i in range(N):
        assert np.array_equal(row(obs2, i), row(obs, i)) != done[i]  # only the masked envs start over
    assert (info2["episode_step"][done] == 0).all() and (info2["episode_step"][~done] > 0).all()
    env.step(zeros())  # usable again


def test_chunks_execute_open_loop_and_stop_where_the_episode_ends(backend):
    env = backend.make(max_episode_steps=4)
    env.reset(seed=0)
    env.step(zeros())
    _, reward, _, truncated, info = host(env.step(np.zeros((N, 5, 4), np.float32)))
    assert info["chunk_steps"].tolist() == [3] * N  # the time limit ends the episode inside the chunk
    assert truncated.all() and (info["episode_step"] == 4).all() and reward.shape == (N,)
    assert "chunk_steps" not in env.step(zeros())[4]  # after the NextStep restart: plain steps


def test_staggered_schedule_spreads_phases_and_group_resets_share_starts(backend):
    env = backend.make(max_episode_steps=40, reset_schedule="staggered")
    _, info = host(env.reset(seed=0))
    assert sorted(info["episode_step"].tolist()) == [0, 10, 20, 30]
    obs, _ = host(env.reset(seed=1, options={"group_size": 2}))
    assert np.array_equal(row(obs, 0), row(obs, 1)) and np.array_equal(row(obs, 2), row(obs, 3))
    assert not np.array_equal(row(obs, 0), row(obs, 2))
    with pytest.raises(ValueError, match="group_size=3 does not divide the 4 envs"):
        env.reset(options={"group_size": 3})


# ------------------------------------------------------------------ seeding and snapshots
def test_same_seed_same_episodes(backend):
    def rollout(seed):
        env = backend.make(autoreset_mode="SameStep", max_episode_steps=3)
        trace = [row(host(env.reset(seed=seed)[0]), i) for i in range(N)]
        actions = np.random.default_rng(0).uniform(-1, 1, (5, N, 4)).astype(np.float32)
        for a in actions:
            obs, reward, *_ = host(env.step(a))
            trace += [row(obs, i) for i in range(N)] + [reward]
        return trace

    a, b, c = rollout(7), rollout(7), rollout(8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_snapshots_resume_exactly_across_autoresets(backend):
    env = backend.make(autoreset_mode="SameStep", max_episode_steps=3)
    env.reset(seed=0)
    env.step(zeros())
    snapshot = env.unwrapped.get_state()
    actions = np.random.default_rng(1).uniform(-1, 1, (4, N, 4)).astype(np.float32)
    first = [host(env.step(a)[:2]) for a in actions]  # crosses an autoreset, which draws new starts
    env.unwrapped.set_state(snapshot)
    second = [host(env.step(a)[:2]) for a in actions]
    for (o1, r1), (o2, r2) in zip(first, second, strict=True):
        assert all(np.array_equal(row(o1, i), row(o2, i)) for i in range(N))
        np.testing.assert_array_equal(r1, r2)
    with pytest.raises(ValueError, match="num_envs=2"):
        backend.make(num_envs=2).unwrapped.set_state(snapshot)


# ------------------------------------------------------------------ bad input
def test_bad_actions_are_rejected_and_change_nothing(backend):
    env = backend.make()
    env.reset(seed=0)
    before = env.unwrapped.get_state()
    bad = zeros()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"actions for envs \[2\] contain NaN or inf"):
        env.step(bad)
    with pytest.raises(ValueError, match=r"actions must have shape \(num_envs, 4\) = \(4, 4\)"):
        env.step(np.zeros((N, 3), np.float32))
    with pytest.raises(TypeError, match="dtype bool"):
        env.step(np.zeros((N, 4), bool))
    assert same_snapshot(env.unwrapped.get_state(), before)
    _, _, _, _, info = host(env.step(np.full((N, 4), 7.0, np.float32)))  # finite: clipped, accepted
    assert (info["episode_step"] == 1).all()


def test_bad_arguments_and_calls_name_what_is_allowed(backend):
    with pytest.raises(TypeError, match="did you mean 'reset_schedule'"):
        backend.make(reset_schedul="staggered")
    with pytest.raises(ValueError, match="num_envs=0 is out of range"):
        backend.make(num_envs=0)
    with pytest.raises(ValueError, match="autoreset_mode='later' is not a mode"):
        backend.make(autoreset_mode="later")
    with pytest.raises(ValueError, match="max_episode_steps=0 must be an int >= 1"):
        backend.make(max_episode_steps=0)
    env = backend.make()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(zeros())
    with pytest.raises(RuntimeError, match="the first reset"):
        env.reset(options={"reset_mask": np.array([True, False, True, True])})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"reset_mask_": None})
    with pytest.raises(ValueError, match=r"reset_mask must be a bool array of shape \(4,\)"):
        env.reset(options={"reset_mask": np.ones(3, bool)})
