"""Policy evaluation: per-task success rates with confidence intervals, videos, a results table.

:func:`evaluate_policy` runs a policy on each task for a fixed number of episodes, through the
rollout loop shared with collection (:mod:`worldsim.rollout`). Episodes are counted without
bias towards short ones: the first ``episodes`` episodes *started* are the ones counted, each
run to its end, however many parallel envs there are. Success rates come with a
95% Wilson score interval (``scipy.stats.binomtest``), which stays inside [0, 1] and is honest
at 0% and 100%.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
from scipy.stats import binomtest
from tqdm.auto import tqdm

from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.registration import make_task_envs
from worldsim.envs.tasks import TASKS, get_suite, get_task
from worldsim.policies.base import Policy
from worldsim.rollout import RolloutHooks, Step, run_episodes
from worldsim.runtime.threads import use_torch_threads
from worldsim.runtime.validation import check_int, positive_ints

if TYPE_CHECKING:
    from rich.table import Table

VIDEO_SIZE = 128


def wilson_interval(successes: int, episodes: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a success rate."""
    if episodes == 0:
        return (0.0, 1.0)
    ci = binomtest(int(successes), int(episodes)).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


@dataclass
class TaskResult:
    task: str
    instruction: str
    episodes: int
    successes: int
    success_rate: float
    ci95: tuple[float, float]
    mean_return: float
    mean_length: float
    failures: int  # episodes ended by a cube leaving the table
    videos: list[str] = field(default_factory=list)
    outcomes: list[bool] = field(default_factory=list)
    """Success of each counted episode, in start order: with a seed, episode k starts from the
    same state for every policy (:func:`worldsim.rollout.slot_seed`), so two policies' lists pair up."""


@dataclass
class EvalResults:
    """Everything an evaluation measured; :meth:`to_json` is what ``--json`` writes."""

    policy: str
    seed: int
    deterministic: bool
    tasks: dict[str, TaskResult]

    @property
    def episodes(self) -> int:
        return sum(r.episodes for r in self.tasks.values())

    @property
    def success_rate(self) -> float:
        """Mean of the per-task success rates (each task weighs the same)."""
        return float(np.mean([r.success_rate for r in self.tasks.values()]))

    def to_json(self) -> dict:
        successes = sum(r.successes for r in self.tasks.values())
        return {
            "policy": self.policy, "seed": self.seed, "deterministic": self.deterministic,
            "success_rate": self.success_rate, "episodes": self.episodes,
            "pooled_success_rate": successes / max(self.episodes, 1),
            "pooled_ci95": list(wilson_interval(successes, self.episodes)),
            "per_task": {name: {"success_rate": r.success_rate, "ci95": list(r.ci95), "episodes": r.episodes,
                                "successes": r.successes, "mean_return": r.mean_return,
                                "mean_length": r.mean_length, "failures": r.failures,
                                "instruction": r.instruction, "videos": r.videos, "outcomes": r.outcomes}
                         for name, r in self.tasks.items()},
        }


def trained_tasks(policy: Policy) -> list[str]:
    """The tasks ``policy`` was trained on, as its checkpoint records them (``config.tasks``, or the
    scripted expert's ``config.task``). A policy whose config names only its instructions (a
    TinyVLA config built by hand): each must then belong to one task, since tasks that share an instruction
    (PushCube-v0, PushCube-Row-v0) cannot be told apart. ``ValueError`` when the tasks are unknown."""
    config = policy.config
    if getattr(config, "tasks", ()):
        return list(config.tasks)
    if getattr(config, "task", None):
        return [get_task(config.task).name]
    instructions = getattr(config, "instructions", ())
    if not instructions:
        raise ValueError(f"{type(policy).__name__}'s checkpoint records no tasks it was trained on; name "
                         "them (--task, repeatable, or --suite)")
    names = []
    for instruction in instructions:
        matches = [name for name, spec in TASKS.items() if spec.instruction == instruction]
        if len(matches) != 1:
            found = f"is shared by {', '.join(matches)}" if matches else "belongs to no task"
            raise ValueError(f"this checkpoint records no task names, and its instruction "
                             f"{instruction!r} {found}; name the tasks (--task, repeatable, or --suite)")
        names += matches
    return names


