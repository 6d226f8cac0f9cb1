"""World model-policy co-evolution (WoVR's PACE, World-VLA-Loop): post-train a VLA policy in
imagination and let the world model learn from the policy's new real experience.

Read top to bottom, :func:`coevolve` is the loop (``R`` = ``rounds``):

0. **collect** ``real_episodes`` real episodes with the base policy (``pixels+state``, split
   evenly over the tasks); **train** a world model on them; **evaluate** the base policy in
   physics (success per task with 95% intervals) and in the world model;
1. for round ``r = 1 .. R``:

   a. **RL in imagination**: PPO or GRPO on the imagined env of every task at once, starting
      from the current policy, with keyframe-initialised resets drawn from the latest real
      episodes (the current policy's own, so its failure states are favoured);
   b. **evaluate** the new policy in physics and in the world model it was trained in;
   c. **guard** against exploiting the world model (below): accept the new policy, or roll
      back to the previous one;
   d. unless it is the last round (or ``frozen_world_model``): **collect** ``real_episodes``
      new real episodes with the new policy (its new successes and failures, the states where
      imagination was wrong) and **refine** the world model on all real episodes so far,
      starting from its current weights.

The real-episode budget spent on training data is ``real_episodes x R`` (``real_episodes``
with a frozen world model); evaluation episodes are counted and reported separately.

**Guarding against exploitation.** A policy trained in a learned simulator can learn what
fools the success head instead of what solves the task. Three mechanisms limit that:
(i) imagined episodes are short: keyframe starts and the imagination's ``horizon`` keep them near
real data, where the model is accurate; (ii) the success head's verdict needs probability
>= the model's calibrated threshold; (iii) every round measures the same policy's imagined
and real success: when imagined success exceeds real success by more than
``divergence_threshold`` (the policy exploits the model), or real success falls more than
``max_real_drop`` below the best accepted policy's so far, the round is **rolled back**: the next round
starts again from the previous policy, with a world model refined on the rejected policy's
real episodes (which show it where it was wrong). Each verdict is recorded when it is made, so
guard settings changed on ``resume`` judge only the rounds that follow.

**Test episodes.** The guard picks the final policy by the round evaluations, so their figure for
it is the best of several noisy ones, biased upward. With ``test_episodes``, the run ends by
evaluating the base and final policies on real episodes that no round saw (seed
``seed + 30000``, against the rounds' ``seed + 10000``): the unbiased comparison, ``results["test"]``.

**Baseline** (``mode="direct-rl"``): the same real-episode budget spent on RL directly in the
physics env (GRPO/PPO on as many real episodes as co-evolution collects in all its rounds, round 0
included, since physics RL learns from none of them), same evaluation. With GRPO it makes at
least as many policy updates as the imagination rounds would (:func:`direct_rl_epochs`).

Every stage writes its outputs under ``out/round_<r>/`` and is recorded in ``out/state.json``
when it finishes; ``resume=True`` skips the recorded stages and redoes an interrupted one, and
with more ``rounds`` than the run was started with, extends it by the rounds that are new.
The run ends with ``results.json``, ``report.md``, ``success.png`` and side-by-side videos
(real | imagined) of the final policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from rich.console import Console

from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.tasks import get_suite, get_task
from worldsim.pipelines.coevolve_parts import RLRounds, WorldModelRounds
from worldsim.pipelines.coevolve_stages import Stages
from worldsim.runtime.device import Device
from worldsim.runtime.run_logging import to_jsonable, write_json
from worldsim.runtime.threads import check_torch_threads, use_torch_threads
from worldsim.runtime.validation import check_range, positive_ints

console = Console()


@dataclass
class GuardConfig:
    """When co-evolution rolls a round's policy back (the module docstring's guard)."""

    divergence_threshold: float = 0.3
    """Roll back when imagined success exceeds real success by more than this."""
    max_real_drop: float = 0.1
    """Roll back when real success falls more than this below the best accepted policy's."""

    def __post_init__(self) -> None:
        for name in ("divergence_threshold", "max_real_drop"):
            check_range(f"guard.{name}", getattr(self, name), 0.0, 1.0, integer=False)


