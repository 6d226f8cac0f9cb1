"""``worldsim train-rl``: one command for both RL algorithms (``--algo ppo`` or ``--algo grpo``).

Every hyperparameter left unset takes the chosen algorithm's default (for PPO, the task
family's tuned value in :data:`worldsim.training.ppo.PPO_DEFAULTS`); an option the chosen algorithm
does not have is an error rather than silently ignored.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from worldsim.training.grpo import GRPOConfig, train_grpo
from worldsim.training.ppo import PPOConfig, train_ppo

# Options always passed on, whatever their value (both configs have them).
ALWAYS = ("task", "obs_mode", "terminate_on_success", "norm_obs", "seed", "resume", "device", "torch_threads",
          "progress")


@dataclass
class TrainRL:
    """Train a policy with PPO or GRPO on a worldsim task (from scratch, or fine-tune --policy)."""

    algo: Literal["ppo", "grpo"] = "ppo"
    """RL algorithm."""
    task: str = "ReachCube-v0"
    """Task to train on (see `worldsim list-envs`)."""
    suite: str | None = None
    """Train one multi-task policy on every seen task of this suite at once (replaces --task)."""
    obs_mode: str = "state"
    """Env observations: state, pixels or pixels+state (imagination: pixels)."""
    world_model: str | None = None
    """Train in imagination: a world model folder from `worldsim train-wm` (evaluation stays real)."""
    keyframes: str | None = None
    """Imagination: episode file whose real states start the imagined episodes."""
    keyframe_ratio: float | None = None
    """Imagination: share of starts at mid-episode keyframes (0: episode starts only)."""
    imagined_horizon: int | None = None
    """Imagination: truncate imagined episodes after this many steps."""
    policy: str | None = None
    """Policy checkpoint or run folder to fine-tune (e.g. runs/bc_push); unset: a new state MLP."""
    out: Path | None = None
    """Run folder (default runs/<algo>)."""
    resume: bool = False
    """Continue the run in --out from its checkpoint, exactly."""
    time_budget: float | None = None
    """Wall-clock seconds of training; then stop cleanly with a final checkpoint."""
    total_env_steps: int | None = None
    """Env steps to train for."""
    num_envs: int | None = None
    """Parallel envs (per rank under torchrun)."""
    num_steps: int | None = None
    """PPO: decisions per env per rollout."""
    group_size: int | None = None
    """GRPO: rollouts per start state."""
    reset_schedule: str | None = None
    """PPO: synchronous, staggered, staggered-random, ..., keyframe (imagination)."""
    terminate_on_success: bool = False
    """End training episodes on success (evaluation always does)."""
    gamma: float | None = None
    """PPO: discount per decision."""
    gae_lambda: float | None = None
    """PPO: GAE lambda."""
    lr: float | None = None
    """Learning rate."""
    update_epochs: int | None = None
    """Passes over each rollout."""
    num_minibatches: int | None = None
    """Minibatches per pass."""
    clip_coef: float | None = None
    """Policy ratio clip range."""
    ent_coef: float | None = None
    """Entropy bonus coefficient."""
    vf_coef: float | None = None
    """PPO: value loss coefficient."""
    max_grad_norm: float | None = None
    """Global gradient-norm clip."""
    target_kl: float | None = None
    """PPO: early-stop an update's epochs above this approximate KL."""
    norm_obs: bool = True
    """Update the policy's running observation normaliser."""
    chunk_size: int | None = None
    """Actions per decision of a new MLP policy."""
    hidden: tuple[int, ...] | None = None
    """Hidden widths of a new MLP policy (default 256 256)."""
    init_log_std: float | None = None
    """Initial action log-std of a new MLP policy."""
    value_warmup_iters: int | None = None
    """PPO: critic-only iterations before policy updates (fine-tuning)."""
    eval_every: int | None = None
    """Evaluate every this many iterations (0: only at the end)."""
    eval_episodes: int | None = None
    """Episodes per evaluation."""
    checkpoint_every: int | None = None
    """Checkpoint every this many iterations."""
    seed: int = 0
    """Seed of everything."""
    device: str = "auto"
    """auto, cpu or cuda."""
    torch_threads: int = 1
    """Torch CPU threads (0: torch's default; 1 is fastest for state MLPs)."""
    progress: bool = True
    """Show a progress bar."""

    def config(self) -> PPOConfig | GRPOConfig:
        """The chosen algorithm's config from the options that were set."""
        config_class = PPOConfig if self.algo == "ppo" else GRPOConfig
        known = {f.name for f in dataclasses.fields(config_class)}
        values: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "algo" or (value is None and f.name not in ALWAYS):
                continue
            if f.name not in known:
                raise ValueError(f"--{f.name.replace('_', '-')} is not an option of {self.algo}; "
                                 f"leave it out or use --algo {'grpo' if self.algo == 'ppo' else 'ppo'}")
            values[f.name] = value
        values.setdefault("out", Path("runs") / self.algo)
        return config_class(**values)

    def run(self) -> dict[str, Any]:
        from rich.console import Console

        config = self.config()
        summary = train_ppo(config) if isinstance(config, PPOConfig) else train_grpo(config)
        if "eval" in summary:
            Console().print(f"[bold]{self.algo}[/] {config.suite or config.task}: {summary['global_step']:,} env steps in "
                            f"{summary['train_seconds']:.0f} s ({summary['stopped']}); eval success "
                            f"{summary['eval']['success_rate']:.1%} -> {config.out}")
        return summary
