"""World-model commands: ``worldsim train-wm``, ``worldsim eval-wm`` and ``worldsim imagine``.

    worldsim train-wm --data data/push.h5 --preset tiny --out runs/wm_push
    worldsim eval-wm --world-model runs/wm_push --data data/push_val.h5
    worldsim imagine --world-model runs/wm_push --data data/push_val.h5 --policy expert --episodes 8 \\
                     --out runs/wm_push/imagined.mp4
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from rich.console import Console
from rich.table import Table

from worldsim.envs.imagination import ImaginationConfig
from worldsim.runtime.threads import use_torch_threads
from worldsim.runtime.validation import check_int
from worldsim.world_models.train import MODEL_DIR, TrainWMConfig

REPLAYS_SET = ("world_model", "keyframes", "keyframe_ratio", "horizon", "reward_type")
"""The imagination settings an open-loop replay does not read, or takes from its own arguments."""


def train_wm(config: TrainWMConfig) -> None:
    """Train a world model on recorded episodes, or fine-tune one.

    The model predicts the next frame (diffusion), the proprio and success; --init fine-tunes an
    existing model on new episodes. The run takes --steps optimiser steps (--time-budget is a
    safety net that stops it sooner, with a warning) and prints its validation loss and PSNR; the
    figures are in summary.json. A non-empty --out is refused unless --overwrite (start afresh) or
    --resume (continue it)."""
    from worldsim.world_models.train import train_world_model

    train_world_model(config)
    Console().print(f"world model -> {config.out / MODEL_DIR}")


@dataclass
class EvalWMArgs:
    SET_BY_COMMAND: ClassVar[dict[str, tuple[str, ...]]] = {"imagination": REPLAYS_SET}
    """The replays start at the held-out episodes' own starts and run their recorded actions."""
    COMMAND_LINE: ClassVar[tuple[str, ...]] = ("world_model", "data", "episodes", "balance", "curve_steps", "out",
                                               "videos", "policy", "seed", "torch_threads", "imagination")
    """The fields that are flags; the rest a config file sets."""

    world_model: Path
    """World model folder or train-wm run."""
    data: Path
    """Held-out episode file (not the one trained on)."""
    episodes: int | None = None
    """Use only the file's first N episodes (of the model's tasks)."""
    balance: bool = False
    """Keep as many failed as successful episodes (base rate 50%), chosen at random."""
    near_miss: float = 0.04
    """Metres: a failed episode whose task object came this close to its goal is a near miss."""
    curve_steps: int = 32
    """Imagined steps of the PSNR/SSIM curves."""
    out: Path | None = None
    """Folder for fidelity.json, confusion.md, error_growth.png and videos (default: <world-model>/eval)."""
    videos: int = 4
    """Side-by-side videos of full replays."""
    policy: Path | None = None
    """A pixel policy (folder or training run): also measure its action gap, how far its actions
    on the imagined frames lie from its actions on the real ones (beside how much they move
    from one real step to the next)."""
    seed: int = 0
    """Seed of the diffusion noise and of the keyframe choice."""
    physics_ceiling: bool = True
    """Also replay the held-out episodes in physics from their recorded starts, the task's cube a
    fraction of a millimetre off: the agreement physics itself reaches (needs state in --data)."""
    torch_threads: int | None = None
    """CPU threads for torch (default: torch's choice)."""
    imagination: ImaginationConfig = field(default_factory=ImaginationConfig)
    """How the replays imagine: the rung (its fidelity figures; oracle's are an upper bound, not the
    model's frames), the judge, the success threshold and sampling steps (default: the model's)."""

    def __post_init__(self) -> None:
        check_int("curve_steps", self.curve_steps)
        check_int("videos", self.videos, 0)
        check_int("episodes", self.episodes, optional=True)