@dataclass
class CoevolveConfig:
    """Co-evolution of a policy and a world model (``worldsim coevolve``)."""

    COMMAND_LINE: ClassVar[tuple[str, ...]] = (
        "base_policy", "suite", "task", "demonstrations", "mode", "real_episodes", "rounds", "eval_episodes",
        "test_episodes", "videos", "out", "resume", "seed", "device", "torch_threads", "progress", "imagination")
    """The fields that are flags; the rest (the guard, the world model's and RL's rounds, study controls) a config
    file sets."""

    base_policy: Path
    """The policy to improve: a checkpoint or run folder (e.g. a BC TinyVLA from `worldsim train-bc`)."""
    suite: str | None = "tabletop-4"
    """Train on every seen task of this suite (see `worldsim list-envs`)."""
    task: str | None = None
    """Or a single task (replaces --suite)."""
    demonstrations: Path | None = None
    """An episode file of demonstrations (e.g. the base policy's BC data) that the world model also
    trains on from round 0; reported apart from the real-episode budget."""
    round0_from: Path | None = None
    """Reuse round 0 (base episodes, world model, base evaluation) of this earlier run with the same
    base policy, tasks, real_episodes, demonstrations, world-model and evaluation settings and seed,
    so that ablations start from the very same world model."""
    mode: Literal["coevolve", "direct-rl"] = "coevolve"
    """coevolve: RL in imagination; direct-rl: the baseline spending the same real budget on physics RL."""
    real_episodes: int = 600
    """Real episodes per collection, split evenly over the tasks (the budget is this x rounds)."""
    rounds: int = 2
    """RL rounds (each after a world-model (re)training)."""
    frozen_world_model: bool = False
    """Ablation: train the world model once and never refine it (no co-evolution)."""
    eval_episodes: int = 50
    """Real evaluation episodes per task after every round."""
    imagined_eval_episodes: int = 32
    """Imagined evaluation episodes per task after every round."""
    test_episodes: int = 0
    """Real episodes per task on which the base and final policies are evaluated once the run
    ends, apart from the round evaluations the guard chooses by (0: none)."""
    collect_deterministic: bool = False
    """Collect with the policy's mean action (default: sampled, for more varied data)."""
    record_features: bool = False
    """Also record the policy's features and sampled chunks in the collected episodes, for
    failure detectors (`worldsim detect`)."""
    videos: int = 2
    """Side-by-side (real | imagined) videos of the final policy per task."""
    out: Path = Path("runs/coevolve")
    """Run folder."""
    resume: bool = False
    """Continue the run in --out, skipping the stages it finished (with more --rounds: extend it)."""
    seed: int = 0
    """Seed of everything."""
    device: Device = "auto"
    """Where torch runs (auto: CUDA when available)."""
    torch_threads: int | None = None
    """Torch CPU threads (None: the cores idle when the run starts; see `worldsim.runtime.threads`)."""
    progress: bool = True
    """Show progress bars."""
    imagination: ImaginationConfig = field(default_factory=ImaginationConfig)
    """How RL imagines (its starts, horizon, frames and reward) and what the imagined evaluations
    show the policy; the world model and keyframes are each round's own, on --device."""
    guard: GuardConfig = field(default_factory=GuardConfig)
    """When a round's policy is rolled back: the guard against a policy that exploits the world model."""
    wm: WorldModelRounds = field(default_factory=WorldModelRounds)
    """The world model each round trains: its preset, the first training's and each refinement's steps."""
    rl: RLRounds = field(default_factory=RLRounds)
    """The RL of each round: algorithm (PPO or GRPO), imagined env steps, envs and learning rate."""

    SET_BY_COMMAND: ClassVar[dict[str, tuple[str, ...]]] = {"imagination": ("world_model", "keyframes", "device")}
    """Each round trains its own world model on its own real episodes, on the run's device."""

    def __post_init__(self) -> None:
        self.base_policy, self.out = Path(self.base_policy), Path(self.out)
        check_torch_threads(self.torch_threads)
        if self.imagination.imagined:
            raise ValueError("coevolve trains its own world model and takes its keyframes from the real episodes "
                             "it collects: leave imagination.world_model and keyframes unset")
        if self.imagination.device not in ("auto", self.device):
            raise ValueError(f"imagination.device={self.imagination.device!r}: the world model runs on the run's "
                             f"device ({self.device!r}); leave the imagination's at 'auto'")
        self.imagination = self.imagination.replace(device=self.device)
        if self.demonstrations is not None:
            self.demonstrations = Path(self.demonstrations)
            if not self.demonstrations.is_file():
                raise ValueError(f"demonstrations={str(self.demonstrations)!r}: no such episode file")
        if self.task is not None:
            self.task, self.suite = get_task(self.task).name, None
        elif self.suite is None:
            raise ValueError("name the tasks: --suite or --task")
        else:
            get_suite(self.suite)
        positive_ints(self, ("real_episodes", "rounds", "eval_episodes", "imagined_eval_episodes"))
        if isinstance(self.test_episodes, bool) or not isinstance(self.test_episodes, int) or self.test_episodes < 0:
            raise ValueError(f"test_episodes={self.test_episodes!r} must be an int >= 0")
        if self.real_episodes < len(self.tasks):
            raise ValueError(f"real_episodes={self.real_episodes} must give each of the {len(self.tasks)} "
                             "tasks at least one episode")
        if self.rl.num_envs % len(self.tasks):
            raise ValueError(f"rl.num_envs={self.rl.num_envs} must be a multiple of the {len(self.tasks)} tasks")

    @property
    def tasks(self) -> list[str]:
        if self.task:
            return [self.task]
        if self.suite is None:
            raise ValueError("coevolve needs a task or a suite")
        return list(get_suite(self.suite).seen)

    @property
    def episodes_per_task(self) -> int:
        return self.real_episodes // len(self.tasks)

    @property
    def real_budget(self) -> int:
        """Real training episodes the whole run collects."""
        collections = 1 if self.frozen_world_model else self.rounds
        return self.episodes_per_task * len(self.tasks) * collections


