"""PPO: the pure pieces against hand computations, the MLP policy, learning, exact resume, time
budget, two-process data parallelism and the train-rl command."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from conftest import write_toml

from worldsim.envs.imagination import ImaginationConfig
from worldsim.policies import MLPPolicy, MLPPolicyConfig, load_policy
from worldsim.runtime.checkpoint import CHECKPOINT_FILE, load_checkpoint
from worldsim.runtime.run_logging import read_metrics
from worldsim.training.ppo import (
    FINETUNE_DEFAULTS,
    PPO_DEFAULTS,
    PPOConfig,
    compute_gae,
    ppo_loss,
    train_ppo,
    value_loss,
)
from worldsim.training.rl import weights_digest


def tiny(tmp_path, **overrides) -> PPOConfig:
    """A PPO run of a few small iterations on ReachCube (seconds on 2 cores)."""
    fields = {"task": "ReachCube-v0", "num_envs": 8, "num_steps": 8, "total_env_steps": 8 * 8 * 4,
              "num_minibatches": 2, "update_epochs": 2, "hidden": (32, 32), "eval_every": 0,
              "eval_episodes": 4, "checkpoint_every": 0, "out": tmp_path / "run", "progress": False,
              "device": "cpu"}
    fields.update(overrides)
    return PPOConfig(**fields)


# ---------------------------------------------------------------------------- GAE
def test_compute_gae_matches_hand_computation_with_truncation_and_termination():
    gamma, lam = 0.9, 0.8
    # env 0: truncated (time limit) after step 1, final obs worth 5; env 1: terminated after step 2
    rewards = torch.tensor([[1.0, 0.0], [2.0, 1.0], [0.5, 3.0]])
    values = torch.tensor([[0.5, 1.0], [1.0, 2.0], [2.0, 1.5]])
    dones = torch.tensor([[False, False], [True, False], [False, True]])
    terminated = torch.tensor([[False, False], [False, False], [False, True]])
    final_values = torch.tensor([[0.0, 0.0], [5.0, 0.0], [0.0, 99.0]])  # 99 must be ignored (terminated)
    next_value = torch.tensor([4.0, 7.0])  # 7 must be ignored: env 1's episode ended at the last step
    adv, ret = compute_gae(rewards, values, next_value, dones, terminated, final_values, gamma, lam)

    # env 0: step 2 starts a new episode and bootstraps from next_value
    d2 = 0.5 + gamma * 4.0 - 2.0
    d1 = 2.0 + gamma * 5.0 - 1.0  # truncation: bootstrap from the final obs, not 0, not values[2]
    d0 = 1.0 + gamma * 1.0 - 0.5
    a0 = [d0 + gamma * lam * d1, d1, d2]
    # env 1: termination at step 2 -> nothing after it
    e2 = 3.0 - 1.5
    e1 = 1.0 + gamma * 1.5 - 2.0
    e0 = 0.0 + gamma * 2.0 - 1.0
    a1 = [e0 + gamma * lam * (e1 + gamma * lam * e2), e1 + gamma * lam * e2, e2]
    expected = torch.tensor([a0, a1]).T
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + values)


def test_compute_gae_without_episode_ends_is_discounted_td_sum():
    rewards = torch.ones(4, 1)
    values = torch.zeros(4, 1)
    no = torch.zeros(4, 1, dtype=torch.bool)
    adv, _ = compute_gae(rewards, values, torch.zeros(1), no, no, torch.zeros(4, 1), gamma=0.5,
                         gae_lambda=1.0)
    # lambda = 1, V = 0: the advantage is the discounted return
    torch.testing.assert_close(adv[:, 0], torch.tensor([1 + 0.5 + 0.25 + 0.125, 1 + 0.5 + 0.25, 1.5, 1.0]))


# ---------------------------------------------------------------------------- losses
def _loss(new, old, adv, **kw):
    new = torch.tensor(new, requires_grad=True)
    zeros = torch.zeros(len(adv))
    loss, stats = ppo_loss(new, torch.tensor(old), torch.tensor(adv), zeros, zeros, zeros, zeros,
                           clip_coef=0.2, vf_coef=0.0, norm_adv=False, **kw)
    loss.backward()
    return loss, stats, new.grad


def test_ppo_loss_clips_the_ratio_where_the_update_went_too_far():
    log_r = float(np.log(1.5))  # ratio 1.5 > 1 + 0.2
    # positive advantage, ratio above the range: clipped, no gradient
    loss, stats, grad = _loss([log_r], [0.0], [2.0])
    assert loss.item() == pytest.approx(-2.0 * 1.2)
    assert grad.item() == 0.0 and stats["clipfrac"] == 1.0
    # negative advantage, ratio above the range: the unclipped (pessimistic) term, with gradient
    loss, stats, grad = _loss([log_r], [0.0], [-2.0])
    assert loss.item() == pytest.approx(2.0 * 1.5)
    assert grad.item() == pytest.approx(2.0 * 1.5)
    # inside the range: plain surrogate -A r
    loss, stats, grad = _loss([0.1], [0.0], [1.0])
    assert loss.item() == pytest.approx(-np.exp(0.1))
    assert stats["clipfrac"] == 0.0


def test_ppo_loss_kl_is_zero_on_policy_and_positive_off_policy():
    _, stats, _ = _loss([-1.0, -2.0], [-1.0, -2.0], [1.0, -1.0])
    assert stats["approx_kl"] == pytest.approx(0.0)
    _, stats, _ = _loss([-0.5, -2.5], [-1.0, -2.0], [1.0, -1.0])
    r = np.exp([0.5, -0.5])
    assert stats["approx_kl"] == pytest.approx(float(np.mean((r - 1) - np.log(r))))


def test_ppo_loss_combines_value_and_entropy_terms():
    z = torch.zeros(2)
    new_v, old_v, ret = torch.tensor([1.0, 3.0]), torch.tensor([1.0, 3.0]), torch.tensor([2.0, 1.0])
    entropy = torch.tensor([0.5, 1.5])
    loss, stats = ppo_loss(z, z, z, entropy, new_v, old_v, ret, vf_coef=0.5, ent_coef=0.1, norm_adv=False)
    assert stats["value_loss"] == pytest.approx(0.5 * (1 + 4) / 2)
    assert loss.item() == pytest.approx(0.5 * 1.25 - 0.1 * 1.0)


def test_value_loss_clipping_keeps_the_pessimistic_term():
    old, ret = torch.tensor([0.0]), torch.tensor([1.0])
    new = torch.tensor([0.5])  # moved 0.5 towards the target; clip 0.2 keeps it at 0.2
    assert value_loss(new, old, ret, None).item() == pytest.approx(0.5 * 0.25)
    assert value_loss(new, old, ret, 0.2).item() == pytest.approx(0.5 * 0.64)


# ---------------------------------------------------------------------------- the MLP policy
def test_mlp_policy_protocol_shapes_and_round_trip(tmp_path):
    torch.manual_seed(0)
    policy = MLPPolicy(MLPPolicyConfig(chunk_size=3, hidden=(16,)))
    obs = np.random.default_rng(0).normal(size=(5, 56)).astype(np.float32)
    batch = policy.preprocess({"state": obs, "instruction": ("x",) * 5})
    out = policy.act(batch)
    assert out.actions.shape == (5, 3, 4) and out.log_prob.shape == (5,) and out.value.shape == (5,)
    assert out.features.shape == (5, 16)
    log_prob, entropy, value = policy.evaluate(batch, out.actions)
    torch.testing.assert_close(log_prob, out.log_prob)
    assert entropy.shape == (5,) and torch.equal(value, out.value)
    assert policy.sample(batch, 7).shape == (5, 7, 3, 4)

    policy.update_normalizer(batch)
    loaded = load_policy(policy.save_pretrained(tmp_path / "p"))
    assert isinstance(loaded, MLPPolicy)
    torch.testing.assert_close(loaded.obs_mean, policy.obs_mean)
    torch.testing.assert_close(loaded.act(batch, deterministic=True).actions, policy.act(batch, True).actions)


def test_normalizer_merges_batches_exactly():
    policy = MLPPolicy(MLPPolicyConfig(hidden=(8,)))
    data = np.random.default_rng(1).normal(3.0, 2.0, size=(300, 56)).astype(np.float32)
    for part in np.split(data, [50, 170]):
        policy.update_normalizer({"state": torch.as_tensor(part)})
    np.testing.assert_allclose(policy.obs_mean.numpy(), data.mean(0), rtol=1e-5)
    np.testing.assert_allclose(policy.obs_var.numpy(), data.var(0), rtol=1e-4)
    assert policy.obs_count.item() == 300
    with pytest.raises(ValueError, match="NaN or inf"):
        policy.update_normalizer({"state": torch.full((2, 56), float("nan"))})


def test_mlp_policy_rejects_bad_config_and_observations():
    with pytest.raises(ValueError, match="hidden="):
        MLPPolicyConfig(hidden=())
    with pytest.raises(ValueError, match="activation='gelu'"):
        MLPPolicyConfig(activation="gelu")
    policy = MLPPolicy(MLPPolicyConfig(hidden=(8,)))
    with pytest.raises(ValueError, match=r"shape \(B, 56\)"):
        policy.preprocess(np.zeros((2, 10), np.float32))
    with pytest.raises(ValueError, match="reads the 'state' observation"):
        policy.preprocess({"image": np.zeros((2, 64, 64, 3), np.uint8)})


# ---------------------------------------------------------------------------- config
def test_config_takes_family_defaults_and_rejects_bad_values(tmp_path):
    config = PPOConfig(task="PushCube-v0", out=tmp_path)
    assert config.num_steps == PPO_DEFAULTS["push"]["num_steps"]
    assert config.gamma == PPO_DEFAULTS["push"]["gamma"]
    assert PPOConfig(task="PushCube-v0", gamma=0.5, out=tmp_path).gamma == 0.5
    assert config.value_warmup_iters == 0
    finetune = PPOConfig(task="PushCube-v0", policy="runs/bc_push", obs_mode="pixels", out=tmp_path)
    assert finetune.value_warmup_iters == FINETUNE_DEFAULTS["value_warmup_iters"] > 0
    assert finetune.lr == FINETUNE_DEFAULTS["lr"]
    with pytest.raises(ValueError, match="gamma=1.5"):
        PPOConfig(gamma=1.5, out=tmp_path)
    with pytest.raises(ValueError, match="num_minibatches=3 must divide"):
        PPOConfig(num_envs=8, num_steps=8, num_minibatches=3, out=tmp_path)
    with pytest.raises(ValueError, match="obs_mode='rgb'"):
        PPOConfig(obs_mode="rgb", out=tmp_path)
    with pytest.raises(KeyError, match="PushCub-v0"):
        PPOConfig(task="PushCub-v0", out=tmp_path)


@pytest.mark.slow
def test_one_policy_trains_on_every_task_of_a_suite(tmp_path):
    """--suite splits the envs between the suite's tasks (ConcatVectorEnv) and evaluates each."""
    summary = train_ppo(tiny(tmp_path, task="PushCube-v0", suite="tabletop-4", num_envs=8, eval_episodes=2))
    assert summary["iterations"] >= 1
    per_task = summary["eval"]["per_task"]
    assert list(per_task) == ["ReachCube-v0", "PushCube-v0", "PickPlaceCube-v0", "StackCube-v0"]
    assert all(r["episodes"] == 2 for r in per_task.values())
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert "eval/success_rate/StackCube-v0" in metrics[-1]
    with pytest.raises(ValueError, match="multiple of the 4 tasks"):
        train_ppo(tiny(tmp_path / "x", suite="tabletop-4", num_envs=6, num_minibatches=2))


