"""The dynamics ensemble: how its members train, how far they disagree, and what the imagined env
charges for it."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from worldsim.training.grpo import GRPOConfig
from worldsim.world_models import EpisodeBank, WorldModel, WorldModelConfig
from worldsim.world_models.ensemble import bootstrap, spread
from worldsim.world_models.model import Rollout
from worldsim.world_models.replay import open_loop
from worldsim.world_models.train import TrainWMConfig, train_world_model

SMALL = dict(image_size=32, context=2, channels=(16, 32), norm_groups=8, cond_hidden=32, success_channels=8,
             object_hidden=32, object_pathway=True, outcome="rule")


def windows(b: int = 6, horizon: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return {"points": torch.rand(b, 2, 6, 2, generator=g) * 32, "heights": torch.full((b, 2, 6), 0.02),
            "proprio": torch.rand(b, 2 + horizon, 4, generator=g), "actions": torch.rand(b, horizon, 4, generator=g),
            "target": torch.rand(b, horizon, 6, 2, generator=g) * 32,
            "target_heights": torch.full((b, horizon, 6), 0.02),
            "valid": torch.ones(b, horizon, dtype=torch.bool), "task": torch.zeros(b, dtype=torch.long)}


def rollout(b: int = 3) -> Rollout:
    g = torch.Generator().manual_seed(4)
    proprio = torch.tensor([0.0, 0.0, 0.1, 0.04]) + 0.05 * torch.rand(b, 2, 4, generator=g)
    return Rollout(torch.rand(b, 2, 48, 8, 8, generator=g) * 2 - 1, torch.rand(b, 48, 8, 8, generator=g) * 2 - 1,
                   proprio, 8 + 16 * torch.rand(b, 2, 6, 2, generator=g), torch.full((b, 2, 6), 0.02))


def test_spread_is_the_farthest_member_from_the_mean_and_bootstrap_keeps_rows_together():
    members = torch.zeros(2, 1, 2, 3)  # 2 members, 1 episode, 2 points
    members[1, 0, 1] = torch.tensor([0.0, 3.0, 4.0])  # the second point 5 apart: each member 2.5 from the mean
    assert spread(members).tolist() == [2.5]
    w = {"a": torch.arange(8.0), "b": torch.arange(8.0)[:, None].repeat(1, 3)}
    drawn = bootstrap(w, torch.Generator().manual_seed(0))
    assert drawn["a"].shape == (8,) and drawn["b"].shape == (8, 3)
    assert torch.equal(drawn["b"][:, 0], drawn["a"]) and len(set(drawn["a"].tolist())) < 8  # with replacement


def test_members_train_on_their_own_loss_and_ensemble_only_leaves_the_model_alone():
    model = WorldModel(WorldModelConfig(**SMALL, dynamics_members=3))
    assert len(model.ensemble) == 2 and model.dynamics_members() == [None, *model.ensemble]
    loss, terms = model.dynamics_loss(windows(), torch.Generator().manual_seed(1))
    assert set(terms) == {"proprio", "objects", "ensemble_proprio", "ensemble_objects"}
    loss.backward()
    assert all(p.grad is not None for p in model.dynamics_parameters())
    model.zero_grad(set_to_none=True)
    loss, terms = model.dynamics_loss(windows(), torch.Generator().manual_seed(1), part="ensemble")
    loss.backward()
    assert set(terms) == {"ensemble_proprio", "ensemble_objects"}
    assert model.proprio_head[-1].weight.grad is None and model.objects.net[-1].weight.grad is None
    owned = {id(p) for p in model.dynamics_parameters("ensemble")}
    assert owned == {id(p) for p in model.ensemble.parameters()}
    with pytest.raises(ValueError, match="part='every'; allowed: all, ensemble"):
        model.dynamics_loss(windows(), part="every")
    with pytest.raises(ValueError, match="no dynamics ensemble.*dynamics_members=1"):
        WorldModel(WorldModelConfig(**SMALL)).dynamics_parameters("ensemble")


def test_disagreement_is_zero_for_identical_members_and_the_imagined_step_is_the_models_own():
    torch.manual_seed(0)
    alone = WorldModel(WorldModelConfig(**SMALL)).eval()
    model = alone.with_dynamics_members(3).eval()
    assert all(torch.equal(value, alone.state_dict()[name]) for name, value in model.state_dict().items()
               if not name.startswith("ensemble."))
    action, task = torch.rand(3, 4) * 2 - 1, torch.zeros(3, dtype=torch.long)
    plain = alone.predict(rollout(), action, task, generator=torch.Generator().manual_seed(0))
    assert plain.disagreement is None
    for member in model.ensemble:  # copies of the model's own: nothing to disagree about
        member.proprio_head.load_state_dict(model.proprio_head.state_dict())
        member.objects.load_state_dict(model.objects.state_dict())
    same = model.predict(rollout(), action, task, generator=torch.Generator().manual_seed(0))
    assert torch.equal(same.latent, plain.latent) and torch.equal(same.proprio, plain.proprio)
    assert same.disagreement.abs().max() < 1e-6
    with torch.no_grad():  # one member's gripper 3 cm further along x than the other two's
        model.ensemble[0].proprio_head[-1].bias[0] += 0.03 / model.proprio_std[0]
    moved = model.predict(rollout(), action, task, generator=torch.Generator().manual_seed(0))
    assert torch.equal(moved.latent, plain.latent)  # the members are read, never followed
    # the mean is 1 cm along: the odd member 2 cm from it (its cube may follow its gripper, never closer)
    assert (moved.disagreement >= 0.02 - 1e-5).all() and (moved.disagreement < 0.05).all()
    assert len(model.with_dynamics_members(2).ensemble) == 1


def test_the_imagined_env_charges_the_disagreement_per_centimetre(push_episodes, tmp_path):
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig(**SMALL, dynamics_members=3))
    with torch.no_grad():
        model.ensemble[0].proprio_head[-1].bias[0] += 0.01  # the members part
    model.save_pretrained(tmp_path / "wm")
    kwargs = dict(num_envs=4, world_model=tmp_path / "wm", keyframes=push_episodes, device="cpu", reward_type="dense",
                  reset_schedule="synchronous", terminate_on_success=False)
    free = gym.make_vec("worldsim/Imagined-PushCube-v0", **kwargs)
    charged = gym.make_vec("worldsim/Imagined-PushCube-v0", uncertainty_penalty=0.5, **kwargs)
    _, info = free.reset(seed=0)
    charged.reset(seed=0)
    assert (info["reward_terms"]["disagreement_cm"] == 0).all()  # nothing imagined yet
    actions = np.random.default_rng(0).uniform(-1, 1, (3, 4, 4)).astype(np.float32)
    for action in actions:
        _, reward, _, _, info = free.step(action)
        _, penalised, _, _, charged_info = charged.step(action)
        disagreement = info["reward_terms"]["disagreement_cm"]
        assert (disagreement > 0).all()
        np.testing.assert_allclose(charged_info["reward_terms"]["disagreement_cm"], disagreement)
        np.testing.assert_allclose(penalised, reward - 0.5 * disagreement, rtol=1e-6, atol=1e-9)
    free.close()
    charged.close()
    replay = open_loop(model, EpisodeBank(push_episodes), np.arange(2), np.zeros(2, np.int64), 3)
    assert replay.disagreement.shape == (2, 4) and (replay.disagreement[:, 0] == 0).all()
    assert (replay.disagreement[:, 1:] > 0).all() and replay.head(2).disagreement.shape == (2, 3)
    with pytest.raises(ValueError, match="uncertainty_penalty=-1.0 must be a finite number >= 0"):
        gym.make_vec("worldsim/Imagined-PushCube-v0", uncertainty_penalty=-1.0, **kwargs)
    WorldModel(WorldModelConfig(**SMALL)).save_pretrained(tmp_path / "single")
    with pytest.raises(ValueError, match="has none: train it with --dynamics-members"):
        gym.make_vec("worldsim/Imagined-PushCube-v0", uncertainty_penalty=0.5,
                     **{**kwargs, "world_model": tmp_path / "single"})
    with pytest.raises(ValueError, match="uncertainty_penalty charges a world model's disagreement"):
        GRPOConfig(task="PushCube-v0", obs_mode="pixels", uncertainty_penalty=0.1, num_envs=8)


@pytest.mark.slow
def test_train_wm_gives_a_trained_model_an_ensemble_without_changing_what_it_imagines(push_episodes, tmp_path):
    common = dict(data=push_episodes, steps=3, batch_size=4, val_fraction=0.25, val_every=3, val_horizon=2,
                  video_every=0, checkpoint_every=3, torch_threads=1, device="cpu", progress=False)
    train_world_model(TrainWMConfig(out=tmp_path / "base", **common))
    with pytest.raises(ValueError, match="--ensemble-only trains the dynamics ensemble.*dynamics_members=1"):
        train_world_model(TrainWMConfig(out=tmp_path / "x", init=tmp_path / "base", ensemble_only=True, **common))
    summary = train_world_model(TrainWMConfig(out=tmp_path / "ens", init=tmp_path / "base", dynamics_members=3,
                                              ensemble_only=True, **common))
    assert {"val/ensemble_proprio", "val/ensemble_objects"} <= set(summary)
    before = load_file(tmp_path / "base" / "world_model" / "model.safetensors")
    after = load_file(tmp_path / "ens" / "world_model" / "model.safetensors")
    assert all(torch.equal(after[name], value) for name, value in before.items())  # the model itself: untouched
    for member in ("ensemble.0", "ensemble.1"):  # their last layers start at zero ("nothing moves"): trained
        assert after[f"{member}.proprio_head.4.weight"].abs().sum() > 0
        assert after[f"{member}.objects.net.6.weight"].abs().sum() > 0
    assert WorldModel.from_pretrained(tmp_path / "ens").config.dynamics_members == 3
    with pytest.raises(ValueError, match="dynamics_members=0 must be an int >= 1"):
        TrainWMConfig(out=tmp_path / "y", dynamics_members=0, **common)
