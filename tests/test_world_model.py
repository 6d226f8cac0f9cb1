"""World model: frames <-> latents, EDM pieces, save/load, training (outputs, exact resume, fine-tuning,
two processes), balanced success sampling, threshold calibration, keyframes, evaluation and the three
commands."""

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
import torch.utils.tensorboard  # noqa: F401  (imported once here, not in each forked rank)
from conftest import NO_PATHWAY, noisy_push_episodes, small_config, write_toml
from safetensors.torch import load_file

from worldsim.commands.parsing import parse
from worldsim.commands.world_model import EvalWMArgs, eval_wm, imagine, train_wm
from worldsim.data.collect import collect_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.observations import ENTITIES, ENTITY_HEIGHTS, entity_positions
from worldsim.evaluation.imagine import imagine_episodes
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig
from worldsim.runtime.device import host_to_device
from worldsim.world_models import (
    EpisodeBank,
    KeyframeRule,
    TrainWMConfig,
    WorldModel,
    WorldModelConfig,
    build_config,
    evaluate_world_model,
    select_keyframes,
    train_world_model,
)
from worldsim.world_models.config import LEGACY_FIELDS, ObjectPathwayConfig, UNetConfig, WanConfig
from worldsim.world_models.evaluate import held_out_bank
from worldsim.world_models.frames import Conditions
from worldsim.world_models.latents import frames_to_latents, latents_to_frames
from worldsim.world_models.metrics import (
    action_gap,
    agreement,
    calibrate_threshold,
    gripper_error_curve,
    success_agreement,
)
from worldsim.world_models.model import LEGACY_PREFIXES
from worldsim.world_models.replay import OpenLoop
from worldsim.world_models.success_head import SuccessHead, keypoint_loss

# The architecture these runs train: WorldModelConfig's defaults (the tiny preset without its
# gripper planes, first-frame anchor and training noise levels), rolled out 4 steps in training.
DEFAULTS = {"frames": {"gripper_planes": False, "anchor": "last"}, "diffusion": {"p_mean": -1.2, "p_std": 1.2},
            "dynamics": {"horizon": 4}}


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    return noisy_push_episodes(tmp_path_factory.mktemp("wm") / "push.h5", 6)


def config(episodes, out, **kwargs) -> TrainWMConfig:
    base = dict(data=episodes, out=out, steps=8, batch_size=4, val_fraction=0.2, val_every=4, val_horizon=3,
                video_every=8, video_steps=4, checkpoint_every=4, torch_threads=1, device="cpu",
                progress=False, model=DEFAULTS)
    return TrainWMConfig(**{**base, **kwargs})


@pytest.fixture(scope="module")
def trained(episodes, tmp_path_factory):
    out = tmp_path_factory.mktemp("wm_run") / "run"
    summary = train_world_model(config(episodes, out))
    return out, summary


def test_space_to_depth_round_trips_frames_exactly():
    frames = torch.randint(0, 256, (2, 3, 32, 32, 3), dtype=torch.uint8)
    latents = frames_to_latents(frames, 4)
    assert latents.shape == (2, 3, 48, 8, 8) and latents.min() >= -1 and latents.max() <= 1
    assert torch.equal(latents_to_frames(latents, 4), frames)


@pytest.mark.slow
def test_edm_preconditioning_schedule_and_one_step_sampling():
    model = WorldModel(small_config(NO_PATHWAY)).eval()
    frames, den, schedule = model.frames, model.frames.edm, model.config.diffusion
    sigma = torch.tensor([1e-4, 0.5, 5.0])
    assert torch.allclose(den.c_skip(sigma)[0], torch.tensor(1.0), atol=1e-6)  # no noise: keep the input
    # EDM's unit-variance target: c_out^2 = (1 - c_skip)^2 sigma_data^2 + c_skip^2 sigma^2
    skip, sd = den.c_skip(sigma), schedule.sigma_data
    assert torch.allclose(den.c_out(sigma) ** 2, (1 - skip) ** 2 * sd**2 + skip**2 * sigma**2)
    sigmas = den.sigmas(3, torch.device("cpu"))
    assert sigmas[0] == pytest.approx(schedule.sigma_max) and sigmas[-1] == 0
    assert sigmas[-2] == pytest.approx(schedule.sigma_min, rel=1e-4)
    assert (sigmas[:-1] > sigmas[1:]).all()
    # one Euler step from sigma_max to 0 lands exactly on the denoiser's estimate
    top, embed_dim = schedule.sigma_max, 4 * model.config.frames.channels[0]  # the UNet's time-embedding width
    context, cond = torch.randn(2, 48 * 3 + 10, 8, 8), torch.randn(2, embed_dim)
    with torch.no_grad():
        x = den.sample(frames.network, (context, cond), (2, 48, 8, 8), context, 1, torch.Generator().manual_seed(0))
        noise = top * torch.randn((2, 48, 8, 8), generator=torch.Generator().manual_seed(0))
        expected = den.denoise(frames.network, noise, torch.full((2,), top), (context, cond))
    assert torch.allclose(x, expected, atol=1e-5)


def test_keypoint_detector_loss_finds_the_target_pixel_and_skips_objects_out_of_view():
    heat = torch.full((1, 2, 8, 8), -20.0)
    heat[0, 0, 3, 5] = 20.0  # entity 0 peaks at column 5, row 3: pixel centre (5.5, 3.5)
    heat[0, 1, 0, 0] = 20.0
    head = SuccessHead(build_config(None, image_size=8, patch=2, frames={"channels": (8,), "norm_groups": 4},
                                    judge={"detector_channels": 4}))
    points = head.keypoints(heat)
    assert torch.allclose(points[0, 0], torch.tensor([5.5, 3.5]), atol=1e-4)
    target = torch.tensor([[[5.5, 3.5], [-3.0, 4.0]]])  # entity 1 is out of view: left out
    loss, distance = keypoint_loss(heat, points, target)
    assert loss.item() < 1e-3 and distance.item() < 1e-3
    far, distance = keypoint_loss(heat, points, torch.tensor([[[1.5, 3.5], [-3.0, 4.0]]]))
    assert far.item() > 10 and abs(distance.item() - 4.0) < 1e-3
    # an untrained head starts at the rare-success prior, not at 50% on every frame
    torch.manual_seed(0)
    probs = torch.sigmoid(head(torch.randn(16, 12, 4, 4), torch.zeros(16, dtype=torch.long), torch.randn(16, 4)))
    assert probs.max() < 0.1


