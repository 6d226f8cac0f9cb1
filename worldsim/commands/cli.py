"""The ``worldsim`` command line: one subcommand per dataclass below (``worldsim --help``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro
from rich.console import Console
from rich.table import Table

from worldsim.training.bc import BCConfig
from worldsim.pipelines.coevolve import Coevolve
from worldsim.data.collect import Collect
from worldsim.data.datasets import DatasetInfo
from worldsim.envs.tasks import SUITES, TASKS, get_suite, get_task
from worldsim.failure.detect import Detect
from worldsim.pipelines.quickstart import Quickstart
from worldsim.evaluation.rank import RankPolicies
from worldsim.commands.train_rl import TrainRL
from worldsim.commands.world_model import EvalWM, Imagine, TrainWM

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
        from worldsim.evaluation.render import expert_episodes
        from worldsim.runtime.video import check_video_path, write_video

        spec = get_task(self.task)
        check_video_path(self.out)
        frames, results = expert_episodes(spec.name, self.episodes, self.seed, self.size, self.wrist)
        path = write_video(self.out, frames, fps=20)
        for r in results:
            console.print(f"seed {r.seed}: success={r.success} steps={r.steps} return={r.ret:.2f}")
        console.print(f"[bold]{spec.instruction}[/] -> {path} ({len(frames)} frames)")


def tasks_for(policy, task: tuple[str, ...], suite: str | None, split: str) -> list[str]:
    """The tasks named by ``--task``/``--suite``, else those ``policy`` was trained on."""
    from worldsim.evaluation.evaluate import trained_tasks

    if task or suite:
        names = [get_task(t).name for t in task]
        if suite:
            s = get_suite(suite)
            names += list({"all": s.tasks, "seen": s.seen, "unseen": s.unseen}[split])
        return list(dict.fromkeys(names))
    return trained_tasks(policy)


@dataclass
class Evaluate:
    """Roll a policy out on tasks: success rate per task with 95% intervals, videos, JSON."""

    policy: str
    """A policy checkpoint or run folder (e.g. runs/bc_push), or "expert" for the scripted expert."""
    task: Annotated[tuple[str, ...], tyro.conf.UseAppendAction] = ()
    """Task to evaluate (repeat --task for several; default: the tasks the policy was trained on)."""
    suite: str | None = None
    """Evaluate every task of this suite (see `worldsim list-envs`)."""
    split: Literal["all", "seen", "unseen"] = "all"
    """Which tasks of --suite."""
    episodes: int = 100
    """Episodes per task."""
    num_envs: int = 50
    """Parallel envs."""
    seed: int = 0
    """Seed of the first task's envs (task k uses seed + k)."""
    stochastic: bool = False
    """Sample actions instead of taking the policy's mean."""
    execute_steps: int | None = None
    """Actions executed per predicted chunk before re-planning (default: the whole chunk)."""
    video: bool = False
    """Record the first 3 episodes of each task as mp4."""
    video_dir: Path | None = None
    """Where videos go (default: next to --json, else ./eval_videos)."""
    json: Path | None = None
    """Write the results (success_rate, per-task rates, intervals, episode count) here."""

    def run(self) -> None:
        from worldsim.evaluation.evaluate import EvalResults, results_table
        from worldsim.policies import ScriptedExpert, ScriptedExpertConfig, load_policy
        from worldsim.runtime.run_logging import write_json

        if self.episodes < 1 or self.num_envs < 1:
            raise ValueError(f"--episodes ({self.episodes}) and --num-envs ({self.num_envs}) must be >= 1")
        if self.policy == "expert":
            if not (self.task or self.suite):
                raise ValueError("--policy expert needs --task or --suite")
            tasks = tasks_for(None, self.task, self.suite, self.split)
            per_task = {}
            for k, name in enumerate(tasks):
                expert = ScriptedExpert(ScriptedExpertConfig(name, seed=self.seed))
                per_task.update(self._evaluate(expert, [name], self.seed + k).tasks)
            merged = EvalResults("expert", self.seed, not self.stochastic, per_task)
        else:
            policy = load_policy(self.policy)
            merged = self._evaluate(policy, tasks_for(policy, self.task, self.suite, self.split), self.seed)
            merged.policy = self.policy
        console.print(results_table(merged))
        if self.json:
            write_json(self.json, merged.to_json())
            console.print(f"results -> {self.json}")

    def _evaluate(self, policy, tasks: list[str], seed: int):
        from worldsim.evaluation.evaluate import evaluate_policy

        video_dir = self.video_dir or (self.json.parent / "videos" if self.json else Path("eval_videos"))
        return evaluate_policy(policy, tasks, self.episodes, num_envs=self.num_envs, seed=seed,
                               deterministic=not self.stochastic, execute_steps=self.execute_steps,
                               videos=3 if self.video else 0, video_dir=video_dir)


@dataclass
class TrainBC(BCConfig):
    """Train TinyVLA by behaviour cloning on recorded episodes (runs under torchrun too)."""

    def run(self) -> None:
        from worldsim.training.bc import train_bc

        summary = train_bc(self)
        console.print({k: v for k, v in summary.items() if k != "per_task_success"})
        console.print(f"policy -> {self.out / 'policy'}")


COMMANDS = {"quickstart": Quickstart, "list-envs": ListEnvs, "render": Render, "evaluate": Evaluate,
            "train-bc": TrainBC,
            "collect": Collect, "dataset-info": DatasetInfo, "train-rl": TrainRL,
            "detect": Detect, "train-wm": TrainWM, "imagine": Imagine, "eval-wm": EvalWM,
            "coevolve": Coevolve, "rank-policies": RankPolicies}


def main(argv: list[str] | None = None) -> int:
    command = tyro.extras.subcommand_cli_from_dict(
        COMMANDS, args=argv, description="worldsim: robot-learning environments and world models")
    try:
        command.run()
    except (KeyError, ValueError, FileExistsError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        console.print(f"[red]error:[/] {message}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
