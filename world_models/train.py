"""Training a world model on recorded episodes (``worldsim train-wm``).

Read top to bottom, :func:`train_world_model` is the recipe:

1. load the episodes of the chosen tasks into memory and split them by episode into train
   and validation sets (:class:`~worldsim.world_models.data.EpisodeBank`);
2. build a new model of the ``model`` architecture (by default the ``tiny`` preset, for a CPU;
   ``base`` is the one for a GPU; ``video-tiny`` and ``video-base`` the video transformer's) with
   the proprio statistics of the training episodes, its video transformer started from a
   pretrained diffusers Wan folder (``init_from``) if given, or load a worldsim model to
   fine-tune (``init``: the co-evolution path; the model keeps its architecture and
   normalisation, its tasks must cover the data's);
3. take ``steps`` AdamW steps on the sum of the denoising and (``success_weight`` times)
   success losses over random windows, a ``success_fraction`` share of them ending in a
   success frame, with linear warm-up and cosine decay of the learning rate; each step also
   takes a step of the low-dimensional dynamics' own optimiser (the proprio dynamics and the
   object pathway) on a large batch of state windows rolled out on their own predictions
   (:meth:`~worldsim.world_models.model.WorldModel.dynamics_loss`);
4. every ``val_every`` steps log the validation loss and the open-loop PSNR after
   ``val_horizon`` imagined steps; every ``video_every`` steps write a side-by-side video
   (real | imagined) of a validation episode to ``out/videos/``; every ``checkpoint_every``
   steps save ``out/world_model/`` and the training state (resumable exactly);
5. at the end, calibrate the model's ``success_threshold``: replay
   every validation episode open loop from its start, take each one's highest imagined success
   probability, and keep the threshold that best separates the successful episodes from the
   failed ones (:func:`~worldsim.world_models.evaluate.calibrate_threshold`); it is saved with
   the model. Without validation episodes of both outcomes the threshold stays as it was; with
   ``outcome="rule"`` there is nothing to calibrate (the task's rule decides).

Each minibatch is drawn, and its noise sampled, from generators seeded by (seed, rank, step) (the
noise's lives on the training device), so a resumed run draws the same batches as an
uninterrupted one and ranks under ``torchrun`` draw different ones; batches are gathered on the
device from a copy of the episodes there (:meth:`EpisodeBank.tensors`);
gradients are averaged across ranks before every step (DistributedDataParallel's recipe). The
run around it (the ``out`` rule, ``torchrun``, seeds, checkpoints, the step budget and the
``time_budget`` safety net, ``summary.json``) is a :class:`~worldsim.runtime.run.TrainingRun`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from worldsim.data.index import split_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.envs.imagination import ImaginationConfig, replay_rung
from worldsim.envs.tasks import get_task
from worldsim.runtime.distributed import broadcast_module
from worldsim.runtime.run import TrainingRun
from worldsim.runtime.run_logging import to_jsonable
from worldsim.runtime.settings import RunSettings
from worldsim.runtime.validation import check_choice, check_int, check_number, check_range, positive_ints
from worldsim.world_models.config import PRESETS, WorldModelConfig, build_config
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.model import MODEL_DIR, WorldModel
from worldsim.world_models.train_step import (
    StepGraph,
    copied,
    draw,
    draw_step,
    optimisers,
    prepare_optimizer,
    state_windows,
    take_step,
)

WARMUP_STEPS = 100
# how often (steps) the losses are read back from the device: logged, and checked for NaN
FINITE_CHECK_EVERY = 25
# Settings a resumed run must share with the run that wrote the checkpoint ("model": the built model's architecture).
RESUME_FIELDS = ("data", "task", "init", "init_from", "precision", "batch_size", "seed", "val_fraction", "model",
                 "success_fraction", "success_weight")
Preset = Literal["tiny", "base", "video-tiny", "video-base"]


@dataclass
class TrainWMConfig(RunSettings):
    """World-model training (``worldsim train-wm``): a new model of the ``preset`` architecture (with
    the ``model`` changes), or ``init`` fine-tuned; the run settings are
    :class:`~worldsim.runtime.run.RunSettings`."""

    COMMAND_LINE: ClassVar[tuple[str, ...]] = (
        "data", "preset", "task", "init", "init_from", "state_supervision", "precision", "steps", "batch_size", "lr",
        "compile", "cuda_graph")
    """The fields that are flags (with the run settings'); the rest a config file sets."""

    data: Path
    """HDF5 episode file with image and proprio observations (``worldsim collect``)."""
    out: Path = field(default=Path("runs/wm"), kw_only=True)
    """Run folder: config, metrics, curves, videos, checkpoint, world_model/."""
    preset: Preset = "tiny"
    """A new model's architecture (:data:`~worldsim.world_models.config.PRESETS`): ``tiny`` or
    ``video-tiny`` (the video transformer) on a CPU, ``base`` or ``video-base`` on a GPU; its tasks,
    instructions and image size come from the data."""
    model: dict[str, Any] = field(default_factory=dict)
    """Changes to the preset's architecture, table by table as a config file's ``[model]`` gives them
    (e.g. ``[model.frames]`` ``anchor = "last"``; :func:`~worldsim.world_models.config.build_config`)."""
    task: tuple[str, ...] = ()
    """Train only on this task of the file (repeat --task for several; default: all)."""
    init: Path | None = None
    """Fine-tune this world model (folder or train-wm run), which keeps its architecture, instead of building one."""
    init_from: Path | None = None
    """Start the new model's video transformer (``--preset video-tiny`` or ``video-base``) from this
    diffusers-format ``WanTransformer3DModel`` folder (or a pipeline folder holding one in
    ``transformer/``): its size comes from the folder, its weights are loaded where they fit,
    and the layers that read worldsim's frames and conditioning are new."""
    state_supervision: bool = True
    """Learn from the data's simulator ``state`` too (the object pathway's positions, the detector's
    keypoints, the goal offset). False: frames, proprio, actions and success flags only, as from a
    real robot's cameras: a model without the object pathway, judged by its success head (the
    ``video`` imagination rung's). Data without ``state`` always trains so."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """The frame loss's arithmetic: ``bf16`` runs it under ``torch.autocast`` in bfloat16 (GPUs
    from Ampere on: about half the memory of activations); the weights and the optimiser stay fp32."""
    steps: int = 4000
    """Optimiser steps: the run's budget."""
    batch_size: int = 32
    """Windows per minibatch per process."""
    lr: float = 1e-3
    """AdamW learning rate (linear warm-up, cosine decay to 10%)."""
    weight_decay: float = 1e-5
    """AdamW weight decay."""
    success_fraction: float = 0.25
    """Share of each minibatch's windows that end in a success frame (the rest are uniform)."""
    success_weight: float = 1.0
    """Weight of the success head's loss in the total."""
    val_fraction: float = 0.1
    """Share of episodes held out for validation."""
    val_every: int = 250
    """Steps between validation figures."""
    val_horizon: int = 8
    """Imagined steps of the open-loop validation PSNR."""
    video_every: int = 1000
    """Steps between sample videos (0: none)."""
    video_steps: int = 32
    """Imagined steps per sample video."""
    checkpoint_every: int = 500
    """Steps between checkpoints."""
    compile: Literal["off", "default", "reduce-overhead"] = "off"
    """``torch.compile`` the step's losses (forward and backward) in this mode: on a GPU, where
    the uncompiled step is bound by launching its ~6,000 operations one by one, they run as fused
    kernels. ``default``: fused kernels, alone or with ``cuda_graph`` (the fastest setting on one
    GPU); ``reduce-overhead``: each loss also replayed as its own CUDA graphs, for runs
    ``cuda_graph`` does not take (several processes under torchrun). The first steps compile
    (minutes); on a CPU compiling gains little."""
    cuda_graph: bool = False
    """Record the whole training step once as a CUDA graph and replay it (a CUDA device, one
    process): the host then launches one graph per step instead of its ~6,000 operations, so a
    GPU is not left waiting on Python. Combines with ``compile="default"``, not with
    ``reduce-overhead`` (which records each loss as a graph of its own)."""

    def __post_init__(self) -> None:
        self.data = Path(self.data)
        self.init = None if self.init is None else Path(self.init)
        self.init_from = None if self.init_from is None else Path(self.init_from)
        self.task = tuple(self.task)
        positive_ints(self, ("steps", "batch_size", "val_every", "val_horizon", "video_steps", "checkpoint_every"))
        check_int("video_every", self.video_every, 0, note="0: no videos")
        check_range("success_fraction", self.success_fraction, 0.0, 1.0, integer=False)
        check_number("success_weight", self.success_weight)
        check_range("val_fraction", self.val_fraction, 0.0, 1.0, integer=False, high_open=True)
        check_number("lr", self.lr, strict=True)
        check_choice("preset", self.preset, PRESETS)
        if self.cuda_graph and self.compile == "reduce-overhead":
            raise ValueError("cuda_graph=True records the whole step as one CUDA graph; compile='reduce-overhead' "
                             "records each loss as its own: give compile='default' (fused kernels) or 'off' with it")
        self.check_run()
        if not self.data.is_file():
            raise ValueError(f"data={str(self.data)!r}: no such file")
        architecture = self.architecture  # checked now, with its reason, rather than after loading the data
        if self.init is not None and (self.model or not self.state_supervision):
            raise ValueError("model changes and state_supervision=False shape a new model; with init the model keeps "
                             "its own")
        if self.init_from is not None and (self.init is not None or architecture.frames.backbone != "wan"):
            raise ValueError("init_from starts a new video transformer: give it with --preset video-tiny or "
                             "video-base, and without --init (which fine-tunes a worldsim model as it is)")
        if getattr(architecture.frames, "lora_rank", 0) and self.init_from is None:
            raise ValueError("lora_rank adapts pretrained weights: give --init-from with it (a new model trains whole)")
        if self.init_from is not None:
            from worldsim.world_models.video_backbone import pretrained_folder

            pretrained_folder(self.init_from)

    @property
    def architecture(self) -> WorldModelConfig:
        """A new model's architecture: the preset with the ``model`` changes (the data's tasks,
        instructions and image size still to come)."""
        return build_config(self.preset, **self.model)


