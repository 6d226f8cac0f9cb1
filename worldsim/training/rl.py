"""What PPO and GRPO share: the clipped surrogate, episode bookkeeping, the training env and
policy, evaluation, and the end of a run (the run itself is a
:class:`~worldsim.runtime.run.TrainingRun`).

The algorithms themselves live in :mod:`worldsim.training.ppo` and :mod:`worldsim.training.grpo`; this module
holds only the pieces that are the same thing in both.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist

from worldsim.envs.arrays import host_array
from worldsim.envs.concat import ConcatVectorEnv
from worldsim.envs.core import PHYSICS_REWARD_TYPES
from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.observations import OBS_MODES
from worldsim.envs.registration import make_task_envs
from worldsim.envs.tasks import TaskSpec, get_suite, get_task
from worldsim.envs.wrappers import ActionChunk
from worldsim.evaluation.evaluate import evaluate_in_physics
from worldsim.policies.base import Batch, Policy, load_policy
from worldsim.policies.mlp import MLPPolicy, MLPPolicyConfig
from worldsim.runtime.distributed import DistInfo
from worldsim.runtime.run import TrainingRun, success_text
from worldsim.runtime.run_logging import write_json
from worldsim.runtime.settings import RunSettings
from worldsim.runtime.validation import check_int, check_number, positive_ints


# ---------------------------------------------------------------------------- losses
def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is True (all entries if ``mask`` is None)."""
    if mask is None:
        return x.mean()
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


