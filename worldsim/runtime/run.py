"""What every training run does around its algorithm (BC, world model, PPO, GRPO), written once.

A trainer reads top to bottom around one :class:`TrainingRun`::

    run = TrainingRun("train-bc", config)            # the out rule, torchrun, seeds, threads
    ...  data, model, optimiser
    state = run.restore(run_config, RESUME_FIELDS)   # --resume: the checkpoint (settings checked)
    ...  load it, or start fresh
    run.start(config.steps, done=step)               # metrics log, progress bar, clock
    while run.keep_going(step):                      # the step budget (the time budget: a safety net)
        ...  one step
        step += 1
        run.log_train(step, {"loss": loss})
        if step % config.checkpoint_every == 0:
            run.save(policy, "policy", {"policy": ..., "step": step})
    run.save(policy, "policy", {...})
    summary = run.summary(policy) | {...}             # how the loop ended
    return run.finish(summary, f"final loss {loss:.4f}")

**Budgets.** A run stops when its step budget is spent (optimiser steps; PPO and GRPO:
iterations, from ``total_env_steps``), so how much it trains does not depend on how fast the
machine is. ``time_budget`` is only a safety net: when it cuts a run short the run prints a
warning then, its progress bar says so, and the summary records it (``stopped_by``, the steps
done and asked).

**Profiles.** ``profile=N`` traces N steps with ``torch.profiler``, after the session's first
ten, into ``out/profile/`` (:mod:`~worldsim.runtime.profiling`): where a step's time goes, and on
a GPU how busy the device kept.

**Output folders.** A non-empty ``out`` is refused unless ``resume`` (continue that run) or
``overwrite`` (start afresh: the earlier run's files are removed first).

**Checkpoints** (atomic, :func:`~worldsim.runtime.checkpoint.save_checkpoint`): rank 0 writes
the model folder and ``checkpoint.pt``, holding the run's config, the shared state (weights,
optimiser, counters) and its own part; every other rank writes its own part (its envs and RNG
states) to ``checkpoint.rank<r>.pt``. A resumed rank reads rank 0's checkpoint, then its own.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from tqdm.auto import tqdm

from worldsim.runtime.checkpoint import CHECKPOINT_FILE, load_checkpoint, save_checkpoint
from worldsim.runtime.distributed import all_reduce_mean, any_rank, init_distributed, ranks_in_sync, shutdown
from worldsim.runtime.profiling import StepProfiler
from worldsim.runtime.run_logging import RunLogger, prepare_run_folder, write_json
from worldsim.runtime.settings import RunSettings
from worldsim.runtime.threads import use_torch_threads


class Pretrained(Protocol):
    """A model that saves itself as a folder (policies, world models)."""

    def save_pretrained(self, path: str | Path) -> Any: ...


def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check_resume(saved: dict[str, Any], current: dict[str, Any], fields: tuple[str, ...], path: Path) -> None:
    """``ValueError`` naming every setting of ``fields`` whose value in ``current`` differs from
    the one ``saved`` with the checkpoint at ``path``: a resumed run must be the same run."""
    changed = [f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in fields
               if saved.get(k) != current.get(k)]
    if changed:
        raise ValueError(f"cannot resume from {path}: settings changed since it was written "
                         f"({'; '.join(changed)}); use the original values, or a new --out")


def success_text(result: dict[str, Any]) -> str:
    """``success 45.0% (95% CI 35.6-54.8%, 100 episodes)`` from an evaluation's JSON document
    (:meth:`~worldsim.evaluation.evaluate.EvalResults.to_json`)."""
    low, high = result["pooled_ci95"]
    return (f"success {result['success_rate']:.1%} (95% CI {low:.1%}-{high:.1%}, "
            f"{result['episodes']} episodes)")


class TrainingRun:
    """One training run: its folder, processes, seeds, checkpoints, budgets, log and summary.

    The methods are called in the order of the module docstring's example. ``name`` heads the
    progress bar and the lines the run prints; ``unit`` names one step of the budget (``"step"``:
    an optimiser step; ``"iteration"``: a rollout and its update), and the summary's counts
    (``steps``/``steps_asked``, ``iterations``/``iterations_asked``)."""

    def __init__(self, name: str, config: RunSettings, unit: str = "step") -> None:
        """Claim ``config.out`` (a non-empty one is refused with ``FileExistsError`` unless
        ``resume`` or ``overwrite``), set torch's CPU threads, join the ``torchrun`` process group if
        there is one, and seed every generator with ``seed + rank``."""
        use_torch_threads(config.torch_threads)
        # before the process group forms, so that no rank has written anything yet
        prepare_run_folder(config.out, resume=config.resume, overwrite=config.overwrite)
        self.dist = init_distributed(config.device)
        seed_everything(config.seed + self.dist.rank)
        self.name, self.config, self.unit, self.out = name, config, unit, Path(config.out)
        self.run_config: dict[str, Any] = {}
        self.stopped_by = "steps"
        self.seconds = 0.0

    @property
    def device(self) -> torch.device:
        return self.dist.device

    @property
    def rank(self) -> int:
        return self.dist.rank

    @property
    def is_main(self) -> bool:
        return self.dist.is_main

    def checkpoint_path(self, rank: int) -> Path:
        """Rank 0's full checkpoint, or another rank's own part of it."""
        return self.out / (CHECKPOINT_FILE if rank == 0 else f"checkpoint.rank{rank}.pt")

    def restore(self, run_config: dict[str, Any], resume_fields: tuple[str, ...]) -> dict[str, Any] | None:
        """Record ``run_config`` (``config.json``, and the settings in every checkpoint); without
        ``resume``, None. With it, the state to continue from: rank 0's checkpoint updated with this
        rank's own part, whose RNG states are now the generators' (``FileNotFoundError`` if either
        is missing; ``ValueError`` naming every ``resume_fields`` setting that changed)."""
        self.run_config = run_config
        if not self.config.resume:
            return None
        for rank in sorted({0, self.rank}):
            if not self.checkpoint_path(rank).exists():
                raise FileNotFoundError(f"resume: no checkpoint at {self.checkpoint_path(rank)}; run without "
                                        "--resume to start a new run there")
        state = load_checkpoint(self.checkpoint_path(0))
        check_resume(state["config"], run_config, resume_fields, self.checkpoint_path(0))
        if self.rank:
            state |= load_checkpoint(self.checkpoint_path(self.rank))
        return state

    def start(self, steps: int, done: int = 0, scale: int = 1) -> None:
        """Begin the loop: a budget of ``steps`` steps, ``done`` of them already (a resumed run).
        Opens the metrics log (a resumed run's cut back to ``done``), the progress bar and the
        clock of the time budget. ``scale``: what one step counts for on the progress bar and the
        metrics' step axis (PPO and GRPO: the env steps of an iteration)."""
        self.steps, self.done, self.first, self.scale = steps, done, done, scale
        self.logger = RunLogger(self.out, self.run_config, enabled=self.is_main,
                                resume_step=done * scale if self.config.resume else None)
        # tqdm reads unit_scale=1 as "SI prefixes" (3.00k); False shows plain counts
        self.bar = tqdm(total=steps, initial=done, desc=self.name, unit="step",
                        unit_scale=scale if scale > 1 else False,
                        disable=not (self.config.progress and self.is_main), dynamic_ncols=True)
        self.profiler = (StepProfiler(self.out / "profile", self.config.profile, self.device)
                         if self.config.profile and self.is_main else None)
        self.clock = time.time()

    def keep_going(self, done: int) -> bool:
        """Whether the loop takes another step, ``done`` having been taken (the progress bar moves
        to it). False once the step budget is spent, or once ``time_budget`` seconds have passed
        since :meth:`start` on any rank (so that all ranks stop at the same step) and this session
        took a step; that stop is announced on stderr and on the progress bar."""
        self.bar.update(done - self.done)
        if self.profiler:
            for _ in range(done - self.done):
                self.profiler.step()
        self.done = done
        if done >= self.steps:
            return self._stop("steps")
        budget = self.config.time_budget
        if budget is not None and done > self.first and any_rank(time.time() - self.clock >= budget, self.dist):
            return self._stop("time_budget")
        return True

    def _stop(self, reason: str) -> bool:
        self.seconds = time.time() - self.clock
        self.stopped_by = reason
        if self.profiler:
            self.profiler.stop()
        if reason == "time_budget":
            self.bar.set_description(f"{self.name} (stopped by the time budget)")
            if self.is_main:
                tqdm.write(f"{self.name}: time budget of {self.config.time_budget:g} s reached at "
                           f"{self.unit} {self.done:,} of {self.steps:,} — results are not reproducible "
                           "across machines", file=sys.stderr)
        self.bar.close()
        return False

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` at ``step`` of the metrics' axis (rank 0 writes them)."""
        self.logger.log(step, metrics)

    def log_train(self, step: int, metrics: dict[str, float | torch.Tensor], every: int = 25) -> None:
        """Every ``every`` steps and at the last: log ``metrics`` averaged over the ranks (a
        collective: call it on every rank) as ``train/<name>``, and show the loss on the progress
        bar. Tensors are read only then."""
        if step % every and step != self.steps:
            return
        values = {f"train/{k}": v.item() if isinstance(v, torch.Tensor) else float(v)
                  for k, v in metrics.items()}
        averaged = all_reduce_mean(values, self.dist)
        self.log(step, averaged)
        self.bar.set_postfix(loss=f"{averaged['train/loss']:.4f}", refresh=False)

    def save(self, model: Pretrained, folder: str, state: dict[str, Any],
             rank_state: dict[str, Any] | None = None) -> None:
        """Checkpoint the run (every rank calls it): rank 0 writes ``model`` to ``out/folder`` and
        ``checkpoint.pt`` with the run config, ``state`` and its ``rank_state``; every other rank
        writes its ``rank_state`` to ``checkpoint.rank<r>.pt``; each file with its RNG states."""
        own = {"config": self.run_config, **(rank_state or {})}
        if self.is_main:
            model.save_pretrained(self.out / folder)
            own |= state
        save_checkpoint(self.checkpoint_path(self.rank), own)

    def summary(self, model: torch.nn.Module) -> dict[str, Any]:
        """How the loop ended, to start the trainer's summary with: ``stopped_by`` (``"steps"``
        or ``"time_budget"``), the ``<unit>s`` done and ``<unit>s_asked``, ``train_seconds`` (the
        loop's), ``torch_threads`` (the CPU threads torch ran on), ``world_size`` and ``ranks_in_sync``
        (every rank holds rank 0's weights of ``model``: a collective, so every rank calls it, before
        any rank-0-only work)."""
        return {"stopped_by": self.stopped_by, f"{self.unit}s": self.done,
                f"{self.unit}s_asked": self.steps, "train_seconds": round(self.seconds, 3),
                "torch_threads": torch.get_num_threads(), "world_size": self.dist.world_size,
                "ranks_in_sync": ranks_in_sync(model, self.dist)}

    def finish(self, summary: dict[str, Any], result: str) -> dict[str, Any]:
        """End the run: rank 0 writes ``summary`` to ``out/summary.json`` and prints the run's
        result in one line, ``<name>: <done> of <asked> <unit>s; <result>`` (other ranks' ``result``
        is not used); the metrics log closes (drawing ``curves.png``) and the process group is
        left. Returns ``summary``."""
        if self.is_main:
            write_json(self.out / "summary.json", summary)
            budget = " (stopped by the time budget)" if self.stopped_by == "time_budget" else ""
            tqdm.write(f"{self.name}: {self.done:,} of {self.steps:,} {self.unit}s{budget}; {result}")
        self.logger.close()
        shutdown(self.dist)
        return summary