def build_model(config: TrainWMConfig, bank: EpisodeBank) -> WorldModel:
    """A new preset model for the bank's tasks and image size, or the ``init`` model checked
    against them."""
    size = bank.image_shape[0]
    if bank.image_shape[0] != bank.image_shape[1]:
        raise ValueError(f"data={str(config.data)!r} holds {bank.image_shape} images; world models take "
                         "square ones")
    if config.init is not None:
        model = WorldModel.from_pretrained(config.init)
        missing = [t for t in bank.tasks if t not in model.config.tasks]
        if missing:
            raise ValueError(f"init={str(config.init)!r} was trained on {', '.join(model.config.tasks)}; the "
                             f"data also holds {', '.join(missing)}: fine-tune on those tasks only "
                             "(--task) or train a new model")
        if model.config.image_size != size:
            raise ValueError(f"init={str(config.init)!r} imagines {model.config.image_size}-pixel frames; "
                             f"the data holds {size}-pixel images")
        return model.train()
    architecture = config.architecture
    if bank.state is None and config.state_supervision:
        # The object pathway learns from the objects' recorded positions; without them the model
        # is built without it rather than refusing data a model can still learn from.
        print(f"train-wm: data={str(config.data)!r} has no 'state' observation; the world model is built without "
              "its object pathway, its success judged by the learned head (collect with obs_mode='pixels+state' "
              "to have both)", file=sys.stderr)
    if bank.state is None or not config.state_supervision:
        architecture = architecture.without_state()
    if config.init_from is not None:
        from worldsim.world_models.video_backbone import WanFrames, pretrained_architecture

        frames = dataclasses.replace(architecture.frames, **pretrained_architecture(config.init_from))
        architecture = dataclasses.replace(architecture, frames=frames)
    model = WorldModel(dataclasses.replace(architecture, tasks=tuple(bank.tasks),
                                           instructions=tuple(bank.instructions[t] for t in bank.tasks),
                                           image_size=size))
    model.set_normalization(bank.proprio.mean(axis=0), bank.proprio.std(axis=0))
    if (camera := model.learn_scene(bank.images, bank.proprio, bank.obs_start, bank.state)) is not None:
        print(f"train-wm: {camera}", file=sys.stderr)
    if config.init_from is not None:
        assert isinstance(model.frames, WanFrames)  # init_from is checked to start a video transformer
        loaded = model.frames.video.load_pretrained(config.init_from)
        print(f"train-wm: video transformer from {str(config.init_from)!r}: {len(loaded['new'])} tensors new "
              f"({', '.join(sorted({n.split('.')[0] for n in loaded['new']})) or 'none'}), "
              f"{len(loaded['unused'])} of the folder's left out", file=sys.stderr)
    return model