@pytest.mark.parametrize("object_pathway", [False, True])
def test_save_and_load_round_trip_and_bad_checkpoints(tmp_path, object_pathway):
    pathway = {"objects": {"carry": False}} if object_pathway else {"objects": None}
    model = WorldModel(small_config(pathway, judge={"outcome": "head"})).eval()
    model.set_normalization(np.array([0.1, 0.2, 0.3, 0.04]), np.array([0.5, 0.5, 0.5, 0.01]))
    model.save_pretrained(tmp_path / "wm")
    loaded = WorldModel.from_pretrained(tmp_path / "wm")
    assert loaded.config == model.config and torch.equal(loaded.scale.std, model.scale.std)
    frames = torch.randint(0, 256, (3, 2, 32, 32, 3), dtype=torch.uint8)
    start = (frames, frames[:, 0], torch.rand(3, 2, 4))
    action, task = torch.rand(3, 4), torch.zeros(3, dtype=torch.long)
    a = model.predict(model.start(*start), action, task, generator=torch.Generator().manual_seed(1))
    b = loaded.predict(loaded.start(*start), action, task, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.latent, b.latent) and torch.equal(a.proprio, b.proprio)
    assert (a.points is not None) == object_pathway
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        WorldModel.from_pretrained(tmp_path)
    document = json.loads((tmp_path / "wm" / "config.json").read_text())
    document["config"]["frames"]["channels"] = [16, 64]
    (tmp_path / "wm" / "config.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="do not fit"):
        WorldModel.from_pretrained(tmp_path / "wm")
    with pytest.raises(ValueError, match="preset='huge' is not a world-model preset"):
        build_config("huge")
    with pytest.raises(ValueError, match="patch=5"):
        WorldModelConfig(image_size=32, patch=5)
    with pytest.raises(ValueError, match="halvings"):
        build_config(None, image_size=32, frames={"channels": (16, 16, 16, 16, 16)})
    # a field no frame generator has
    with pytest.raises(ValueError, match=r"unknown setting\(s\) channel in \[frames\]"):
        build_config(None, frames={"channel": (16, 32)})
    with pytest.raises(ValueError, match="cannot imagine task 'StackCube-v0'"):
        model.task_index("StackCube-v0")
    with pytest.raises(ValueError, match="success_threshold=1.0"):
        small_config(judge={"success_threshold": 1.0})


def flat_legacy_config(config: WorldModelConfig) -> dict:
    """``config`` as models were saved before their parts had configs of their own: one flat table
    (every field of both backbones, those of the other at their defaults; ``LEGACY_FIELDS`` reversed)."""
    nested = dataclasses.asdict(config)
    flat = {k: v for k, v in nested.items() if not isinstance(v, dict) and v is not None}
    flat |= {"backbone": config.frames.backbone, "cond_hidden": config.frames.cond_hidden,
             "object_pathway": config.objects is not None}
    defaults = {"frames": dataclasses.asdict(UNetConfig()) | dataclasses.asdict(WanConfig()),
                "objects": dataclasses.asdict(ObjectPathwayConfig())}
    for old, (part, key) in LEGACY_FIELDS.items():
        table = nested[part] if nested[part] is not None and key in nested[part] else defaults[part]
        flat[old] = table[key]
    return json.loads(json.dumps(flat))  # as JSON holds it: lists for tuples


@pytest.mark.parametrize("backbone", ["unet", "wan"])
def test_a_model_saved_with_the_flat_config_and_old_weight_names_loads_as_it_was(tmp_path, backbone):
    from safetensors.torch import save_file

    if backbone == "unet":  # with the object pathway, judged by the rule
        config = small_config(objects={"hidden": 32, "carry": True}, diffusion={"sampling_steps": 2},
                              judge={"outcome": "rule", "success_threshold": 0.4})
    else:  # frames alone, as the video rung's
        wan = WanConfig(heads=2, head_dim=12, layers=1, ffn_dim=32, token_patch=2, cond_hidden=32)
        config = small_config(NO_PATHWAY, state_supervision=False).without_state()
        config = dataclasses.replace(config, frames=wan)
    torch.manual_seed(0)
    model = WorldModel(config).eval()
    model.set_normalization(np.array([0.1, 0.2, 0.3, 0.04]), np.array([0.5, 0.5, 0.5, 0.01]))
    model.save_pretrained(tmp_path / "wm")
    document = json.loads((tmp_path / "wm" / "config.json").read_text())
    document["config"] = flat_legacy_config(config)
    (tmp_path / "wm" / "config.json").write_text(json.dumps(document))
    weights = load_file(tmp_path / "wm" / "model.safetensors")
    old = {}
    for key, tensor in weights.items():
        new, before = next(((n, o) for o, n in LEGACY_PREFIXES if key.startswith(n)), (None, None))
        old[key if new is None else before + key[len(new):]] = tensor
    before = {"denoiser", "proprio_head", "success_head", "proprio_mean", "proprio_std"}
    before |= {"cond_mlp", "objects"} if backbone == "unet" else set()  # the video transformer has its own MLP
    assert {k.split(".")[0] for k in old} == before
    save_file(old, tmp_path / "wm" / "model.safetensors")
    loaded = WorldModel.from_pretrained(tmp_path / "wm")
    assert loaded.config == config
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values(),
                                                  strict=True))
    frames = torch.randint(0, 256, (3, 2, 32, 32, 3), dtype=torch.uint8)
    start = (frames, frames[:, 0], torch.rand(3, 2, 4))
    action, task = torch.rand(3, 4), torch.zeros(3, dtype=torch.long)
    a = model.predict(model.start(*start), action, task, generator=torch.Generator().manual_seed(1))
    b = loaded.predict(loaded.start(*start), action, task, generator=torch.Generator().manual_seed(1))
    for name in ("latent", "proprio", "success_prob", "points", "heights"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None and y is None) or torch.equal(x, y), name