def eval_wm(args: EvalWMArgs) -> None:
    """Measure a world model's fidelity on held-out episodes.

    Open-loop replays of the real actions from episode starts and from keyframes: PSNR, SSIM and
    the gripper's error per step, success agreement, a plot of error growth and side-by-side videos."""
    import numpy as np

    from worldsim.world_models.evaluate import ceiling_label, evaluate_world_model

    use_torch_threads(args.torch_threads)
    out = args.out or args.world_model / "eval"
    report = evaluate_world_model(args.world_model, args.data, episodes=args.episodes, balance=args.balance,
                                  near_miss_m=args.near_miss, curve_steps=args.curve_steps,
                                  imagination=args.imagination, policy=args.policy, seed=args.seed,
                                  physics_ceiling=args.physics_ceiling, out=out, videos=args.videos)
    held = report["held_out"]
    table = Table(title=f"{args.world_model} on {args.data} ({held['episodes']} episodes, {held['successes']} "
                        f"successes, base rate {held['base_rate']:.0%})")
    for column in ("start", "replays", "PSNR@1", "PSNR@8", f"PSNR@{args.curve_steps}", "SSIM@8",
                   f"gripper cm@{args.curve_steps}"):
        table.add_column(column, justify="left" if column == "start" else "right")
    for name in ("episode_start", "keyframe"):
        part = report[name]
        if part["replays"]:
            at8 = min(8, len(part["psnr"])) - 1
            table.add_row(name.replace("_", " "), str(part["replays"]), f"{part['psnr'][0]:.2f}",
                          f"{part['psnr'][at8]:.2f}", f"{part['psnr'][-1]:.2f}", f"{part['ssim'][at8]:.3f}",
                          f"{part['gripper_cm'][-1]:.2f}")
    agreement = Table(title=f"imagined vs real outcome (threshold {report['success_threshold']:.3f})")
    for column in ("replays", "episodes", "base rate", "accuracy", "balanced accuracy"):
        agreement.add_column(column, justify="left" if column == "replays" else "right")
    for name, a in report["success_by_horizon"].items():
        if a is not None:
            agreement.add_row(name, str(a["episodes"]), f"{a['base_rate']:.0%}", f"{a['accuracy']:.1%}",
                              f"{a['balanced_accuracy']:.1%}")
    for name, a in (report["physics_ceiling"] or {}).items():
        agreement.add_row(f"full, physics itself ({ceiling_label(name)})", str(a["episodes"]),
                          f"{a['base_rate']:.0%}", f"{a['accuracy']:.1%}", f"{a['balanced_accuracy']:.1%}")
    console = Console()
    console.print(table)
    console.print(agreement)
    on_real = report["success_head_on_real_frames"]["episode"]
    console.print(f"the success head on the real frames: {on_real['accuracy']:.1%} -> {out}")
    if args.policy is not None:
        console.print(f"{args.policy}'s action gap, imagined vs real frames (mean L2, action units): "
                      f"{report['action_gap_at_8']:.3f} over steps 1-8, {report['action_gap_at_horizon']:.3f} over "
                      f"1-{args.curve_steps}; its action moves {report['step_change_mean']:.3f} per real step")
    contact = report["object_error_after_contact"]
    if contact is not None:
        console.print(f"task object position error after first contact (median of {contact['replays']} replays, "
                      f"cm on the table): {contact['at_horizon_cm']:.1f} at step {len(contact['imagined_cm']) - 1}; "
                      f"the detector on the real frames: {np.nanmedian(contact['real_cm']):.1f}")


@dataclass
class ImagineArgs:
    SET_BY_COMMAND: ClassVar[dict[str, tuple[str, ...]]] = {"imagination": REPLAYS_SET}
    """The episodes start at the file's own episode starts."""

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
    steps: int | None = None
    """Imagined steps per episode (default: the longest episode of the selection)."""
    seed: int = 0
    """Seed of the diffusion noise."""
    torch_threads: int | None = None
    """CPU threads for torch (default: torch's choice)."""
    imagination: ImaginationConfig = field(default_factory=ImaginationConfig)
    """How the video imagines: the rung (pixels, video, sim-seeded, or oracle: the scene's renderer,
    not the model's frames), the judge, the success threshold and sampling steps."""


def imagine(args: ImagineArgs) -> None:
    """Imagine episodes from real starts, saved beside the recorded ones.

    With --policy expert the recorded actions of each episode are replayed in imagination from
    its first frame; with a pixel policy checkpoint the policy acts on the imagined frames (the
    left column then shows the recorded episode from the same start, for reference)."""

    from worldsim.evaluation.imagine import imagine_episodes

    use_torch_threads(args.torch_threads)
    result = imagine_episodes(args.world_model, args.data, args.out, policy=args.policy, episodes=args.episodes,
                              steps=args.steps, imagination=args.imagination, seed=args.seed)
    Console().print(f"{result.episodes} episodes, imagined success {result.imagined_success:.0%} "
                    f"(recorded: {result.recorded_success:.0%}) -> {result.path}")
