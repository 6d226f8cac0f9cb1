"""worldsim tasks as LeRobot's evaluation loop reads them (``worldsim.envs.lerobot``), checked the
way ``lerobot-eval`` 0.4.4 reads an env: ``gym.make`` inside a synchronous vector env with
same-step autoreset, ``task_description`` and ``_max_episode_steps`` on the env it holds,
``pixels``/``agent_pos`` observations and ``final_info["is_success"]``."""

import gymnasium as gym
import numpy as np
import pytest

from worldsim.envs.lerobot import FEATURES, NAMESPACE, LeRobotEnv, feature_shapes, register_lerobot_envs


def lerobot_vector_env(env_id: str, num_envs: int, **kwargs) -> gym.vector.SyncVectorEnv:
    """What lerobot's ``make_env`` builds for a registered env type."""
    register_lerobot_envs()
    return gym.vector.SyncVectorEnv([lambda: gym.make(env_id, disable_env_checker=True, **kwargs)] * num_envs,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def test_physics_env_reads_as_lerobot_expects_and_matches_worldsim():
    env = lerobot_vector_env(f"{NAMESPACE}/PushCube-v0", 2, obs_mode="pixels", image_size=32)
    reference = gym.make("worldsim/PushCube-v0", obs_mode="pixels", image_size=32)
    try:
        inner = env.envs[0]
        assert isinstance(inner, LeRobotEnv)  # lerobot reads these attributes on the env it holds
        assert inner.task_description == "push the red cube onto the blue square" and inner.task == "PushCube-v0"
        assert env.call("_max_episode_steps") == (100, 100)
        assert env.call("task_description") == ("push the red cube onto the blue square",) * 2
        assert env.unwrapped.metadata["render_fps"] == 20
        obs, _ = env.reset(seed=[3, 4])
        assert set(obs) == {"pixels", "agent_pos"} and set(obs["pixels"]) == {"front"}
        assert obs["pixels"]["front"].shape == (2, 32, 32, 3) and obs["pixels"]["front"].dtype == np.uint8
        assert obs["agent_pos"].shape == (2, 4) and obs["agent_pos"].dtype == np.float32
        ref_obs, _ = reference.reset(seed=3)
        np.testing.assert_array_equal(obs["pixels"]["front"][0], ref_obs["image"])
        np.testing.assert_array_equal(obs["agent_pos"][0], ref_obs["proprio"])
        actions = np.random.default_rng(0).uniform(-1, 1, (5, 2, 4)).astype(np.float32)
        for action in actions:
            obs, reward, _, _, info = env.step(action)
            ref_obs, ref_reward, _, _, ref_info = reference.step(action[0])
            assert info["is_success"].dtype == bool and info["is_success"][0] == ref_info["success"]
        np.testing.assert_array_equal(obs["pixels"]["front"][0], ref_obs["image"])
        assert reward[0] == pytest.approx(ref_reward)
        features = feature_shapes(inner)
        assert features == {"action": ("ACTION", (4,)), "pixels/front": ("VISUAL", (32, 32, 3)),
                            "agent_pos": ("STATE", (4,))}
        assert set(features) <= set(FEATURES) and FEATURES["pixels/front"] == "observation.images.front"
    finally:
        env.close()
        reference.close()


def test_success_reaches_final_info_when_an_episode_ends():
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig

    env = lerobot_vector_env(f"{NAMESPACE}/ReachCube-v0", 1, obs_mode="state")
    expert = ScriptedExpert(ScriptedExpertConfig("ReachCube-v0"))
    try:
        obs, _ = env.reset(seed=0)
        assert set(obs) == {"environment_state"} and obs["environment_state"].shape == (1, 56)
        for _ in range(100):
            batch = expert.preprocess(obs["environment_state"])
            action = expert.act(batch, deterministic=True).actions[:, 0].numpy()
            obs, _, terminated, truncated, info = env.step(np.clip(action, -1, 1))
            if terminated[0] or truncated[0]:
                break
        assert "final_info" in info and info["final_info"]["is_success"].tolist() == [True]
    finally:
        env.close()


def test_imagined_env_reads_the_same_way(untrained_world_model, push_episodes):
    env = lerobot_vector_env(f"{NAMESPACE}/Imagined-PushCube-v0", 1, world_model=untrained_world_model,
                             keyframes=push_episodes, device="cpu")
    try:
        assert env.envs[0].task_description == "push the red cube onto the blue square"
        obs, _ = env.reset(seed=0)
        assert obs["pixels"]["front"].shape == (1, 32, 32, 3) and obs["agent_pos"].shape == (1, 4)
        obs, _, _, _, info = env.step(np.zeros((1, 4), np.float32))
        assert obs["pixels"]["front"].dtype == np.uint8 and info["is_success"].dtype == bool
    finally:
        env.close()


def test_unknown_task_is_refused_with_the_known_ones():
    with pytest.raises(KeyError, match="PushCube-v0"):
        LeRobotEnv(gym.make("worldsim/PushCube-v0").unwrapped, "PushCub-v0")


def test_a_lerobot_checkpoint_is_recognised_and_needs_lerobot(tmp_path, monkeypatch):
    import importlib.util

    from worldsim.policies import load_policy
    from worldsim.policies.lerobot import lerobot_checkpoint

    model = tmp_path / "act" / "checkpoints" / "last" / "pretrained_model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"type": "act"}')
    (model / "policy_preprocessor.json").write_text("{}")
    assert lerobot_checkpoint(tmp_path / "act") == model == lerobot_checkpoint(model)
    assert lerobot_checkpoint(tmp_path) is None
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lerobot" else real(name, *a))
    with pytest.raises(ImportError, match="LeRobot policy checkpoint; loading it needs lerobot installed"):
        load_policy(tmp_path / "act")