def test_gripper_planes_put_a_blob_where_the_camera_sees_the_tcp():
    model = WorldModel(small_config(NO_PATHWAY, frames={"gripper_planes": True})).eval()
    plain = WorldModel(small_config(NO_PATHWAY)).eval()
    assert model.frames.unet.config.in_channels == plain.frames.unet.config.in_channels + 2
    size, patch = model.config.latent_size, model.config.patch
    now, then = torch.tensor([0.08, -0.06, 0.05, 0.04]), torch.tensor([-0.1, 0.1, 0.12, 0.04])
    context = torch.zeros(1, 2, model.config.latent_channels, size, size)
    conditions = Conditions.of(model.scale, now.expand(1, 2, 4), model.scale.normalize(then[None]), torch.zeros(1, 4),
                               torch.zeros(1, dtype=torch.long), len(model.config.tasks))
    stack = model.frames.stack(context, context[:, 0], conditions)
    assert stack.shape[1] == model.frames.unet.config.in_channels - model.config.latent_channels
    for plane, tcp in zip(stack[0, -2:], (now, then), strict=True):
        column, row = (model.frames.image_camera.project(tcp[:3]) / patch).floor().long().tolist()
        assert divmod(int(plane.argmax()), size) == (row, column) and plane.max() > 0.5
    frames = torch.randint(0, 256, (2, 2, 32, 32, 3), dtype=torch.uint8)
    pred = model.predict(model.start(frames, frames[:, 0], torch.rand(2, 2, 4)), torch.rand(2, 4),
                         torch.zeros(2, dtype=torch.long), generator=torch.Generator().manual_seed(0))
    assert pred.latent.shape == (2, model.config.latent_channels, size, size)
    # a UNet input: no field of Wan's
    with pytest.raises(ValueError, match=r"unknown setting\(s\) gripper_planes in \[frames\]"):
        build_config(None, frames={"backbone": "wan", "gripper_planes": True})


def test_the_calibrated_threshold_travels_with_the_model(tmp_path):
    model = WorldModel(small_config(NO_PATHWAY, judge={"success_threshold": 0.37}))
    model.save_pretrained(tmp_path / "wm")
    assert WorldModel.from_pretrained(tmp_path / "wm").config.judge.success_threshold == 0.37


def test_threshold_calibration_picks_the_most_accurate_cut():
    # successes score 0.3, 0.6, 0.9; failures 0.1, 0.2, 0.5: no cut is perfect; cutting between 0.2
    # and 0.3 gets 5 of 6 right (one failure, at 0.5, above), as does cutting between 0.5 and 0.6
    # (the success at 0.3 below); the two best cuts are 0.25 and 0.55 and the middle one of the
    # best candidates is taken
    scores = np.array([0.3, 0.6, 0.9, 0.1, 0.2, 0.5])
    labels = np.array([1, 1, 1, 0, 0, 0], bool)
    threshold = calibrate_threshold(scores, labels)
    assert threshold in (pytest.approx(0.25), pytest.approx(0.55))
    assert ((scores >= threshold) == labels).mean() == pytest.approx(5 / 6)
    # separable scores: the cut lands in the gap, wherever the classes sit in (0, 1)
    assert 0.02 < calibrate_threshold(np.array([0.01, 0.02, 0.03, 0.04]), np.array([0, 0, 1, 1], bool)) < 0.03
    assert calibrate_threshold(np.array([0.999, 0.9999]), np.array([0, 1], bool)) < 1
    with pytest.raises(ValueError, match="needs both classes"):
        calibrate_threshold(np.array([0.2, 0.7]), np.array([1, 1], bool))
    with pytest.raises(ValueError, match="equal-length"):
        calibrate_threshold(np.array([0.2, 0.7]), np.array([1], bool))


def test_state_windows_follow_recorded_episodes_and_stop_at_their_end(episodes):
    bank = EpisodeBank(episodes)
    w = bank.state_windows(64, 2, 5, {"PushCube-v0": 0}, torch.Generator().manual_seed(0))
    assert w["proprio"].shape == (64, 7, 4) and w["actions"].shape == (64, 5, 4) and w["valid"].shape == (64, 5)
    assert w["points"].shape == (64, 2, len(ENTITIES), 2) and w["target_heights"].shape == (64, 5, len(ENTITIES))
    valid = w["valid"].numpy()
    assert (valid[:, :-1] >= valid[:, 1:]).all() and valid[:, 0].all() and not valid.all()  # some windows end
    ended = torch.from_numpy(~valid[:, 1:])  # the first step ahead is always there
    # past the end the last observation repeats
    assert torch.equal(w["proprio"][:, 3:][ended], w["proprio"][:, 2:-1][ended])
    # each first target is the recorded row that holds the window's first next proprio
    for proprio, target in zip(w["proprio"][:, 2].numpy(), w["target"][:, 0].numpy(), strict=True):
        row = np.flatnonzero((bank.proprio == proprio).all(1))
        assert any(np.array_equal(bank.entity_pixels[r], target) for r in row)
    bank = EpisodeBank(episodes)
    bank.state = bank.entity_pixels = bank.entity_heights = None  # as a file recorded without 'state' reads
    plain = bank.state_windows(64, 2, 5, {"PushCube-v0": 0}, torch.Generator().manual_seed(0))
    assert set(plain) == {"proprio", "actions", "valid", "task"}
    assert torch.equal(plain["proprio"], w["proprio"])  # the same draw, with or without the objects


def test_balanced_sampling_yields_the_requested_success_share(episodes):
    bank = EpisodeBank(episodes)
    generator = torch.Generator().manual_seed(0)
    batch = bank.sample(40, 2, 4, {"PushCube-v0": 0}, generator, success_fraction=0.25)
    assert batch["success"][:10].all()  # round(0.25 * 40) windows drawn among the success frames
    assert bank.success.mean() < 0.1  # one success frame per episode: without balancing they are rare
    many = [bank.sample(64, 2, 4, {"PushCube-v0": 0}, generator, success_fraction=0.5)["success"]
            for _ in range(5)]
    assert torch.cat(many).float().mean() >= 0.5
    # the success head's auxiliary target: the goal-minus-object offset of the target frame
    assert batch["goal_offset"].shape == (40, 3) and batch["goal_offset"].dtype == torch.float32
    # and the scene objects' pixel positions: the red cube sits where the frame is red
    assert batch["entity_pixels"].shape == (40, len(ENTITIES), 2)
    frame, (col, row) = bank.images[0], bank.entity_pixels[0, ENTITIES.index("red_cube")]
    red = (frame[..., 0] > 150) & (frame[..., 1] < 80) & (frame[..., 2] < 80)
    rows, cols = np.nonzero(red)
    assert abs(cols.mean() + 0.5 - col) < 1.0 and abs(rows.mean() + 0.5 - row) < 1.0
    back = bank.camera.unproject(bank.entity_pixels[0], ENTITY_HEIGHTS)  # onto each object's plane
    assert np.allclose(back, entity_positions(bank.state[:1])[0], atol=1e-5)
    with pytest.raises(ValueError, match="success_fraction=1.5"):
        bank.sample(4, 2, 4, {"PushCube-v0": 0}, generator, success_fraction=1.5)


