"""The ``wan`` frame network (world_models/video_backbone.py): save/load, per-frame conditioning,
starting from a diffusers Wan folder (``init_from``), LoRA, bf16 training, bad input and the
command line. Tiny transformers (1 block, 2 heads of 12) on 32x32 frames."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_toml
from safetensors.torch import load_file

from worldsim.commands.parsing import parse
from worldsim.commands.world_model import train_wm
from worldsim.data.reader import EpisodeReader
from worldsim.envs.observations import ENTITIES
from worldsim.world_models import WorldModel, WorldModelConfig, build_config, train_world_model
from worldsim.world_models.config import UNetConfig, merged
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.train import TrainWMConfig, build_model
from worldsim.world_models.video_backbone import (
    LORA_TARGETS,
    OWN_LAYERS,
    ClipInputs,
    VideoBackbone,
    pretrained_architecture,
    pretrained_folder,
)

# The architecture the pretrained folder below fixes, and a worldsim model of the same size.
WAN = dict(heads=2, head_dim=12, layers=1, ffn_dim=32, token_patch=2, freq_dim=32)
# Small parts around it (nested tables of build_config), the MLPs as wide as the conditioning's.
TINY = {"image_size": 32, "context": 2, "frames": {"cond_hidden": 16}, "proprio": {"hidden": 16},
        "judge": {"hidden": 16, "detector_channels": 8}, "objects": {"hidden": 32},
        "dynamics": {"batch": 16, "horizon": 4}}
NO_PATHWAY = {"objects": None, "judge": {"outcome": "head"}}
TO_Q = "blocks.0.attn1.to_q.weight"


def wan_config(*parts: dict, **changes) -> WorldModelConfig:
    """The small Wan model with each of ``parts`` and ``changes`` (nested tables) merged in."""
    tables = merged(TINY, {"frames": {"backbone": "wan", **WAN}})
    for part in (*parts, changes):
        tables = merged(tables, part)
    return build_config(None, **tables)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """A random diffusers Wan transformer, saved in a pipeline's layout (``transformer/``), whose
    input, output and text widths are not worldsim's (16 channels, 64-wide text) and whose size is
    not the ``video-tiny`` preset's."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(1)
    wan = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16,
                                out_channels=16, text_dim=64, freq_dim=32, ffn_dim=32, num_layers=1,
                                cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)
    folder = tmp_path_factory.mktemp("wan")
    wan.save_pretrained(folder / "transformer")
    return folder


def pretrained_weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(next((folder / "transformer").glob("*.safetensors")))


def run_config(episodes, out, **kwargs) -> TrainWMConfig:
    base = dict(data=episodes, out=out, steps=2, batch_size=2, val_fraction=0.0, video_every=0, checkpoint_every=2,
                torch_threads=1, device="cpu", progress=False, lr=1e-2, preset="video-tiny", model=TINY)
    return TrainWMConfig(**{**base, **kwargs})


def rollout_inputs(config: WorldModelConfig, seed: int = 0):
    """Random uint8 frames, first frames, proprio and object positions for two rollouts."""
    g = torch.Generator().manual_seed(seed)
    b, c, size = 2, config.context, config.image_size
    frames = torch.randint(0, 256, (b, c, size, size, 3), dtype=torch.uint8, generator=g)
    first = torch.randint(0, 256, (b, size, size, 3), dtype=torch.uint8, generator=g)
    proprio = torch.randn(b, c, 4, generator=g)
    objects = (torch.rand(b, c, len(ENTITIES), 2, generator=g) * size,
               torch.rand(b, c, len(ENTITIES), generator=g) * 0.05)
    return frames, first, proprio, objects if config.objects is not None else None


def imagine(model: WorldModel, action: torch.Tensor | None = None, seed: int = 3):
    """One predicted step of two rollouts from fixed inputs, with a generator seeded ``seed``."""
    frames, first, proprio, objects = rollout_inputs(model.config)
    rollout = model.start(frames, first, proprio, objects)
    action = torch.tensor([[0.5, -0.2, 0.1, 1.0], [-0.3, 0.4, 0.0, -1.0]]) if action is None else action
    task = torch.zeros(2, dtype=torch.long)
    return model.predict(rollout, action, task, generator=torch.Generator().manual_seed(seed))