def train_world_model(config: TrainWMConfig) -> dict[str, Any]:
    """Train (or fine-tune) a world model for ``config.steps`` steps (``time_budget`` may stop it
    sooner). Returns the summary, also ``out/summary.json``: ``steps`` done and ``steps_asked``,
    ``stopped_by`` (``"steps"`` or ``"time_budget"``), ``train_loss`` (the last step's), with
    validation episodes ``val/loss`` and ``val/psnr_<val_horizon>``, the calibrated success
    threshold, ``train_seconds``, ``world_size``, ``ranks_in_sync`` and ``out`` (the model)."""
    from worldsim.runtime.video import upscale, write_video
    from worldsim.world_models.metrics import psnr_curve
    from worldsim.world_models.replay import open_loop, side_by_side

    run = TrainingRun("train-wm", config)
    device = run.device

    # 1. data, split by episode
    with EpisodeReader(config.data) as reader:
        tasks = [get_task(t).name for t in config.task] or reader.tasks
        unknown = [t for t in tasks if t not in reader.tasks]
        if unknown:
            raise ValueError(f"task={unknown} not in data={str(config.data)!r}; it holds "
                             f"{', '.join(reader.tasks)}")
        indices = np.array([info.index for info in reader.episode_info() if info.task in tasks])
        train_pos, val_pos = split_episodes(len(indices), config.val_fraction, config.seed)
        train = EpisodeBank(reader, tasks=tasks, episodes=indices[train_pos])
        val = EpisodeBank(reader, tasks=tasks, episodes=indices[val_pos]) if len(val_pos) else None

    # 2. model
    model = build_model(config, train).to(device)
    for bank in (train, val):  # the objects' targets placed in the image through the model's own camera
        if bank is not None:
            bank.use_camera(model.camera)
    if not model.config.state_supervision:  # nothing in training may read the data's state
        train, val = train.without_state(), None if val is None else val.without_state()
    # validation replays start the objects as training saw them: at the recorded state when it supervised
    replaying = ImaginationConfig(rung=replay_rung(model, train))
    if config.compile != "off":
        compile_losses(model, config.compile)
    task_ids = {t: model.task_index(t) for t in train.tasks}
    if config.cuda_graph and (device.type != "cuda" or run.dist.world_size > 1):
        raise ValueError(f"cuda_graph=True records the step on one CUDA device; this run has {run.dist.world_size} "
                         f"process(es) on {device.type}")
    optimizer, dynamics_optimizer = optimisers(model, config.lr, config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, config.steps))
    dynamics_schedule = torch.optim.lr_scheduler.LambdaLR(dynamics_optimizer, lambda s: warmup_cosine(s, config.steps))
    step = 0
    state = run.restore({**to_jsonable(config), "model": to_jsonable(model.config)}, RESUME_FIELDS)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        dynamics_optimizer.load_state_dict(state["dynamics_optimizer"])
        dynamics_schedule.load_state_dict(state["dynamics_schedule"])
        step = state["step"]
    prepare_optimizer(optimizer, device, config.cuda_graph)
    prepare_optimizer(dynamics_optimizer, device, config.cuda_graph)
    broadcast_module(model, run.dist)
    run.start(config.steps, done=step)

    def checkpoint() -> None:
        run.save(model, MODEL_DIR, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                    "schedule": schedule.state_dict(),
                                    "dynamics_optimizer": dynamics_optimizer.state_dict(),
                                    "dynamics_schedule": dynamics_schedule.state_dict(), "step": step})

    val_starts = np.zeros(min(len(val), 8), np.int64) if val is not None else None

    @torch.no_grad()
    def validate() -> dict[str, float]:
        assert val is not None and val_starts is not None  # called only when there are validation episodes
        model.eval()
        windows, noise = generators(config.seed + 1, device)
        losses, dynamics_terms = [], []
        for _ in range(4):
            batch = draw(val, model, config.batch_size, config.success_fraction, task_ids, windows, device)
            losses.append(model.loss(batch, noise, config.success_weight)[0].item())
            terms = model.dynamics_loss(state_windows(val, model, task_ids, windows, device), noise)[1]
            dynamics_terms.append({name: value.item() for name, value in terms.items()})
        replay = open_loop(model, val, np.arange(len(val_starts)), val_starts, config.val_horizon,
                           generator=torch.Generator(device).manual_seed(config.seed + 2), imagination=replaying)
        model.train()
        figures = {"val/loss": float(np.mean(losses)), f"val/psnr_{config.val_horizon}": float(psnr_curve(replay)[-1])}
        for name in dynamics_terms[0]:  # val/proprio and, with the pathway, val/objects
            figures[f"val/{name}"] = float(np.mean([terms[name] for terms in dynamics_terms]))
        return figures

    def sample_video() -> None:
        model.eval()
        replay = open_loop(model, val if val is not None else train, np.arange(1), np.zeros(1, np.int64),
                           config.video_steps, generator=torch.Generator(device).manual_seed(config.seed + 3),
                           imagination=replaying)
        write_video(config.out / "videos" / f"step_{step:06d}.mp4", upscale(side_by_side(replay, 0)), fps=10)
        model.train()

    # 3-4. optimise. Nothing in a step reads a value back from the device, so the host can queue
    # steps ahead of a GPU, and the step can be recorded whole as a CUDA graph (train_step.py):
    # the losses are logged, and checked for NaN, every FINITE_CHECK_EVERY steps and before saving.
    model.train()
    train_loss = torch.tensor(float("nan"))
    unstable = torch.zeros((), dtype=torch.bool, device=device)

    def check_finite() -> None:
        if unstable.item():
            raise FloatingPointError(f"the world-model loss became non-finite by step {step}; lower --lr")

    def update(draws: dict[str, Any]) -> dict[str, torch.Tensor]:
        return take_step(model, optimizer, dynamics_optimizer, draws, config.success_weight, run.dist,
                         config.precision == "bf16")

    take = StepGraph(update) if config.cuda_graph else update
    while run.keep_going(step):
        windows, noise = generators(config.seed * 1_000_003 + run.rank * 7919 + step, device)
        logs = take(draw_step(model, train, config.batch_size, config.success_fraction, task_ids, windows, noise,
                              device))
        schedule.step()
        dynamics_schedule.step()
        step += 1
        train_loss = logs["loss"]
        unstable |= ~torch.isfinite(torch.stack(list(logs.values()))).all()
        if step % FINITE_CHECK_EVERY == 0 or step % config.checkpoint_every == 0:
            check_finite()
        run.log_train(step, {**logs, "lr": dynamics_schedule.get_last_lr()[0]}, every=FINITE_CHECK_EVERY)
        if run.is_main and val is not None and (step % config.val_every == 0 or step == config.steps):
            run.log(step, validate())
        if run.is_main and config.video_every and step % config.video_every == 0:
            sample_video()
        if step % config.checkpoint_every == 0:
            checkpoint()
    calibrated = False
    if run.is_main and val is not None and model.config.judge.outcome == "head":
        calibrated = calibrate_success_threshold(model, val, torch.Generator(device).manual_seed(config.seed + 4))
    check_finite()
    checkpoint()
    summary = run.summary(model) | {
        "train_episodes": len(train), "val_episodes": 0 if val is None else len(val),
        "parameters": model.num_parameters(),
        "trained_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "out": str(config.out / MODEL_DIR), "train_loss": train_loss.item(),
        "success_threshold": model.config.judge.success_threshold, "success_threshold_calibrated": calibrated}
    result = f"final loss {train_loss.item():.4f}"
    if run.is_main:
        if val is not None:
            summary.update(validate())
            psnr = summary[f"val/psnr_{config.val_horizon}"]
            result += f", validation loss {summary['val/loss']:.4f}, PSNR@{config.val_horizon} {psnr:.2f} dB"
        if config.video_every:
            sample_video()
    return run.finish(summary, result)