def test_importing_the_command_line_does_not_import_diffusers():
    code = "import sys, worldsim.commands.cli; print('diffusers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_training_writes_gif_sample_videos_without_ffmpeg(episodes, tmp_path, monkeypatch):
    import imageio.v3 as iio

    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # not installed: its import fails
    out = tmp_path / "run"
    train_world_model(config(episodes, out, steps=2, val_every=2, video_every=2, checkpoint_every=2))
    assert [p.name for p in (out / "videos").iterdir()] == ["step_000002.gif"]
    assert iio.imread(out / "videos" / "step_000002.gif", plugin="pillow", index=None).shape[0] == 5  # 1 + 4 steps


@pytest.mark.slow
def test_a_run_leaves_metrics_videos_checkpoint_and_a_loadable_model(trained):
    out, summary = trained
    assert summary["steps"] == 8 and summary["train_episodes"] == 5 and summary["val_episodes"] == 1
    # one validation episode has one outcome: nothing to calibrate against, the threshold stays
    assert not summary["success_threshold_calibrated"] and summary["success_threshold"] == 0.5
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["train/success_offset"]) for r in rows if "train/loss" in r)
    assert all(0 <= r["train/keypoint_error_px"] < 64 for r in rows if "train/loss" in r)  # the detector's
    assert [r["step"] for r in rows if "val/loss" in r] == [4, 8]
    assert all(np.isfinite(r["val/psnr_3"]) for r in rows if "val/psnr_3" in r)
    assert (out / "videos" / "step_000008.mp4").stat().st_size > 0 and (out / "curves.png").exists()
    assert any((out / "tb").iterdir()) and (out / "checkpoint.pt").exists()
    model = WorldModel.from_pretrained(out)  # the run folder finds world_model/
    assert model.config.tasks == ("PushCube-v0",) and model.config.image_size == 32
    assert model.scale.std.min() > 0  # the dataset statistics travel with the weights


@pytest.mark.slow
def test_resume_continues_exactly_and_fine_tuning_starts_from_the_model(episodes, trained, tmp_path):
    stopped = train_world_model(config(episodes, tmp_path / "resumed", time_budget=1e-6, video_every=0))
    assert stopped["steps"] == 1 and stopped["stopped_by"] == "time_budget"
    train_world_model(config(episodes, tmp_path / "resumed", resume=True))
    a = load_file(trained[0] / "world_model" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "world_model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows = (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in rows]
    assert steps == sorted(steps)
    with pytest.raises(ValueError, match="settings changed"):
        train_world_model(config(episodes, tmp_path / "resumed", resume=True, batch_size=8, steps=9))

    tuned = train_world_model(config(episodes, tmp_path / "tuned", init=trained[0], model={}, steps=2,
                                     video_every=0))
    assert tuned["steps"] == 2
    original, fine = WorldModel.from_pretrained(trained[0]), WorldModel.from_pretrained(tmp_path / "tuned")
    assert torch.equal(original.scale.mean, fine.scale.mean)  # keeps its normalisation
    assert fine.config == original.config  # and its architecture
    with pytest.raises(ValueError, match="with init the model keeps its own"):
        config(episodes, tmp_path / "x", init=trained[0], model={"context": 3})
    with pytest.raises(ValueError, match="with init the model keeps its own"):
        config(episodes, tmp_path / "x", init=trained[0], model={}, state_supervision=False)


@pytest.mark.filterwarnings("ignore:Dynamo detected")
def test_compiled_losses_train_as_the_eager_ones(episodes, trained, tmp_path, monkeypatch):
    """--compile trains the model the eager step trains; with CUDA graphs (reduce-overhead) the
    losses' outputs are copied out of the graphs' memory, which the next replay reuses. Traced
    here with aot_eager and fullgraph: inductor's code generation is torch's to test, and takes
    minutes on these cores."""
    compiled, real = [], torch.compile

    def whole(fn, mode, dynamic):
        compiled.append(mode)
        return real(fn, backend="aot_eager", fullgraph=True, dynamic=dynamic)

    torch._dynamo.reset()
    monkeypatch.setattr(torch, "compile", whole)
    train_world_model(config(episodes, tmp_path / "run", compile="reduce-overhead", video_every=0))
    assert compiled == ["reduce-overhead"] * 2
    assert WorldModel.from_pretrained(tmp_path / "run").config.objects is not None  # the pathway's rollout compiled too
    eager = load_file(trained[0] / "world_model" / "model.safetensors")
    ours = load_file(tmp_path / "run" / "world_model" / "model.safetensors")
    assert max((eager[k] - ours[k]).abs().max().item() for k in eager) < 1e-4


def test_bad_training_input_gets_clear_errors(episodes, tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        config(tmp_path / "missing.h5", tmp_path / "r")
    with pytest.raises(ValueError, match="steps=0"):
        config(episodes, tmp_path / "r", steps=0)
    with pytest.raises(ValueError, match="StackCube-v0"):
        train_world_model(config(episodes, tmp_path / "r", task=("StackCube-v0",)))
    state_only = tmp_path / "state.h5"
    collect_episodes(["PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t)), 1, state_only,
                     num_envs=1, obs_mode="state", progress=False)
    with pytest.raises(ValueError, match="no image or proprio"):
        train_world_model(config(state_only, tmp_path / "r"))


def test_keyframes_precede_success_and_favour_failures(episodes):
    bank = EpisodeBank(episodes)
    keys = select_keyframes(bank, KeyframeRule(lead=2))
    assert len(keys) > 0 and keys.counts()["motion_onset"] > 0
    for j, t in zip(keys.episode, keys.step, strict=True):
        success = bank.episode(j, "success")
        first_success = np.flatnonzero(success)[0] if success.any() else len(success)
        assert 1 <= t < first_success and t < bank.lengths[j]
    failed = np.array([not bank.infos[j].success for j in keys.episode])
    assert np.all(keys.weight[failed] == 2.0) and np.all(keys.weight[~failed] == 1.0)
    with pytest.raises(ValueError, match="ratio=1.5"):
        KeyframeRule(ratio=1.5)


def test_gripper_error_is_the_median_tcp_distance_over_valid_replays():
    real = np.zeros((3, 3, 4), np.float32)
    imagined = real.copy()
    imagined[:, 1, 0] = [0.01, 0.02, 0.03]  # the finger gap (last column) is not the TCP
    imagined[:, 2, :] = [[0.0, 0.03, 0.04, 0.5], [0.0, 0.0, 0.05, 0.0], [9.0, 0.0, 0.0, 0.0]]
    valid = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 0]], bool)
    frames = np.zeros((3, 3, 2, 2, 3), np.uint8)
    run = OpenLoop(frames, frames, valid, np.zeros((3, 3)), np.zeros((3, 3), bool), real, imagined)
    np.testing.assert_allclose(gripper_error_curve(run), [2.0, 5.0], rtol=1e-5)


