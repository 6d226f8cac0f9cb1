"""External-VLA adapters: the base's Gaussian, value head and action mapping, and a tiny
transformers model (random weights from a config) through the protocol and a checkpoint."""

import json

import numpy as np
import pytest
import torch

from worldsim.policies import (
    ExternalVLAAdapter,
    ExternalVLAConfig,
    TransformersVLAAdapter,
    TransformersVLAConfig,
    load_policy,
)

TINY = {"chunk_size": 3, "hidden_size": 16, "num_heads": 2, "vision_layers": 1, "text_layers": 1,
        "patch_size": 16, "feature_dim": 16, "value_hidden": 16}


def pixel_obs(batch_size: int = 4, seed: int = 0, wrist: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    obs = {"image": rng.integers(0, 256, (batch_size, 64, 64, 3), dtype=np.uint8),
           "proprio": rng.normal(size=(batch_size, 4)).astype(np.float32),
           "instruction": tuple(f"push the cube {i % 2}" for i in range(batch_size))}
    if wrist:
        obs["wrist_image"] = rng.integers(0, 256, (batch_size, 64, 64, 3), dtype=np.uint8)
    return obs


def tiny_adapter(**overrides) -> TransformersVLAAdapter:
    torch.manual_seed(0)
    return TransformersVLAAdapter(TransformersVLAConfig(**{**TINY, **overrides})).eval()


class EchoVLA(ExternalVLAAdapter):
    """A stand-in external model: the chunk repeats proprio; features say which instruction it got."""

    policy_type = "echo_vla_test"
    config_class = ExternalVLAConfig

    def __init__(self, config: ExternalVLAConfig, chunk_shape: tuple[int, ...] | None = None):
        super().__init__(config, feature_dim=2)
        self.chunk_shape = chunk_shape
        self.seen: list[list[str]] = []

    def predict_chunk(self, images, wrist_images, instructions, proprio):
        self.seen.append(instructions)
        chunk = proprio[:, None].expand(-1, self.chunk_size, -1)
        return chunk.reshape(self.chunk_shape) if self.chunk_shape else chunk

    def embed(self, images, wrist_images, instructions, proprio):
        return torch.tensor([[len(t), images.mean().item()] for t in instructions])


@pytest.mark.slow
def test_transformers_adapter_through_the_protocol():
    policy = tiny_adapter(use_wrist=True)
    batch = policy.preprocess(pixel_obs(4, wrist=True))
    out = policy.act(batch)
    assert out.actions.shape == (4, 3, 4) and out.actions.dtype == torch.float32
    assert out.log_prob.shape == out.value.shape == (4,)
    assert out.features.shape == (4, 16)
    log_prob, entropy, value = policy.evaluate(batch, out.actions)
    torch.testing.assert_close(log_prob, out.log_prob)
    torch.testing.assert_close(value, out.value)
    assert entropy.shape == (4,)
    mode = policy.act(batch, deterministic=True)
    torch.testing.assert_close(mode.actions, policy.predict_with_features(
        batch["image"], batch["wrist_image"], list(pixel_obs(4)["instruction"]), batch["proprio"])[0])
    assert policy.sample(batch, 5).shape == (4, 5, 3, 4)
    assert torch.equal(policy.features(batch), out.features)
    assert torch.equal(policy.value(batch), out.value)


@pytest.mark.slow
def test_transformers_adapter_trains_end_to_end():
    policy = tiny_adapter().train()
    batch = policy.preprocess(pixel_obs(4))
    actions = policy.act(batch).actions.detach()
    log_prob, entropy, value = policy.evaluate(batch, actions)
    (-(log_prob.mean()) - 0.01 * entropy.mean() + value.pow(2).mean()).backward()
    for name in ("vision.embeddings.patch_embeddings.projection.weight", "text.embeddings.word_embeddings.weight",
                 "action_dist.log_std", "value_head.2.weight"):
        grad = dict(policy.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_transformers_adapter_save_load_round_trip(tmp_path):
    policy = tiny_adapter(action_low=(-2.0, -2.0, -2.0, 1.0), action_high=(2.0, 2.0, 2.0, 0.0))
    with torch.no_grad():
        policy.action_dist.log_std.fill_(-0.5)
    policy.save_pretrained(tmp_path / "vla")
    loaded = load_policy(tmp_path / "vla")
    assert isinstance(loaded, TransformersVLAAdapter) and loaded.config == policy.config
    obs = pixel_obs(3)
    a = policy.act(policy.preprocess(obs), deterministic=True)
    b = loaded.act(policy.preprocess(obs), deterministic=True)  # batches are portable between copies
    for x, y in zip((a.actions, a.log_prob, a.value, a.features),
                    (b.actions, b.log_prob, b.value, b.features), strict=True):
        assert torch.equal(x, y)

    document = json.loads((tmp_path / "vla" / "config.json").read_text())
    document["config"]["hidden_size"] = 32
    (tmp_path / "vla" / "config.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="do not fit a TransformersVLAAdapter"):
        load_policy(tmp_path / "vla")


def test_action_mapping_and_instructions_reach_the_model():
    # Model units: translation in metres (+-3 cm is worldsim's +-1), gripper 1 = open, 0 = closed.
    config = ExternalVLAConfig(chunk_size=2, action_low=(-0.03, -0.03, -0.03, 1.0), action_high=(0.03, 0.03, 0.03, 0.0))
    policy = EchoVLA(config)
    obs = pixel_obs(3)
    obs["proprio"] = np.array([[0.03, -0.03, 0.0, 1.0], [0.015, 0.0, 0.0, 0.0], [0, 0, 0, 0.5]], np.float32)
    obs["instruction"] = ("open the drawer", "pick up the red mug", "open the drawer")  # any text: open vocabulary
    out = policy.act(policy.preprocess(obs), deterministic=True)
    expected = torch.tensor([[1.0, -1.0, 0.0, -1.0], [0.5, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(out.actions, expected[:, None].expand(-1, 2, -1))
    assert policy.seen[-1] == list(obs["instruction"])
    assert out.features[:, 0].tolist() == [15.0, 19.0, 15.0]


def test_a_model_returning_the_wrong_chunk_shape_is_named():
    policy = EchoVLA(ExternalVLAConfig(chunk_size=2), chunk_shape=(3, 8, 1))
    with pytest.raises(ValueError, match=r"EchoVLA.predict_chunk returned shape \(3, 8, 1\); expected \(3, 2, 4\)"):
        policy.act(policy.preprocess(pixel_obs(3)))
    with pytest.raises(ValueError, match=r"actions must be a tensor of shape \(3, 2, 4\)"):
        EchoVLA(ExternalVLAConfig(chunk_size=2)).evaluate(policy.preprocess(pixel_obs(3)), torch.zeros(3, 4))


def test_adapter_rejects_bad_observations():
    policy = tiny_adapter(use_wrist=True)
    with pytest.raises(ValueError, match=r"lacks \['wrist_image'\]"):
        policy.preprocess(pixel_obs(2))
    with pytest.raises(ValueError, match=r"image must have shape \(B, 64, 64, 3\)"):
        policy.preprocess({**pixel_obs(2, wrist=True), "image": np.zeros((2, 32, 32, 3), np.uint8)})


@pytest.mark.parametrize(("overrides", "match"), [
    ({"action_low": (0.0, 0.0, 0.0)}, "must hold 4 finite numbers"),
    ({"action_low": (1.0, 0.0, 0.0, 0.0), "action_high": (1.0, 1.0, 1.0, 1.0)}, r"equal in \[0\]"),
    ({"patch_size": 12}, "patch_size=12 must divide image_size=64"),
    ({"num_heads": 3}, "num_heads=3 must divide hidden_size=16"),
    ({"chunk_size": 0}, "chunk_size=0 must be an int >= 1"),
    ({"init_log_std": -9.0}, "min_log_std <= init_log_std"),
])
def test_bad_adapter_configs_are_rejected(overrides, match):
    with pytest.raises(ValueError, match=match):
        TransformersVLAConfig(**{**TINY, **overrides})
