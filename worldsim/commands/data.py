"""Data commands: ``worldsim collect`` and ``worldsim dataset-info``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import tyro
from rich.console import Console
from rich.table import Table

from worldsim.data.collect import CollectConfig


def collect(config: CollectConfig) -> None:
    """Record episodes of a policy to an HDF5 episode file.

    The policy is the scripted expert or a checkpoint; with --record-features each step also
    stores the policy's features and sampled action chunks, for failure detectors."""
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
    from worldsim.data.datasets import EpisodeReader

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
