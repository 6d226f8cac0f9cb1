"""Proximal Policy Optimisation on any worldsim vector env, readable top to bottom.

The recipe is CleanRL's ``ppo_continuous_action`` (Huang et al. 2022, "The 37 implementation
details of PPO"): rollout buffers shaped ``(num_steps, num_envs, ...)``, GAE, flattened ``b_``
batches and ``mb_`` minibatches, per-minibatch advantage normalisation, clipped policy and
value losses, global gradient clipping, optional KL early stop and learning-rate annealing.
Its two pure pieces, :func:`compute_gae` and :func:`ppo_loss`, are importable and tested.

What is worldsim-specific:

- autoreset ``SameStep``: an env whose episode ended is reset inside ``step``; its last
  observation is ``info["final_obs"]``. A time-limit truncation bootstraps from the value of
  that final observation; a termination bootstraps from 0.
- ``terminate_on_success=False`` by default while training: the dense reward is at most 0.5-0.67
  before success and 1 on success, so with success ending the episode a return-maximising
  agent learns to hover next to the goal, collecting the shaping reward instead of ending the
  episode (its return rises while its success falls); kept running, success is the best place
  to be. Evaluation always uses the task's own rules (success ends the episode).
- any :class:`~worldsim.policies.base.Policy`: a state MLP from scratch, or a checkpoint
  (e.g. a BC TinyVLA on pixels) fine-tuned after ``value_warmup_iters`` iterations that train
  the value head alone (the actor and any shared trunk keep their pretrained weights).
  A policy with ``chunk_size > 1`` acts through :class:`~worldsim.envs.wrappers.ActionChunk`:
  one chunk is one decision, its reward the sum over the chunk.
- exact resume: the checkpoint holds the policy, optimiser, counters, the env snapshot, the
  current observation, the episode bookkeeping and the RNG states.
- ``torchrun``: each rank steps its own envs (seed + rank); gradients are averaged before each
  optimiser step, so every rank keeps the same weights; rank 0 logs, evaluates and saves.
- ``backend="warp"``: the envs run on the policy's device and their observations (images
  included) go to the policy as device tensors, actions come back as tensors; only rewards and
  episode flags (a few bytes per env) are copied to the host, for the episode bookkeeping.

Per-family tuned hyperparameters are in :data:`PPO_DEFAULTS` (and :data:`FINETUNE_DEFAULTS`
for a pretrained policy); a config field left ``None`` takes that value.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from worldsim.envs.core import snapshots
from worldsim.envs.observations import STATE_DIM
from worldsim.envs.tasks import get_suite, get_task
from worldsim.policies.base import Batch
from worldsim.runtime.distributed import any_rank, average_gradients, broadcast_module
from worldsim.runtime.run import TrainingRun
from worldsim.runtime.run_logging import to_jsonable
from worldsim.training.rl import (
    EpisodeTracker,
    RLRunConfig,
    build_policy,
    clipped_surrogate,
    end_iteration,
    env_actions,
    final_obs_of,
    finish_run,
    flatten_batch,
    gather_rows,
    host_step,
    make_train_env,
    stack_batches,
)

# Per task family, for a state MLP trained from scratch on a few CPU cores. Pushing takes gamma
# 0.99: the reach term peaks with the paddle behind the cube, so a shorter horizon does not see
# the pay-off of pushing the cube home and settles on pushing it near the zone. Pick-and-place
# and stack start from the push settings, untuned.
_COMMON = {"gae_lambda": 0.95, "update_epochs": 5, "ent_coef": 0.0, "value_warmup_iters": 0}
_MANIPULATION = {"num_envs": 512, "num_steps": 16, "gamma": 0.99, "gae_lambda": 0.95, "lr": 5e-4,
                 "update_epochs": 4, "num_minibatches": 4, "ent_coef": 0.0, "value_warmup_iters": 0}
PPO_DEFAULTS: dict[str, dict[str, Any]] = {
    "reach": {**_COMMON, "num_envs": 256, "num_steps": 16, "gamma": 0.95, "lr": 1e-3, "num_minibatches": 4,
              "total_env_steps": 3_000_000},
    "push": {**_MANIPULATION, "total_env_steps": 20_000_000},
    "pick_place": {**_MANIPULATION, "total_env_steps": 30_000_000},
    "stack": {**_MANIPULATION, "total_env_steps": 30_000_000},
}
# Fine-tuning a pretrained policy (e.g. a BC TinyVLA on pixels, where every step renders):
# fewer envs, a small learning rate, and the value head trained alone first so that the first
# policy updates follow a meaningful advantage instead of a random critic. Not tuned.
FINETUNE_DEFAULTS: dict[str, Any] = {
    "num_envs": 64, "num_steps": 16, "gamma": 0.9, "gae_lambda": 0.9, "lr": 1e-4, "update_epochs": 2,
    "num_minibatches": 4, "ent_coef": 0.0, "value_warmup_iters": 10, "total_env_steps": 2_000_000}
# Settings a resumed run must share with the run that wrote the checkpoint.
RESUME_FIELDS = ("task", "suite", "imagination", "obs_mode", "backend",
                 "num_envs", "num_steps", "chunk_size", "hidden", "policy", "seed")


@dataclass(frozen=True)
class PPOSettings:
    """The :class:`PPOConfig` fields that may be left ``None`` ("the tuned default"), as the
    training loop reads them: every one filled in."""

    num_envs: int
    num_steps: int
    total_env_steps: int
    reset_schedule: str
    gamma: float
    gae_lambda: float
    lr: float
    update_epochs: int
    num_minibatches: int
    ent_coef: float
    value_warmup_iters: int


@dataclass
class PPOConfig(RLRunConfig):
    """PPO settings. Fields left ``None`` take the task family's tuned value (``PPO_DEFAULTS``), or
    when fine-tuning a given ``policy``, ``FINETUNE_DEFAULTS``."""

    COMMAND_LINE: ClassVar[tuple[str, ...]] = ("num_envs", "num_steps", "total_env_steps", "lr")
    """PPO's fields that are flags (with RLRunConfig's); the rest a config file sets."""

    num_envs: int | None = None
    """Parallel envs per rank."""
    num_steps: int | None = None
    """Decisions per env per rollout (the rollout is num_steps x num_envs)."""
    total_env_steps: int | None = None
    """Env steps to train for, over all ranks (a chunk of K actions is K env steps)."""
    reset_schedule: str | None = None
    """How episodes start at the first reset: synchronous, staggered, staggered-random, ..., or in
    imagination keyframe (None: keyframe in imagination, else staggered)."""
    gamma: float | None = None
    """Discount per decision."""
    gae_lambda: float | None = None
    """GAE lambda."""
    lr: float | None = None
    """Adam learning rate."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over total_env_steps."""
    update_epochs: int | None = None
    """Passes over each rollout."""
    num_minibatches: int | None = None
    """Minibatches per pass (per rank)."""
    clip_vloss: bool = True
    """Clip the value update around the rollout's values (PPO2 style)."""
    ent_coef: float | None = None
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    value_warmup_iters: int | None = None
    """Iterations that train the value head alone before policy updates begin (fine-tuning)."""
    out: Path = field(default=Path("runs/ppo"), kw_only=True)
    """Run folder: config.json, metrics.jsonl, tb/, policy/, checkpoint.pt, eval.json."""

    def __post_init__(self) -> None:
        if self.reset_schedule is None:
            self.reset_schedule = "keyframe" if self.imagined else "staggered"
        family = get_task(get_suite(self.suite).seen[0] if self.suite else self.task).family
        defaults = PPO_DEFAULTS[family] if self.policy is None else FINETUNE_DEFAULTS
        for name, value in defaults.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        self.check(positive=("num_steps", "update_epochs", "num_minibatches"),
                   nonnegative=("value_warmup_iters",))
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be in [0, 1]")
        if not (math.isfinite(self.vf_coef) and self.vf_coef >= 0):
            raise ValueError(f"vf_coef={self.vf_coef!r} must be a finite number >= 0")
        hp = self.settings
        if (hp.num_envs * hp.num_steps) % hp.num_minibatches:
            raise ValueError(f"num_minibatches={hp.num_minibatches} must divide the rollout of "
                             f"num_envs x num_steps = {hp.num_envs * hp.num_steps} samples")

    @property
    def settings(self) -> PPOSettings:
        """The auto fields, filled in by ``__post_init__`` (``RuntimeError`` if one was unset later)."""
        values = {f.name: getattr(self, f.name) for f in fields(PPOSettings)}
        unset = [name for name, value in values.items() if value is None]
        if unset:
            raise RuntimeError(f"PPOConfig fields {unset} are None: set them after construction, not to None")
        return PPOSettings(**values)