def test_pixels_from_scratch_is_refused(tmp_path):
    with pytest.raises(ValueError, match="state MLP"):
        train_ppo(tiny(tmp_path, obs_mode="pixels"))


# ---------------------------------------------------------------------------- training
@pytest.mark.slow
def test_ppo_learns_to_reach(tmp_path):
    """64 envs, ~80k env steps: the deterministic policy goes from no success to most episodes."""
    config = tiny(tmp_path, num_envs=64, num_steps=16, num_minibatches=4, update_epochs=5, hidden=(64, 64),
                  total_env_steps=64 * 16 * 80, eval_every=80, eval_episodes=50, lr=3e-3)
    summary = train_ppo(config)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    success = [r["episode/success_rate"] for r in rows if "episode/success_rate" in r]
    returns = [r["episode/return"] for r in rows if "episode/return" in r]
    assert np.mean(success[:3]) < 0.2
    assert np.mean(success[-3:]) > 0.6
    assert np.mean(returns[-3:]) > 2 * np.mean(returns[:3])
    assert summary["eval"]["success_rate"] >= 0.6


@pytest.mark.slow
def test_resume_is_exact(tmp_path):
    straight = train_ppo(tiny(tmp_path / "a", anneal_lr=False))
    first = train_ppo(tiny(tmp_path / "b", anneal_lr=False, total_env_steps=8 * 8 * 2))
    assert first["iterations"] == 2
    resumed = train_ppo(tiny(tmp_path / "b", anneal_lr=False, resume=True))
    assert resumed["iterations"] == 4
    assert resumed["weights_digest"] == straight["weights_digest"]
    a = load_checkpoint(tmp_path / "a" / "run" / CHECKPOINT_FILE)
    b = load_checkpoint(tmp_path / "b" / "run" / CHECKPOINT_FILE)
    for key in a["optimizer"]["state"]:
        assert torch.equal(a["optimizer"]["state"][key]["exp_avg"], b["optimizer"]["state"][key]["exp_avg"])
    np.testing.assert_array_equal(a["next_obs"], b["next_obs"])
    # the resumed run's metrics hold one history: steps 1..4 once each
    steps = [r["step"] for r in read_metrics(tmp_path / "b" / "run" / "metrics.jsonl") if "approx_kl" in r]
    assert steps == [64, 128, 192, 256]