# ---------------------------------------------------------------------------- the stages
def collect_real(config: CoevolveConfig, policy_path: Path, out: Path, seed: int) -> dict[str, Any]:
    """``config.real_episodes`` real episodes of ``policy_path`` (pixels + state, for keyframes)."""
    from worldsim.data.collect import collect_episodes
    from worldsim.policies import load_policy

    policy = load_policy(policy_path).eval()
    image_size = policy.env_kwargs().get("image_size", 64)
    stats = collect_episodes(config.tasks, lambda task: policy, config.episodes_per_task, out,
                             num_envs=min(32, config.episodes_per_task), seed=seed, image_size=image_size,
                             obs_mode="pixels+state", deterministic=config.collect_deterministic,
                             record_features=config.record_features, progress=config.progress)
    return {"file": str(out), "episodes": stats.episodes, "success_rate": stats.success_rate,
            "per_task_success": {task: s.success_rate for task, s in stats.tasks.items()}}


def train_wm(config: CoevolveConfig, data: Path, out: Path, init: Path | None, seed: int) -> dict[str, Any]:
    """Train a world model on ``data`` (or refine ``init`` on it)."""
    from worldsim.world_models.train import train_world_model

    summary = train_world_model(config.wm.train_config(
        data, out, init, seed, state_supervision=config.imagination.rung.trained_on_state, device=config.device,
        torch_threads=config.torch_threads, progress=config.progress))
    return {"world_model": str(out), **{k: summary[k] for k in ("steps", "stopped_by", "train_seconds")}}


def evaluate_both(config: CoevolveConfig, policy_path: Path, world_model: Path | None, keyframes: Path | None,
                  real: dict[str, Any] | None = None) -> dict[str, Any]:
    """Real and imagined success of one policy (:func:`worldsim.evaluation.rank.evaluate_real_and_imagined`)."""
    from worldsim.evaluation.rank import evaluate_real_and_imagined

    imagination = (config.imagination.replace(world_model=world_model, keyframes=keyframes)
                   if world_model is not None else None)
    result = evaluate_real_and_imagined(policy_path, config.tasks, episodes=config.eval_episodes,
                                        imagined_episodes=config.imagined_eval_episodes, imagination=imagination,
                                        seed=config.seed, progress=config.progress, real=real)
    imagined = result.get("imagined")
    console.print(f"{policy_path}: real success {100 * result['real']['success_rate']:.1f}% of "
                  f"{result['real']['episodes']} episodes"
                  + (f", imagined {100 * imagined['success_rate']:.1f}%" if imagined else ""))
    return result


