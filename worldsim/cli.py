"""The ``worldsim`` command line: one subcommand per dataclass below (``worldsim --help``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import tyro
from rich.console import Console
from rich.table import Table

from worldsim.envs.tasks import SUITES, TASKS, get_suite, get_task

console = Console()


@dataclass
class ListEnvs:
    """Print the registered tasks (id, instruction, time limit) and the suites with their splits."""

    suite: str | None = None
    """Only list the tasks of this suite."""

    def run(self) -> None:
        names = list(get_suite(self.suite).tasks) if self.suite else list(TASKS)
        table = Table(title=f"worldsim tasks ({len(names)})")
        table.add_column("id", no_wrap=True)
        table.add_column("instruction")
        table.add_column("steps", justify="right")
        for name in names:
            spec = TASKS[name]
            table.add_row(f"worldsim/{name}", spec.instruction, str(spec.max_episode_steps))
        console.print(table)
        suites = Table(title="suites")
        for col in ("suite", "seen", "unseen"):
            suites.add_column(col)
        for s in SUITES.values():
            suites.add_row(s.name, ", ".join(s.seen), ", ".join(s.unseen))
        console.print(suites)


@dataclass
class Render:
    """Roll out the scripted expert on a task and save the episode(s) as a video."""

    task: str = "PushCube-v0"
    """Task name, e.g. PushCube-v0 (see `worldsim list-envs`)."""
    out: Path = Path("expert.mp4")
    """Video path (.mp4, or .gif)."""
    episodes: int = 1
    """Number of consecutive episodes in the video."""
    seed: int = 0
    """Seed of the first episode; episode k uses seed + k."""
    size: int = 256
    """Frame side in pixels."""
    wrist: bool = False
    """Show the wrist camera beside the front camera."""

    def run(self) -> None:
        from worldsim.render import expert_episodes
        from worldsim.video import check_video_path, write_video

        spec = get_task(self.task)
        check_video_path(self.out)
        frames, results = expert_episodes(spec.name, self.episodes, self.seed, self.size, self.wrist)
        path = write_video(self.out, frames, fps=20)
        for r in results:
            console.print(f"seed {r.seed}: success={r.success} steps={r.steps} return={r.ret:.2f}")
        console.print(f"[bold]{spec.instruction}[/] -> {path} ({len(frames)} frames)")


COMMANDS = {"list-envs": ListEnvs, "render": Render}


def main(argv: list[str] | None = None) -> int:
    command = tyro.extras.subcommand_cli_from_dict(
        COMMANDS, args=argv, description="worldsim: robot-learning environments and world models")
    try:
        command.run()
    except (KeyError, ValueError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        console.print(f"[red]error:[/] {message}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
