"""The world-model and RL parts of a co-evolution config: what each round trains, and with what
budget. Each part checks its own fields and builds the trainer config it passes on, so
:class:`~worldsim.pipelines.coevolve.CoevolveConfig` and the quickstart compose them instead of
copying their fields. Their flags carry the part's name (``--wm.steps``, ``--rl.env-steps``),
since both parts have steps and a time budget."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from worldsim.runtime.validation import check_choice, check_number, positive_ints

if TYPE_CHECKING:
    from worldsim.training.grpo import GRPOConfig
    from worldsim.training.ppo import PPOConfig
    from worldsim.world_models.train import TrainWMConfig

WorldModelPreset = Literal["tiny", "base", "video-tiny", "video-base"]
RLAlgorithm = Literal["grpo", "ppo"]


@dataclass
class WorldModelRounds:
    """The world model's training in co-evolution: its preset, the first training's steps and
    each refinement's."""

    NAME: ClassVar[str] = "wm"
    """The part's field name in the configs that hold it (its flags are ``--wm.<field>``)."""

    preset: WorldModelPreset = "tiny"
    """World-model preset (`worldsim train-wm --config`)."""
    model: dict[str, Any] = field(default_factory=dict)
    """Changes to the preset's architecture, as `worldsim train-wm`'s ``model`` takes them (a config
    file's ``[wm.model]`` tables, e.g. ``camera = "scene"``)."""
    steps: int = 4000
    """Optimiser steps of the first world-model training."""
    refine_steps: int = 1500
    """Optimiser steps of each refinement (on all real episodes so far, from the current weights)."""
    time_budget: float | None = None
    """Seconds per world-model training (None: no limit)."""

    def __post_init__(self) -> None:
        check_choice("wm.preset", self.preset, typing.get_args(WorldModelPreset))
        positive_ints(self, ("steps", "refine_steps"), prefix="wm.")
        check_number("wm.time_budget", self.time_budget, strict=True, optional=True, note="seconds")

    def train_config(self, data: Path, out: Path, init: Path | None, seed: int, *, state_supervision: bool = True,
                     **run: Any) -> TrainWMConfig:
        """The config of one training on ``data`` into ``out`` (a refinement of ``init`` when given);
        ``state_supervision=False`` trains on frames, proprio, actions and success flags alone (the
        ``video`` rung); ``run``: the run settings it shares with the pipeline (``device``,
        ``torch_threads``, ``progress``)."""
        from worldsim.world_models.train import TrainWMConfig

        steps = self.steps if init is None else self.refine_steps
        # a refinement keeps the model's own architecture (its state_supervision too): train-wm --init refuses another
        return TrainWMConfig(data=data, out=out, init=init, preset=self.preset,
                             model=self.model if init is None else {},
                             state_supervision=state_supervision or init is not None, steps=steps,
                             time_budget=self.time_budget, val_every=max(steps // 4, 1), video_every=steps,
                             checkpoint_every=steps, seed=seed, **run)


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
        check_choice("rl.algo", self.algo, typing.get_args(RLAlgorithm))
        positive_ints(self, ("env_steps", "num_envs", "group_size"), prefix="rl.")
        check_number("rl.time_budget", self.time_budget, strict=True, optional=True, note="seconds")
        check_number("rl.lr", self.lr, strict=True)
        check_number("rl.kl_coef", self.kl_coef)
        if self.kl_coef and self.algo != "grpo":
            raise ValueError(f"rl.kl_coef={self.kl_coef!r} is GRPO's KL term; rl.algo={self.algo!r} has none")

    @property
    def groups_divide_envs(self) -> bool:
        """Whether GRPO's groups of ``group_size`` (at least 2) divide ``num_envs`` (as one task's
        envs: a run over several tasks checks each task's share when it starts); always for PPO.
        The commands that take these as flags say which flags with their own one-line error."""
        return self.algo != "grpo" or (self.group_size >= 2 and self.num_envs % self.group_size == 0)

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
