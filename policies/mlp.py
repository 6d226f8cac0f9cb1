"""A state-based Gaussian MLP actor-critic: the policy PPO and GRPO train from scratch.

It reads the flat ``state`` observation (``obs_mode="state"``, or the ``state`` key of a dict
observation). The actor maps the normalised state to the mean of a diagonal Gaussian over an
action chunk ``(K, A)``; the log standard deviation is a learned, state-independent parameter
(CleanRL's ``ppo_continuous_action``). The critic is a separate MLP.

Observation normalisation lives inside the policy, as running mean/variance buffers saved with
the weights, so a saved policy acts on raw observations. The trainer updates them with
:meth:`MLPPolicy.update_normalizer` between optimisation phases (never during one, so the
log-probabilities of a rollout stay those the update sees).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from worldsim.envs.tasks import get_task
from worldsim.policies.base import Batch, Policy, PolicyOutput, register_policy

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}
OBS_CLIP = 10.0  # normalised observations are clipped to +-OBS_CLIP (CleanRL, SB3 VecNormalize)


@dataclass
class MLPPolicyConfig:
    obs_dim: int = 56
    """Length of the flat state observation."""
    action_dim: int = 4
    """Length of one action."""
    chunk_size: int = 1
    """Actions per decision (K); the actor predicts the whole chunk."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and of the critic."""
    activation: str = "tanh"
    """Hidden activation: tanh, relu or elu."""
    init_log_std: float = -0.5
    """Initial log standard deviation of every action dimension."""
    tasks: tuple[str, ...] = ()
    """The tasks the policy was trained on (what ``worldsim evaluate`` runs when no task is
    named). Empty: the tasks must be named when it is evaluated."""

    def __post_init__(self) -> None:
        self.hidden = tuple(self.hidden)
        self.tasks = tuple(get_task(name).name for name in self.tasks)
        for name in ("obs_dim", "action_dim", "chunk_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int >= 1")
        if not self.hidden or any(isinstance(h, bool) or not isinstance(h, int) or h < 1
                                  for h in self.hidden):
            raise ValueError(f"hidden={self.hidden!r} must be a non-empty tuple of ints >= 1")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}; allowed: {', '.join(ACTIVATIONS)}")
        if not math.isfinite(self.init_log_std):
            raise ValueError(f"init_log_std={self.init_log_std!r} must be a finite number")


def _mlp(sizes: list[int], activation: type[nn.Module], out_gain: float) -> nn.Sequential:
    """Orthogonally initialised MLP (gain sqrt(2) inside, ``out_gain`` on the last layer)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        linear = nn.Linear(a, b)
        last = i == len(sizes) - 2
        nn.init.orthogonal_(linear.weight, out_gain if last else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(activation())
    return nn.Sequential(*layers)


@register_policy
class MLPPolicy(Policy):
    """Gaussian MLP actor, MLP critic, running observation normaliser. Features are the
    actor's last hidden layer."""

    policy_type = "mlp"
    obs_mode = "state"
    config_class = MLPPolicyConfig

    # buffers: running statistics of the state observations
    obs_mean: torch.Tensor
    obs_var: torch.Tensor
    obs_count: torch.Tensor

    def __init__(self, config: MLPPolicyConfig) -> None:
        super().__init__()
        self.config = config
        self.chunk_size = config.chunk_size
        self.action_dim = config.action_dim
        act = ACTIVATIONS[config.activation]
        out = config.chunk_size * config.action_dim
        # The small output gains (0.01 actor, 1 critic) follow the PPO implementation study
        # (Andrychowicz et al. 2021): near-zero initial means keep early exploration unbiased.
        trunk = _mlp([config.obs_dim, *config.hidden], act, math.sqrt(2))
        self.actor_body = nn.Sequential(*trunk, act())
        self.actor_mean = _mlp([config.hidden[-1], out], act, 0.01)
        self.critic = _mlp([config.obs_dim, *config.hidden, 1], act, 1.0)
        self.log_std = nn.Parameter(torch.full((config.chunk_size, config.action_dim),
                                               float(config.init_log_std)))
        self.register_buffer("obs_mean", torch.zeros(config.obs_dim))
        self.register_buffer("obs_var", torch.ones(config.obs_dim))
        self.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))

    # ---------------------------------------------------------------- processing
    def preprocess(self, obs: Any) -> Batch:
        """Raw ``state`` as a float32 tensor ``(B, obs_dim)`` on the policy's device (a tensor already
        there is used as it is); normalisation happens in the forward."""
        state = obs.get("state") if isinstance(obs, dict) else obs
        if state is None:
            raise ValueError("the MLP policy reads the 'state' observation; make the env with "
                             "obs_mode='state' or 'pixels+state'")
        state = torch.as_tensor(state if isinstance(state, torch.Tensor) else np.asarray(state),
                                dtype=torch.float32, device=self.device)
        if state.ndim != 2 or state.shape[1] != self.config.obs_dim:
            raise ValueError(f"state observation must have shape (B, {self.config.obs_dim}); "
                             f"got {tuple(state.shape)}")
        return {"state": state}

    def normalize(self, state: torch.Tensor) -> torch.Tensor:
        """``(state - mean) / std`` with the running statistics, clipped to +-10."""
        z = (state - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8)
        return z.clamp(-OBS_CLIP, OBS_CLIP)

    @torch.no_grad()
    def update_normalizer(self, batch: Batch) -> None:
        """Fold the states of ``batch`` (``(B, obs_dim)``) into the running mean and variance
        (parallel-variance merge of Chan et al.; exact for any split of the data)."""
        x = batch["state"].to(torch.float64)
        if not torch.isfinite(x).all():
            raise ValueError("update_normalizer: the batch holds NaN or inf states")
        n = torch.tensor(float(len(x)), dtype=torch.float64, device=x.device)
        mean, var = x.mean(0), x.var(0, unbiased=False)
        total = self.obs_count + n
        delta = mean - self.obs_mean.to(torch.float64)
        new_mean = self.obs_mean + delta * n / total
        m2 = self.obs_var * self.obs_count + var * n + delta**2 * self.obs_count * n / total
        self.obs_mean.copy_(new_mean.float())
        self.obs_var.copy_((m2 / total).float())
        self.obs_count.copy_(total)

    # ---------------------------------------------------------------- the protocol
    def _hidden(self, batch: Batch) -> torch.Tensor:
        return self.actor_body(self.normalize(batch["state"]))

    def _distribution(self, hidden: torch.Tensor) -> torch.distributions.Normal:
        mean = self.actor_mean(hidden).view(-1, self.chunk_size, self.action_dim)
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean))

    def act(self, batch: Batch, deterministic: bool = False) -> PolicyOutput:
        hidden = self._hidden(batch)
        dist = self._distribution(hidden)
        actions = dist.mean if deterministic else dist.sample()
        return PolicyOutput(actions, dist.log_prob(actions).sum((1, 2)), self.value(batch), hidden)

    def evaluate(self, batch: Batch, actions: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist = self._distribution(self._hidden(batch))
        if actions.shape != dist.mean.shape:
            raise ValueError(f"actions must have shape {tuple(dist.mean.shape)}; got {tuple(actions.shape)}")
        return dist.log_prob(actions).sum((1, 2)), dist.entropy().sum((1, 2)), self.value(batch)

    def features(self, batch: Batch) -> torch.Tensor:
        return self._hidden(batch)

    def value(self, batch: Batch) -> torch.Tensor:
        return self.critic(self.normalize(batch["state"])).squeeze(-1)