def test_action_gap_reads_the_policy_on_imagined_against_real_frames():
    torch.manual_seed(0)
    policy = TinyVLA(TinyVLAConfig.for_tasks(["PushCube-v0"], language="learned", channels=(4, 8), hidden_dim=16,
                                             feature_dim=16, language_dim=8, image_size=32)).eval()
    rng = np.random.default_rng(0)
    real = rng.integers(0, 256, (2, 4, 32, 32, 3), dtype=np.uint8)
    proprio = rng.normal(size=(2, 4, 4)).astype(np.float32)
    valid = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    words = ["push the red cube onto the blue square"] * 2
    same = action_gap(OpenLoop(real, real.copy(), valid, np.zeros((2, 4)), np.zeros((2, 4), bool), proprio,
                               proprio.copy()), policy, words)
    assert same["imagined"] == same["frame"] == [0.0, 0.0, 0.0]  # steps 1..3; step 3 has one valid replay
    imagined = real.copy()
    imagined[:, 1:] = 255 - imagined[:, 1:]  # every imagined frame after the start differs
    other = proprio.copy()
    other[:, 1:] += 1.0
    run = OpenLoop(real, imagined, valid, np.zeros((2, 4)), np.zeros((2, 4), bool), proprio, other)
    gap = action_gap(run, policy, words)
    assert all(g > 0 for g in gap["imagined"]) and all(g > 0 for g in gap["frame"])
    mean = policy.act(policy.preprocess({"image": real[0], "proprio": proprio[0], "instruction": (words[0],) * 4}),
                      deterministic=True).actions[:, 0].clamp(-1, 1).detach().numpy()
    assert gap["step_change"][2] == pytest.approx(float(np.linalg.norm(mean[3] - mean[2])), abs=1e-4)  # replay 0 only
    assert gap["step_change"] == same["step_change"]  # read on the real frames alone


def test_success_agreement_counts_episodes():
    valid = np.ones((4, 3), bool)
    prob = np.array([[0, 0.9, 0], [0, 0, 0], [0, 0, 0.6], [0, 0.2, 0]])
    real = np.array([[0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 1, 0]], bool)
    frames, proprio = np.zeros((4, 3, 2, 2, 3), np.uint8), np.zeros((4, 3, 4), np.float32)
    run = OpenLoop(frames, frames, valid, prob, real, proprio, proprio)
    s = success_agreement(run)
    assert (s["true_positive"], s["false_positive"], s["false_negative"], s["true_negative"]) == (1, 1, 1, 1)
    assert s["accuracy"] == 0.5 and s["precision"] == 0.5 and s["recall"] == 0.5


@pytest.mark.slow
def test_training_and_validation_draw_noise_with_a_generator_on_the_data_device(episodes, tmp_path, monkeypatch):
    """On a GPU the first validation used to pass a CPU generator with CUDA tensors: every loss
    call now gets a generator on its batch's device (checked here on the CPU path)."""
    seen = []
    real_noise = WorldModel.training_noise

    def spy(self, batch, generator=None):
        seen.append((generator.device, batch["target"].device))
        return real_noise(self, batch, generator)

    monkeypatch.setattr(WorldModel, "training_noise", spy)
    train_world_model(config(episodes, tmp_path / "run", steps=4, val_every=2, video_every=0))
    assert len(seen) == 4 + 3 * 4  # 4 training steps; validation at steps 2 and 4, and at the end
    assert all(g == d for g, d in seen)


def test_a_non_finite_loss_stops_training_before_anything_is_saved(episodes, tmp_path, monkeypatch):
    """The step reads no value back from the device; the NaN check runs every 25 steps and
    before each checkpoint, so a diverged run ends with a clear error and saves no NaN weights."""
    real_loss = WorldModel.frame_loss

    def diverging(self, batch, noise, success_weight=1.0):
        loss, terms = real_loss(self, batch, noise, success_weight)
        return loss * float("nan"), terms

    monkeypatch.setattr(WorldModel, "frame_loss", diverging)
    with pytest.raises(FloatingPointError, match="non-finite by step 3; lower --lr"):
        train_world_model(config(episodes, tmp_path / "run", steps=30, checkpoint_every=3, val_every=100,
                                 video_every=0))
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_bank_batches_are_gathered_on_the_device_from_one_copy(episodes):
    bank = EpisodeBank(episodes)
    tensors = bank.tensors("cpu")
    assert tensors is bank.tensors("cpu") and tensors["image"].data_ptr() == bank.images.__array_interface__["data"][0]
    batch = bank.sample(8, 2, 4, {"PushCube-v0": 0}, torch.Generator().manual_seed(0), 0.5)
    again = bank.sample(8, 2, 4, {"PushCube-v0": 0}, torch.Generator().manual_seed(0), 0.5)
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    assert batch["context"].shape == (8, 2, 48, 8, 8) and batch["success"][:4].all()  # half end in a success
    assert set(batch) >= {"goal_offset", "entity_pixels"}