def episode_bank(episodes) -> EpisodeBank:
    with EpisodeReader(episodes) as reader:
        return EpisodeBank(reader, tasks=reader.tasks, episodes=np.arange(len(reader.episode_info())))


# ----------------------------------------------------------------------------- save / load
@pytest.mark.parametrize("pathway", [True, False], ids=["objects", "frames-only"])
def test_wan_model_round_trips_through_save_pretrained(tmp_path, pathway):
    torch.manual_seed(0)
    model = WorldModel(wan_config({} if pathway else NO_PATHWAY)).eval()
    assert (model.objects is not None) == pathway and not hasattr(model.frames, "cond_mlp")
    with torch.no_grad():  # as after training: the per-frame conditioning is no longer zero
        model.frames.video.frame_mlp[-1].weight.normal_(0, 0.1)
    model.save_pretrained(tmp_path / "wm")
    loaded = WorldModel.from_pretrained(tmp_path / "wm").eval()
    assert loaded.config == model.config and loaded.config.frames.backbone == "wan"
    assert loaded.frames.video.transformer.config.num_layers == 1
    before, after = imagine(model), imagine(loaded)
    assert torch.equal(before.latent, after.latent) and torch.equal(before.success_prob, after.success_prob)
    assert before.latent.shape == (2, 48, 8, 8)
    if pathway:
        assert torch.equal(before.points, after.points)
    # another noise seed draws another frame: the equality above is the weights', not a constant output
    assert not torch.equal(imagine(loaded, seed=4).latent, after.latent)


# ----------------------------------------------------------------------------- conditioning
def test_each_frame_is_conditioned_and_the_frame_mlp_starts_at_zero():
    torch.manual_seed(0)
    model = WorldModel(wan_config(NO_PATHWAY)).eval()
    video = model.frames.video
    assert isinstance(video, VideoBackbone)
    last = video.frame_mlp[-1]
    assert last.out_features == 2 * 12 and not last.weight.any() and not last.bias.any()
    g = torch.Generator().manual_seed(0)
    b, f = 2, 1 + model.config.context
    clip = ClipInputs(torch.randn(b, f, 48, 8, 8, generator=g), torch.zeros(b, 0, 8, 8), torch.rand(b, f, generator=g),
                      torch.randn(b, f + 1, 9, generator=g), torch.zeros(b, dtype=torch.long))
    x, sigma = torch.randn(b, 48, 8, 8, generator=g), torch.tensor([0.3, 1.5])
    other = dataclasses.replace(clip, features=torch.randn(b, f + 1, 9, generator=g))
    with torch.no_grad():
        out = video(x, sigma, clip)
        assert out.shape == (b, 48, 8, 8)
        # zero-initialised: proprio and action do not move the output (a pretrained backbone starts as it was) ...
        assert torch.equal(video(x, sigma, other), out)
        # ... while the noise levels, the given frames and the noisy frame do
        assert (video(x, sigma, dataclasses.replace(clip, levels=clip.levels + 0.5)) - out).abs().max() > 1e-4
        assert (video(x, sigma, dataclasses.replace(clip, frames=clip.frames.flip(1))) - out).abs().max() > 1e-4
        last.weight.normal_(0, 0.5)
        out = video(x, sigma, clip)
        # the new frame's action alone (its features' columns 4-7) changes the prediction
        acted = clip.features.clone()
        acted[:, -1, 4:8] += 1.0
        assert (video(x, sigma, dataclasses.replace(clip, features=acted)) - out).abs().max() > 1e-4
        # and so does one context frame's proprio
        moved = clip.features.clone()
        moved[:, 1, :4] += 1.0
        assert (video(x, sigma, dataclasses.replace(clip, features=moved)) - out).abs().max() > 1e-4
    # through the model: another action, another imagined frame (same noise)
    first = imagine(model, torch.tensor([[0.5, 0.0, 0.0, 1.0]] * 2))
    second = imagine(model, torch.tensor([[-0.5, 0.0, 0.0, 1.0]] * 2))
    assert (first.latent - second.latent).abs().max() > 1e-4


