"""GRPO: group-relative advantages, the first-episode and first-success masks, the masked
surrogate, and a short training run through the train-rl command."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from worldsim.envs.imagination import ImaginationConfig
from worldsim.policies import MLPPolicy, load_policy
from worldsim.runtime.run_logging import read_metrics
from worldsim.training.grpo import (
    GRPOConfig,
    first_episode_mask,
    group_advantages,
    reference_kl,
    success_mask,
    train_grpo,
)
from worldsim.training.rl import clipped_surrogate, make_train_env, weights_digest


def test_group_advantages_subtract_the_group_mean():
    returns = torch.tensor([1.0, 3.0, 10.0, 10.0, 0.0, 2.0, 4.0, 6.0])
    adv = group_advantages(returns, group_size=2, norm_std=False)
    torch.testing.assert_close(adv, torch.tensor([-1.0, 1.0, 0.0, 0.0, -1.0, 1.0, -1.0, 1.0]))
    adv = group_advantages(returns, group_size=4, norm_std=True)
    first = np.array([1.0, 3.0, 10.0, 10.0])
    expected = (first - first.mean()) / (first.std(ddof=1) + 1e-8)
    np.testing.assert_allclose(adv[:4].numpy(), expected, rtol=1e-5)
    # equal returns in a group: no signal, and no division by zero
    assert torch.equal(group_advantages(torch.ones(4), 4, True), torch.zeros(4))
    with pytest.raises(ValueError, match="multiple of group_size=3"):
        group_advantages(torch.ones(4), 3)


def test_first_episode_and_success_masks():
    dones = torch.tensor([[0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1]], dtype=torch.bool)
    alive = first_episode_mask(dones)
    expected_alive = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 1], [0, 0, 1]], dtype=torch.bool)
    assert torch.equal(alive, expected_alive)
    # env 0 succeeds at step 1 (and again at 2), env 1 only after its first episode, env 2 never
    success = torch.tensor([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    mask = success_mask(success, alive)
    expected = torch.tensor([[1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 0, 1]], dtype=torch.bool)
    assert torch.equal(mask, expected)


def test_masked_surrogate_ignores_steps_after_success():
    new = torch.tensor([0.1, -0.3, 2.0], requires_grad=True)
    old = torch.zeros(3)
    adv = torch.tensor([1.0, -1.0, 5.0])
    mask = torch.tensor([True, True, False])
    loss, stats = clipped_surrogate(new, old, adv, 0.2, mask)
    loss.backward()
    # step 1: A < 0 and r = exp(-0.3) = 0.74 < 0.8, so the pessimistic term is the clipped one, 0.8
    assert loss.item() == pytest.approx((-np.exp(0.1) + 0.8) / 2)
    assert new.grad[2].item() == 0.0
    assert stats["clipfrac"].item() == pytest.approx(0.5)


def test_config_rejects_bad_groups(tmp_path):
    with pytest.raises(ValueError, match="group_size=3 must be >= 2 and divide num_envs=16"):
        GRPOConfig(num_envs=16, group_size=3, out=tmp_path)
    with pytest.raises(ValueError, match="group_size=1"):
        GRPOConfig(num_envs=16, group_size=1, out=tmp_path)
    with pytest.raises(ValueError, match="kl_coef=-0.1 must be a finite number >= 0"):
        GRPOConfig(num_envs=16, kl_coef=-0.1, out=tmp_path)


def test_physics_reward_sets_the_training_envs_reward_and_is_refused_in_imagination(tmp_path):
    config = GRPOConfig(task="PushCube-v0", num_envs=4, group_size=2, total_env_steps=40, physics_reward="sparse",
                        out=tmp_path)
    policy = MLPPolicy(config.mlp_config(obs_dim=8))
    env = make_train_env(config, 4, policy, reset_schedule="synchronous")
    env.reset(seed=0)
    _, reward, *_ = env.step(np.zeros((4, 4), dtype=np.float32))
    assert env.unwrapped.reward_type == "sparse" and set(np.asarray(reward).tolist()) <= {0.0, 1.0}
    env.close()
    dense = make_train_env(GRPOConfig(task="PushCube-v0", num_envs=4, group_size=2, out=tmp_path), 4, policy,
                           reset_schedule="synchronous")
    dense.reset(seed=0)
    _, reward, *_ = dense.step(np.zeros((4, 4), dtype=np.float32))
    assert dense.unwrapped.reward_type == "dense" and 0.0 < float(np.min(reward)) < 1.0  # the shaping pays a start
    dense.close()
    with pytest.raises(ValueError, match="physics_reward='sparse' with world_model: imagination rewards as"):
        GRPOConfig(num_envs=4, group_size=2, obs_mode="pixels", physics_reward="sparse", out=tmp_path,
                   imagination=ImaginationConfig(world_model=tmp_path, keyframes=tmp_path))
    with pytest.raises(ValueError, match="physics_reward='shaped'; allowed: dense, sparse"):
        GRPOConfig(num_envs=4, group_size=2, physics_reward="shaped", out=tmp_path)


def test_reference_kl_is_zero_where_the_policies_agree_and_positive_elsewhere():
    log_prob = torch.tensor([0.0, 0.0, -1.0])
    kl = reference_kl(log_prob, torch.tensor([0.0, np.log(0.5), 1.0]))
    torch.testing.assert_close(kl, torch.tensor([0.0, 0.5 - np.log(0.5) - 1.0, np.e**2 - 2.0 - 1.0]))
    far = reference_kl(torch.tensor([-500.0, 0.0]), torch.tensor([0.0, -500.0]))  # exp(500) would overflow
    assert far.tolist() == [10.0, 10.0]


@pytest.mark.slow
def test_grpo_trains_and_resumes_exactly(tmp_path):
    fields = {"task": "ReachCube-v0", "num_envs": 16, "group_size": 4, "total_env_steps": 16 * 50 * 2,
              "update_epochs": 2, "num_minibatches": 2, "hidden": (32, 32), "eval_every": 0,
              "eval_episodes": 4, "checkpoint_every": 0, "progress": False, "device": "cpu"}
    straight = train_grpo(GRPOConfig(**fields, out=tmp_path / "a"))
    assert straight["iterations"] == 2 and straight["global_step"] == 1600
    rows = [r for r in read_metrics(tmp_path / "a" / "metrics.jsonl") if "policy_loss" in r]
    assert len(rows) == 2
    assert all(0.0 <= r["masked_fraction"] < 1.0 and r["episode/length"] == 50 for r in rows)
    assert isinstance(load_policy(tmp_path / "a"), MLPPolicy)

    train_grpo(GRPOConfig(**{**fields, "total_env_steps": 800}, out=tmp_path / "b"))
    resumed = train_grpo(GRPOConfig(**fields, out=tmp_path / "b", resume=True))
    assert resumed["iterations"] == 2
    assert resumed["weights_digest"] == straight["weights_digest"]


@pytest.mark.slow
def test_train_rl_cli_runs_grpo(tmp_path):
    from worldsim.commands.cli import main

    out = tmp_path / "grpo"
    code = main(["train-rl", "--algo", "grpo", "--task", "ReachCube-v0", "--num-envs", "8",
                 "--group-size", "4", "--total-env-steps", "400", "--eval-episodes", "4", "--out", str(out),
                 "--no-progress"])
    assert code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["algo"] == "grpo" and config["group_size"] == 4
    result = json.loads((out / "eval.json").read_text())
    assert result["algo"] == "grpo" and result["episodes"] == 4 and result["env_steps"] == 400


def test_descending_the_reference_kl_brings_the_policy_back_to_the_reference():
    actions = torch.randn(4096, generator=torch.Generator().manual_seed(0)) + 1.0  # taken by a policy at mean 1
    reference = torch.distributions.Normal(0.0, 1.0).log_prob(actions)
    mean = torch.tensor(1.0, requires_grad=True)
    optimizer = torch.optim.SGD([mean], lr=0.5)
    for _ in range(50):
        kl = reference_kl(torch.distributions.Normal(mean, 1.0).log_prob(actions), reference).mean()
        optimizer.zero_grad()
        kl.backward()
        optimizer.step()
    assert abs(mean.item()) < 0.05 and kl.item() < 1e-2


@pytest.mark.slow
def test_grpo_trains_with_the_kl_term_and_logs_it(tmp_path):
    fields = {"task": "ReachCube-v0", "num_envs": 16, "group_size": 4, "total_env_steps": 16 * 50 * 2,
              "update_epochs": 2, "num_minibatches": 2, "hidden": (32, 32), "eval_every": 0, "eval_episodes": 4,
              "checkpoint_every": 0, "progress": False, "device": "cpu"}
    summary = train_grpo(GRPOConfig(**fields, kl_coef=0.1, out=tmp_path / "kl"))
    rows = [r for r in read_metrics(tmp_path / "kl" / "metrics.jsonl") if "policy_loss" in r]
    assert summary["iterations"] == 2 and len(rows) == 2
    assert rows[0]["reference_kl"] >= 0 and rows[1]["reference_kl"] > 0  # the first update starts at the reference


def test_a_non_finite_grpo_loss_stops_with_a_clear_error(tmp_path, monkeypatch):
    import worldsim.training.grpo as grpo

    def diverged(new, old, advantages, clip_coef, mask=None):
        loss, stats = clipped_surrogate(new, old, advantages, clip_coef, mask)
        return loss * float("nan"), stats

    monkeypatch.setattr(grpo, "clipped_surrogate", diverged)
    with pytest.raises(FloatingPointError, match="the GRPO loss became nan at iteration 1; lower --lr"):
        train_grpo(GRPOConfig(task="ReachCube-v0", num_envs=8, group_size=4, total_env_steps=400, hidden=(8, 8),
                              eval_every=0, eval_episodes=2, checkpoint_every=0, progress=False, device="cpu",
                              out=tmp_path / "run"))


def _tiny(tmp_path, name, **overrides):
    fields = {"task": "ReachCube-v0", "num_envs": 16, "group_size": 4, "total_env_steps": 16 * 50 * 2,
              "update_epochs": 4, "num_minibatches": 2, "hidden": (32, 32), "eval_every": 0, "eval_episodes": 2,
              "checkpoint_every": 0, "progress": False, "device": "cpu", "out": tmp_path / name}
    return GRPOConfig(**{**fields, **overrides})


def test_an_update_stops_its_epochs_once_the_kl_passes_target_kl(tmp_path):
    for target_kl, epochs in ((1e-9, 1), (None, 4)):  # the first epoch's second minibatch is off-policy
        train_grpo(_tiny(tmp_path, str(target_kl), target_kl=target_kl))
        rows = [r for r in read_metrics(tmp_path / str(target_kl) / "metrics.jsonl") if "policy_loss" in r]
        assert [r["early_stop_epoch"] for r in rows] == [epochs, epochs]


def test_a_fine_tuned_policy_that_ends_far_from_its_start_is_warned_about(tmp_path, capsys):
    from worldsim.envs.observations import STATE_DIM
    from worldsim.policies import MLPPolicyConfig
    from worldsim.training.rl import FAR_KL

    torch.manual_seed(0)
    start = tmp_path / "start"
    MLPPolicy(MLPPolicyConfig(obs_dim=STATE_DIM, hidden=(32, 32), tasks=("ReachCube-v0",))).save_pretrained(start)
    far = train_grpo(_tiny(tmp_path, "far", policy=start, lr=0.5, target_kl=None))
    assert far["drift_kl"] > FAR_KL
    assert f"warning: the policy ended far from {start}" in capsys.readouterr().err
    near = train_grpo(_tiny(tmp_path, "near", policy=start, lr=1e-5))
    assert 0 <= near["drift_kl"] < FAR_KL
    assert "warning" not in capsys.readouterr().err


def test_keep_checkpoints_keeps_the_policy_of_every_checkpoint_the_last_one_as_policy(tmp_path):
    summary = train_grpo(_tiny(tmp_path, "kept", checkpoint_every=1, keep_checkpoints=True, target_kl=None))
    run = tmp_path / "kept"
    assert sorted(p.name for p in run.glob("policy_iter*")) == ["policy_iter1", "policy_iter2"]
    first, last, latest = (load_policy(run / name) for name in ("policy_iter1", "policy_iter2", "policy"))
    assert summary["weights_digest"] == weights_digest(last) == weights_digest(latest) != weights_digest(first)
    train_grpo(_tiny(tmp_path, "plain", checkpoint_every=1))
    assert not list((tmp_path / "plain").glob("policy_iter*"))
