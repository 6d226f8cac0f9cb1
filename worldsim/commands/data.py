"""Data commands: ``worldsim collect``, ``worldsim dataset-info``, ``worldsim export`` and ``worldsim import``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tyro
from rich.console import Console
from rich.table import Table

from worldsim.data.collect import CollectConfig


def collect(config: CollectConfig) -> None:
    """Record episodes of a policy to an HDF5 episode file.

    The policy is the scripted expert or a checkpoint, in physics or, with --world-model and
    --keyframes, in imagination; with --record-features each step also stores the policy's
    features and sampled action chunks, for failure detectors."""
    from worldsim.data.collect import collect as collect_episodes

    stats = collect_episodes(config)
    table = Table(title=f"{config.out} ({stats.file_bytes / 2**20:.1f} MiB, {stats.seconds:.1f} s)")
    for column in ("task", "episodes", "success rate", "mean length", "steps/s"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for s in stats.tasks.values():
        table.add_row(s.task, str(s.episodes), f"{s.success_rate:.1%}", f"{s.mean_length:.1f}",
                      f"{s.steps_per_second:,.0f}")
    Console().print(table)


@dataclass
class DatasetInfoArgs:
    data: tyro.conf.Positional[Path]
    """The episode file (.h5) to describe."""


def dataset_info(args: DatasetInfoArgs) -> None:
    """Summarise an episode file: layout, and episodes and success per task.

    The layout is the observations and the recorded policy outputs; per task, the episodes,
    steps, mean length and success rate."""
    from worldsim.data.reader import EpisodeReader

    with EpisodeReader(args.data) as reader:
        summary = reader.summary()
        layout = ", ".join(f"{k} {reader.obs_shapes[k]}" for k in reader.obs_keys)
        outputs = ", ".join(f"{k} {shape}" for k, shape in reader.policy_shapes.items()) or "none"
        env_kwargs = reader.env_kwargs
    table = Table(title=f"{args.data} ({args.data.stat().st_size / 2**20:.1f} MiB)")
    for column in ("task", "episodes", "steps", "mean length", "success rate"):
        table.add_column(column, justify="left" if column == "task" else "right")
    rows = list(summary["tasks"].items())
    if len(rows) > 1:
        rows.append(("all", {"episodes": summary["episodes"], "steps": summary["steps"],
                             "mean_length": summary["steps"] / summary["episodes"],
                             "success_rate": summary["success_rate"]}))
    for task, s in rows:
        table.add_row(task, str(s["episodes"]), str(s["steps"]), f"{s['mean_length']:.1f}",
                      f"{s['success_rate']:.1%}")
    console = Console()
    console.print(table)
    console.print(f"observations: {layout}")
    console.print(f"policy outputs (per step): {outputs}")
    console.print(f"env kwargs: {json.dumps(env_kwargs, sort_keys=True)}")


@dataclass
class ExportArgs:
    data: Path
    """The worldsim episode file (.h5) to export."""
    out: Path
    """The dataset folder to write (it must not exist, unless --overwrite)."""
    format: Literal["lerobot"] = "lerobot"
    """Dataset format: lerobot."""
    codebase_version: Literal["v3.0", "v2.1"] = "v3.0"
    """LeRobot's dataset version: v3.0 (lerobot 0.4 and later) or v2.1 (lerobot 0.3)."""
    fps: int = 20
    """Frames per second recorded in the dataset (worldsim's control rate is 20 Hz)."""
    state: bool = True
    """Include the simulator's state (observation.environment_state) where the file holds it;
    --no-state leaves it out, so that a policy trained on the export reads what a real robot and
    an imagined env give (camera and proprioception)."""
    overwrite: bool = False
    """Replace an existing --out."""


def export(args: ExportArgs) -> None:
    """Write an episode file as a dataset in another format (LeRobot v3.0 or v2.1).

    Lossless: images are stored as PNG; everything worldsim records comes back on import."""
    from worldsim.data.lerobot import export_lerobot

    result = export_lerobot(args.data, args.out, fps=args.fps, version=args.codebase_version,
                            state=args.state, overwrite=args.overwrite)
    Console().print(f"{result.episodes} episodes, {result.frames} frames of {', '.join(result.tasks)} -> "
                    f"{result.path} (LeRobot {args.codebase_version})")


@dataclass
class ImportArgs:
    data: Path
    """The dataset folder to read (LeRobot v2.0, v2.1 or v3.0)."""
    out: Path
    """The worldsim episode file (.h5) to write."""
    format: Literal["lerobot"] = "lerobot"
    """Dataset format: lerobot."""
    task: str | None = None
    """worldsim task name of every episode (default: the one worldsim recorded, else the dataset's task)."""
    image_key: str | None = None
    """The dataset's front camera (default: observation.images.front, or its only camera)."""
    wrist_image_key: str | None = None
    """The dataset's wrist camera, if any."""
    proprio_key: str | None = None
    """The dataset's 4-d proprio (default: observation.state)."""
    state_key: str | None = None
    """The dataset's full low-dimensional state (default: observation.environment_state, if present)."""
    overwrite: bool = False
    """Replace an existing --out."""


def import_(args: ImportArgs) -> None:
    """Read a dataset of another format (LeRobot) into a worldsim episode file.

    The file then trains world models and policies like any recorded one."""
    from worldsim.data.lerobot import import_lerobot

    result = import_lerobot(args.data, args.out, task=args.task, overwrite=args.overwrite,
                            image_key=args.image_key, wrist_image_key=args.wrist_image_key,
                            proprio_key=args.proprio_key, state_key=args.state_key)
    Console().print(f"{result.episodes} episodes, {result.frames} frames of {', '.join(result.tasks)} -> "
                    f"{result.path}")