class _Tally(RolloutHooks):
    """Evaluation's hooks: each counted episode's return, length, outcome and failure flag, and
    the frames of the first ``videos`` episodes (rendered only while one of them runs). Idle envs
    stand still (zero actions)."""

    def __init__(self, env: gym.vector.VectorEnv, episodes: int, videos: int, bar: tqdm) -> None:
        self.env, self.bar = env, bar
        self.returns = np.zeros(episodes)
        self.lengths = np.zeros(episodes, np.int64)
        self.success = np.zeros(episodes, bool)
        self.failure = np.zeros(episodes, bool)
        self.clips: dict[int, list[np.ndarray]] = {k: [] for k in range(min(videos, episodes))}
        self._frames: tuple[Step | None, Any] = (None, None)

    def act(self, obs: Any, actions: np.ndarray, slots: np.ndarray) -> np.ndarray:
        filming = [i for i, k in enumerate(slots) if k in self.clips]
        if filming:
            frames: Any = self.env.render()  # worldsim vector envs render one (N, H, W, 3) batch
            for i in filming:
                self.clips[slots[i]].append(frames[i])
        actions[slots < 0] = 0.0
        return actions

    def stepped(self, step: Step) -> None:
        live = step.active
        self.returns[step.slots[live]] += step.reward[live]

    def finished(self, slot: int, env: int, step: Step) -> None:
        self.lengths[slot] = step.next_info(env, "episode_step")
        self.success[slot] = step.next_info(env, "success")
        self.failure[slot] = step.next_info(env, "failure")
        if slot in self.clips:
            if self._frames[0] is not step:  # one render per step, however many clips end in it
                self._frames = (step, self.env.render())
            self.clips[slot].append(self._frames[1][env])
        self.bar.update(1)


def evaluate_task(policy: Policy, task: str, episodes: int, *, num_envs: int = 50, seed: int = 0,
                  deterministic: bool = True, execute_steps: int | None = None, videos: int = 0,
                  video_dir: Path | None = None, progress: bool = True,
                  imagination: ImaginationConfig | None = None) -> TaskResult:
    """Run ``episodes`` episodes of ``task`` with ``policy`` and measure them, in physics or, with
    ``imagination`` (that names a world model), in that world model's imagined twin of the task,
    from real episode starts to the time limit
    (:meth:`~worldsim.envs.imagination.ImaginationConfig.for_evaluation`). The episodes are the
    first ``episodes`` started on ``num_envs`` envs (:func:`worldsim.rollout.run_episodes`).

    ``videos`` > 0 records the first that many episodes (front camera, 128 px in physics, the
    model's frames in imagination) into ``video_dir/<task>_<k>.mp4``."""
    from worldsim.runtime.video import write_video

    spec = get_task(task)
    policy.check_task(spec.instruction)
    check_int("episodes", episodes)
    env_kwargs = {"render_mode": "rgb_array" if videos else None, **policy.env_kwargs()}
    imagined = imagination.for_evaluation() if imagination is not None and imagination.imagined else None
    if imagined is None:
        env_kwargs["render_size"] = VIDEO_SIZE
    env = make_task_envs(spec.name, min(num_envs, episodes), autoreset_mode="Disabled", imagination=imagined,
                         **env_kwargs)
    bar = tqdm(total=episodes, desc=f"eval {spec.name}", disable=not progress, leave=False)
    tally = _Tally(env, episodes, videos, bar)
    try:
        run_episodes(env, policy, episodes, tally, seed=seed, execute_steps=execute_steps,
                     deterministic=deterministic)
    finally:
        bar.close()
        env.close()
    paths = []
    if videos and video_dir is not None:
        for k, clip in tally.clips.items():
            path = write_video(Path(video_dir) / f"{spec.name}_{k}.mp4", np.stack(clip), fps=20)
            paths.append(str(path))
    wins = int(tally.success.sum())
    return TaskResult(spec.name, spec.instruction, episodes, wins, wins / episodes, wilson_interval(wins, episodes),
                      float(tally.returns.mean()), float(tally.lengths.mean()), int(tally.failure.sum()), paths,
                      tally.success.tolist())


def evaluate_policy(policy: Policy, tasks: list[str], episodes: int, *, num_envs: int = 50, seed: int = 0,
                    deterministic: bool = True, execute_steps: int | None = None, videos: int = 0,
                    video_dir: Path | None = None, name: str = "", progress: bool = True,
                    imagination: ImaginationConfig | None = None) -> EvalResults:
    """Evaluate ``policy`` on each of ``tasks`` for ``episodes`` episodes each (task k uses
    seed ``seed + k``), in physics or, with ``imagination``, in a world model (torch on the idle
    cores unless this process chose a thread count)."""
    use_torch_threads()
    results = {}
    with torch.no_grad():
        for k, task in enumerate(tasks):
            result = evaluate_task(policy, task, episodes, num_envs=num_envs, seed=seed + k,
                                   deterministic=deterministic, execute_steps=execute_steps,
                                   videos=videos, video_dir=video_dir, progress=progress,
                                   imagination=imagination)
            results[result.task] = result
    return EvalResults(name or type(policy).__name__, seed, deterministic, results)


