"""The video transformer's world models (``backbone="wan"``) through what the UNet's go through:
train-wm's exact resume, eval-wm, imagine, rank-policies and imagined-vs-real, the oracle and
video rungs, and co-evolution's world-model part. The imagined env's own contract runs on both
frame networks in test_world_model_env.py."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import write_toml
from safetensors.torch import load_file

from worldsim.commands.cli import main
from worldsim.pipelines.coevolve_parts import WorldModelRounds
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig
from worldsim.world_models import TrainWMConfig, WorldModel, build_config, train_world_model
from worldsim.world_models.config import merged

INSTRUCTION = "push the red cube onto the blue square"
# The video transformer at its smallest for 32x32 frames: one block, two heads of 12, 16 tokens a frame (the
# changes to the video-tiny preset), and MLPs as wide as its conditioning's.
SMALLEST = {"frames": {"backbone": "wan", "heads": 2, "head_dim": 12, "layers": 1, "ffn_dim": 32, "token_patch": 2,
                       "cond_hidden": 16},
            "proprio": {"hidden": 16}, "judge": {"hidden": 16, "detector_channels": 8}}
WAN = merged(SMALLEST, {"image_size": 32, "context": 2})


def config(episodes, out, **kwargs) -> TrainWMConfig:
    base = dict(data=episodes, out=out, steps=2, batch_size=4, val_fraction=0.25, val_every=2, val_horizon=2,
                video_every=0, checkpoint_every=2, torch_threads=1, device="cpu", progress=False,
                preset="video-tiny", model=merged(SMALLEST, {"objects": {"hidden": 32}, "dynamics": {"horizon": 4}}))
    return TrainWMConfig(**{**base, **kwargs})


@pytest.fixture(scope="module")
def trained(push_episodes, tmp_path_factory):
    """A 2-step train-wm run of the small video transformer with the object pathway."""
    out = tmp_path_factory.mktemp("wan_run") / "run"
    train_world_model(config(push_episodes, out))
    return out


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan_policies")
    for k in range(2):
        torch.manual_seed(k)
        TinyVLA(TinyVLAConfig(instructions=(INSTRUCTION,), image_size=32, language="learned", channels=(8, 8),
                              hidden_dim=32, feature_dim=32)).save_pretrained(root / f"p{k}")
    return [str(root / f"p{k}") for k in range(2)]


@pytest.mark.slow
def test_train_wm_resumes_a_video_model_exactly(push_episodes, trained, tmp_path):
    stopped = train_world_model(config(push_episodes, tmp_path / "resumed", time_budget=1e-6))
    assert stopped["steps"] == 1 and stopped["stopped_by"] == "time_budget"
    train_world_model(config(push_episodes, tmp_path / "resumed", resume=True))
    a = load_file(trained / "world_model" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "world_model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(k.startswith("frames.video.transformer.") for k in a)  # the video transformer's weights
    model = WorldModel.from_pretrained(trained)
    assert model.config.frames.backbone == "wan" and model.config.objects is not None


@pytest.mark.slow
def test_the_commands_take_a_video_model(push_episodes, trained, policies, tmp_path):
    on_cpu = write_toml(tmp_path / "cpu.toml", """
        [imagination]
        device = "cpu"
        """)
    common = ["--config-file", str(on_cpu), "--no-progress"]
    no_ceiling = write_toml(tmp_path / "eval.toml", "physics_ceiling = false\n")
    assert main(["eval-wm", "--world-model", str(trained), "--data", str(push_episodes), "--curve-steps", "3",
                 "--out", str(tmp_path / "eval"), "--videos", "0", "--episodes", "2", "--rung", "sim-seeded",
                 "--config-file", str(no_ceiling)]) == 0  # physics' own agreement does not depend on the model
    fidelity = json.loads((tmp_path / "eval" / "fidelity.json").read_text())
    assert fidelity["held_out"]["episodes"] == 2 and 0 < fidelity["psnr_at_8"] < 100
    assert main(["imagine", "--world-model", str(trained), "--data", str(push_episodes), "--policy", policies[0],
                 "--episodes", "1", "--steps", "3", "--out", str(tmp_path / "imagined.mp4")]) == 0
    assert (tmp_path / "imagined.mp4").stat().st_size > 0
    assert main(["rank-policies", "--world-model", str(trained), "--keyframes", str(push_episodes), "--episodes", "2",
                 "--imagined-episodes", "2", "--rung", "oracle", "--out", str(tmp_path / "rank"), *common,
                 "--policies", *policies]) == 0
    ranking = json.loads((tmp_path / "rank" / "ranking.json").read_text())
    assert ranking["rung"] == "oracle" and all(p["imagined"]["episodes"] == 2 for p in ranking["policies"])
    assert main(["imagined-vs-real", "--world-model", str(trained), "--keyframes", str(push_episodes), "--policy",
                 policies[1], "--starts", "3", "--horizon", "3", "--videos", "1", "--out", str(tmp_path / "ivr"),
                 *common]) == 0
    report = json.loads((tmp_path / "ivr" / "report.json").read_text())
    assert report["starts"] == 3 and report["rung"] == "pixels"


def test_the_oracle_and_video_rungs_take_a_video_model(push_episodes, tmp_path):
    """The rungs test_world_model_env.py leaves out: each imagines the same frames from the same seed."""
    torch.manual_seed(0)
    WorldModel(build_config(None, **merged(WAN, {"objects": {"hidden": 32}}))).save_pretrained(tmp_path / "pathway")
    video = merged(WAN, {"objects": None, "judge": {"outcome": "head"}, "state_supervision": False})
    WorldModel(build_config(None, **video)).save_pretrained(tmp_path / "video")
    actions = np.random.default_rng(0).uniform(-1, 1, (3, 2, 4)).astype(np.float32)
    for model, rung in (("pathway", "oracle"), ("video", "video")):
        frames = []
        for _ in range(2):
            env = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=2, world_model=tmp_path / model,
                               keyframes=push_episodes, device="cpu", rung=rung, terminate_on_success=False)
            obs, _ = env.reset(seed=3)
            frames.append([obs["image"]] + [env.step(a)[0]["image"] for a in actions])
            assert env.observation_space.contains(obs) and env.unwrapped.rung.name == rung
            env.close()
        assert np.array_equal(np.stack(frames[0]), np.stack(frames[1])), rung
        assert not np.array_equal(frames[0][0], frames[0][-1]), rung  # the frames change as the robot moves


@pytest.mark.parametrize("name", ["video-tiny", "video-base"])
def test_coevolution_trains_and_refines_the_video_presets(push_episodes, tmp_path, name):
    wm = WorldModelRounds(preset=name, steps=3, refine_steps=2)
    first = wm.train_config(push_episodes, tmp_path / "a", None, 0, device="cpu")
    assert first.preset == name and first.model == {} and first.steps == 3
    assert first.architecture == build_config(name) and first.architecture.frames.backbone == "wan"
    # a refinement keeps the model's own architecture, on the video rung (no state supervision) too
    for state_supervision in (True, False):
        again = wm.train_config(push_episodes, tmp_path / "b", tmp_path / "a", 1, device="cpu",
                                state_supervision=state_supervision)
        assert again.init == tmp_path / "a" and again.steps == 2 and again.model == {} and again.state_supervision
    video = wm.train_config(push_episodes, tmp_path / "c", None, 0, device="cpu", state_supervision=False)
    assert not video.state_supervision and video.architecture.without_state().objects is None
