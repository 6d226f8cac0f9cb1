"""Group Relative Policy Optimisation (Shao et al. 2024) for worldsim tasks: PPO's clipped
surrogate without a critic, the baseline being the other rollouts from the same start.

Each iteration resets the envs in groups of ``group_size`` consecutive envs that share one
layout (``env.reset(options={"group_size": G})``) and runs one episode per env. An episode's
advantage is its return minus the mean return of its group (divided by the group's standard
deviation if ``norm_std``), the same for each of its decisions. The policy loss is PPO's
clipped surrogate (:func:`worldsim.training.rl.clipped_surrogate`), averaged only over the decisions
up to and including the first success, so what a policy does after solving the task is
neither rewarded nor punished. With ``kl_coef`` > 0 the loss adds, as in the paper, that weight
times the KL divergence of the policy from the one training started from (the reference), on the
same decisions (:func:`reference_kl`): in imagination it keeps the policy near the behaviour the
world model learned from, where its rewards can be trusted.

Episodes run with ``terminate_on_success=False`` by default for the same reason as in
:mod:`worldsim.training.ppo`: each step spent in success earns the top reward, so an earlier success
means a larger return. Autoreset is ``SameStep`` and whatever follows an env's first episode
is masked out (``Disabled`` would forbid stepping the batch once any env finished).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from worldsim.envs.core import snapshots
from worldsim.envs.observations import STATE_DIM
from worldsim.envs.tasks import get_task
from worldsim.policies.base import Batch
from worldsim.runtime.distributed import any_rank, average_gradients, broadcast_module
from worldsim.runtime.run import TrainingRun
from worldsim.runtime.run_logging import to_jsonable
from worldsim.runtime.validation import check_number
from worldsim.training.rl import (
    RLRunConfig,
    build_policy,
    clipped_surrogate,
    end_iteration,
    env_actions,
    finish_run,
    flatten_batch,
    gather_rows,
    make_train_env,
    stack_batches,
)

RESUME_FIELDS = ("task", "suite", "imagination", "obs_mode",
                 "num_envs", "group_size", "chunk_size", "hidden", "policy", "seed")


@dataclass
class GRPOConfig(RLRunConfig):
    """GRPO settings."""

    COMMAND_LINE: ClassVar[tuple[str, ...]] = ("num_envs", "group_size", "total_env_steps", "lr")
    """GRPO's fields that are flags (with RLRunConfig's); the rest a config file sets."""

    num_envs: int = 256
    """Parallel envs per rank: num_envs / group_size groups per iteration."""
    group_size: int = 8
    """Rollouts per start state (G)."""
    total_env_steps: int = 2_000_000
    """Env steps to train for, over all ranks (each iteration is num_envs x time limit)."""
    lr: float = 3e-4
    """Adam learning rate."""
    update_epochs: int = 4
    """Passes over each iteration's decisions."""
    num_minibatches: int = 4
    """Minibatches per pass (per rank)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    kl_coef: float = 0.0
    """Weight of the KL divergence from the starting policy (the paper's beta; 0: none)."""
    norm_std: bool = True
    """Divide advantages by the group's return standard deviation."""
    eval_every: int = 10
    """Evaluate (deterministic policy) every this many iterations; 0: only at the end."""
    checkpoint_every: int = 10
    """Write checkpoint.pt and policy/ every this many iterations (and at the end)."""
    out: Path = field(default=Path("runs/grpo"), kw_only=True)
    """Run folder: config.json, metrics.jsonl, tb/, policy/, checkpoint.pt, eval.json."""

    def __post_init__(self) -> None:
        self.check(positive=("group_size", "update_epochs", "num_minibatches"))
        check_number("kl_coef", self.kl_coef)
        if self.backend != "mujoco":
            raise ValueError(f"backend={self.backend!r}: GRPO's group rollouts step the MuJoCo backend; allowed: "
                             "'mujoco' (PPO trains on 'mjx' and 'warp')")
        per_task = self.num_envs // len(self.tasks)
        if self.group_size < 2 or self.num_envs % len(self.tasks) or per_task % self.group_size:
            split = f" / {len(self.tasks)} tasks = {per_task} envs per task" if len(self.tasks) > 1 else ""
            raise ValueError(f"group_size={self.group_size} must be >= 2 and divide num_envs={self.num_envs}{split}")


# ---------------------------------------------------------------------------- pure pieces
def iteration_steps(episode_steps: int, chunk: int, num_envs: int) -> int:
    """Env steps one GRPO iteration counts: every env's episode of ``episode_steps`` (the longest
    task's, or the imagined horizon), in whole chunks of ``chunk`` actions."""
    return math.ceil(episode_steps / chunk) * chunk * num_envs


def group_advantages(returns: torch.Tensor, group_size: int, norm_std: bool = True) -> torch.Tensor:
    """Per-episode advantage ``(N,)``: return minus the mean return of its group of
    ``group_size`` consecutive episodes, divided by the group's standard deviation (+1e-8) if
    ``norm_std``. A group whose returns are all equal gets advantage 0."""
    if returns.ndim != 1 or len(returns) % group_size:
        raise ValueError(f"returns must be (N,) with N a multiple of group_size={group_size}; "
                         f"got shape {tuple(returns.shape)}")
    groups = returns.view(-1, group_size)
    centred = groups - groups.mean(1, keepdim=True)
    if norm_std:
        centred = centred / (groups.std(1, keepdim=True) + 1e-8)
    return centred.reshape(-1)


def reference_kl(log_prob: torch.Tensor, reference_log_prob: torch.Tensor) -> torch.Tensor:
    """Per-decision estimate of KL(policy || reference) from the log-probabilities of actions
    the rollout policy took: ``r - log r - 1`` with ``r = reference / policy`` (Schulman's k3, the
    GRPO paper's eq. 4), never negative and 0 where the two agree. The log-ratio is clamped to
    +-20 and the estimate to 10, as verl does: a Gaussian policy that moves far in one iteration
    otherwise overflows ``exp`` into infinite, then NaN, weights."""
    log_ratio = (reference_log_prob - log_prob).clamp(-20.0, 20.0)
    return (log_ratio.exp() - log_ratio - 1.0).clamp(max=10.0)


def first_episode_mask(dones: torch.Tensor) -> torch.Tensor:
    """``(T, N)`` mask of the steps of each env's first episode: up to and including its first
    ``done``."""
    ended_before = torch.cumsum(dones.long(), 0) - dones.long()
    return ended_before == 0


def success_mask(success: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
    """``(T, N)`` mask of the steps that count in the loss: those of ``alive`` (the first
    episode) up to and including the first step where ``success`` is True."""
    success = success.bool() & alive.bool()
    succeeded_before = torch.cumsum(success.long(), 0) - success.long()
    return alive.bool() & (succeeded_before == 0)


# ---------------------------------------------------------------------------- training
def train_grpo(config: GRPOConfig) -> dict[str, Any]:
    """Train with GRPO as ``config`` says; returns a summary like :func:`worldsim.training.ppo.train_ppo`."""
    cfg = config
    run = TrainingRun(f"grpo {cfg.suite or cfg.task}{' (imagined)' * cfg.imagined}", cfg, unit="iteration")
    device, rank, world = run.device, run.rank, run.dist.world_size
    specs = [get_task(task) for task in cfg.tasks]

    policy = build_policy(cfg.policy, specs, cfg.obs_mode, cfg.mlp_config(STATE_DIM), device)
    broadcast_module(policy, run.dist)
    # the starting policy, also when resuming: taken before a checkpoint's weights are loaded
    start = copy.deepcopy(policy).eval().requires_grad_(False)
    reference = start if cfg.kl_coef > 0 else None
    # Every episode of an iteration starts with its group: in physics at step 0 of the group's
    # layout, in imagination at the group's real start state (an episode start or a keyframe).
    env = make_train_env(cfg, cfg.num_envs, policy,
                         reset_schedule="keyframe" if cfg.imagined else "synchronous")
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=1e-5)
    chunk = policy.chunk_size
    # decisions that cover the longest task's episode (shorter tasks' later steps are masked out);
    # an imagined episode ends by its horizon, and imagining past it would only feed the mask
    episode_steps = max(spec.max_episode_steps for spec in specs)
    if cfg.imagined and cfg.imagination.horizon is not None:
        episode_steps = min(episode_steps, cfg.imagination.horizon)
    horizon = math.ceil(episode_steps / chunk)
    steps_per_iter = iteration_steps(episode_steps, chunk, cfg.num_envs * world)

    iteration = 0
    state = run.restore({"algo": "grpo", **to_jsonable(cfg)}, RESUME_FIELDS)
    if state is None:
        env.reset(seed=cfg.seed + rank)
    else:
        policy.load_state_dict(state["policy"])
        optimizer.load_state_dict(state["optimizer"])
        snapshots(env).set_state(state["env"])
        iteration = state["iteration"]
    run.start(math.ceil(cfg.total_env_steps / steps_per_iter), done=iteration, scale=steps_per_iter)

    def save() -> None:
        run.save(policy, "policy", {"policy": policy.state_dict(), "optimizer": optimizer.state_dict()},
                 rank_state={"env": snapshots(env).get_state(), "iteration": iteration})

    b_obs: Batch = {}
    while run.keep_going(iteration):
        iter_start = time.time()

        # ---- one episode per env, groups of group_size envs from one start
        policy.eval()
        obs, _ = env.reset(options={"group_size": cfg.group_size})
        obs_steps, actions, logprobs = [], [], []
        rewards = torch.zeros(horizon, cfg.num_envs)
        dones = torch.zeros(horizon, cfg.num_envs, dtype=torch.bool)
        successes = torch.zeros(horizon, cfg.num_envs, dtype=torch.bool)
        with torch.no_grad():
            for step in range(horizon):
                batch = policy.preprocess(obs)
                out = policy.act(batch)
                obs_steps.append(batch)
                actions.append(out.actions)
                logprobs.append(out.log_prob)
                obs, reward, terminated, truncated, info = env.step(env_actions(out.actions))
                done = terminated | truncated
                success = info["success"].copy()
                if done.any():
                    success[done] = info["final_info"]["success"][done]
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
                dones[step] = torch.as_tensor(done)
                successes[step] = torch.as_tensor(success)
        alive = first_episode_mask(dones)
        episode_returns = (rewards * alive).sum(0)
        advantages = group_advantages(episode_returns, cfg.group_size, cfg.norm_std)
        mask = success_mask(successes, alive)

        # ---- flatten, keeping only the decisions that count in the loss
        keep = mask.reshape(-1).nonzero().squeeze(1)
        b_obs = {k: v[keep] for k, v in flatten_batch(stack_batches(obs_steps)).items()}
        b_actions = torch.stack(actions).reshape(-1, chunk, policy.action_dim)[keep]
        b_logprobs = torch.stack(logprobs).reshape(-1)[keep]
        b_advantages = advantages.expand(horizon, -1).reshape(-1)[keep].to(device)
        if reference is not None:
            with torch.no_grad():
                b_reference = torch.cat([reference.evaluate({k: v[rows] for k, v in b_obs.items()}, b_actions[rows])[0]
                                         for rows in torch.arange(len(keep)).split(1024)])

        # ---- optimise the clipped surrogate (no critic)
        policy.train()
        stats: dict[str, list[float]] = {}
        minibatch_size = math.ceil(len(keep) / cfg.num_minibatches)
        epochs = cfg.update_epochs
        for epoch in range(cfg.update_epochs):
            order = torch.randperm(len(keep))
            for begin in range(0, len(order), minibatch_size):
                mb = order[begin:begin + minibatch_size].to(device)
                new_logprob, entropy, _ = policy.evaluate({k: v[mb] for k, v in b_obs.items()}, b_actions[mb])
                pg_loss, mb_stats = clipped_surrogate(new_logprob, b_logprobs[mb], b_advantages[mb],
                                                      cfg.clip_coef)
                entropy_mean = entropy.mean()
                loss = pg_loss - cfg.ent_coef * entropy_mean
                if reference is not None:
                    kl = reference_kl(new_logprob, b_reference[mb]).mean()
                    loss = loss + cfg.kl_coef * kl
                    mb_stats["reference_kl"] = kl.detach()
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"the GRPO loss became {loss.item()} at iteration {iteration + 1}; "
                                             "lower --lr")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                average_gradients(policy, run.dist)
                nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                optimizer.step()
                for key, value in {"policy_loss": pg_loss, "entropy": entropy_mean, **mb_stats}.items():
                    stats.setdefault(key, []).append(value.item())
            epoch_kl = float(np.mean(stats["approx_kl"][-math.ceil(len(keep) / minibatch_size):]))
            if cfg.target_kl is not None and any_rank(epoch_kl > cfg.target_kl, run.dist):
                epochs = epoch + 1
                break

        update_normalizer = getattr(policy, "update_normalizer", None)  # state policies only
        if cfg.norm_obs and update_normalizer is not None:
            states = flatten_batch(stack_batches(obs_steps))["state"][alive.reshape(-1)]
            update_normalizer({"state": gather_rows(states, run.dist)})

        iteration += 1
        metrics = {k: float(np.mean(v)) for k, v in stats.items()}
        metrics |= {"episode/return": float(episode_returns.mean()),
                    "episode/success_rate": float((successes & alive).any(0).float().mean()),
                    "episode/length": float(alive.sum(0).float().mean() * chunk)}
        metrics |= {"early_stop_epoch": epochs,
                    "group_return_std": float(episode_returns.view(-1, cfg.group_size).std(1).mean()),
                    "masked_fraction": 1.0 - len(keep) / mask.numel(),
                    "sps": steps_per_iter / (time.time() - iter_start)}
        end_iteration(run, policy, cfg, iteration, iteration * steps_per_iter, metrics, save)

    save()
    env.close()
    return finish_run(run, policy, cfg, "grpo", iteration * steps_per_iter, start, b_obs)
