"""The LeRobot user's round trip (docs/lerobot.md) at tiny budgets: worldsim episodes -> `worldsim
export` -> `lerobot-train` (ACT) -> `lerobot-eval-worldsim` in physics and in imagination -> the
same policy through `worldsim evaluate`, which must act exactly as lerobot's own loop does.

It needs lerobot, which pins an older torch than worldsim's main environment: CI runs it in the
environment docs/lerobot.md installs (`.ci/run`, where WORLDSIM_LEROBOT_ROUNDTRIP=required turns a
missing lerobot into a failure); elsewhere it is skipped."""

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

if os.environ.get("WORLDSIM_LEROBOT_ROUNDTRIP") == "required":  # CI's LeRobot environment: never skipped
    import lerobot  # noqa: F401
    import lerobot_env_worldsim  # noqa: F401
else:
    pytest.importorskip("lerobot")
    pytest.importorskip("lerobot_env_worldsim")

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
       "WANDB_MODE": "disabled"}
TINY_ACT = ["--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false",
            "--policy.pretrained_backbone_weights=null", "--policy.chunk_size=5", "--policy.n_action_steps=5",
            "--policy.dim_model=32", "--policy.n_heads=4", "--policy.dim_feedforward=64",
            "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1", "--policy.latent_dim=8",
            "--steps=20", "--batch_size=4", "--num_workers=0", "--eval_freq=0", "--log_freq=10",
            "--wandb.enable=false"]


def run(*argv: str, cwd: Path) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def trained(push_episodes, tmp_path_factory):
    """An ACT policy lerobot-train trained for 20 steps on the export of four PushCube episodes."""
    work = tmp_path_factory.mktemp("lerobot_roundtrip")
    run(BIN / "worldsim", "export", "--data", push_episodes, "--out", work / "push_lerobot", "--no-state", cwd=work)
    run(BIN / "lerobot-train", "--dataset.repo_id=worldsim/push", f"--dataset.root={work / 'push_lerobot'}",
        *TINY_ACT, f"--output_dir={work / 'act'}", cwd=work)
    return work


def test_lerobot_eval_runs_the_policy_on_worldsim_in_physics_and_imagination(trained, untrained_world_model,
                                                                                push_episodes):
    checkpoint = trained / "act" / "checkpoints" / "last" / "pretrained_model"
    common = [f"--policy.path={checkpoint}", "--policy.device=cpu", "--env.type=worldsim", "--env.task=PushCube-v0",
              "--env.image_size=32", "--eval.n_episodes=2", "--eval.batch_size=2"]
    run(BIN / "lerobot-eval-worldsim", *common, f"--output_dir={trained / 'physics'}", cwd=trained)
    run(BIN / "lerobot-eval-worldsim", *common, f"--env.world_model={untrained_world_model}",
        f"--env.keyframes={push_episodes}", "--env.device=cpu", f"--output_dir={trained / 'imagined'}", cwd=trained)
    for arm in ("physics", "imagined"):
        info = json.loads((trained / arm / "eval_info.json").read_text())
        assert info["overall"]["n_episodes"] == 2, arm
        assert len(info["per_task"][0]["metrics"]["successes"]) == 2, arm


def test_worldsim_acts_as_lerobots_own_loop(trained):
    """The first action on the same observation, and the return of the same four whole episodes
    under lerobot's rollout loop and under worldsim's evaluation."""
    from lerobot.envs.factory import make_env_pre_post_processors
    from lerobot.envs.utils import add_envs_task, preprocess_observation
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot.scripts.lerobot_eval import rollout
    from lerobot_env_worldsim import WorldsimEnv

    from worldsim.evaluation.evaluate import evaluate_task
    from worldsim.policies import load_policy
    from worldsim.policies.lerobot import LeRobotPolicy
    from worldsim.rollout import slot_seed

    checkpoint = trained / "act"
    ours = load_policy(checkpoint)
    assert isinstance(ours, LeRobotPolicy) and ours.env_kwargs() == {"obs_mode": "pixels", "image_size": 32,
                                                                     "wrist_camera": False}
    # lerobot's path: its vector env, its observation preprocessing, its select_action
    model_dir = checkpoint / "checkpoints" / "last" / "pretrained_model"
    config = WorldsimEnv(task="PushCube-v0", image_size=32)
    theirs = get_policy_class("act").from_pretrained(str(model_dir))
    theirs.eval()
    pre, post = make_pre_post_processors(theirs.config, pretrained_path=str(model_dir),
                                         preprocessor_overrides={"device_processor": {"device": "cpu"}})
    envs = config.make_envs(2)["worldsim"][0]
    try:
        obs, _ = envs.reset(seed=[5, 6])
        with torch.no_grad():
            action = post(theirs.select_action(pre(add_envs_task(envs, preprocess_observation(obs)))))
    finally:
        envs.close()
    # worldsim's path: its own env seeded alike, the adapter's chunk
    worldsim_env = gym.make_vec("worldsim/PushCube-v0", num_envs=1, **ours.env_kwargs())
    chunks = []
    for seed in (5, 6):
        wobs, _ = worldsim_env.reset(seed=seed)
        chunks.append(ours.act(ours.preprocess(wobs), deterministic=True).actions[0])
    worldsim_env.close()
    np.testing.assert_allclose(torch.stack(chunks)[:, 0].numpy(), action.numpy(), rtol=1e-5, atol=1e-6)
    # whole episodes: lerobot's loop on the starts worldsim gives its episodes 0-3 under seed 0
    envs = config.make_envs(4)["worldsim"][0]
    env_pre, env_post = make_env_pre_post_processors(config, theirs.config)
    try:
        data = rollout(envs, theirs, env_pre, env_post, pre, post, seeds=[slot_seed(0, k) for k in range(4)])
    finally:
        envs.close()
    done = data["done"].int()
    running = torch.cumsum(torch.cat([torch.zeros_like(done[:, :1]), done[:, :-1]], dim=1), dim=1) == 0
    returns = (data["reward"] * running).sum(dim=1)
    result = evaluate_task(ours, "PushCube-v0", 4, num_envs=4, seed=0, progress=False)
    assert result.mean_length == pytest.approx(float(running.sum(dim=1).float().mean()))
    assert result.mean_return == pytest.approx(float(returns.mean()), rel=1e-4, abs=1e-6)