KILLED_RUN = """
import sys
from pathlib import Path
from worldsim.training.ppo import PPOConfig, train_ppo
train_ppo(PPOConfig(task="ReachCube-v0", num_envs=8, num_steps=8, total_env_steps=8 * 8 * 40,
                    num_minibatches=2, update_epochs=2, hidden=(32, 32), eval_every=0, eval_episodes=4,
                    checkpoint_every=1,
                    out=Path(sys.argv[1]), progress=False, device="cpu"))
"""


@pytest.mark.slow
def test_sigkill_loses_only_work_since_the_checkpoint_and_resume_is_exact(tmp_path):
    """Kill -9 a run mid-way (learning-rate annealing on), resume it: same weights as a run
    never interrupted."""
    out = tmp_path / "killed" / "run"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not (out / CHECKPOINT_FILE).exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    killed_at = load_checkpoint(out / CHECKPOINT_FILE)["iteration"]
    assert 1 <= killed_at < 40
    config = {"total_env_steps": 8 * 8 * 40, "checkpoint_every": 1}
    resumed = train_ppo(tiny(tmp_path / "killed", resume=True, **config))
    straight = train_ppo(tiny(tmp_path / "straight", **config))
    assert resumed["iterations"] == straight["iterations"] == 40
    assert resumed["weights_digest"] == straight["weights_digest"]


