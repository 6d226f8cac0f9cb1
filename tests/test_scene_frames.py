"""Imagined states drawn by the scene's renderer (the ``oracle`` rung): the frame is the state the
outcome is judged on, drawn as the physics env draws its observation, and nothing is denoised."""

import shutil

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
from conftest import NO_PATHWAY, small_config

import worldsim.training.grpo
import worldsim.training.rl
from worldsim.data.collect import collect_episodes
from worldsim.envs.imagination import ImaginationConfig
from worldsim.evaluation.evaluate import evaluate_policy
from worldsim.evaluation.imagine import imagine_episodes
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig
from worldsim.world_models import EpisodeBank, WorldModel
from worldsim.world_models.data import image_camera
from worldsim.world_models.evaluate import evaluate_world_model
from worldsim.world_models.outcome import TaskRules
from worldsim.world_models.replay import open_loop
from worldsim.world_models.scene_frames import SceneFrames

ORACLE = ImaginationConfig(rung="oracle")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Noisy expert pushes (with ``state``), pixels-only ones, and small untrained world models with
    and without the object pathway."""
    root = tmp_path_factory.mktemp("scene_frames")
    expert = lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.3))  # noqa: E731
    collect_episodes(["PushCube-v0"], expert, 3, root / "push.h5", num_envs=3, image_size=32, progress=False)
    shutil.copy(root / "push.h5", root / "pixels.h5")
    with h5py.File(root / "pixels.h5", "a") as f:  # as if recorded with obs_mode="pixels"
        for episode in f["data"].values():
            del episode["obs/state"]
    torch.manual_seed(0)
    WorldModel(small_config(objects={"hidden": 32, "carry": False}, judge={"outcome": "rule"})
               ).save_pretrained(root / "pathway")
    WorldModel(small_config(NO_PATHWAY)).save_pretrained(root / "frames_only")
    return root


def test_a_recorded_state_is_drawn_as_it_was_observed(files):
    bank = EpisodeBank(files / "push.h5")
    rows = np.arange(len(bank.images))  # every step of every push: cubes turned and moved, fingers open and shut
    drawn = SceneFrames(TaskRules(("PushCube-v0",), image_camera(32, 32)), 32, len(rows))
    drawn.start(rows, bank.state[rows])
    points, heights = bank.recorded_objects(rows)
    frames = drawn.draw(rows, torch.from_numpy(bank.proprio[rows]), points, heights)
    drawn.close()
    assert frames.shape == bank.images.shape and frames.dtype == np.uint8
    # the positions round-trip through the camera (pixels and heights): all but a few edge pixels match
    assert (frames == bank.images).all(axis=-1).mean() > 0.999


def test_rendered_imagination_draws_the_judged_state_without_denoising(files):
    env = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=3, world_model=files / "pathway",
                       keyframes=files / "push.h5", device="cpu", rung="oracle", reset_schedule="synchronous",
                       terminate_on_success=False)
    world = env.unwrapped
    obs, _ = env.reset(seed=0)
    bank = world.bank
    assert np.array_equal(obs["image"], bank.images[bank.obs_start[world.start_episode]])  # real start frames

    def never(*args, **kwargs):
        raise AssertionError("a rendered step denoised a frame")

    world.model.frames.edm.sample = never
    context = world._rollout.context.clone()
    actions = np.random.default_rng(0).uniform(-1, 1, (4, 3, 4)).astype(np.float32)
    for action in actions:
        obs, _, _, _, info = env.step(action)
        rollout = world._rollout
        state = (rollout.proprio[:, -1], rollout.points[:, -1], rollout.heights[:, -1])
        assert np.array_equal(obs["image"], world.scene_frames.draw(np.arange(3), *state))
        assert np.allclose(obs["proprio"], state[0].numpy())
        success, _ = world.model.rules.outcome(world._task, *state)
        assert info["success"].tolist() == success.tolist()  # judged on the state the frame shows
    assert torch.equal(world._rollout.context, context)  # no frame was imagined, none joined the context
    assert not np.array_equal(obs["image"], bank.images[bank.obs_start[world.start_episode]])  # the gripper moved
    env.close()


def test_undrawn_predictions_keep_the_dynamics_and_the_verdict(files):
    model = WorldModel.from_pretrained(files / "pathway")
    bank = EpisodeBank(files / "push.h5")
    rows = bank.context_rows(np.arange(3), np.array([0, 5, 9]), model.config.context)
    rollout = model.start(torch.from_numpy(bank.images[rows]), torch.from_numpy(bank.images[bank.obs_start]),
                          torch.from_numpy(bank.proprio[rows]), bank.recorded_objects(rows))
    action, task = torch.rand(3, 4) * 2 - 1, torch.zeros(3, dtype=torch.long)
    drawn = model.predict(rollout, action, task, generator=torch.Generator().manual_seed(0))
    undrawn = model.predict(rollout, action, task, draw=False)
    assert undrawn.latent is None and drawn.latent is not None
    for name in ("proprio", "points", "heights", "success_prob", "failed"):
        assert torch.equal(getattr(undrawn, name), getattr(drawn, name)), name
    advanced = rollout.advance(undrawn)
    assert torch.equal(advanced.context, rollout.context)
    assert torch.equal(advanced.proprio[:, -1], undrawn.proprio)
    with pytest.raises(ValueError, match="draw=False needs the object pathway"):
        WorldModel.from_pretrained(files / "frames_only").predict(rollout, action, task, draw=False)


def test_rendered_frames_need_the_pathway_and_recorded_states(files):
    def make(**kwargs):
        kwargs = {"world_model": files / "pathway", "keyframes": files / "push.h5", "device": "cpu", **kwargs}
        return gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=1, **kwargs)

    with pytest.raises(ValueError, match="rung='painted'; allowed: oracle, sim-seeded, pixels, video"):
        make(rung="painted")
    with pytest.raises(ValueError, match="rung='oracle'.*no object pathway.*use rung 'pixels'"):
        make(rung="oracle", world_model=files / "frames_only")
    with pytest.raises(ValueError, match="rung='oracle'.*pixels.h5.*no 'state'.*use rung 'pixels'"):
        make(rung="oracle", keyframes=files / "pixels.h5")
    make(rung="pixels", keyframes=files / "pixels.h5").close()  # the world model's own frames need no state


def test_trainers_and_evaluations_pass_the_rung_on(files, tmp_path):
    instruction = "push the red cube onto the blue square"
    TinyVLA(TinyVLAConfig(instructions=(instruction,), image_size=32, language="learned", channels=(8, 8),
                          hidden_dim=32, feature_dim=32)).save_pretrained(tmp_path / "vla")
    policy = worldsim.training.rl.load_policy(tmp_path / "vla", torch.device("cpu"))
    for rung in ("sim-seeded", "oracle"):
        config = worldsim.training.grpo.GRPOConfig(
            task="PushCube-v0", obs_mode="pixels", policy=str(tmp_path / "vla"), num_envs=2, group_size=2,
            out=tmp_path / "grpo", device="cpu",
            imagination=ImaginationConfig(files / "pathway", files / "push.h5", rung=rung))
        env = worldsim.training.rl.make_train_env(config, 2, policy, reset_schedule="keyframe")
        assert (env.unwrapped.scene_frames is not None) == (rung == "oracle")
        env.close()
    imagination = ImaginationConfig(files / "pathway", files / "push.h5", device="cpu", rung="oracle")
    result = evaluate_policy(policy, ["PushCube-v0"], 3, num_envs=2, progress=False, imagination=imagination)
    assert result.tasks["PushCube-v0"].episodes == 3


def test_replays_and_fidelity_reports_draw_the_imagined_state(files, tmp_path):
    model = WorldModel.from_pretrained(files / "pathway")
    bank = EpisodeBank(files / "push.h5")
    run = open_loop(model, bank, np.arange(3), np.zeros(3, np.int64), 5, imagination=ORACLE)
    drawn = SceneFrames(model.rules, 32, 3)
    drawn.start(np.arange(3), bank.state[bank.obs_start])
    assert np.array_equal(run.imagined[:, 0], run.real[:, 0])
    for k in range(1, 6):
        state = (torch.from_numpy(run.imagined_proprio[:, k]), torch.from_numpy(run.points[:, k]),
                 torch.from_numpy(run.heights[:, k]))
        assert np.array_equal(run.imagined[:, k], drawn.draw(np.arange(3), *state))
    drawn.close()
    report = evaluate_world_model(model, bank, imagination=ORACLE, curve_steps=4, physics_ceiling=False, videos=0,
                                  progress=False)
    assert report["rung"] == "oracle" and len(report["episode_start"]["psnr"]) == 4
    video = imagine_episodes(files / "pathway", files / "push.h5", tmp_path / "imagined.mp4", episodes=2, steps=3,
                             imagination=ORACLE)
    assert video.episodes == 2 and video.path.stat().st_size > 0
    with pytest.raises(ValueError, match="no object pathway"):
        open_loop(WorldModel.from_pretrained(files / "frames_only"), bank, np.arange(1), np.zeros(1, np.int64), 2,
                  imagination=ORACLE)
    with pytest.raises(ValueError, match="pixels.h5.*no 'state'"):
        open_loop(model, EpisodeBank(files / "pixels.h5"), np.arange(1), np.zeros(1, np.int64), 2, imagination=ORACLE)