def test_host_arrays_reach_the_cpu_without_a_copy():
    array = np.arange(6)
    tensor = host_to_device(array, torch.device("cpu"))
    assert tensor.data_ptr() == array.__array_interface__["data"][0] and tensor.tolist() == list(range(6))


def test_agreement_reports_the_base_rate_and_balanced_accuracy():
    real = np.array([1, 1, 1, 0], bool)
    always = agreement(np.ones(4, bool), real)  # always answering "success"
    assert always["accuracy"] == 0.75 == always["base_rate"] == always["majority_accuracy"]
    assert always["balanced_accuracy"] == 0.5 and always["specificity"] == 0.0
    exact = agreement(real, real)
    assert exact["accuracy"] == exact["balanced_accuracy"] == 1.0


def test_balanced_held_out_set_has_as_many_failures_as_successes(tmp_path):
    mixed = tmp_path / "mixed.h5"
    # A noisy expert: 7 of these 10 seeded episodes succeed, 3 fail.
    noisy_push_episodes(mixed, 10, epsilon=0.2)
    model = WorldModel(small_config(NO_PATHWAY))
    with EpisodeReader(mixed) as reader:
        outcomes = [i.success for i in reader.episode_info()]
    wins, losses = sum(outcomes), len(outcomes) - sum(outcomes)
    assert wins and losses
    held = held_out_bank(model, mixed, balance=True, seed=0)
    assert held.summary()["successes"] == held.summary()["failures"] == min(wins, losses)
    assert held.summary()["base_rate"] == 0.5 and len(held.bank) == 2 * min(wins, losses)
    assert (held.near_miss <= ~held.success).all()  # near misses are failures
    everything = held_out_bank(model, mixed)
    assert len(everything.bank) == 10 and everything.summary()["balanced"] is False


@pytest.mark.slow
def test_evaluation_and_commands_write_their_outputs(episodes, trained, tmp_path):
    out, _ = trained
    report = evaluate_world_model(out, episodes, curve_steps=4, rl_horizons=(2, 4), contact_horizon=3,
                                  out=tmp_path / "eval", videos=1, progress=False,
                                  imagination=ImaginationConfig(rung="sim-seeded"))
    assert report["rung"] == "sim-seeded"
    assert len(report["episode_start"]["psnr"]) == 4 and report["keyframe"]["replays"] > 0
    assert 0 < report["psnr_at_8"] < 100 and -1 <= report["ssim_at_8"] <= 1
    copy = report["episode_start"]["psnr_copy_first"]  # the trivial predictor beside every PSNR
    assert len(copy) == 4 and report["psnr_copy_first_at_horizon"] == copy[-1] and report["psnr_copy_first_at_8"] > 0
    gripper = report["episode_start"]["gripper_cm"]
    assert len(gripper) == 4 and min(gripper) >= 0 and report["gripper_cm_at_horizon"] == gripper[-1]
    regions = report["regions"]["episode_start"]  # the data has state: the object's windows too
    assert set(regions) == {"gripper", "gripper_start", "object", "object_start", "other_cubes"}
    assert report["regions"]["half_width_px"] == 3  # a tenth of the 32-pixel frames
    for name, curves in regions.items():
        assert len(curves["psnr"]) == len(curves["psnr_copy_first"]) == 4, name
        assert report["region_psnr_at_horizon"][name] == {"model": curves["psnr"][-1],
                                                          "copy_first": curves["psnr_copy_first"][-1]}
    held = report["held_out"]
    assert held["episodes"] == 6 and held["base_rate"] == held["successes"] / 6
    assert report["success"]["episodes"] == 6 and report["success_threshold"] == 0.5  # the model's
    assert set(report["success_by_horizon"]) == {"last_2", "last_4", "keyframe_2", "keyframe_4", "keyframe_2_balanced",
                                                 "keyframe_4_balanced", "full"}
    assert report["success_by_horizon"]["last_4"]["base_rate"] == held["base_rate"]  # the episodes' outcomes
    for name, a in report["success_by_horizon"].items():
        if a is not None:  # a balanced keyframe set needs windows of both outcomes
            assert a["majority_accuracy"] >= 0.5 and 0 <= a["accuracy"] <= 1, name
            assert not name.endswith("_balanced") or a["base_rate"] == 0.5, name
    assert json.dumps(report["success_by_horizon"]["full"]) == json.dumps(report["success"])  # NaN-safe
    assert len(report["success_by_threshold"]) == 9 and len(report["confusion"]) == 6
    assert sum(row["real"] for row in report["confusion"]) == held["successes"]
    contact = report["object_error_after_contact"]  # from the step before the cube first moves
    assert len(contact["imagined_cm"]) == len(contact["real_cm"]) == 4 and contact["replays"] > 0
    assert contact["imagined_cm"][0] == contact["real_cm"][0] and contact["at_horizon_cm"] >= 0
    assert len(contact["pathway_cm"]) == 4 and contact["pathway_cm"][0] < 0.01  # the recorded start, carried
    # at the start the pathway holds the recorded positions: the frame's offset from them is the detector's
    assert contact["frame_vs_pathway_cm"][0] == pytest.approx(contact["imagined_cm"][0], abs=1e-3)
    assert len(contact["pathway_recorded_gripper_cm"]) == 4 and contact["pathway_recorded_gripper_cm"][0] < 0.01
    assert "base rate" in (tmp_path / "eval" / "confusion.md").read_text()
    ceiling = report["physics_ceiling"]  # the held-out episodes replayed in physics itself
    assert set(ceiling) == {"exact", "shift_0.1mm", "shift_0.33mm", "shift_1mm"}
    assert all(a["episodes"] == 6 and a["base_rate"] == held["base_rate"] for a in ceiling.values())
    assert "physics itself (cube 0.33 mm off)" in (tmp_path / "eval" / "confusion.md").read_text()
    with EpisodeReader(episodes) as reader:
        infos = reader.episode_info()
    on_real = report["success_head_on_real_frames"]  # the head judging the real frames
    assert on_real["frames"] == sum(i.num_samples + 1 for i in infos) and on_real["episode"]["episodes"] == 6
    assert on_real["success_frames"] == sum(i.success for i in infos) == report["success"]["true_positive"] + \
        report["success"]["false_negative"]
    assert 0 <= on_real["frame_false_positive_rate"] <= 1
    objects = report["object_error"]  # the detector's view of the task object, per step
    assert len(objects["imagined_cm"]) == len(objects["real_cm"]) == max(i.num_samples for i in infos) + 1
    assert objects["imagined_cm"][0] == objects["real_cm"][0]  # step 0 is the real frame in both
    assert objects["final_imagined_cm"] >= 0
    for name in ("fidelity.json", "confusion.md", "error_growth.png", "replay_0.mp4"):
        assert (tmp_path / "eval" / name).stat().st_size > 0
    TinyVLA(TinyVLAConfig.for_tasks(["PushCube-v0"], language="learned", channels=(4, 8), hidden_dim=16,
                                    feature_dim=16, language_dim=8, image_size=32)).save_pretrained(tmp_path / "vla")
    eval_wm(EvalWMArgs(world_model=out, data=episodes, curve_steps=3, out=tmp_path / "cli", videos=0, episodes=2,
                       policy=tmp_path / "vla"))
    cli = json.loads((tmp_path / "cli" / "fidelity.json").read_text())
    assert cli["held_out"]["episodes"] == 2 and len(cli["action_gap"]["imagined"]) == 3  # steps 1..horizon
    assert cli["action_gap_at_horizon"] == pytest.approx(np.mean(cli["action_gap"]["imagined"]))
    assert cli["action_gap_at_horizon"] >= 0 and cli["step_change_mean"] >= 0
    imagined = imagine_episodes(out, episodes, tmp_path / "imagined.mp4", episodes=2, steps=5)
    assert imagined.path.stat().st_size > 0 and imagined.episodes == 2
    with pytest.raises(ValueError, match="must end in"):
        imagine_episodes(out, episodes, tmp_path / "imagined.avi")
    # a pixel policy acts on the imagined frames instead of replaying the recorded actions
    vla = TinyVLA(TinyVLAConfig(instructions=("push the red cube onto the blue square",), image_size=32,
                                language="learned", channels=(8, 8), hidden_dim=32, feature_dim=32))
    vla.save_pretrained(tmp_path / "vla")
    imagined = imagine_episodes(out, episodes, tmp_path / "policy.mp4", policy=tmp_path / "vla", episodes=1,
                                steps=3)
    assert imagined.path.stat().st_size > 0


