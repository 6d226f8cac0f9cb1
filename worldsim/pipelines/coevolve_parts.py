"""The world-model and RL parts of a co-evolution config: what each round trains, and with what
budget. Each part checks its own fields and builds the trainer config it passes on, so
:class:`~worldsim.pipelines.coevolve.CoevolveConfig` and the quickstart compose them instead of
copying their fields. Their flags carry the part's name (``--wm.steps``, ``--rl.env-steps``),
since both parts have steps and a time budget."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from worldsim.training.grpo import GRPOConfig
    from worldsim.training.ppo import PPOConfig
    from worldsim.world_models.train import TrainWMConfig

WorldModelPreset = Literal["tiny", "base", "video-tiny", "video-base"]
RLAlgorithm = Literal["grpo", "ppo"]


def _check_counts(part: Any, names: tuple[str, ...]) -> None:
    """``ValueError`` naming the first of ``part``'s fields ``names`` that is not an int >= 1."""
    for name in names:
        value = getattr(part, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{part.NAME}.{name}={value!r} must be an int >= 1")


def _check_choice(part: Any, name: str, kind: Any) -> None:
    """``ValueError`` when ``part``'s field ``name`` is not one of the ``Literal`` ``kind``'s values."""
    allowed = typing.get_args(kind)
    if getattr(part, name) not in allowed:
        raise ValueError(f"{part.NAME}.{name}={getattr(part, name)!r} is not one of {', '.join(allowed)}")


def _check_time_budget(part: Any) -> None:
    """``ValueError`` when ``part``'s time budget is set and not a positive number of seconds."""
    budget = part.time_budget
    if budget is not None and not (isinstance(budget, (int, float)) and budget > 0):
        raise ValueError(f"{part.NAME}.time_budget={budget!r} must be > 0 seconds (or None: no limit)")


@dataclass
class WorldModelRounds:
    """The world model's training in co-evolution: its preset, the first training's steps and
    each refinement's."""

    NAME: ClassVar[str] = "wm"
    """The part's field name in the configs that hold it (its flags are ``--wm.<field>``)."""

    preset: WorldModelPreset = "tiny"
    """World-model preset (`worldsim train-wm --config`)."""
    steps: int = 4000
    """Optimiser steps of the first world-model training."""
    refine_steps: int = 1500
    """Optimiser steps of each refinement (on all real episodes so far, from the current weights)."""
    time_budget: float | None = None
    """Seconds per world-model training (None: no limit)."""

    def __post_init__(self) -> None:
        _check_choice(self, "preset", WorldModelPreset)
        _check_counts(self, ("steps", "refine_steps"))
        _check_time_budget(self)

    def train_config(self, data: Path, out: Path, init: Path | None, seed: int, *, state_supervision: bool = True,
                     **run: Any) -> TrainWMConfig:
        """The config of one training on ``data`` into ``out`` (a refinement of ``init`` when given);
        ``state_supervision=False`` trains on frames, proprio, actions and success flags alone (the
        ``video`` rung); ``run``: the run settings it shares with the pipeline (``device``,
        ``torch_threads``, ``progress``)."""
        from worldsim.world_models.config import preset
        from worldsim.world_models.train import PRESET_CONFIGS

        steps = self.steps if init is None else self.refine_steps
        # a refinement keeps the model's own architecture (its state_supervision too): train-wm --init refuses another
        model = preset(self.preset) if init is not None else preset(self.preset, state_supervision=state_supervision)
        return PRESET_CONFIGS[self.preset](data=data, out=out, init=init, model=model, steps=steps,
                                           time_budget=self.time_budget, val_every=max(steps // 4, 1),
                                           video_every=steps, checkpoint_every=steps, seed=seed, **run)


@dataclass
class RLRounds:
    """The policy's RL in each co-evolution round: the algorithm, its budget and its settings
    for fine-tuning a pretrained policy."""

    NAME: ClassVar[str] = "rl"
    """The part's field name in the configs that hold it (its flags are ``--rl.<field>``)."""

    algo: RLAlgorithm = "grpo"
    """RL algorithm in imagination (and for the direct-rl baseline)."""
    env_steps: int = 80_000
    """Imagined env steps per RL round (direct-rl: replaced by the real budget): with GRPO,
    env_steps / (num_envs x horizon) iterations of num_envs imagined episodes."""
    time_budget: float | None = None
    """Seconds per RL round (None: no limit)."""
    num_envs: int = 64
    """Parallel (imagined) envs, split evenly over the tasks."""
    group_size: int = 8
    """GRPO: rollouts per start state."""
    lr: float = 3e-5
    """RL learning rate (fine-tuning a pretrained policy: small)."""
    kl_coef: float = 0.0
    """GRPO: weight of the KL divergence from the round's starting policy (0: none)."""

    def __post_init__(self) -> None:
        _check_choice(self, "algo", RLAlgorithm)
        _check_counts(self, ("env_steps", "num_envs", "group_size"))
        _check_time_budget(self)
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"rl.lr={self.lr!r} must be a finite number > 0")
        if not (isinstance(self.kl_coef, (int, float)) and math.isfinite(self.kl_coef) and self.kl_coef >= 0):
            raise ValueError(f"rl.kl_coef={self.kl_coef!r} must be a finite number >= 0")
        if self.kl_coef and self.algo != "grpo":
            raise ValueError(f"rl.kl_coef={self.kl_coef!r} is GRPO's KL term; rl.algo={self.algo!r} has none")

    def train_config(self, total_env_steps: int, **run: Any) -> GRPOConfig | PPOConfig:
        """The config of one RL run of ``total_env_steps`` env steps (this part's budget, or the
        direct-rl baseline's); ``run``: what the pipeline sets (policy, tasks, imagination, evaluation,
        run settings)."""
        from worldsim.training.grpo import GRPOConfig
        from worldsim.training.ppo import PPOConfig

        own: dict[str, Any] = dict(num_envs=self.num_envs, lr=self.lr, total_env_steps=total_env_steps,
                                   time_budget=self.time_budget)
        if self.algo == "grpo":
            return GRPOConfig(group_size=self.group_size, kl_coef=self.kl_coef, **own, **run)
        return PPOConfig(**own, **run)
