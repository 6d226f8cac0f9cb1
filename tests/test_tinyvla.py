"""TinyVLA: the protocol's shapes and invariants, behaviour cloning, checkpoints, bad input, a real env."""

import json
import math

import numpy as np
import pytest
import torch

from worldsim.envs.tasks import get_task
from worldsim.policies import TinyVLA, TinyVLAConfig, language, load_policy
from worldsim.policies.base import Policy
from worldsim.policies.runner import ChunkQueue

PUSH = get_task("PushCube-v0").instruction
REACH = get_task("ReachCube-v0").instruction
TINY = {"language": "learned", "channels": (4, 8, 8), "hidden_dim": 32, "feature_dim": 24, "language_dim": 8,
        "chunk_size": 3}


def tiny_policy(**overrides) -> TinyVLA:
    torch.manual_seed(0)
    return TinyVLA(TinyVLAConfig.for_tasks(["PushCube-v0", "ReachCube-v0"], **{**TINY, **overrides}))


def pixel_obs(batch_size: int = 5, seed: int = 0, size: int = 64, wrist: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    obs = {"image": rng.integers(0, 256, (batch_size, size, size, 3), dtype=np.uint8),
           "proprio": rng.normal(size=(batch_size, 4)).astype(np.float32),
           "instruction": tuple(PUSH if i % 2 else REACH for i in range(batch_size))}
    if wrist:
        obs["wrist_image"] = rng.integers(0, 256, (batch_size, size, size, 3), dtype=np.uint8)
    return obs


@pytest.mark.parametrize("overrides", [{}, {"film": False, "pooling": "mean", "tanh_mean": False}])
def test_protocol_shapes_and_dtypes(overrides):
    policy = tiny_policy(**overrides)
    batch = policy.preprocess(pixel_obs(5))
    assert batch["image"].shape == (5, 3, 64, 64) and batch["image"].dtype == torch.float32
    assert 0.0 <= batch["image"].min() and batch["image"].max() <= 1.0
    assert batch["instruction_id"].tolist() == [1, 0, 1, 0, 1]
    as_bytes = {**pixel_obs(5), "instruction": np.array([t.encode() for t in pixel_obs(5)["instruction"]])}
    # instructions as h5py gives them
    assert torch.equal(policy.preprocess(as_bytes)["instruction_id"], batch["instruction_id"])
    out = policy.act(batch)
    assert out.actions.shape == (5, 3, 4) and out.actions.dtype == torch.float32
    assert out.log_prob.shape == out.value.shape == (5,)
    assert out.features.shape == (5, 24)
    log_prob, entropy, value = policy.evaluate(batch, out.actions)
    assert log_prob.shape == entropy.shape == value.shape == (5,)
    assert policy.features(batch).shape == (5, 24)
    assert policy.sample(batch, 7).shape == (5, 7, 3, 4)
    assert torch.equal(policy.value(batch), out.value)
    assert isinstance(policy, Policy) and policy.chunk_size == 3


def test_log_prob_entropy_and_deterministic_mode():
    policy = tiny_policy()
    batch = policy.preprocess(pixel_obs(6))
    out = policy.act(batch)
    log_prob, entropy, _ = policy.evaluate(batch, out.actions)
    torch.testing.assert_close(log_prob, out.log_prob)
    # A diagonal Gaussian over 3x4 dims with std e^-1 everywhere.
    expected_entropy = 12 * (0.5 * math.log(2 * math.pi * math.e) - 1.0)
    torch.testing.assert_close(entropy, torch.full((6,), expected_entropy))
    mode = policy.act(batch, deterministic=True)
    mean = policy.action_mean(policy.features(batch))
    torch.testing.assert_close(mode.actions, mean)
    assert mode.actions.abs().max() <= 1.0  # tanh mean
    assert (mode.log_prob > out.log_prob).all()  # the mode is the most likely chunk


def test_samples_spread_with_the_policy_std():
    policy = tiny_policy()
    batch = policy.preprocess(pixel_obs(2))
    torch.manual_seed(1)
    samples = policy.sample(batch, 4000)
    mean = policy.act(batch, deterministic=True).actions
    torch.testing.assert_close(samples.mean(1), mean, atol=0.02, rtol=0)
    torch.testing.assert_close(samples.std(1), torch.full_like(mean, math.exp(-1.0)), atol=0.02, rtol=0)


def test_the_instruction_conditions_the_policy():
    policy = tiny_policy()
    with torch.no_grad():
        for p in policy.image_encoder.films.parameters():  # FiLM starts as the identity; make it act
            p.normal_(0, 0.5)
    obs = pixel_obs(2)
    obs["image"][1] = obs["image"][0]
    obs["proprio"][1] = obs["proprio"][0]
    features = policy.features(policy.preprocess(obs))
    assert not torch.allclose(features[0], features[1], atol=1e-3)


def sample_std(policy: TinyVLA, obs: dict, num_samples: int = 3000) -> torch.Tensor:
    """The empirical std ``(B, K, 4)`` of ``policy.sample`` over many samples."""
    torch.manual_seed(2)
    with torch.no_grad():
        return policy.sample(policy.preprocess(obs), num_samples).std(1)


def test_a_state_std_head_makes_the_spread_of_samples_depend_on_the_input():
    policy = tiny_policy(std_head="state").eval()
    assert policy.action_dist.log_std_head.weight.abs().max() == 0  # starts as the global std
    with torch.no_grad():
        policy.action_dist.log_std_head.weight.normal_(0, 0.1)
    obs = pixel_obs(2)  # two different images, proprio and instructions
    std = sample_std(policy, obs)
    with torch.no_grad():
        exact = policy.action_dist.std(policy.features(policy.preprocess(obs)))
    assert exact.shape == (2, 3, 4)
    torch.testing.assert_close(std, exact, rtol=0.06, atol=0)
    assert (exact[0] - exact[1]).abs().max() > 0.05 and not torch.allclose(std[0], std[1], rtol=0.1)
    _, entropy, _ = policy.evaluate(policy.preprocess(obs), torch.zeros(2, 3, 4))
    assert entropy[0] != entropy[1]


def test_a_global_std_head_gives_the_same_spread_for_any_input():
    policy = tiny_policy(std_head="global").eval()
    assert policy.action_dist.log_std_head is None
    with torch.no_grad():
        policy.action_dist.log_std.normal_(-1.0, 0.3)  # differs per chunk step and dimension
    obs = pixel_obs(2)
    std = sample_std(policy, obs)
    exact = policy.action_dist.std().detach()
    assert exact.shape == (3, 4)
    torch.testing.assert_close(std, exact.expand(2, 3, 4), rtol=0.06, atol=0)
    with torch.no_grad():
        features = policy.features(policy.preprocess(obs))
        assert torch.equal(policy.action_dist(policy.action_mean(features)).stddev[0],
                           policy.action_dist(policy.action_mean(features)).stddev[1])


def test_save_load_keeps_the_state_std_head(tmp_path):
    policy = tiny_policy(std_head="state").eval()
    with torch.no_grad():
        policy.action_dist.log_std_head.weight.normal_(0, 0.1)
    policy.save_pretrained(tmp_path / "p")
    loaded = load_policy(tmp_path / "p")
    assert loaded.config.std_head == "state"
    assert torch.equal(loaded.action_dist.log_std_head.weight, policy.action_dist.log_std_head.weight)
    obs = pixel_obs(3)
    with torch.no_grad():
        a = policy.action_dist.std(policy.features(policy.preprocess(obs)))
        b = loaded.action_dist.std(loaded.features(loaded.preprocess(obs)))
    assert torch.equal(a, b) and not torch.equal(a[0], a[1])
    document = json.loads((tmp_path / "p" / "config.json").read_text())
    document["config"]["std_head"] = "global"  # a state head's weights do not fit a global-std policy
    (tmp_path / "p" / "config.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="do not fit a TinyVLA"):
        load_policy(tmp_path / "p")


def test_behaviour_cloning_overfits_a_small_batch():
    policy = tiny_policy(image_size=32)
    obs = pixel_obs(16, seed=3, size=32)
    policy.set_normalization(obs["proprio"].mean(0), obs["proprio"].std(0))
    batch = policy.preprocess(obs)
    actions = torch.as_tensor(np.random.default_rng(4).uniform(-0.8, 0.8, (16, 3, 4)), dtype=torch.float32)
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    first = None
    for _ in range(100):
        loss, logs = policy.imitation_loss(batch, actions)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first = first if first is not None else logs
    assert set(logs) == {"loss", "mse", "nll", "std"}
    assert logs["mse"] < 0.1 * first["mse"], (first, logs)
    assert logs["std"] < first["std"]  # the NLL shrinks the std towards the residuals


def test_imitation_loss_ignores_masked_steps():
    policy = tiny_policy()
    batch = policy.preprocess(pixel_obs(4))
    actions = torch.zeros(4, 3, 4)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    changed = actions.clone()
    changed[~mask] = 0.9
    loss_a, _ = policy.imitation_loss(batch, actions, mask)
    loss_b, _ = policy.imitation_loss(batch, changed, mask)
    torch.testing.assert_close(loss_a, loss_b)
    with pytest.raises(ValueError, match="masks out every action"):
        policy.imitation_loss(batch, actions, torch.zeros(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"action_mask must have shape \(4, 3\)"):
        policy.imitation_loss(batch, actions, torch.ones(4, 2))
    with pytest.raises(ValueError, match=r"actions must be a tensor of shape \(4, 3, 4\)"):
        policy.imitation_loss(batch, torch.zeros(4, 2, 4))
    with pytest.raises(ValueError, match="NaN"):
        policy.evaluate(batch, torch.full((4, 3, 4), float("nan")))


def test_normalization_is_applied_saved_and_validated(tmp_path):
    policy = tiny_policy()
    obs = pixel_obs(3)
    policy.set_normalization([1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 0.0, 1.0])
    assert policy.proprio_std.tolist() == pytest.approx([2.0, 2.0, 0.01, 1.0])  # floored
    proprio = policy.preprocess(obs)["proprio"]
    expected = (torch.as_tensor(obs["proprio"]) - policy.proprio_mean) / policy.proprio_std
    torch.testing.assert_close(proprio, expected)
    with pytest.raises(ValueError, match=r"proprio_mean must have shape \(4,\)"):
        policy.set_normalization([0.0, 0.0], [1.0] * 4)
    with pytest.raises(ValueError, match="proprio_std must be >= 0"):
        policy.set_normalization([0.0] * 4, [1.0, -1.0, 1.0, 1.0])
    policy.save_pretrained(tmp_path / "p")
    assert load_policy(tmp_path / "p").proprio_mean.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_save_load_round_trip_is_exact(tmp_path):
    policy = tiny_policy(use_wrist=True)
    policy.set_normalization([0.1, 0.2, 0.3, 0.4], [1.0, 2.0, 3.0, 4.0])
    with torch.no_grad():
        policy.action_dist.log_std.add_(0.3)
    policy.save_pretrained(tmp_path / "run" / "policy")
    loaded = load_policy(tmp_path / "run")  # a run folder holding policy/
    assert isinstance(loaded, TinyVLA) and loaded.config == policy.config
    obs = pixel_obs(4, wrist=True)
    policy.eval()
    a, b = policy.act(policy.preprocess(obs), True), loaded.act(loaded.preprocess(obs), True)
    for x, y in zip((a.actions, a.log_prob, a.value, a.features),
                    (b.actions, b.log_prob, b.value, b.features), strict=True):
        assert torch.equal(x, y)
    assert isinstance(TinyVLA.from_pretrained(tmp_path / "run" / "policy"), TinyVLA)


def test_the_checkpoint_records_its_tasks_or_they_follow_from_its_instructions(tmp_path):
    from worldsim.evaluation.evaluate import trained_tasks

    policy = tiny_policy()
    assert policy.config.tasks == ("PushCube-v0", "ReachCube-v0")
    policy.save_pretrained(tmp_path / "p")
    assert trained_tasks(load_policy(tmp_path / "p")) == ["PushCube-v0", "ReachCube-v0"]
    # A config naming only instructions: its tasks follow from instructions that belong to one
    # task each, and are refused where tasks share the instruction.
    for task, folder in (("PushCube-Green-v0", "green"), ("PushCube-v0", "push")):
        instruction = get_task(task).instruction
        TinyVLA(TinyVLAConfig(instructions=(instruction,), **TINY)).save_pretrained(tmp_path / folder)
    bare = load_policy(tmp_path / "green")
    assert bare.config.tasks == () and trained_tasks(bare) == ["PushCube-Green-v0"]
    with pytest.raises(ValueError, match="'push the red cube onto the blue square' is shared by PushCube-v0, "
                                         "PushCube-Row-v0.*--task"):
        trained_tasks(load_policy(tmp_path / "push"))
    with pytest.raises(ValueError, match=r"tasks \['StackCube-v0'\] have instructions outside"):
        TinyVLAConfig(instructions=(PUSH,), tasks=("StackCube-v0",))


def test_a_checkpoint_of_another_architecture_is_refused(tmp_path):
    tiny_policy().save_pretrained(tmp_path / "p")
    document = json.loads((tmp_path / "p" / "config.json").read_text())
    document["config"]["channels"] = [4, 8, 16]
    (tmp_path / "p" / "config.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="do not fit a TinyVLA"):
        load_policy(tmp_path / "p")


def test_an_instruction_it_was_not_trained_on_is_refused():
    policy = tiny_policy()
    policy.check_task(PUSH)
    unseen = get_task("StackCube-v0").instruction
    with pytest.raises(ValueError, match="not trained on the instruction") as err:
        policy.check_task(unseen)
    assert PUSH in str(err.value) and REACH in str(err.value)
    obs = pixel_obs(2)
    obs["instruction"] = (PUSH, unseen)
    with pytest.raises(ValueError, match=f"not trained on the instruction.*{unseen}"):
        policy.preprocess(obs)


@pytest.mark.parametrize(("change", "error", "match"), [
    (lambda o: o["image"], TypeError, "expected a pixel observation dict"),
    (lambda o: {k: v for k, v in o.items() if k != "proprio"}, ValueError, r"lacks \['proprio'\]"),
    (lambda o: {**o, "image": o["image"][:, :32, :32]}, ValueError,
     r"image must have shape \(B, 64, 64, 3\)"),
    (lambda o: {**o, "image": o["image"].astype(np.float32)}, ValueError, "image must be uint8"),
    (lambda o: {**o, "proprio": o["proprio"][:, :3]}, ValueError, r"proprio must have shape \(B, 4\)"),
    (lambda o: {**o, "proprio": o["proprio"] * np.nan}, ValueError, "proprio holds NaN"),
    (lambda o: {**o, "instruction": o["instruction"][:2]}, ValueError, "with B=2 instructions"),
    (lambda o: {**o, "instruction": (1, 2, 3)}, TypeError, "instruction must be a string or a sequence"),
])
def test_bad_observations_get_clear_errors(change, error, match):
    policy = tiny_policy()
    with pytest.raises(error, match=match):
        policy.preprocess(change(pixel_obs(3)))


def test_wrist_camera_is_required_when_configured_and_unbatched_obs_work():
    policy = tiny_policy(use_wrist=True)
    with pytest.raises(ValueError, match=r"lacks \['wrist_image'\].*wrist_camera=True"):
        policy.preprocess(pixel_obs(2))
    obs = pixel_obs(1, wrist=True)
    single = {k: v[0] for k, v in obs.items()}
    assert torch.equal(policy.preprocess(single)["image"], policy.preprocess(obs)["image"])


@pytest.mark.parametrize(("overrides", "match"), [
    ({"instructions": ()}, "non-empty tuple"),
    ({"instructions": ("a", "b", "a")}, r"repeated: \['a'\]"),
    ({"image_size": 62}, "divisible by 4"),
    ({"chunk_size": 0}, "chunk_size=0 must be an int >= 1"),
    ({"language": "bert"}, "language='bert' must be one of"),
    ({"allow_new_instructions": True}, "needs language='minilm'"),
    ({"pooling": "max"}, "pooling='max'"),
    ({"init_log_std": 3.0}, "min_log_std <= init_log_std <= max_log_std"),
    ({"std_head": "mlp"}, r"std_head='mlp' must be one of \('global', 'state'\)"),
])
def test_bad_configs_are_rejected(overrides, match):
    fields = {"instructions": ("a",), **TINY, **overrides}
    with pytest.raises(ValueError, match=match):
        TinyVLAConfig(**fields)


def test_tinyvla_drives_a_real_env_through_a_chunk_queue(make_vec):
    env = make_vec("PushCube-v0", num_envs=3, obs_mode="pixels")
    policy = tiny_policy(pooling="mean").eval()
    queue = ChunkQueue(policy, num_envs=3, execute_steps=2)
    obs, _ = env.reset(seed=0)
    planned = 0
    for _ in range(6):
        actions = queue(obs)
        assert actions.shape == (3, 4) and actions.dtype == np.float32
        planned += len(queue.last_planned)
        obs, reward, terminated, truncated, _ = env.step(actions)
        queue.restart(terminated | truncated)
        assert np.isfinite(reward).all()
    assert planned == 9  # re-planned every 2 steps for each of 3 envs
    assert queue.last_output.features.shape == (3, 24)


@pytest.mark.slow
def test_minilm_embeddings_and_reload_without_minilm(tmp_path, monkeypatch):
    config = TinyVLAConfig.for_tasks(["PushCube-v0", "ReachCube-v0"], **{**TINY, "language": "minilm"})
    policy = TinyVLA(config)
    obs = pixel_obs(2)
    out = policy.act(policy.preprocess(obs), deterministic=True)
    table = policy.language.embeddings
    assert table.shape == (2, 384)
    torch.testing.assert_close(table.norm(dim=1), torch.ones(2))
    assert float(table[0] @ table[1]) < 0.95  # different instructions, different embeddings
    policy.save_pretrained(tmp_path / "p")

    def no_minilm():
        raise AssertionError("MiniLM must not be loaded to use a saved policy")

    monkeypatch.setattr(language, "load_minilm", no_minilm)
    loaded = load_policy(tmp_path / "p")
    assert loaded.config.language == "minilm"
    assert torch.equal(loaded.act(loaded.preprocess(obs), deterministic=True).actions, out.actions)
    monkeypatch.undo()

    # Zero-shot: an unseen instruction is embedded at run time; it gets an id after the known ones.
    zero_shot = TinyVLA(TinyVLAConfig.for_tasks(["PushCube-v0"], **{**TINY, "language": "minilm",
                                                                    "allow_new_instructions": True}))
    unseen = get_task("PushCube-Green-v0").instruction
    zero_shot.check_task(unseen)
    batch = zero_shot.preprocess({**pixel_obs(2), "instruction": (PUSH, unseen)})
    assert batch["instruction_id"].tolist() == [0, 1]
    assert zero_shot.act(batch).actions.shape == (2, 3, 4)
    zero_shot.save_pretrained(tmp_path / "z")  # run-time embeddings are not part of the checkpoint
    assert load_policy(tmp_path / "z").language.embeddings.shape == (1, 384)


def test_auto_language_falls_back_to_a_learned_table_without_minilm(monkeypatch):
    monkeypatch.setattr(language, "minilm_available", lambda: False)
    with pytest.warns(UserWarning, match="falling back to a learned instruction embedding"):
        config = TinyVLAConfig(instructions=(PUSH,), **{**TINY, "language": "auto"})
    assert config.language == "learned"
    assert isinstance(TinyVLA(config).language.table, torch.nn.Embedding)