def direct_rl_epochs(config: CoevolveConfig, chunk: int, update_epochs: int = 4) -> int:
    """GRPO's passes over each iteration of the direct-rl baseline, so that it makes at least as
    many policy updates as the imagination rounds would (``update_epochs`` passes each, the trainer's
    default): its real budget gives it fewer iterations than imagination's imagined steps do,
    so it makes more passes over each."""
    from worldsim.training.grpo import iteration_steps

    def iterations(env_steps: int, episode_steps: int) -> int:
        return math.ceil(env_steps / iteration_steps(episode_steps, chunk, config.rl.num_envs))

    limit = max(get_task(t).max_episode_steps for t in config.tasks)
    imagined = min(limit, config.imagination.horizon or limit)
    updates = config.rounds * iterations(config.rl.env_steps, imagined) * update_epochs
    return max(update_epochs, math.ceil(updates / iterations(config.real_budget * limit, limit)))


def train_rl(config: CoevolveConfig, policy_path: Path, out: Path, world_model: Path | None,
             keyframes: Path | None, total_env_steps: int, **settings: Any) -> dict[str, Any]:
    """One RL run from ``policy_path``: in imagination with ``world_model``, else in physics
    (``settings``: the trainer's own, e.g. ``update_epochs``). Its final evaluation
    (``config.seed``: the same real episodes as every round's) is the round's real evaluation."""
    from worldsim.training.grpo import GRPOConfig, train_grpo
    from worldsim.training.ppo import train_ppo

    run: dict[str, Any] = dict(policy=str(policy_path), obs_mode="pixels", eval_every=0,
                               eval_episodes=config.eval_episodes, checkpoint_every=0, seed=config.seed, out=out,
                               device=config.device, torch_threads=config.torch_threads, progress=config.progress)
    run |= {"suite": config.suite} if config.suite else {"task": config.task}
    if world_model is not None:
        run["imagination"] = config.imagination.replace(world_model=world_model, keyframes=keyframes)
    rl_config = config.rl.train_config(total_env_steps, **run, **settings)
    summary = train_grpo(rl_config) if isinstance(rl_config, GRPOConfig) else train_ppo(rl_config)
    return {"policy": str(out / "policy"), "env_steps": summary["global_step"], **settings,
            "train_seconds": summary["train_seconds"], "stopped_by": summary["stopped_by"],
            "eval": summary.get("eval")}


def guard(accepted: list[dict[str, Any]], current: dict[str, Any], config: GuardConfig) -> dict[str, Any]:
    """Accept the round's policy, or roll back (see the module docstring); the verdict and why.
    ``accepted`` are the rounds accepted so far: real success is compared with the best of them,
    so a slow slide over several rounds is caught as well as a sudden drop."""
    real = current["real"]["success_rate"]
    best = max(r["real"]["success_rate"] for r in accepted)
    gap = current["imagined"]["success_rate"] - real
    reasons = []
    if gap > config.divergence_threshold:
        reasons.append(f"imagined success exceeds real by {gap:.2f} > {config.divergence_threshold}")
    if real < best - config.max_real_drop:
        reasons.append(f"real success {real:.2f} fell more than {config.max_real_drop} below the best so far "
                       f"({best:.2f})")
    return {"accepted": not reasons, "gap": gap, "reasons": reasons}


# ---------------------------------------------------------------------------- the loop
def build_round0(config: CoevolveConfig, stages: Stages, r0: Path) -> tuple[Path, list[Path], int]:
    """Round 0's stages in ``r0``: the base policy's real episodes (``r0/data.h5``, the first
    keyframes), merged with the demonstrations when there are any, and the world model trained on
    them; returns the world model, the episode files so far and the real episodes collected."""
    from worldsim.data.merge import merge_episode_files

    data = stages.run("round 0: collect (base policy)", r0 / "data.h5",
                      lambda: collect_real(config, config.base_policy, r0 / "data.h5", config.seed))
    all_data = [r0 / "data.h5"]
    if config.demonstrations is not None:
        all_data.insert(0, Path(config.demonstrations))
        stages.run("round 0: merge demonstrations", r0 / "all.h5",
                   lambda: {"episodes": merge_episode_files(all_data, r0 / "all.h5")})
    wm_data = r0 / "all.h5" if config.demonstrations is not None else r0 / "data.h5"
    wm = stages.run("round 0: train world model", r0 / "wm",
                    lambda: train_wm(config, wm_data, r0 / "wm", None, config.seed))
    return Path(wm["world_model"]), all_data, int(data["episodes"])