@pytest.mark.slow
def test_resume_refuses_changed_settings(tmp_path):
    train_ppo(tiny(tmp_path, total_env_steps=64))
    with pytest.raises(ValueError, match="num_envs: 8 -> 16"):
        train_ppo(tiny(tmp_path, num_envs=16, resume=True))


@pytest.mark.slow
def test_time_budget_stops_cleanly_with_a_checkpoint(tmp_path):
    summary = train_ppo(tiny(tmp_path, total_env_steps=10**9, time_budget=1.0))
    assert summary["stopped_by"] == "time_budget"
    assert 1 <= summary["iterations"] < 10**9 // 64
    state = load_checkpoint(tmp_path / "run" / CHECKPOINT_FILE)
    assert state["iteration"] == summary["iterations"]
    assert weights_digest(load_policy(tmp_path / "run")) == summary["weights_digest"]
    assert (tmp_path / "run" / "eval.json").exists()


@pytest.mark.slow
def test_train_rl_refuses_an_earlier_run_unless_overwrite_or_resume(tmp_path, capsys):
    from worldsim.commands.cli import main

    run = tmp_path / "run"
    settings = write_toml(tmp_path / "ppo.toml", """
        num_minibatches = 2
        update_epochs = 2
        hidden = [32, 32]
        eval_every = 0
        checkpoint_every = 0
        anneal_lr = false
        """)
    argv = ["train-rl", "--task", "ReachCube-v0", "--num-envs", "8", "--num-steps", "8", "--config-file",
            str(settings), "--eval-episodes", "4", "--device", "cpu", "--no-progress", "--out", str(run)]
    assert main([*argv, "--total-env-steps", "128"]) == 0
    assert "ppo ReachCube-v0: 2 of 2 iterations; 128 env steps" in capsys.readouterr().out
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main([*argv, "--total-env-steps", "256"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "already holds files" in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # untouched
    assert main([*argv, "--total-env-steps", "256", "--resume"]) == 0
    straight = train_ppo(tiny(tmp_path / "straight", anneal_lr=False))
    assert weights_digest(load_policy(run)) == straight["weights_digest"]  # resumed exactly
    summary = json.loads((run / "summary.json").read_text())
    assert summary["iterations"] == summary["iterations_asked"] == 4 and summary["stopped_by"] == "steps"
    (run / "stale.txt").write_text("from another run")
    assert main([*argv, "--total-env-steps", "64", "--overwrite"]) == 0
    assert not (run / "stale.txt").exists() and json.loads((run / "summary.json").read_text())["iterations"] == 1
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl") if "approx_kl" in r] == [64]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, port: int, out: str, results) -> None:
    import os

    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from pathlib import Path

    summary = train_ppo(tiny(Path(out), total_env_steps=2 * 64 * 3))
    results.put((rank, summary["weights_digest"], summary["iterations"]))


@pytest.mark.slow
def test_two_gloo_processes_stay_in_sync(tmp_path):
    context = mp.get_context("spawn")
    results = context.Queue()
    port = _free_port()
    procs = [context.Process(target=_rank_main, args=(r, port, str(tmp_path), results)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    got = {rank: (digest, iters) for rank, digest, iters in (results.get(timeout=5) for _ in range(2))}
    assert got[0] == got[1]
    assert got[0][1] == 3  # 3 iterations of 2 ranks x 64 env steps
    assert weights_digest(load_policy(tmp_path / "run")) == got[0][0]
    assert (tmp_path / "run" / "checkpoint.rank1.pt").exists()


@pytest.mark.slow
def test_value_warmup_fine_tunes_a_pixel_chunk_policy_without_moving_the_actor(tmp_path):
    """A BC-style TinyVLA (action chunks of 3, 32 px images): during warm-up only its value
    head learns, so its actions stay exactly the pretrained ones."""
    from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig

    torch.manual_seed(0)
    pretrained = TinyVLA(TinyVLAConfig.for_tasks(["PushCube-v0"], language="learned", channels=(4, 8, 8),
                                                 hidden_dim=16, feature_dim=16, language_dim=8, chunk_size=3,
                                                 image_size=32))
    pretrained.save_pretrained(tmp_path / "bc" / "policy")
    summary = train_ppo(tiny(tmp_path, task="PushCube-v0", obs_mode="pixels", policy=str(tmp_path / "bc"),
                             num_envs=4, num_steps=4, num_minibatches=2, total_env_steps=4 * 4 * 3,
                             value_warmup_iters=1))
    assert summary["iterations"] == 1 and summary["global_step"] == 48  # 4 envs x 4 chunks x 3 actions
    tuned = load_policy(tmp_path / "run")
    obs = {"image": np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8),
           "proprio": np.zeros((2, 4), np.float32), "instruction": (tuned.config.instructions[0],) * 2}
    before, after = pretrained.eval(), tuned.eval()
    with torch.no_grad():
        old, new = before.preprocess(obs), after.preprocess(obs)
        assert torch.equal(before.act(old, True).actions, after.act(new, True).actions)
        assert not torch.equal(before.value(old), after.value(new))


def test_fine_tuning_refuses_a_task_the_policy_was_not_trained_on(tmp_path):
    from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig

    config = TinyVLAConfig.for_tasks(["PushCube-v0"], language="learned", channels=(4, 8, 8), hidden_dim=16,
                                     feature_dim=16, language_dim=8)
    TinyVLA(config).save_pretrained(tmp_path / "bc" / "policy")
    with pytest.raises(ValueError, match="move the gripper above the red cube"):
        train_ppo(tiny(tmp_path, task="ReachCube-v0", obs_mode="pixels", policy=str(tmp_path / "bc")))


def test_value_warmup_needs_a_value_head(tmp_path):
    from worldsim.training.ppo import value_parameter_names

    assert value_parameter_names(MLPPolicy(MLPPolicyConfig(hidden=(8,)))) == {
        "critic.0.weight", "critic.0.bias", "critic.2.weight", "critic.2.bias"}
    with pytest.raises(ValueError, match="needs a value head"):
        value_parameter_names(torch.nn.Linear(2, 2))


# ---------------------------------------------------------------------------- CLI
@pytest.mark.slow
def test_train_rl_cli_writes_a_complete_run(tmp_path):
    from worldsim.commands.cli import main

    out = tmp_path / "ppo_reach"
    settings = write_toml(tmp_path / "ppo.toml", "num_minibatches = 2\neval_every = 2\n")
    code = main(["train-rl", "--task", "ReachCube-v0", "--obs-mode", "state", "--algo", "ppo",
                 "--num-envs", "8", "--num-steps", "8", "--config-file", str(settings), "--total-env-steps", "192",
                 "--eval-episodes", "6", "--out", str(out), "--no-progress"])
    assert code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["algo"] == "ppo" and config["task"] == "ReachCube-v0" and config["num_envs"] == 8
    assert config["gamma"] == PPO_DEFAULTS["reach"]["gamma"]
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows if "approx_kl" in r] == [64, 128, 192]
    assert all(np.isfinite(r["value_loss"]) and 0 <= r["clipfrac"] <= 1 for r in rows if "approx_kl" in r)
    assert any("eval/success_rate" in r for r in rows)
    assert isinstance(load_policy(out), MLPPolicy)
    result = json.loads((out / "eval.json").read_text())
    assert result["episodes"] == 6 and 0.0 <= result["success_rate"] <= 1.0 and result["env_steps"] == 192
    assert (out / "curves.png").exists() and (out / CHECKPOINT_FILE).exists()


def test_train_rl_cli_rejects_an_option_of_the_other_algorithm(tmp_path, capsys):
    from worldsim.commands.cli import main

    code = main(["train-rl", "--algo", "grpo", "--num-steps", "16", "--out", str(tmp_path)])
    assert code == 2
    assert "--num-steps is not an option of grpo; leave it out or use --algo ppo" in capsys.readouterr().err
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_ppo_on_the_warp_backend_keeps_observations_on_the_device(tmp_path, warp_compiled, monkeypatch):
    """Two iterations on MuJoCo Warp (Warp's CPU device here; the policy's device in general):
    the policy reads the envs' torch observations as they are — no numpy copy of them — and
    SameStep's dense final observations bootstrap the truncated envs."""
    from worldsim.envs.warp.vector_env import WarpVectorEnv

    seen = []
    observe = WarpVectorEnv._observe
    monkeypatch.setattr(WarpVectorEnv, "_observe", lambda self, *a: seen.append(observe(self, *a)) or seen[-1])
    copies = []
    real_asarray = np.asarray
    monkeypatch.setattr(np, "asarray", lambda x, *a, **k: copies.append(type(x)) or real_asarray(x, *a, **k))
    cfg = tiny(tmp_path, num_envs=4, num_steps=4, total_env_steps=4 * 4 * 2, backend="warp")
    summary = train_ppo(cfg)
    monkeypatch.undo()
    losses = [r["policy_loss"] for r in read_metrics(cfg.out / "metrics.jsonl") if "policy_loss" in r]
    assert summary["iterations"] == 2 and len(losses) == 2 and np.isfinite(losses).all()
    assert seen and all(isinstance(obs, torch.Tensor) for obs in seen)
    assert torch.Tensor not in copies  # no observation (nor anything else of torch) went through numpy


def test_backend_must_be_known_and_physical(tmp_path):
    with pytest.raises(ValueError, match="backend='jax' is not a backend; allowed: 'mujoco', 'mjx', 'warp'"):
        tiny(tmp_path, backend="jax")
    with pytest.raises(ValueError, match="backend='warp' with world_model"):
        tiny(tmp_path, backend="warp", imagination=ImaginationConfig("wm", "k.h5"), obs_mode="pixels")


def test_the_in_run_evaluation_and_worldsim_evaluate_run_the_same_episodes(tmp_path, capsys):
    """train-rl says which episodes it evaluated on (its seed); `worldsim evaluate` with that seed
    gives the same figure, episode by episode."""
    from worldsim.commands.cli import main

    out = tmp_path / "run"
    minibatches = write_toml(tmp_path / "ppo.toml", "num_minibatches = 2\n")
    assert main(["train-rl", "--task", "ReachCube-v0", "--obs-mode", "state", "--algo", "ppo", "--num-envs", "8",
                 "--num-steps", "8", "--config-file", str(minibatches), "--total-env-steps", "128",
                 "--eval-episodes", "6", "--seed", "3", "--out", str(out), "--no-progress"]) == 0
    in_run = json.loads((out / "eval.json").read_text())
    assert in_run["seed"] == 10_003
    assert "of seed 10003 (`worldsim evaluate --policy" in " ".join(capsys.readouterr().out.split())
    assert main(["evaluate", "--policy", str(out), "--seed", "10003", "--episodes", "6",
                 "--out", str(tmp_path / "eval.json")]) == 0
    assert "episodes of seed 10003" in " ".join(capsys.readouterr().out.split())
    again = json.loads((tmp_path / "eval.json").read_text())
    assert again["success_rate"] == in_run["success_rate"]
    for key in ("outcomes", "mean_return", "mean_length"):
        assert again["per_task"]["ReachCube-v0"][key] == in_run["per_task"]["ReachCube-v0"][key]


def test_an_update_stops_its_epochs_once_the_kl_passes_target_kl(tmp_path):
    for target_kl, epochs in ((1e-9, 1), (None, 3)):  # the first epoch's second minibatch is off-policy
        summary = train_ppo(tiny(tmp_path / str(target_kl), target_kl=target_kl, update_epochs=3))
        rows = [r for r in read_metrics(tmp_path / str(target_kl) / "run" / "metrics.jsonl") if "approx_kl" in r]
        assert [r["early_stop_epoch"] for r in rows] == [epochs] * 4
        assert summary["drift_kl"] >= 0  # from scratch: measured, never warned about
    with pytest.raises(ValueError, match="target_kl=0.0 must be a finite number > 0"):
        tiny(tmp_path, target_kl=0.0)
