"""Environment commands: ``worldsim list-envs`` and ``worldsim render``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from worldsim.envs.tasks import SUITES, TASKS, get_suite


@dataclass
class ListEnvsArgs:
    suite: str | None = None
    """Only list the tasks of this suite."""


def list_envs(args: ListEnvsArgs) -> None:
    """Print the registered tasks and the suites with their splits.

    Each task with its Gymnasium id, instruction and time limit; each suite with its seen and
    unseen tasks."""
    names = list(get_suite(args.suite).tasks) if args.suite else list(TASKS)
    table = Table(title=f"worldsim tasks ({len(names)})")
    table.add_column("id", no_wrap=True)
    table.add_column("instruction")
    table.add_column("steps", justify="right")
    for name in names:
        spec = TASKS[name]
        table.add_row(f"worldsim/{name}", spec.instruction, str(spec.max_episode_steps))
    console = Console()
    console.print(table)
    suites = Table(title="suites")
    for column in ("suite", "seen", "unseen"):
        suites.add_column(column)
    for suite in SUITES.values():
        suites.add_row(suite.name, ", ".join(suite.seen), ", ".join(suite.unseen))
    console.print(suites)


@dataclass
class RenderArgs:
    task: tuple[str, ...] = ()
    """Task to show, e.g. PushCube-v0 (repeat --task for several, one after another; default
    PushCube-v0; see `worldsim list-envs`)."""
    out: Path = Path("runs/render/expert.mp4")
    """Video path (.mp4, or .gif; a .gif beside it when ffmpeg is unavailable)."""
    episodes: int = 1
    """Consecutive episodes per task."""
    seed: int = 0
    """Seed of each task's first episode; episode k uses seed + k."""
    size: int = 256
    """Frame side in pixels."""
    wrist: bool = False
    """Show the wrist camera beside the front camera."""


def render(args: RenderArgs) -> None:
    """Roll out the scripted expert on tasks and save the episodes as a video."""
    from worldsim.evaluation.render import render_expert

    tasks = args.task or ("PushCube-v0",)
    path, results = render_expert(tasks, args.out, args.episodes, args.seed, args.size, args.wrist)
    console = Console()
    for task, episodes in results.items():
        for r in episodes:
            console.print(f"{task} seed {r.seed}: success={r.success} steps={r.steps} return={r.ret:.2f}")
    console.print(f"{len(results) * args.episodes} episodes -> {path}")