# ---------------------------------------------------------------------------- pure pieces
def compute_gae(
    rewards: torch.Tensor, values: torch.Tensor, next_value: torch.Tensor, dones: torch.Tensor,
    terminated: torch.Tensor, final_values: torch.Tensor, gamma: float, gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a rollout (Schulman et al. 2016).

    All inputs are ``(T, N)`` except ``next_value`` ``(N,)``, the value of the observation
    after the last step. ``dones[t]`` marks envs whose episode ended at step ``t`` (either
    way); ``terminated[t]`` those that ended by termination. The value that follows step
    ``t`` is then: 0 after a termination, ``final_values[t]`` (the value of ``final_obs``)
    after a time-limit truncation, and ``values[t + 1]`` (or ``next_value``) otherwise. The
    recursion does not cross episode boundaries. Returns ``(advantages, returns)`` with
    ``returns = advantages + values``.
    """
    steps = rewards.shape[0]
    dones, terminated = dones.bool(), terminated.bool()
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(steps)):
        following = next_value if t == steps - 1 else values[t + 1]
        following = torch.where(dones[t], torch.where(terminated[t], 0.0, final_values[t]), following)
        delta = rewards[t] + gamma * following - values[t]
        last = delta + gamma * gae_lambda * (~dones[t]).to(rewards.dtype) * last
        advantages[t] = last
    return advantages, advantages + values


def value_loss(new_value: torch.Tensor, old_value: torch.Tensor, returns: torch.Tensor,
               clip_coef: float | None) -> torch.Tensor:
    """``0.5 * mean((V - R)^2)``; with ``clip_coef`` the pessimistic maximum of that and the
    loss of ``V`` clipped to ``old_value +- clip_coef``."""
    unclipped = (new_value - returns) ** 2
    if clip_coef is None:
        return 0.5 * unclipped.mean()
    clipped = (old_value + (new_value - old_value).clamp(-clip_coef, clip_coef) - returns) ** 2
    return 0.5 * torch.maximum(unclipped, clipped).mean()


def ppo_loss(
    new_log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, entropy: torch.Tensor,
    new_value: torch.Tensor, old_value: torch.Tensor, returns: torch.Tensor, *, clip_coef: float = 0.2,
    vf_coef: float = 0.5, ent_coef: float = 0.0, clip_vloss: bool = True, norm_adv: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The PPO minibatch loss: clipped surrogate + ``vf_coef`` x value loss - ``ent_coef`` x
    entropy. Inputs are ``(B,)``. Returns the loss and floats ``policy_loss``, ``value_loss``,
    ``entropy``, ``approx_kl``, ``clipfrac``."""
    if norm_adv and len(advantages) > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss, stats = clipped_surrogate(new_log_prob, old_log_prob, advantages, clip_coef)
    v_loss = value_loss(new_value, old_value, returns, clip_coef if clip_vloss else None)
    entropy_mean = entropy.mean()
    loss = pg_loss + vf_coef * v_loss - ent_coef * entropy_mean
    return loss, {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": entropy_mean.item(),
                  "approx_kl": stats["approx_kl"].item(), "clipfrac": stats["clipfrac"].item()}


def value_parameter_names(policy: nn.Module) -> set[str]:
    """Names of the value head's parameters, by the convention that a name part starts with
    ``critic`` or ``value`` (``MLPPolicy.critic``, ``TinyVLA.value_head``)."""
    names = {name for name, _ in policy.named_parameters()
             if any(part.startswith(("critic", "value")) for part in name.split("."))}
    if not names:
        raise ValueError(f"value_warmup_iters needs a value head (parameters named critic* or value*); "
                         f"{type(policy).__name__} has none")
    return names


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(R - V) / Var(R): 1 is a perfect critic, 0 no better than a constant."""
    var = returns.var()
    return float("nan") if var == 0 else float(1 - (returns - values).var() / var)


# ---------------------------------------------------------------------------- training
def train_ppo(config: PPOConfig) -> dict[str, Any]:
    """Train with PPO as ``config`` says, for ``total_env_steps`` (whole iterations; ``time_budget``
    may stop it sooner). Returns the summary, also ``out/summary.json``: ``global_step``,
    ``iterations`` done and ``iterations_asked``, ``stopped_by`` (``"steps"`` or ``"time_budget"``),
    ``train_seconds``, ``weights_digest`` and the final evaluation ``eval``; see
    :class:`~worldsim.runtime.run.TrainingRun` for the run's folder, checkpoints and budgets."""
    cfg, hp = config, config.settings
    run = TrainingRun(f"ppo {cfg.suite or cfg.task}{' (imagined)' * cfg.imagined}", cfg, unit="iteration")
    device, rank, world = run.device, run.rank, run.dist.world_size
    specs = [get_task(task) for task in cfg.tasks]

    # ---- policy, env, optimiser
    policy = build_policy(cfg.policy, specs, cfg.obs_mode, cfg.mlp_config(STATE_DIM), device)
    broadcast_module(policy, run.dist)
    start = copy.deepcopy(policy).eval().requires_grad_(False)  # before a checkpoint's weights: for drift_kl
    env = make_train_env(cfg, hp.num_envs, policy, reset_schedule=hp.reset_schedule)
    optimizer = torch.optim.Adam(policy.parameters(), lr=hp.lr, eps=1e-5)
    chunk = policy.chunk_size
    steps_per_iter = hp.num_steps * hp.num_envs * chunk * world
    num_iterations = math.ceil(hp.total_env_steps / steps_per_iter)
    minibatch_size = hp.num_envs * hp.num_steps // hp.num_minibatches
    tracker = EpisodeTracker(hp.num_envs)
    value_names = value_parameter_names(policy) if hp.value_warmup_iters else set()

    # ---- start, or resume exactly where the checkpoint left off
    iteration = 0
    state = run.restore({"algo": "ppo", **to_jsonable(cfg)}, RESUME_FIELDS)
    if state is None:
        next_obs, _ = env.reset(seed=cfg.seed + rank)
    else:
        policy.load_state_dict(state["policy"])
        optimizer.load_state_dict(state["optimizer"])
        snapshots(env).set_state(state["env"])
        next_obs = state["next_obs"]
        tracker.load_state_dict(state["tracker"])
        iteration = state["iteration"]
    run.start(num_iterations, done=iteration, scale=steps_per_iter)

    def save() -> None:
        run.save(policy, "policy", {"policy": policy.state_dict(), "optimizer": optimizer.state_dict()},
                 rank_state={"env": snapshots(env).get_state(), "next_obs": next_obs,
                             "tracker": tracker.state_dict(), "iteration": iteration})

    b_obs: Batch = {}
    while run.keep_going(iteration):
        iter_start = time.time()
        if cfg.anneal_lr:
            optimizer.param_groups[0]["lr"] = hp.lr * (1.0 - iteration / num_iterations)

        # ---- rollout: buffers shaped (num_steps, num_envs, ...)
        policy.eval()
        obs_steps, actions, logprobs, values = [], [], [], []
        rewards = torch.zeros(hp.num_steps, hp.num_envs)
        dones = torch.zeros(hp.num_steps, hp.num_envs, dtype=torch.bool)
        terminateds = torch.zeros(hp.num_steps, hp.num_envs, dtype=torch.bool)
        final_values = torch.zeros(hp.num_steps, hp.num_envs)
        with torch.no_grad():
            for step in range(hp.num_steps):
                batch = policy.preprocess(next_obs)
                out = policy.act(batch)
                obs_steps.append(batch)
                actions.append(out.actions)
                logprobs.append(out.log_prob)
                values.append(out.value)
                next_obs, reward, terminated, truncated, info = env.step(
                    env_actions(out.actions, on_device=cfg.backend == "warp"))
                reward, terminated, truncated, flags = host_step(reward, terminated, truncated, info)
                tracker.update(reward, terminated, truncated, flags)
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
                dones[step] = torch.as_tensor(terminated | truncated)
                terminateds[step] = torch.as_tensor(terminated)
                cut = np.flatnonzero(truncated & ~terminated)
                if len(cut):
                    final = policy.preprocess(final_obs_of(info, cut))
                    final_values[step, cut] = policy.value(final).float().cpu()
            next_value = policy.value(policy.preprocess(next_obs)).float().cpu()
        b_values_2d = torch.stack(values).float().cpu()
        advantages, returns = compute_gae(rewards, b_values_2d, next_value, dones, terminateds, final_values,
                                          hp.gamma, hp.gae_lambda)

        # ---- flatten the rollout: b_ = batch views
        b_obs = flatten_batch(stack_batches(obs_steps))
        b_actions = torch.stack(actions).reshape(-1, chunk, policy.action_dim)
        b_logprobs = torch.stack(logprobs).reshape(-1)
        b_values = b_values_2d.reshape(-1).to(device)
        b_advantages = advantages.reshape(-1).to(device)
        b_returns = returns.reshape(-1).to(device)

        # ---- optimise: update_epochs passes of minibatches (critic only during warm-up)
        policy.train()
        warmup = iteration < hp.value_warmup_iters
        stats: dict[str, list[float]] = {}
        epochs = hp.update_epochs
        for epoch in range(hp.update_epochs):
            order = torch.randperm(len(b_logprobs))
            for begin in range(0, len(order), minibatch_size):
                mb = order[begin:begin + minibatch_size].to(device)
                mb_obs = {k: v[mb] for k, v in b_obs.items()}
                new_logprob, entropy, new_value = policy.evaluate(mb_obs, b_actions[mb])
                loss, mb_stats = ppo_loss(new_logprob, b_logprobs[mb], b_advantages[mb], entropy, new_value,
                                          b_values[mb], b_returns[mb], clip_coef=cfg.clip_coef,
                                          vf_coef=cfg.vf_coef, ent_coef=hp.ent_coef,
                                          clip_vloss=cfg.clip_vloss, norm_adv=cfg.norm_adv)
                if warmup:
                    loss = cfg.vf_coef * value_loss(new_value, b_values[mb], b_returns[mb],
                                                    cfg.clip_coef if cfg.clip_vloss else None)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if warmup:  # only the value head learns: the actor and a shared trunk keep their weights
                    for name, param in policy.named_parameters():
                        if name not in value_names:
                            param.grad = None
                average_gradients(policy, run.dist)
                nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                optimizer.step()
                for key, value in mb_stats.items():
                    stats.setdefault(key, []).append(value)
            epoch_kl = float(np.mean(stats["approx_kl"][-hp.num_minibatches:]))
            if cfg.target_kl is not None and not warmup and any_rank(epoch_kl > cfg.target_kl, run.dist):
                epochs = epoch + 1
                break

        # ---- the normaliser learns from this rollout only now, so the update above saw the
        # same normalisation as the rollout (every rank folds in every rank's states)
        update_normalizer = getattr(policy, "update_normalizer", None)  # state policies only
        if cfg.norm_obs and update_normalizer is not None:
            update_normalizer({"state": gather_rows(b_obs["state"], run.dist)})

        iteration += 1
        metrics = {k: float(np.mean(v)) for k, v in stats.items()}
        metrics |= tracker.pop()
        metrics |= {"early_stop_epoch": epochs, "explained_variance": explained_variance(b_values, b_returns),
                    "lr": optimizer.param_groups[0]["lr"], "value_warmup": float(warmup),
                    "sps": steps_per_iter / (time.time() - iter_start)}
        log_std = getattr(policy, "log_std", None)  # Gaussian state policies
        if isinstance(log_std, torch.Tensor):
            metrics["log_std"] = float(log_std.detach().mean())
        end_iteration(run, policy, cfg, iteration, iteration * steps_per_iter, metrics, save)

    save()
    env.close()
    return finish_run(run, policy, cfg, "ppo", iteration * steps_per_iter, start, b_obs)