# ----------------------------------------------------------------------------- init_from
def test_load_pretrained_copies_what_fits_and_reports_the_rest(pretrained):
    assert pretrained_folder(pretrained) == pretrained / "transformer"
    assert pretrained_folder(pretrained / "transformer") == pretrained / "transformer"
    assert pretrained_architecture(pretrained) == WAN
    torch.manual_seed(0)
    model = WorldModel(wan_config())
    video = model.frames.video
    weights = pretrained_weights(pretrained)
    assert not torch.equal(video.transformer.state_dict()[TO_Q], weights[TO_Q])
    loaded = video.load_pretrained(pretrained)
    own = video.transformer.state_dict()
    # worldsim's input (48 cells + 5 object planes), output (48) and text (MiniLM's 384) layers are new
    assert {"patch_embedding.weight", "proj_out.weight", "condition_embedder.text_embedder.linear_1.weight"} <= set(
        loaded["new"])
    assert set(loaded["unused"]) == {n for n in weights if n in loaded["new"]}  # the folder's versions of them
    assert not any(n.startswith("blocks.") for n in loaded["new"])
    for name, tensor in weights.items():  # everything else is the folder's, exactly
        if name not in loaded["new"]:
            assert torch.equal(own[name], tensor), name
    assert own["patch_embedding.weight"].shape[1] == 48 + len(ENTITIES)


def test_train_from_a_pretrained_folder_takes_its_architecture_and_weights(pretrained, push_episodes, tmp_path):
    cfg = run_config(push_episodes, tmp_path / "run", init_from=pretrained)
    frames = cfg.architecture.frames
    assert frames.heads * frames.head_dim == 128 and frames.layers == 3  # the preset's size ...
    model = build_model(cfg, episode_bank(push_episodes))
    for name, value in WAN.items():  # ... gives way to the folder's
        assert getattr(model.config.frames, name) == value, name
    weights = pretrained_weights(pretrained)
    assert torch.equal(model.frames.video.transformer.state_dict()[TO_Q], weights[TO_Q])
    summary = train_world_model(cfg)
    assert summary["steps"] == 2 and np.isfinite(summary["train_loss"])
    trained = WorldModel.from_pretrained(tmp_path / "run")
    expected = dataclasses.asdict(model.config)
    expected["judge"]["success_threshold"] = trained.config.judge.success_threshold  # calibrated in training
    assert dataclasses.asdict(trained.config) == expected
    assert trained.frames.video.transformer.config.attention_head_dim == 12
    # trained whole: the pretrained block moved
    assert not torch.equal(trained.frames.video.transformer.state_dict()[TO_Q], weights[TO_Q])
    assert imagine(trained.eval()).latent.isfinite().all()


def test_lora_trains_adapters_and_own_layers_only(pretrained, push_episodes, tmp_path):
    cfg = run_config(push_episodes, tmp_path / "run", init_from=pretrained,
                     model=merged(TINY, {"frames": {"lora_rank": 4}}))
    model = build_model(cfg, episode_bank(push_episodes))
    transformer = model.frames.video.transformer
    trainable = {n for n, p in transformer.named_parameters() if p.requires_grad}
    lora = {n for n in trainable if ".lora_" in n}
    assert lora and {n.split(".lora_")[0].removeprefix("blocks.0.").removeprefix("attn1.").removeprefix("attn2.")
                     for n in lora} == set(LORA_TARGETS)
    assert all(n.startswith(OWN_LAYERS) for n in trainable - lora)
    assert {n.split(".")[0] for n in trainable - lora} == {"patch_embedding", "proj_out", "condition_embedder",
                                                           "scale_shift_table"}
    frozen = {n for n, p in transformer.named_parameters() if not p.requires_grad}
    assert f"{TO_Q.removesuffix('.weight')}.base_layer.weight" in frozen and "blocks.0.norm2.weight" in frozen
    assert not any(n.startswith("condition_embedder.time_embedder") for n in trainable)
    weights = pretrained_weights(pretrained)
    summary = train_world_model(cfg)
    assert np.isfinite(summary["train_loss"])
    trained = WorldModel.from_pretrained(tmp_path / "run").eval()
    assert trained.config.frames.lora_rank == 4
    state = trained.frames.video.transformer.state_dict()
    for name in frozen:  # the frozen base weights are the folder's, unchanged by training
        assert torch.equal(state[name], weights[name.replace(".base_layer", "")]), name
    b_weights = [state[n] for n in lora if ".lora_B." in n]
    assert b_weights and all(w.abs().max() > 0 for w in b_weights)  # adapters start at zero; these moved
    # the saved model round-trips with its adapters
    trained.save_pretrained(tmp_path / "again")
    again = WorldModel.from_pretrained(tmp_path / "again").eval()
    assert torch.equal(imagine(again).latent, imagine(trained).latent)
    again_state = again.frames.video.transformer.state_dict()
    assert all(torch.equal(again_state[n], state[n]) for n in lora)
    # and the adapters matter: disabled, another frame
    with torch.no_grad():
        trained.frames.video.transformer.disable_adapters()
    assert not torch.equal(imagine(trained).latent, imagine(again).latent)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # CPU rms_norm under autocast