@pytest.mark.slow
def test_train_wm_refuses_an_earlier_run_unless_overwrite_or_resume(episodes, tmp_path, capsys):
    from worldsim.commands.cli import main

    settings = "val_fraction = 0.2\nval_every = 2\nval_horizon = 2\nvideo_every = 0\ncheckpoint_every = 2\n"
    file = write_toml(tmp_path / "wm.toml", settings)

    def argv(out):
        return ["train-wm", "--data", str(episodes), "--out", str(out), "--steps", "4", "--batch-size", "4",
                "--config-file", str(file), "--torch-threads", "1", "--device", "cpu", "--no-progress"]

    run = tmp_path / "run"
    budget = write_toml(tmp_path / "budget.toml", settings + "time_budget = 1e-9\n")
    assert main([*argv(run), "--config-file", str(budget)]) == 0  # cut short after one step
    assert "time budget of 1e-09 s reached at step 1 of 4" in capsys.readouterr().err
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(argv(run)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "already holds files" in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # untouched
    assert main([*argv(run), "--resume"]) == 0
    assert main(argv(tmp_path / "straight")) == 0
    a = load_file(run / "world_model" / "model.safetensors")
    b = load_file(tmp_path / "straight" / "world_model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # resumed exactly
    (run / "stale.txt").write_text("from another run")
    assert main([*argv(run), "--overwrite"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert not (run / "stale.txt").exists() and summary["steps"] == 4 and summary["stopped_by"] == "steps"
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
            if "val/loss" in line] == [2, 4]  # the new run's history alone


def test_commands_parse_from_the_command_line(episodes, tmp_path):
    budget = write_toml(tmp_path / "budget.toml", "time_budget = 60\n")
    train = parse(train_wm, ["--data", str(episodes), "--preset", "base", "--task", "PushCube-v0",
                             "--init", str(tmp_path), "--config-file", str(budget), "--resume"], "worldsim train-wm")
    assert train.preset == "base" and train.architecture == build_config("base")
    assert train.task == ("PushCube-v0",) and train.init == tmp_path
    assert train.resume and train.time_budget == 60
    evaluate = parse(eval_wm, ["--world-model", "runs/wm", "--data", str(episodes), "--curve-steps", "40"],
                     "worldsim eval-wm")
    assert evaluate.curve_steps == 40 and evaluate.out is None
    args = parse(imagine, ["--world-model", "runs/wm", "--data", str(episodes), "--policy", "expert",
                           "--episodes", "8", "--out", "imagined.mp4"], "worldsim imagine")
    assert args.episodes == 8 and args.policy == "expert"
    assert parse(imagine, ["--world-model", "runs/wm", "--data", str(episodes), "--policy", "runs/vla"],
                 "worldsim imagine").policy == Path("runs/vla")


def _rank(rank: int, port: int, cfg: TrainWMConfig) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    train_world_model(cfg)


@pytest.mark.slow
def test_two_processes_with_gloo_stay_in_sync(episodes, tmp_path):
    """The torchrun path (environment variables, gloo, averaged gradients) with two forked
    processes: forking skips the seconds each fresh interpreter spends importing torch."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = config(episodes, tmp_path / "ddp", steps=3, val_every=3, val_horizon=2, video_every=0)
    mp.start_processes(_rank, args=(port, cfg), nprocs=2, start_method="fork")
    summary = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["ranks_in_sync"] and summary["steps"] == 3


@pytest.mark.slow
def test_multi_task_data_trains_one_model_that_imagines_each_task(tmp_path):
    data = tmp_path / "two.h5"
    collect_episodes(["ReachCube-v0", "PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t)), 2,
                     data, num_envs=2, image_size=32, progress=False)
    train_world_model(config(data, tmp_path / "run", steps=2, val_fraction=0.0, video_every=0))
    model = WorldModel.from_pretrained(tmp_path / "run")
    assert model.config.tasks == ("ReachCube-v0", "PushCube-v0")
    for task in model.config.tasks:
        env = gym.make_vec(f"worldsim/Imagined-{task}", num_envs=2, world_model=model, keyframes=data,
                           device="cpu")
        obs, _ = env.reset(seed=0)
        env.step(np.zeros((2, 4), np.float32))
        assert obs["instruction"][0] == model.config.instructions[model.task_index(task)]


@pytest.mark.slow
def test_training_calibrates_the_threshold_on_validation_episodes_of_both_outcomes(tmp_path):
    from worldsim.world_models.metrics import episode_scores
    from worldsim.world_models.replay import open_loop
    from worldsim.world_models.train import calibrate_success_threshold

    data = tmp_path / "mixed.h5"
    noisy_push_episodes(data, 4, epsilon=0.5, seed=3)
    bank = EpisodeBank(data)
    assert 0 < sum(info.success for info in bank.infos) < len(bank)
    torch.manual_seed(1)
    model = WorldModel(small_config(NO_PATHWAY)).eval()
    with torch.no_grad():  # untrained scores around 0.5, not at the 2% prior: a cut inside [0.1, 0.9]
        model.judge.success_head.classifier[-1].bias.zero_()
    assert calibrate_success_threshold(model, bank, torch.Generator().manual_seed(0))
    run = open_loop(model, bank, np.arange(len(bank)), np.zeros(len(bank), np.int64), int(bank.lengths.max()),
                    generator=torch.Generator().manual_seed(0))
    assert model.config.judge.success_threshold == calibrate_threshold(*episode_scores(run))


def test_videos_people_look_at_are_upscaled_without_blur():
    from worldsim.runtime.video import upscale

    frames = np.random.default_rng(0).integers(0, 256, (3, 64, 130, 3), dtype=np.uint8)
    big = upscale(frames)
    assert big.shape == (3, 256, 520, 3)
    assert np.array_equal(big[:, ::4, ::4], frames)  # nearest neighbour: every pixel kept as it was
    assert upscale(big).shape == big.shape  # already tall enough


def test_the_copied_first_frame_is_the_trivial_predictor_s_psnr():
    """Step 1 repeats the start frame exactly (100 dB, as identical frames count); step 2 differs
    by 10 grey levels everywhere (PSNR 20 log10(255 / 10)); a replay past its end is left out."""
    from worldsim.world_models.metrics import copy_first_psnr_curve, psnr_curve
    from worldsim.world_models.replay import OpenLoop

    real = np.full((2, 3, 4, 4, 3), 100, np.uint8)
    real[:, 2] = 110
    valid = np.ones((2, 3), bool)
    valid[1, 2] = False
    run = OpenLoop(real=real, imagined=np.zeros_like(real), valid=valid, success_prob=np.zeros((2, 3)),
                   success=np.zeros((2, 3), bool), real_proprio=np.zeros((2, 3, 4)),
                   imagined_proprio=np.zeros((2, 3, 4)))
    np.testing.assert_allclose(copy_first_psnr_curve(run), [100.0, 20 * np.log10(255 / 10)])
    assert (psnr_curve(run) < 10).all()  # the black imagined frames, for contrast


def test_region_psnr_scores_only_the_window_and_pools_the_replays_errors():
    """Real frames are grey 100; the imagined frames are off by 10 grey levels in the 3 x 3 window
    around pixel (column 2, row 1) only, and the real frame at step 2 has turned 110 there. The
    window there scores 20 log10(255 / 10); a window far from it, at the frame's corner (clipped
    to 2 x 2), scores 100 dB (no error); the copied start frame is exact at step 1 and 10 off in
    the window at step 2. Replay 1's step 2 is past its end and left out of the pooled error."""
    from worldsim.world_models.metrics import region_psnr_curves
    from worldsim.world_models.replay import OpenLoop

    real = np.full((2, 3, 8, 8, 3), 100, np.uint8)
    imagined = real.copy()
    imagined[:, 1:, 0:3, 1:4] = 110
    real[:, 2, 0:3, 1:4] = 110
    imagined[:, 2, 0:3, 1:4] = 120
    valid = np.ones((2, 3), bool)
    valid[1, 2] = False
    run = OpenLoop(real=real, imagined=imagined, valid=valid, success_prob=np.zeros((2, 3)),
                   success=np.zeros((2, 3), bool), real_proprio=np.zeros((2, 3, 4)),
                   imagined_proprio=np.zeros((2, 3, 4)))
    centres = {"moved": np.broadcast_to(np.array([2.2, 0.8]), (2, 3, 2)),
               "corner": np.broadcast_to(np.array([7.0, 7.0]), (2, 3, 2))}
    curves = region_psnr_curves(run, centres, half=1)
    ten = round(20 * np.log10(255 / 10), 3)
    assert curves["moved"] == {"psnr": [ten, ten], "psnr_copy_first": [100.0, ten]}
    assert curves["corner"] == {"psnr": [100.0, 100.0], "psnr_copy_first": [100.0, 100.0]}
    off = run.imagined.copy()
    off[0, 1, 0:3, 1:4] = 100  # replay 0 exact at step 1: the pooled error halves (+3 dB)
    halved = region_psnr_curves(OpenLoop(**{**run.__dict__, "imagined": off}), centres, half=1)
    assert halved["moved"]["psnr"][0] == round(20 * np.log10(255 / 10) + 10 * np.log10(2), 3)
    left = centres["moved"].copy()
    left[:, 1] = np.nan  # a start window counts only once its thing has left it: not at step 1
    assert np.isnan(region_psnr_curves(run, {"left": left}, half=1)["left"]["psnr"][0])
    # a region of several windows (the other cubes) pools their errors; a NaN window is left out
    both = np.stack([centres["moved"], centres["corner"]], axis=2).copy()  # (2, 3, 2 windows, 2)
    pooled = region_psnr_curves(run, {"cubes": both}, half=1)["cubes"]["psnr"]
    window_mse = 10.0 ** 2 * 9 / (9 + 4)  # the moved window's 9 pixels off by 10, the corner's 4 exact
    assert pooled[0] == round(10 * np.log10(255.0 ** 2 / window_mse), 3)
    both[:, :, 1] = np.nan
    assert region_psnr_curves(run, {"cubes": both}, half=1)["cubes"]["psnr"] == [ten, ten]
