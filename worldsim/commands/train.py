"""Training commands: ``worldsim train-bc`` and ``worldsim train-rl``; both run under torchrun too
(``torchrun --nproc-per-node 2 -m worldsim train-bc ...``)."""

from __future__ import annotations

from typing import Annotated, Any

from rich.console import Console

from worldsim.commands.parsing import Choice
from worldsim.training.bc import BCConfig
from worldsim.training.grpo import GRPOConfig
from worldsim.training.ppo import PPOConfig


def train_bc(config: BCConfig) -> None:
    """Train TinyVLA by behaviour cloning on recorded episodes.

    The run takes --steps optimiser steps (--time-budget is a safety net that stops it sooner, with
    a warning) and prints its final loss; the figures are in summary.json. A non-empty --out is
    refused unless --overwrite (start afresh) or --resume (continue it)."""
    from worldsim.training.bc import train_bc as train

    train(config)
    Console().print(f"policy -> {config.out / 'policy'}")


RLConfig = Annotated[PPOConfig | GRPOConfig,
                     Choice("--algo", "algorithm", {"ppo": PPOConfig, "grpo": GRPOConfig})]


def train_rl(config: RLConfig) -> dict[str, Any]:
    """Train a policy with PPO or GRPO, in physics or in a world model.

    From scratch (a state MLP) or fine-tuning --policy; in imagination with --world-model and
    --keyframes (evaluation stays in physics). A PPO option left unset takes the task family's
    tuned value. The run takes --total-env-steps (whole iterations; --time-budget is a safety net
    that stops it sooner, with a warning) and prints its final success with a 95% interval. A
    non-empty --out is refused unless --overwrite (start afresh) or --resume (continue it)."""
    from worldsim.training.grpo import train_grpo
    from worldsim.training.ppo import train_ppo

    summary = train_ppo(config) if isinstance(config, PPOConfig) else train_grpo(config)
    Console().print(f"policy -> {config.out / 'policy'}")
    return summary