def test_bf16_trains_on_a_cpu(push_episodes, tmp_path):
    model = merged(TINY, {"frames": {k: v for k, v in WAN.items() if k != "freq_dim"}})
    summary = train_world_model(run_config(push_episodes, tmp_path / "run", precision="bf16", model=model))
    assert summary["steps"] == 2 and np.isfinite(summary["train_loss"]) and summary["train_loss"] > 0
    trained = WorldModel.from_pretrained(tmp_path / "run")
    assert all(p.dtype == torch.float32 for p in trained.parameters())  # weights stay fp32


# ----------------------------------------------------------------------------- bad input
def test_bad_input_is_refused_with_its_reason(pretrained, push_episodes, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no config.json in it or in its transformer/"):
        run_config(push_episodes, tmp_path / "a", init_from=empty)
    unet = tmp_path / "unet"
    unet.mkdir()
    (unet / "config.json").write_text(json.dumps({"_class_name": "UNet2DModel"}))
    with pytest.raises(ValueError, match="holds a 'UNet2DModel'; worldsim's video backbone loads a Wan"):
        run_config(push_episodes, tmp_path / "b", init_from=unet)
    (unet / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not a diffusers config"):
        pretrained_folder(unet)
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "config.json").write_text(json.dumps({"_class_name": "WanTransformer3DModel", "patch_size": [2, 2, 2]}))
    with pytest.raises(ValueError, match=r"patch_size=\[2, 2, 2\]; worldsim needs \(1, p, p\)"):
        pretrained_architecture(wide)
    with pytest.raises(ValueError, match="init_from starts a new video transformer"):
        TrainWMConfig(data=push_episodes, out=tmp_path / "c", init_from=pretrained)  # the unet preset
    with pytest.raises(ValueError, match="lora_rank adapts pretrained weights: give --init-from"):
        run_config(push_episodes, tmp_path / "d", model={"frames": {"lora_rank": 2}})
    with pytest.raises(ValueError, match=r"unknown setting\(s\) lora_rank in \[frames\]"):  # the UNet has no LoRA
        build_config("tiny", frames={"lora_rank": 2})
    with pytest.raises(TypeError, match="lora_rank"):
        UNetConfig(lora_rank=2)
    with pytest.raises(ValueError, match="lora_rank=-1 must be >= 0"):
        wan_config(frames={"lora_rank": -1})
    with pytest.raises(ValueError, match="head_dim=13 must be even"):
        wan_config(frames={"head_dim": 13})
    with pytest.raises(ValueError, match="token_patch=3 must divide the 8x8 latent"):
        wan_config(frames={"token_patch": 3})
    with pytest.raises(ValueError, match=r"frames.backbone='vit'; allowed: unet, wan"):
        build_config(None, frames={"backbone": "vit"})
    # the UNet has no tokens: its own settings decide which sizes it takes
    assert build_config(None, image_size=24, frames={"channels": (16, 32), "norm_groups": 8}).latent_size == 6


# ----------------------------------------------------------------------------- command line
def test_the_command_line_takes_the_video_settings(pretrained, push_episodes, tmp_path):
    lora = write_toml(tmp_path / "lora.toml", """
        [model.frames]
        lora_rank = 2
        """)
    train = parse(train_wm, ["--data", str(push_episodes), "--preset", "video-tiny", "--init-from", str(pretrained),
                             "--config-file", str(lora), "--precision", "bf16"], "worldsim train-wm")
    assert train.preset == "video-tiny" and train.model == {"frames": {"lora_rank": 2}}
    assert train.architecture == build_config("video-tiny", frames={"lora_rank": 2})
    assert train.architecture.frames.backbone == "wan"
    assert train.init_from == pretrained and train.precision == "bf16" and train.init is None
    default = parse(train_wm, ["--data", str(push_episodes), "--preset", "video-base"], "worldsim train-wm")
    assert default.architecture == build_config("video-base") and default.precision == "fp32"
    assert default.init_from is None