def coevolve(config: CoevolveConfig) -> dict[str, Any]:
    """Run co-evolution (or the direct-RL baseline) as ``config`` says; returns ``results.json``."""

    from worldsim.data.merge import merge_episode_files
    from worldsim.policies import load_policy

    load_policy(config.base_policy)  # a missing or broken checkpoint fails here, before out is created
    use_torch_threads(config.torch_threads)  # stages given None keep this count
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    stages = Stages(out, to_jsonable(config), config.resume)
    r0 = out / "round_0"
    if config.round0_from is not None:
        stages.adopt_round0(Path(config.round0_from), r0)

    rounds: list[dict[str, Any]] = []
    if config.mode == "direct-rl":
        base = stages.run("round 0: evaluate", None, lambda: evaluate_both(config, config.base_policy, None, None))
        rounds.append({"round": 0, "policy": str(config.base_policy), **base, "accepted": True,
                       "real_episodes_used": 0})
        horizon = max(get_task(t).max_episode_steps for t in config.tasks)
        # Physics RL learns from none of co-evolution's collected episodes, so it gets all of them:
        # the whole real budget, counted in env steps at the longest episode (episodes that end
        # early leave it more episodes, which favours this baseline); with GRPO, as many policy
        # updates as the imagination rounds make, by more passes over its fewer iterations.
        epochs = ({"update_epochs": direct_rl_epochs(config, load_policy(config.base_policy).chunk_size)}
                  if config.rl.algo == "grpo" else {})
        rl = stages.run("direct RL in physics", out / "direct_rl",
                        lambda: train_rl(config, config.base_policy, out / "direct_rl", None, None,
                                         config.real_budget * horizon, **epochs))
        after = stages.run("direct RL: evaluate", None,
                           lambda: evaluate_both(config, Path(rl["policy"]), None, None, rl["eval"]))
        rounds.append({"round": 1, "policy": rl["policy"], **after, "accepted": True,
                       "real_episodes_used": config.real_budget, "rl": rl})
        return finish(config, rounds, None, test_evaluation(config, stages, rounds), stages.seconds())

    world_model, all_data, episodes = build_round0(config, stages, r0)
    keyframes = r0 / "data.h5"
    base = stages.run("round 0: evaluate", None,
                      lambda: evaluate_both(config, config.base_policy, world_model, keyframes))
    rounds.append({"round": 0, "policy": str(config.base_policy), **base, "accepted": True,
                   "real_episodes_used": episodes, "world_model": str(world_model)})
    current, used = config.base_policy, episodes
    for r in range(1, config.rounds + 1):
        folder = out / f"round_{r}"
        rl = stages.run(f"round {r}: RL in imagination ({config.rl.algo})", folder / "rl",
                        lambda: train_rl(config, current, folder / "rl", world_model, keyframes,
                                         config.rl.env_steps))
        evaluation = stages.run(f"round {r}: evaluate", None,
                                lambda: evaluate_both(config, Path(rl["policy"]), world_model, keyframes,
                                                      rl["eval"]))
        judged = stages.run(f"round {r}: guard", None,
                            lambda: guard([r for r in rounds if r["accepted"]], evaluation, config.guard))
        verdict = {k: judged[k] for k in ("accepted", "gap", "reasons")}
        rounds.append({"round": r, **evaluation, **verdict, "rl": rl, "world_model": str(world_model),
                       "real_episodes_used": used})
        if verdict["accepted"]:
            current = Path(rl["policy"])
        else:
            console.print(f"[yellow]round {r} rolled back:[/] {'; '.join(verdict['reasons'])}")
        if r == config.rounds or config.frozen_world_model:
            continue
        new = stages.run(f"round {r}: collect (new policy)", folder / "data.h5",
                         lambda: collect_real(config, Path(rl["policy"]), folder / "data.h5", config.seed + 100 * r))
        used += new["episodes"]
        all_data.append(folder / "data.h5")
        stages.run(f"round {r}: merge episodes", folder / "all.h5",
                   lambda: {"episodes": merge_episode_files(all_data, folder / "all.h5")})
        wm = stages.run(f"round {r}: refine world model", folder / "wm",
                        lambda: train_wm(config, folder / "all.h5", folder / "wm", world_model, config.seed + r))
        world_model, keyframes = Path(wm["world_model"]), folder / "data.h5"
    return finish(config, rounds, world_model, test_evaluation(config, stages, rounds), stages.seconds())