def evaluate_in_physics(policy: Policy, tasks: list[str], episodes: int, seed: int,
                        deterministic: bool = True) -> dict[str, Any]:
    """The trainers' evaluation: in physics, on fresh envs, ``episodes`` per task (the tasks' own
    episode rules: success ends an episode), the policy's train/eval mode left as it was; the
    JSON document of :meth:`EvalResults.to_json`. The policy is read by its mean action, or with
    ``deterministic=False`` by sampled actions, drawn from torch's generator seeded with ``seed``."""
    was_training = policy.training
    policy.eval()
    if not deterministic:
        torch.manual_seed(seed)
    results = evaluate_policy(policy, tasks, episodes, num_envs=min(episodes, 256), seed=seed,
                              deterministic=deterministic, progress=False)
    policy.train(was_training)
    return results.to_json()


@dataclass
class EvaluationConfig:
    """An evaluation of a policy checkpoint (or the scripted expert) by :func:`evaluate_checkpoint`."""

    policy: Literal["expert"] | Path
    """A policy checkpoint or run folder (e.g. runs/bc_push), or "expert" for the scripted expert."""
    task: tuple[str, ...] = ()
    """Task to evaluate (repeat --task for several). Default: the tasks the policy was trained on,
    as its checkpoint records them (not every task sharing their instructions)."""
    suite: str | None = None
    """Evaluate the tasks of this suite (see `worldsim list-envs`; added to --task)."""
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
    """Record the first 3 episodes of each task (mp4, or GIF without ffmpeg)."""
    video_dir: Path | None = None
    """Where videos go (default: videos/ beside --out, else runs/evaluate/videos)."""
    out: Path | None = None
    """Write the results (success_rate, per-task rates, intervals, episode count) to this JSON file."""
    imagination: ImaginationConfig = field(default_factory=ImaginationConfig)
    """Evaluate in a world model instead of physics (with --world-model and --keyframes): from
    real episode starts, to the task's time limit."""

    SET_BY_COMMAND: ClassVar[dict[str, tuple[str, ...]]] = {
        "imagination": ("keyframe_ratio", "horizon", "reward_type")}
    """Evaluation starts at episode starts, runs to the time limit and reads success only."""

    def __post_init__(self) -> None:
        positive_ints(self, ("episodes", "num_envs"))

    @property
    def named_tasks(self) -> list[str]:
        """The tasks of --task and --suite (its --split), each once, in order."""
        names = [get_task(t).name for t in self.task]
        if self.suite:
            suite = get_suite(self.suite)
            names += list({"all": suite.tasks, "seen": suite.seen, "unseen": suite.unseen}[self.split])
        return list(dict.fromkeys(names))

    @property
    def videos_to(self) -> Path:
        if self.video_dir is not None:
            return self.video_dir
        return self.out.parent / "videos" if self.out is not None else Path("runs/evaluate/videos")


def evaluate_checkpoint(config: EvaluationConfig) -> EvalResults:
    """Evaluate the policy ``config`` names on its tasks (by default those it was trained on,
    :func:`trained_tasks`; the scripted expert needs them named, one expert per task) and write
    the results to ``config.out`` when given."""
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig, load_policy
    from worldsim.runtime.run_logging import write_json

    tasks = config.named_tasks
    kwargs: dict[str, Any] = dict(num_envs=config.num_envs, deterministic=not config.stochastic,
                  execute_steps=config.execute_steps, videos=3 if config.video else 0,
                  video_dir=config.videos_to,
                  imagination=config.imagination if config.imagination.imagined else None)
    if config.policy == "expert":
        if not tasks:
            raise ValueError("--policy expert needs --task or --suite")
        per_task: dict[str, TaskResult] = {}
        for k, name in enumerate(tasks):
            expert = ScriptedExpert(ScriptedExpertConfig(name, seed=config.seed))
            result = evaluate_policy(expert, [name], config.episodes, seed=config.seed + k, **kwargs)
            per_task.update(result.tasks)
        results = EvalResults("expert", config.seed, not config.stochastic, per_task)
    else:
        policy = load_policy(config.policy)
        results = evaluate_policy(policy, tasks or trained_tasks(policy), config.episodes, seed=config.seed,
                                  name=str(config.policy), **kwargs)
    if config.out is not None:
        write_json(config.out, results.to_json())
    return results


def results_table(results: EvalResults) -> Table:
    """A rich table of per-task success with 95% intervals."""
    from rich.table import Table

    kind = "deterministic" if results.deterministic else "stochastic"
    table = Table(title=f"evaluation of {results.policy} ({results.episodes} episodes of seed {results.seed}, "
                        f"{kind}: the same seed runs the same episodes)")
    table.add_column("task", justify="left")
    for col in ("success", "95% CI", "episodes", "return", "length"):
        table.add_column(col, justify="right")
    for r in results.tasks.values():
        table.add_row(r.task, f"{100 * r.success_rate:.1f}%", f"{100 * r.ci95[0]:.1f}-{100 * r.ci95[1]:.1f}%",
                      str(r.episodes), f"{r.mean_return:.2f}", f"{r.mean_length:.1f}")
    table.add_row("[bold]mean[/]", f"[bold]{100 * results.success_rate:.1f}%[/]", "", str(results.episodes), "", "")
    return table
