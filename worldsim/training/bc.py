"""Behaviour cloning: TinyVLA from recorded episodes.

Read top to bottom, :func:`train_bc` is the whole recipe:

1. load the episodes (:class:`~worldsim.data.windows.WindowDataset`: the current frame, proprio and
   instruction, and the next ``chunk_size`` actions with a mask past the episode end), split
   them by episode into train and validation sets;
2. build a :class:`~worldsim.policies.tinyvla.TinyVLA` that knows the dataset's instructions,
   with proprio normalised by the dataset's statistics;
3. take ``steps`` Adam steps on the policy's imitation loss over random minibatches, with
   random-shift image augmentation (pad 4 pixels, random crop: the standard fix for pixel BC
   overfitting to exact pixel positions);
4. every ``val_every`` steps measure the validation loss; every ``checkpoint_every`` steps
   write the policy and the training state (resumable exactly), and with ``keep_checkpoints``
   a copy of the policy as ``policy_step<N>/`` (checkpoints to compare or rank later);
5. at the end, optionally roll the policy out in the envs and record success rates.

The run around it (the ``out`` rule, ``torchrun``, seeds, checkpoints, the step budget and the
``time_budget`` safety net, ``summary.json``) is a :class:`~worldsim.runtime.run.TrainingRun`.

Each minibatch is drawn from a generator seeded by (seed, rank, step), so a resumed run draws
the same batches as an uninterrupted one, and ranks under ``torchrun`` draw different ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F

from worldsim.data.index import split_episodes
from worldsim.data.windows import window_obs
from worldsim.envs.tasks import get_task
from worldsim.runtime.distributed import average_gradients, broadcast_module
from worldsim.runtime.run import TrainingRun, success_text
from worldsim.runtime.run_logging import to_jsonable, write_json
from worldsim.runtime.settings import RunSettings
from worldsim.runtime.validation import check_int, check_number, check_range, positive_ints

# Settings a resumed run must share with the run that wrote the checkpoint: they shape the
# policy, the train/validation split and the minibatches.
RESUME_FIELDS = ("data", "task", "chunk_size", "language", "std_head", "batch_size", "val_fraction",
                 "augment_shift", "seed")


@dataclass
class BCConfig(RunSettings):
    """Behaviour cloning of TinyVLA (``worldsim train-bc``); the run settings are
    :class:`~worldsim.runtime.run.RunSettings`."""

    COMMAND_LINE: ClassVar[tuple[str, ...]] = ("data", "task", "chunk_size", "language", "steps", "batch_size", "lr",
                                               "checkpoint_every", "keep_checkpoints", "eval_episodes")
    """The fields that are flags (with the run settings'); the rest a config file sets."""

    data: Path
    """HDF5 episodes file (from ``worldsim collect``)."""
    out: Path = field(default=Path("runs/bc"), kw_only=True)
    """Run folder: config, metrics, curves, checkpoint, policy/."""
    task: tuple[str, ...] = ()
    """Train only on this task of the file (repeat --task for several; default: all)."""
    chunk_size: int = 4
    """Actions predicted per step (the action chunk K)."""
    language: Literal["minilm", "learned"] = "minilm"
    """Instruction encoder: frozen all-MiniLM-L6-v2, or a learned embedding per instruction."""
    std_head: Literal["state", "global"] = "state"
    """TinyVLA's action std: predicted per state (sampled chunks then show where the policy is
    unsure, which failure detectors read) or one global parameter per action dimension."""
    steps: int = 3000
    """Optimiser steps: the run's budget."""
    batch_size: int = 128
    """Minibatch size per process."""
    lr: float = 1e-3
    """Adam learning rate (cosine-annealed to 10% over the run)."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    val_fraction: float = 0.1
    """Fraction of episodes held out for the validation loss."""
    augment_shift: int = 4
    """Random-shift augmentation in pixels (0 disables it)."""
    val_every: int = 250
    """Steps between validation losses."""
    checkpoint_every: int = 500
    """Steps between checkpoints."""
    keep_checkpoints: bool = False
    """Also keep each checkpoint's policy as policy_step<N>/ beside policy/ (the latest), so the
    checkpoints can be ranked or compared afterwards (``worldsim rank-policies``)."""
    eval_episodes: int = 0
    """Episodes per task to roll out in the envs after training (0: none)."""

    def __post_init__(self) -> None:
        self.data, self.out = Path(self.data), Path(self.out)
        positive_ints(self, ("chunk_size", "steps", "batch_size", "val_every", "checkpoint_every"))
        check_range("val_fraction", self.val_fraction, 0.0, 1.0, integer=False, high_open=True)
        check_number("lr", self.lr, strict=True)
        check_int("augment_shift", self.augment_shift, 0)
        check_int("eval_episodes", self.eval_episodes, 0)
        self.check_run()
        if not self.data.exists():
            raise ValueError(f"data={str(self.data)!r}: no such file")


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """Pad uint8 images (B, H, W, C) by ``pad`` (edge replicate) and crop back at a random offset
    per image (DrQ's augmentation)."""
    if pad == 0:
        return images
    b, h, w, _ = images.shape
    padded = F.pad(images.permute(0, 3, 1, 2).float(), (pad,) * 4, mode="replicate")
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    rows = (dy[:, None] + torch.arange(h)[None])[:, :, None].expand(b, h, w)
    cols = (dx[:, None] + torch.arange(w)[None])[:, None, :].expand(b, h, w)
    batch = torch.arange(b)[:, None, None].expand(b, h, w)
    return padded.permute(0, 2, 3, 1)[batch, rows, cols].to(images.dtype)


def _collate(dataset: torch.utils.data.Dataset, index: np.ndarray) -> dict:
    return torch.utils.data.default_collate([dataset[int(i)] for i in index])


def train_bc(config: BCConfig) -> dict[str, Any]:
    """Train TinyVLA by behaviour cloning for ``config.steps`` steps (``time_budget`` may stop it
    sooner). Returns the summary, also ``out/summary.json``: ``steps`` done and ``steps_asked``,
    ``stopped_by`` (``"steps"`` or ``"time_budget"``), ``train_loss`` and ``val_loss`` at the end,
    the split's sizes, ``train_seconds``, ``world_size``, ``ranks_in_sync``, and with
    ``eval_episodes`` the success rates (``success_rate``, ``success_ci95``, ``per_task_success``)."""
    from worldsim.data.reader import EpisodeReader
    from worldsim.data.statistics import dataset_statistics
    from worldsim.data.windows import WindowDataset
    from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig

    run = TrainingRun("train-bc", config)
    device = run.device

    # 1. data
    reader = EpisodeReader(config.data)
    tasks = [get_task(t).name for t in config.task] or None
    dataset = WindowDataset(reader, context=1, chunk=config.chunk_size, tasks=tasks,
                            keys=tuple(k for k in ("image", "wrist_image", "proprio") if k in reader.obs_keys))
    obs_keys = tuple(k for k in ("image", "wrist_image", "proprio") if k in reader.obs_keys)
    episode_of = dataset.episode_index  # (num_samples,) episode of each sample
    episodes = np.unique(episode_of)
    train_eps, val_eps = split_episodes(len(episodes), config.val_fraction, config.seed)
    train_idx = np.flatnonzero(np.isin(episode_of, episodes[train_eps]))
    val_idx = np.flatnonzero(np.isin(episode_of, episodes[val_eps]))
    stats = dataset_statistics(reader, keys=("proprio",))

    # 2. policy
    image_size = reader.image_shape[0]
    policy = TinyVLA(TinyVLAConfig(instructions=tuple(dataset.instructions), tasks=tuple(dataset.tasks),
                                   image_size=image_size,
                                   use_wrist="wrist_image" in obs_keys, chunk_size=config.chunk_size,
                                   language=config.language, std_head=config.std_head))
    policy.set_normalization(*stats["proprio"])
    policy.to(device)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, config.steps) / config.steps)))
    step = 0
    state = run.restore(to_jsonable(config), RESUME_FIELDS)
    if state is not None:
        policy.load_state_dict(state["policy"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        step = state["step"]
    broadcast_module(policy, run.dist)
    run.start(config.steps, done=step)

    def checkpoint() -> None:
        run.save(policy, "policy", {"policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
                                    "schedule": schedule.state_dict(), "step": step})
        if config.keep_checkpoints and run.is_main:
            policy.save_pretrained(config.out / f"policy_step{step}")

    @torch.no_grad()
    def validation_loss() -> float:
        policy.eval()
        losses = []
        for start in range(0, len(val_idx), 256):
            items = _collate(dataset, val_idx[start:start + 256])
            loss, _ = policy.imitation_loss(policy.preprocess(window_obs(items, obs_keys)),
                                            items["actions"].to(device), items["action_mask"].to(device))
            losses.append(loss.item() * len(items["actions"]))
        policy.train()
        return sum(losses) / max(len(val_idx), 1)

    # 3-4. optimise
    policy.train()
    train_loss = float("nan")
    while run.keep_going(step):
        generator = torch.Generator().manual_seed(config.seed * 1_000_003 + run.rank * 7919 + step)
        pick = torch.randint(0, len(train_idx), (config.batch_size,), generator=generator).numpy()
        items = _collate(dataset, train_idx[pick])
        for key in ("image", "wrist_image"):
            if key in items:
                items[key][:, -1] = random_shift(items[key][:, -1], config.augment_shift, generator)
        loss, logs = policy.imitation_loss(policy.preprocess(window_obs(items, obs_keys)),
                                           items["actions"].to(device), items["action_mask"].to(device))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"the BC loss became {loss.item()} at step {step}; lower --lr")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        average_gradients(policy, run.dist)
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), 10.0)
        optimizer.step()
        schedule.step()
        step += 1
        train_loss = logs["loss"]
        run.log_train(step, {"loss": loss, "grad_norm": grad_norm, **logs, "lr": schedule.get_last_lr()[0]})
        if len(val_idx) and (step % config.val_every == 0 or step == config.steps):
            run.log(step, {"val/loss": validation_loss()})
        if step % config.checkpoint_every == 0:
            checkpoint()
    if step % config.checkpoint_every:  # the last step's checkpoint, unless the loop just wrote it
        checkpoint()
    summary = run.summary(policy) | {
        "train_samples": int(len(train_idx)), "val_samples": int(len(val_idx)),
        "train_episodes": int(len(train_eps)), "val_episodes": int(len(val_eps)), "train_loss": train_loss,
        "val_loss": validation_loss() if len(val_idx) else float("nan")}

    result = f"final loss {train_loss:.4f}, validation loss {summary['val_loss']:.4f}"

    # 5. roll out
    if config.eval_episodes and run.is_main:
        from worldsim.evaluation.evaluate import evaluate_policy

        policy.eval()
        results = evaluate_policy(policy, list(dataset.tasks), config.eval_episodes, seed=config.seed + 10_000,
                                  videos=2, video_dir=config.out / "videos", name=str(config.out))
        evaluation = results.to_json()
        write_json(config.out / "eval.json", evaluation)
        summary |= {"success_rate": results.success_rate, "success_ci95": evaluation["pooled_ci95"],
                    "per_task_success": {k: r.success_rate for k, r in results.tasks.items()}}
        result += f"; {success_text(evaluation)}"
    return run.finish(summary, result)