def last_accepted(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose policy a run ends with: the last one the guard accepted."""
    return next(r for r in reversed(rounds) if r["accepted"])


def real_outcomes(tasks: list[str], row: dict[str, Any]) -> list[bool]:
    """A round's per-episode real outcomes, task after task: the same episodes in every round,
    so two rounds' lists pair up."""
    return [o for task in tasks for o in row["real"]["per_task"][task]["outcomes"]]


TEST_SEED_OFFSET = 30_000


def test_evaluation(config: CoevolveConfig, stages: Stages, rounds: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The base and final policies on ``config.test_episodes`` real episodes per task that no
    round evaluation saw (the same for both, so they pair), or None without test episodes."""
    from worldsim.evaluation.compare import paired_comparison
    from worldsim.evaluation.evaluate import evaluate_in_physics
    from worldsim.evaluation.rank import per_task_summary
    from worldsim.policies import load_policy

    if not config.test_episodes:
        return None
    seed = config.seed + TEST_SEED_OFFSET

    def test(row: dict[str, Any]) -> dict[str, Any]:
        result = stages.run(f"test: round {row['round']}", None, lambda: {"real": per_task_summary(
            evaluate_in_physics(load_policy(row["policy"]), config.tasks, config.test_episodes, seed=seed))})
        return {"round": row["round"], "policy": row["policy"], "real": result["real"]}

    base, final = test(rounds[0]), test(last_accepted(rounds))
    return {"episodes_per_task": config.test_episodes, "seed": seed, "base": base, "final": final,
            "comparison": paired_comparison(real_outcomes(config.tasks, base), real_outcomes(config.tasks, final))}


def finish(config: CoevolveConfig, rounds: list[dict[str, Any]], world_model: Path | None,
           test: dict[str, Any] | None, seconds: float) -> dict[str, Any]:
    """Write ``results.json``, ``report.md``, ``success.png`` and the final policy's videos. The
    final policy is the last accepted one; ``test`` its :func:`test_evaluation`; ``seconds`` the
    time the run's stages took."""
    from worldsim.evaluation.compare import paired_comparison, verdict
    from worldsim.pipelines.coevolve_report import plot_rounds, side_by_side_videos, write_report

    final = last_accepted(rounds)
    final_policy = Path(final["policy"])

    def outcomes(row: dict[str, Any]) -> list[bool]:
        return real_outcomes(config.tasks, row)

    comparison = paired_comparison(outcomes(rounds[0]), outcomes(final))
    results = {"mode": config.mode, "algo": config.rl.algo, "tasks": config.tasks, "rounds": rounds,
               "real_budget": config.real_budget,
               "demonstrations": str(config.demonstrations) if config.demonstrations else None,
               "base_real_success": rounds[0]["real"]["success_rate"],
               "final_policy": str(final_policy), "final_real_success": final["real"]["success_rate"],
               "improvement": final["real"]["success_rate"] - rounds[0]["real"]["success_rate"],
               "comparison": comparison,
               # The last trained policy against the base, whether the guard kept it or not.
               "last_round_comparison": paired_comparison(outcomes(rounds[0]), outcomes(rounds[-1]))
               if len(rounds) > 1 else None,
               "evaluation_episodes": sum(r["real"]["episodes"] for r in rounds),
               "test": test,
               "ablation": {"frozen_world_model": config.frozen_world_model,
                            "imagination": to_jsonable(config.imagination)},
               "wall_clock_s": seconds}
    videos = []
    if world_model is not None and config.videos:
        videos = side_by_side_videos(final_policy, world_model, config.tasks, config.videos, config.seed,
                                     config.out / "videos", config.imagination)
    results["videos"] = [str(v) for v in videos]
    write_json(config.out / "results.json", results)
    plot_rounds(results, config.out / "success.png")
    write_report(results, config.out / "report.md")
    console.print(f"[bold]real success[/] {verdict(comparison, 'base', 'final')} {results['real_budget']} real "
                  f"training episodes -> {config.out / 'report.md'}")
    if test is not None:
        console.print(f"[bold]on test episodes[/] {verdict(test['comparison'], 'base', 'final')}")
    return results