@torch.no_grad()
def calibrate_success_threshold(model: WorldModel, val: EpisodeBank, generator: torch.Generator) -> bool:
    """Set ``model.config.judge.success_threshold`` from full open-loop replays of the ``val``
    episodes (step 5 of the module docstring); False (unchanged) when they are all of one
    outcome, or when the best cut lies outside [0.1, 0.9]: the head then does not separate the
    imagined outcomes (a cut at 1e-6 would call nearly every imagined frame a success), and a
    probability of 0.5 stays the honest default."""
    from worldsim.world_models.metrics import calibrate_threshold, episode_scores
    from worldsim.world_models.replay import open_loop

    training = model.training
    model.eval()
    run = open_loop(model, val, np.arange(len(val)), np.zeros(len(val), np.int64), int(val.lengths.max()),
                    generator=generator, imagination=ImaginationConfig(rung=replay_rung(model, val)))
    model.train(training)
    scores, real = episode_scores(run)
    if real.all() or not real.any():
        return False
    threshold = calibrate_threshold(scores, real)
    if not 0.1 <= threshold <= 0.9:
        return False
    model.config.judge.success_threshold = threshold
    return True


def compile_losses(model: WorldModel, mode: str) -> None:
    """Compile the model's :meth:`~WorldModel.frame_loss` and :meth:`~WorldModel.dynamics_losses` (the
    arithmetic of a training step, its random draws made apart) with ``torch.compile`` in
    ``mode``, for fixed shapes (a run's batches all have the same). The weights, and what is
    saved, are the model's own."""
    # the gripper's servo target goes through array_api_compat, whose cached type checks dynamo
    # traces through correctly but warns about, once per helper
    warnings.filterwarnings("ignore", message="Dynamo detected a call to a `functools.lru_cache`")
    for name in ("frame_loss", "dynamics_losses"):
        compiled = torch.compile(getattr(model, name), mode=mode, dynamic=False)
        setattr(model, name, graph_safe(compiled) if mode == "reduce-overhead" else compiled)


def graph_safe(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` (replayed as CUDA graphs) called as a new graph step, its outputs copied: a
    replay reuses the memory of the last one's outputs, and the step keeps its losses' terms
    across several calls (two dynamics updates, logging every few steps)."""
    def call(*args: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return copied(compiled(*args))

    return call


def warmup_cosine(step: int, steps: int) -> float:
    """The learning-rate factor at ``step`` of ``steps``: a linear warm-up over WARMUP_STEPS, then a
    cosine decay to a tenth of the base rate."""
    warm = min(1.0, (step + 1) / WARMUP_STEPS)
    return warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps)))


def generators(seed: int, device: torch.device) -> tuple[torch.Generator, torch.Generator]:
    """A CPU generator that draws a batch's windows and one on ``device`` for its noise, both
    seeded by ``seed``: noise drawn on the data's device needs a generator there."""
    return torch.Generator().manual_seed(seed), torch.Generator(device).manual_seed(seed)