def clipped_surrogate(
    new_log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, clip_coef: float,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped policy objective, as a loss to minimise (Schulman et al. 2017, eq. 7):
    ``mean(max(-A r, -A clip(r, 1-eps, 1+eps)))`` with ``r = exp(new - old)``, averaged over
    ``mask`` if given. Returns the loss and detached health signals: ``approx_kl`` (the
    unbiased ``(r - 1) - log r`` estimator of KL(old || new)) and ``clipfrac`` (share of
    samples whose ratio left the clip range)."""
    log_ratio = new_log_prob - old_log_prob
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {"approx_kl": masked_mean((ratio - 1.0) - log_ratio, mask),
                 "clipfrac": masked_mean(((ratio - 1.0).abs() > clip_coef).float(), mask)}
    return loss, stats


# ---------------------------------------------------------------------------- episodes
class EpisodeTracker:
    """Returns, lengths and success of the episodes a ``SameStep`` vector env finishes.

    An episode counts as a success if the task was achieved at any step of it (with
    ``terminate_on_success=False`` it may drift off again before the time limit)."""

    def __init__(self, num_envs: int) -> None:
        self.returns = np.zeros(num_envs)
        self.lengths = np.zeros(num_envs, np.int64)
        self.success = np.zeros(num_envs, bool)
        self.finished: list[tuple[float, int, bool]] = []

    def update(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
               info: dict[str, Any]) -> None:
        self.returns += reward
        self.lengths += info.get("chunk_steps", 1)
        done = terminated | truncated
        success = info["success"].copy()
        if done.any():
            success[done] = info["final_info"]["success"][done]
        self.success |= success
        for i in np.flatnonzero(done):
            self.finished.append((float(self.returns[i]), int(self.lengths[i]), bool(self.success[i])))
        self.returns[done] = 0.0
        self.lengths[done] = 0
        self.success[done] = info["success"][done]  # the new episode's first state

    def pop(self) -> dict[str, float]:
        """Means over the episodes finished since the last call (empty if none)."""
        if not self.finished:
            return {}
        ret, length, success = (np.array(c, dtype=float) for c in zip(*self.finished, strict=True))
        self.finished = []
        return {"episode/return": ret.mean(), "episode/length": length.mean(),
                "episode/success_rate": success.mean(), "episode/count": float(len(ret))}

    def state_dict(self) -> dict[str, Any]:
        return {"returns": self.returns.copy(), "lengths": self.lengths.copy(),
                "success": self.success.copy(), "finished": list(self.finished)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns[:] = state["returns"]
        self.lengths[:] = state["lengths"]
        self.success[:] = state["success"]
        self.finished = list(state["finished"])


def final_obs_of(info: dict[str, Any], index: np.ndarray) -> Any:
    """The ``final_obs`` of envs ``index`` stacked into one batched observation (taken as rows of
    an accelerator backend's dense ``final_obs``, where they stay on its device)."""
    final = info["final_obs"]
    if not (isinstance(final, np.ndarray) and final.dtype == object):
        if isinstance(final, dict):
            return {k: (tuple(v[i] for i in index) if k == "instruction" else v[index]) for k, v in final.items()}
        return final[index]
    rows = [final[i] for i in index]
    if isinstance(rows[0], dict):
        return {k: (tuple(r[k] for r in rows) if k == "instruction" else np.stack([r[k] for r in rows]))
                for k in rows[0]}
    return np.stack(rows)


def stack_batches(batches: list[Batch]) -> Batch:
    """Stack per-step processed batches into ``(T, B, ...)`` tensors, key by key."""
    return {k: torch.stack([b[k] for b in batches]) for k in batches[0]}


def host_step(reward: Any, terminated: Any, truncated: Any, info: dict[str, Any]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """A step's rewards and flags on the host, with the ``info`` entries the bookkeeping reads
    (``success``, ``chunk_steps``, ``final_info["success"]``): accelerator backends return device
    arrays, and these are a few bytes per env, unlike the observations, which stay where they are."""
    host: dict[str, Any] = {k: host_array(info[k]) for k in ("success", "chunk_steps") if k in info}
    if "final_info" in info:
        host["final_info"] = {"success": host_array(info["final_info"]["success"])}
    return host_array(reward), host_array(terminated), host_array(truncated), host


def flatten_batch(batch: Batch) -> Batch:
    """``(T, B, ...)`` -> ``(T * B, ...)`` for every key."""
    return {k: v.reshape(-1, *v.shape[2:]) for k, v in batch.items()}


# ---------------------------------------------------------------------------- env and policy
TARGET_KL = 0.05
"""Default :attr:`RLRunConfig.target_kl`: above what a healthy update reaches (an epoch's mean
approximate KL stays under 0.025 for PPO and GRPO with their default settings from scratch on
reach), so tuned runs still run every epoch, while an update that runs away (a KL of 1 and more,
as RL in an imperfect world model can) stops after its first epoch."""
FAR_KL = 0.5
"""A fine-tuning run "ends far from where it started" when the final policy's KL divergence from
the starting one, per action dimension, passes this on the last iteration's observations: for a
Gaussian policy, as if the mean of every action dimension had moved by a whole standard
deviation. :func:`finish_run` then warns (its figure is the summary's ``drift_kl``)."""


@dataclass
class RLRunConfig(RunSettings):
    """Settings PPO and GRPO share: the task, the policy to train, evaluation, checkpoints and the
    run itself (:class:`~worldsim.runtime.run.RunSettings`). Each algorithm's config extends it
    with its own hyperparameters and calls :meth:`check` once its defaults are filled in."""

    if TYPE_CHECKING:  # every algorithm's config has one (PPO's is None until its default is picked)
        ent_coef: float | None

    SET_BY_COMMAND: ClassVar[dict[str, tuple[str, ...]]] = {"imagination": ("device",)}
    """The world model runs on the run's device: the imagination's own is not a flag."""
    COMMAND_LINE: ClassVar[tuple[str, ...]] = ("task", "suite", "obs_mode", "backend", "policy", "eval_episodes",
                                               "imagination", "physics_reward")
    """The fields PPO and GRPO share that are flags (with the run settings'); the rest a config file sets."""

    task: str = "ReachCube-v0"
    """Task to train on (see `worldsim list-envs`)."""
    suite: str | None = None
    """Train one multi-task policy on every seen task of this suite at once (replaces task); the
    envs are split evenly between the tasks and evaluation covers each."""
    obs_mode: Literal["state", "pixels", "pixels+state"] = "state"
    """Env observations: state, pixels or pixels+state (a policy from scratch needs state)."""
    backend: Literal["mujoco", "mjx", "warp"] = "mujoco"
    """Physics of the training envs: mujoco (MuJoCo on the CPU), mjx (MuJoCo XLA, state only) or warp
    (MuJoCo Warp: physics, pixels and rewards on the policy's device, observations handed to the
    policy as device tensors). Evaluation always runs on mujoco."""
    imagination: ImaginationConfig = field(default_factory=ImaginationConfig)
    """Train in imagination: with a world model (and keyframes, obs_mode pixels, the mujoco
    backend) the world model steps the training envs instead of physics, on the run's device;
    evaluation stays in physics. Without one, training runs in physics on ``physics_reward``."""
    physics_reward: Literal["dense", "sparse"] = "dense"
    """The reward of training in physics: ``"dense"``, the task's staged shaping, or ``"sparse"``,
    success alone (1 each step the task is solved). Imagination's is ``imagination.reward_type``."""
    terminate_on_success: bool = False
    """End training episodes on success (evaluation always does); see the module docstring."""
    clip_coef: float = 0.2
    """Policy ratio clip range."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    target_kl: float | None = TARGET_KL
    """Stop an update's epochs once an epoch's mean approximate KL from the rollout policy passes
    this (as CleanRL does; the metrics log early_stop_epoch); None: always run every epoch."""
    norm_obs: bool = True
    """Update the policy's running observation normaliser (policies that have one)."""
    policy: Path | None = None
    """A policy checkpoint or run folder to fine-tune (e.g. runs/bc_push); None: a new state MLP."""
    chunk_size: int = 1
    """Actions per decision of a new MLP policy (a loaded policy keeps its own)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden widths of a new MLP policy."""
    init_log_std: float = -0.5
    """Initial action log-std of a new MLP policy."""
    eval_every: int = 25
    """Evaluate (deterministic policy) every this many iterations; 0: only at the end."""
    eval_episodes: int = 100
    """Episodes per evaluation, per task."""
    checkpoint_every: int = 50
    """Write checkpoint.pt and policy/ every this many iterations (and at the end)."""
    keep_checkpoints: bool = False
    """Also keep each checkpoint's policy as policy_iter<N>/ beside policy/ (the latest), so the
    run's policies along the way can be compared or ranked later."""
    torch_threads: int | None = field(default=None, kw_only=True)
    """Torch CPU threads (None: one in physics, the idle cores in imagination). In physics the
    physics thread pool keeps the cores busy, and torch's workers waiting for a busy core slow
    small networks down many times over; in imagination torch does the work."""

    def check(self, positive: tuple[str, ...] = (), nonnegative: tuple[str, ...] = ()) -> None:
        """Normalise the shared fields and validate them, plus the subclass's int fields named in
        ``positive`` (>= 1) and ``nonnegative`` (>= 0). Needs ``num_envs``, ``lr``,
        ``total_env_steps`` and ``ent_coef`` on the subclass."""
        if self.suite is not None:
            self.task = get_suite(self.suite).seen[0]
        self.task = get_task(self.task).name
        self.out = Path(self.out)
        self.policy = None if self.policy is None else Path(self.policy)
        if self.imagination.device not in ("auto", self.device):
            raise ValueError(f"imagination.device={self.imagination.device!r}: the world model runs on the run's "
                             f"device ({self.device!r}); leave the imagination's at 'auto'")
        if self.imagined and self.obs_mode != "pixels":
            raise ValueError(f"obs_mode={self.obs_mode!r}: imagined envs observe pixels only; use "
                             "obs_mode='pixels' with world_model")
        if self.physics_reward not in PHYSICS_REWARD_TYPES:
            raise ValueError(f"physics_reward={self.physics_reward!r}; allowed: {', '.join(PHYSICS_REWARD_TYPES)}")
        if self.imagined and self.physics_reward != "dense":
            raise ValueError(f"physics_reward={self.physics_reward!r} with world_model: imagination rewards as "
                             "imagination.reward_type says; set that instead")
        if self.backend not in ("mujoco", "mjx", "warp"):
            raise ValueError(f"backend={self.backend!r} is not a backend; allowed: 'mujoco', 'mjx', 'warp'")
        if self.imagined and self.backend != "mujoco":
            raise ValueError(f"backend={self.backend!r} with world_model: a world model steps imagined envs, "
                             "not physics; leave backend at 'mujoco'")
        self.hidden = tuple(self.hidden)
        if self.obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode={self.obs_mode!r}; allowed: {', '.join(OBS_MODES)}")
        if self.torch_threads is None and not self.imagined:
            self.torch_threads = 1  # see torch_threads
        positive_ints(self, ("num_envs", "total_env_steps", "chunk_size", "eval_episodes", *positive))
        for name in ("eval_every", "checkpoint_every", *nonnegative):
            check_int(name, getattr(self, name), 0)
        for name in ("lr", "clip_coef", "max_grad_norm"):
            check_number(name, getattr(self, name), strict=True)
        check_number("target_kl", self.target_kl, strict=True, optional=True, note="None: no early stop")
        check_number("ent_coef", self.ent_coef)
        self.check_run()

    @property
    def tasks(self) -> list[str]:
        """The tasks trained on: the suite's seen tasks, or ``task`` alone."""
        return list(get_suite(self.suite).seen) if self.suite is not None else [self.task]

    @property
    def imagined(self) -> bool:
        """Whether training happens in a world model rather than in physics."""
        return self.imagination.imagined

    def mlp_config(self, obs_dim: int) -> MLPPolicyConfig:
        return MLPPolicyConfig(obs_dim=obs_dim, chunk_size=self.chunk_size, hidden=self.hidden,
                               init_log_std=self.init_log_std, tasks=tuple(self.tasks))



def build_policy(policy_path: str | Path | None, specs: list[TaskSpec], obs_mode: str, mlp: MLPPolicyConfig,
                 device: torch.device) -> Policy:
    """The policy to train: ``load_policy(policy_path)`` (checked against every task), or a fresh
    :class:`MLPPolicy` from ``mlp`` (which needs the ``state`` observation)."""
    if policy_path is None:
        if obs_mode == "pixels":
            raise ValueError("a policy trained from scratch is a state MLP: use obs_mode='state' or "
                             "'pixels+state', or pass --policy with a pixel policy (e.g. a BC TinyVLA)")
        return MLPPolicy(mlp).to(device)
    policy = load_policy(policy_path, device)
    for spec in specs:
        policy.check_task(spec.instruction)
    return policy.train()


def make_train_env(config: RLRunConfig, num_envs: int, policy: Policy, *, reset_schedule: str,
                   autoreset_mode: str = "SameStep") -> gym.vector.VectorEnv:
    """The training envs of ``config``: ``num_envs`` envs split evenly between its tasks (a
    :class:`~worldsim.envs.concat.ConcatVectorEnv` for several), physics or, with
    ``config.imagination``'s world model, imagined (:class:`~worldsim.world_models.env.ImaginedVectorEnv`),
    giving ``policy`` its observations; wrapped in :class:`ActionChunk` when the policy emits
    chunks (a chunk is one decision)."""
    tasks = config.tasks
    if num_envs % len(tasks):
        raise ValueError(f"num_envs={num_envs} must be a multiple of the {len(tasks)} tasks trained on")
    kwargs = {**policy.env_kwargs(), "obs_mode": config.obs_mode, "autoreset_mode": autoreset_mode,
              "reset_schedule": reset_schedule, "terminate_on_success": config.terminate_on_success}
    if config.backend != "mujoco":
        kwargs["backend"] = config.backend
    if config.backend == "warp":
        kwargs["device"] = policy.device
    imagination = config.imagination.replace(device=config.device) if config.imagined else None
    if imagination is None:
        kwargs["reward_type"] = config.physics_reward
    envs = [make_task_envs(task, num_envs // len(tasks), imagination=imagination, **kwargs) for task in tasks]
    env = envs[0] if len(envs) == 1 else ConcatVectorEnv(envs)
    return ActionChunk(env, policy.chunk_size) if policy.chunk_size > 1 else env


def env_actions(actions: torch.Tensor, on_device: bool = False) -> np.ndarray | torch.Tensor:
    """A policy's chunk ``(B, K, A)`` as the env takes it: ``(B, A)`` for K = 1, else the chunk;
    a numpy copy on the host, or with ``on_device`` the tensor where it is (the Warp backend
    takes it there)."""
    array = actions.detach().float() if on_device else actions.detach().cpu().numpy().astype(np.float32)
    return array[:, 0] if array.shape[1] == 1 else array


EVAL_SEED_OFFSET = 10_000
"""A run's evaluations use seed ``seed + EVAL_SEED_OFFSET`` (its training envs use ``seed``):
``worldsim evaluate --seed`` with that seed runs the same episodes (the result says which)."""


def evaluation_metrics(policy: Policy, config: RLRunConfig) -> tuple[dict[str, Any], dict[str, float]]:
    """:func:`~worldsim.evaluation.evaluate.evaluate_in_physics` on ``config``'s tasks with its
    episodes and evaluation seed; also the metrics to log (the success rate is the mean over tasks)."""
    result = evaluate_in_physics(policy, config.tasks, config.eval_episodes, seed=config.seed + EVAL_SEED_OFFSET)
    metrics = {"eval/success_rate": result["success_rate"],
               "eval/return": float(np.mean([r["mean_return"] for r in result["per_task"].values()]))}
    if len(config.tasks) > 1:
        metrics |= {f"eval/success_rate/{task}": r["success_rate"] for task, r in result["per_task"].items()}
    return result, metrics


def end_iteration(run: TrainingRun, policy: Policy, config: RLRunConfig, iteration: int, global_step: int,
                  metrics: dict[str, float], save: Callable[[], None]) -> None:
    """The end of a PPO or GRPO iteration: log its ``metrics`` at ``global_step``, with an
    evaluation every ``eval_every`` iterations (rank 0; not after the last iteration, which the
    final evaluation covers), then ``save`` a checkpoint every ``checkpoint_every`` iterations
    (with ``keep_checkpoints``, a copy of the policy as ``policy_iter<N>/`` too)."""
    if run.is_main and config.eval_every and iteration % config.eval_every == 0 and iteration < run.steps:
        result, eval_metrics = evaluation_metrics(policy, config)
        metrics = metrics | eval_metrics
        run.bar.set_postfix(eval_success=f"{result['success_rate']:.2f}")
    run.log(global_step, metrics)
    if config.checkpoint_every and iteration % config.checkpoint_every == 0:
        save()
        if config.keep_checkpoints and run.is_main:
            policy.save_pretrained(config.out / f"policy_iter{iteration}")


def drift_kl(policy: Policy, start: Policy, batch: Batch, rows: int = 512) -> float:
    """KL divergence of ``policy`` from ``start`` per action dimension, on the observations of
    ``batch`` (at most ``rows`` of them): actions drawn from ``policy``, the k3 estimate
    (:func:`worldsim.training.grpo.reference_kl`'s, unclamped), divided by ``chunk_size x action_dim``."""
    keep = {k: v[:rows] for k, v in batch.items()}
    was_training = policy.training
    policy.eval()
    with torch.no_grad():
        out = policy.act(keep)
        log_ratio = start.evaluate(keep, out.actions)[0].float() - out.log_prob.float()
    policy.train(was_training)
    kl = float(((log_ratio.exp() - 1.0) - log_ratio).mean())
    return kl / (policy.chunk_size * policy.action_dim)


def finish_run(run: TrainingRun, policy: Policy, config: RLRunConfig, algo: str, global_step: int,
               start: Policy, last_batch: Batch) -> dict[str, Any]:
    """The end of a PPO or GRPO run, after its last checkpoint: the summary (the run's
    :meth:`~worldsim.runtime.run.TrainingRun.summary`, ``global_step``, ``out``,
    ``weights_digest``, ``drift_kl`` (:func:`drift_kl` from the starting policy ``start`` on this
    process's last rollout's observations ``last_batch``; not measured when it is empty),
    and on rank 0 the final evaluation, ``eval``, also in ``eval.json``), written to
    ``summary.json`` and printed as one line; a fine-tuned policy that ended farther than
    :data:`FAR_KL` from where it started gets a warning on stderr."""
    summary = run.summary(policy) | {"global_step": global_step, "out": str(config.out),
                                     "weights_digest": weights_digest(policy)}
    drift = drift_kl(policy, start, last_batch) if last_batch else None
    if drift is not None:
        summary["drift_kl"] = drift
        if run.is_main and config.policy is not None and drift > FAR_KL:
            print(f"warning: the policy ended far from {config.policy}, where it started: KL {drift:.2f} per action "
                  f"dimension (> {FAR_KL}); compare the two on the same episodes (`worldsim evaluate --seed`) "
                  "before using it, and consider a lower --lr or --target-kl", file=sys.stderr)
    result = ""
    if run.is_main:
        evaluation, metrics = evaluation_metrics(policy, config)
        summary["eval"] = evaluation | {"env_steps": global_step, "train_seconds": run.seconds, "algo": algo}
        write_json(config.out / "eval.json", summary["eval"])
        run.log(global_step, metrics)
        result = (f"{global_step:,} env steps in {run.seconds:.0f} s; {success_text(evaluation)} of seed "
                  f"{evaluation['seed']} (`worldsim evaluate --policy {config.out} --seed {evaluation['seed']} "
                  f"--episodes {config.eval_episodes}` runs the same episodes)")
    return run.finish(summary, result)


def gather_rows(x: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Concatenate every rank's rows of ``x`` (same shape on every rank); ``x`` alone without
    torchrun. Used so that every rank folds the same data into the observation normaliser."""
    if info.world_size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(info.world_size)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def weights_digest(module: torch.nn.Module) -> str:
    """SHA-256 of every parameter and buffer, in order: equal digests mean identical weights."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
