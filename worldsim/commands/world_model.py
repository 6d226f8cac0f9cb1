"""World-model commands: ``worldsim train-wm``, ``worldsim eval-wm`` and ``worldsim imagine``.

    worldsim train-wm --data data/push.h5 --config tiny --out runs/wm_push
    worldsim eval-wm --world-model runs/wm_push --data data/push_val.h5
    worldsim imagine --world-model runs/wm_push --data data/push_val.h5 --policy expert --episodes 8 \\
                     --out runs/wm_push/imagined.mp4
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.table import Table

from worldsim.world_models.train import MODEL_DIR, TrainWMConfig


def train_wm(config: TrainWMConfig) -> None:
    """Train a world model on recorded episodes, or fine-tune one.

    The model predicts the next frame (diffusion), the proprio and success; --init fine-tunes an
    existing model on new episodes."""
    from worldsim.world_models.train import train_world_model

    summary = train_world_model(config)
    Console().print(summary)
    Console().print(f"world model -> {config.out / MODEL_DIR}")


@dataclass
class EvalWMArgs:
    world_model: Path
    """World model folder or train-wm run."""
    data: Path
    """Held-out episode file (not the one trained on)."""
    episodes: int | None = None
    """Use only the file's first N episodes (of the model's tasks)."""
    horizon: int = 32
    """Imagined steps of the PSNR/SSIM curves."""
    out: Path | None = None
    """Folder for fidelity.json, error_growth.png and videos (default: <world-model>/eval)."""
    videos: int = 4
    """Side-by-side videos of full replays."""
    success_threshold: float | None = None
    """Success probability at or above which an imagined frame is a success (default: the
    model's, calibrated by train-wm)."""
    sampling_steps: int | None = None
    """Denoising steps per frame (default: the model's)."""
    seed: int = 0
    """Seed of the diffusion noise and of the keyframe choice."""
    torch_threads: int | None = None
    """CPU threads for torch (default: torch's choice)."""


def eval_wm(args: EvalWMArgs) -> None:
    """Measure a world model's fidelity on held-out episodes.

    Open-loop replays of the real actions from episode starts and from keyframes: PSNR and SSIM
    per step, success agreement, a plot of error growth and side-by-side videos."""
    import numpy as np
    import torch

    from worldsim.world_models.evaluate import evaluate_world_model

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    if args.horizon < 1:
        raise ValueError(f"--horizon {args.horizon} must be >= 1")
    out = args.out or args.world_model / "eval"
    report = evaluate_world_model(args.world_model, args.data, episodes=args.episodes, horizon=args.horizon,
                                  success_threshold=args.success_threshold,
                                  sampling_steps=args.sampling_steps, seed=args.seed, out=out,
                                  videos=args.videos)
    table = Table(title=f"{args.world_model} on {args.data} ({report['episodes']} episodes)")
    for column in ("start", "replays", "PSNR@1", "PSNR@8", f"PSNR@{args.horizon}", "SSIM@8"):
        table.add_column(column, justify="left" if column == "start" else "right")
    at8 = min(8, args.horizon) - 1
    for name in ("episode_start", "keyframe"):
        part = report[name]
        if part["replays"]:
            table.add_row(name.replace("_", " "), str(part["replays"]), f"{part['psnr'][0]:.2f}",
                          f"{part['psnr'][at8]:.2f}", f"{part['psnr'][-1]:.2f}", f"{part['ssim'][at8]:.3f}")
    console = Console()
    console.print(table)
    s, on_real = report["success"], report["success_head_on_real_frames"]["episode"]
    by_horizon = ", ".join(f"{h}: {r['accuracy']:.1%}" for h, r in report["success_by_horizon"].items())
    console.print(f"success agreement at threshold {report['success_threshold']:.3f}: accuracy "
                  f"{s['accuracy']:.1%}, precision {s['precision']:.1%}, recall {s['recall']:.1%} over "
                  f"{s['episodes']} episodes; accuracy by horizon (last h steps replayed): {by_horizon}; "
                  f"the head on the real frames: {on_real['accuracy']:.1%} -> {out}")
    objects = report["object_error"]
    if objects is not None:
        console.print("task object position error (median, cm on the table): imagined "
                      f"{objects['imagined_cm'][1]:.1f} at step 1, {objects['final_imagined_cm']:.1f} at the "
                      f"episode's end; the detector on the real frames: {np.median(objects['real_cm']):.1f}")


@dataclass
class ImagineArgs:
    world_model: Path
    """World model folder or train-wm run."""
    data: Path
    """Episode file whose episodes give the starts (and the replayed actions)."""
    policy: Literal["expert"] | Path = "expert"
    """"expert": replay the recorded actions; else a pixel policy checkpoint or run folder."""
    episodes: int = 8
    """Episodes to imagine (the file's first ones of the model's tasks)."""
    out: Path = Path("runs/imagined.mp4")
    """Video path (.mp4, or .gif): the episodes one after another."""
    horizon: int | None = None
    """Imagined steps per episode (default: the longest episode of the selection)."""
    sampling_steps: int | None = None
    """Denoising steps per frame (default: the model's)."""
    seed: int = 0
    """Seed of the diffusion noise."""
    torch_threads: int | None = None
    """CPU threads for torch (default: torch's choice)."""


def imagine(args: ImagineArgs) -> None:
    """Imagine episodes from real starts, saved beside the recorded ones.

    With --policy expert the recorded actions of each episode are replayed in imagination from
    its first frame; with a pixel policy checkpoint the policy acts on the imagined frames (the
    left column then shows the recorded episode from the same start, for reference)."""
    import torch

    from worldsim.evaluation.imagine import imagine_episodes

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    result = imagine_episodes(args.world_model, args.data, args.out, policy=args.policy,
                              episodes=args.episodes, horizon=args.horizon,
                              sampling_steps=args.sampling_steps, seed=args.seed)
    Console().print(f"{result.episodes} episodes, imagined success {result.imagined_success:.0%} "
                    f"(recorded: {result.recorded_success:.0%}) -> {result.path}")
