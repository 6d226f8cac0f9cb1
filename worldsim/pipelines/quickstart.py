"""``worldsim quickstart``: the whole pipeline, small, on CPU, with one report at the end.

1. **demonstrations**: the scripted expert (with action noise) records ``demos`` episodes;
2. **behaviour cloning**: TinyVLA learns from them (``bc_steps``);
3. **co-evolution, one round** (:mod:`worldsim.pipelines.coevolve`): the BC policy collects
   ``real_episodes`` real episodes (with its features, for step 5); a world model trains on
   them and the demonstrations; GRPO post-trains the policy in imagination; the BC and the
   post-trained policy are evaluated in physics and in imagination;
4. side-by-side videos of the final policy, real | imagined;
5. **failure detection** (:mod:`worldsim.failure`): detectors fitted and calibrated on the BC
   policy's real rollouts, scored on held-out ones;
6. ``report.md`` in ``out``: what each stage measured, with the plots and videos.

The defaults take about 20 minutes on 2 CPU cores. Every stage is recorded in
``out/coevolve/state.json`` or by its output file, so ``--resume`` continues an interrupted run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from worldsim.envs.tasks import get_task
from worldsim.failure.detect import parse_detectors
from worldsim.runtime.atomic import atomic_path
from worldsim.runtime.checkpoint import CHECKPOINT_FILE
from worldsim.runtime.run_logging import write_json

console = Console()


@dataclass
class QuickstartConfig:
    """The whole pipeline at small scale (:func:`quickstart`)."""

    task: str = "PushCube-v0"
    """Task (see `worldsim list-envs`)."""
    demos: int = 100
    """Scripted-expert demonstrations for behaviour cloning."""
    bc_steps: int = 1500
    """Behaviour-cloning optimiser steps."""
    real_episodes: int = 100
    """Real episodes the BC policy collects for the world model (and the failure detectors)."""
    wm_steps: int = 2000
    """World-model optimiser steps (the learning-rate schedule spans them)."""
    wm_time_budget: float = 300.0
    """Seconds of world-model training at most."""
    rl_env_steps: int = 100_000
    """Imagined env steps of GRPO."""
    rl_time_budget: float = 180.0
    """Seconds of RL at most."""
    eval_episodes: int = 50
    """Real evaluation episodes per policy."""
    imagined_eval_episodes: int = 16
    """Imagined evaluation episodes per policy."""
    detectors: str = "safe-mlp,stac,knn,action-variance"
    """Failure detectors to compare (see `worldsim detect --help`)."""
    out: Path = Path("runs/quickstart")
    """Run folder; report.md is the place to start."""
    resume: bool = False
    """Continue an interrupted run in --out."""
    seed: int = 0
    """Seed of everything."""
    torch_threads: int = 1
    """Torch CPU threads (1 leaves the other core to physics and rendering)."""
    progress: bool = True
    """Show progress bars."""

    def __post_init__(self) -> None:
        self.task = get_task(self.task).name
        for name in ("demos", "bc_steps", "real_episodes", "wm_steps", "rl_env_steps", "eval_episodes",
                     "imagined_eval_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)} must be >= 1")
        parse_detectors(self.detectors)


def quickstart(config: QuickstartConfig) -> dict[str, Any]:
    """Run the stages of the module docstring into ``config.out`` (refused when not empty, unless
    ``resume``: finished stages are then skipped); returns the summary ``summary.json`` holds."""
    import torch

    from worldsim.data.collect import collect_episodes
    from worldsim.failure.detect import DetectionConfig, run_detection
    from worldsim.pipelines.coevolve import CoevolveConfig, coevolve
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
    from worldsim.training.bc import BCConfig, train_bc

    out = config.out
    if out.exists() and any(out.iterdir()) and not config.resume:
        raise ValueError(f"{out} is not empty: pass --resume to continue that run, or a new --out")
    torch.set_num_threads(config.torch_threads)
    start, timings = time.time(), {}

    def stage(name: str, done: Path, work: Callable[[], Any]) -> None:
        if config.resume and done.exists():
            console.print(f"[dim]{name}: done earlier[/]")
            return
        console.rule(f"[bold]quickstart: {name}")
        began = time.time()
        work()
        timings[name] = round(time.time() - began, 1)

    demos = out / "data" / "demos.h5"
    stage("expert demonstrations", demos, lambda: collect_episodes(
        [config.task], lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.3, seed=config.seed)),
        config.demos, demos, num_envs=min(config.demos, 25), seed=config.seed, obs_mode="pixels+state",
        progress=config.progress))
    bc = out / "bc"
    resume_bc = config.resume and (bc / CHECKPOINT_FILE).exists()
    stage("behaviour cloning", bc / "summary.json", lambda: train_bc(BCConfig(
        data=demos, out=bc, steps=config.bc_steps, seed=config.seed, torch_threads=config.torch_threads,
        resume=resume_bc, overwrite=not resume_bc, progress=config.progress)))
    coevolution = CoevolveConfig(
        base_policy=bc / "policy", task=config.task, demonstrations=demos, real_episodes=config.real_episodes,
        rounds=1, wm_steps=config.wm_steps, wm_time_budget=config.wm_time_budget,
        rl_env_steps=config.rl_env_steps, rl_time_budget=config.rl_time_budget, rl_num_envs=32, group_size=8,
        eval_episodes=config.eval_episodes,
        imagined_eval_episodes=config.imagined_eval_episodes, record_features=True, videos=2,
        out=out / "coevolve", resume=config.resume and (out / "coevolve" / "state.json").exists(),
        seed=config.seed, device="cpu", torch_threads=config.torch_threads, progress=config.progress)
    results: dict[str, Any] = {}
    stage("world model + RL in imagination", out / "coevolve" / "results.json",
          lambda: results.update(coevolve(coevolution)))
    results = results or json.loads((out / "coevolve" / "results.json").read_text())
    detect = out / "detect"
    stage("failure detection", detect / "results.json", lambda: run_detection(DetectionConfig(
        data=out / "coevolve" / "round_0" / "data.h5", detectors=config.detectors, seen_tasks=(config.task,),
        alpha=0.2, cp="constant", seeds=(0, 1, 2), videos=2, out=detect)))
    detection = json.loads((detect / "results.json").read_text())
    summary = {"task": config.task, "timings_s": timings, "wall_clock_s": round(time.time() - start, 1),
               "bc_real_success": results["base_real_success"],
               "final_real_success": results["final_real_success"],
               "imagined_success": [r["imagined"]["success_rate"] for r in results["rounds"]],
               "detectors_roc_auc": {name: d["summary"]["seen"]["roc_auc"]["mean"]
                                     for name, d in detection["detectors"].items()}}
    write_report(config, summary)
    return summary


def write_report(config: QuickstartConfig, summary: dict[str, Any]) -> Path:
    """``out/report.md``: the pipeline's stages and their figures, linking the stage reports."""
    out = config.out
    coevolve_table = (out / "coevolve" / "report.md").read_text().split("\n", 2)[2]
    detect_table = (out / "detect" / "table.md").read_text()
    lines = [f"# worldsim quickstart: {summary['task']}", "",
             f"Whole pipeline in {summary['wall_clock_s'] / 60:.1f} minutes "
             "(stage timings below). Each stage's own folder holds its metrics, curves and checkpoints.", "",
             "## 1-2. Expert demonstrations and behaviour cloning", "",
             f"{config.demos} noisy scripted-expert episodes -> TinyVLA, {config.bc_steps} steps "
             "([training curves](bc/curves.png)).", "",
             "## 3-4. World model, RL in imagination, real and imagined evaluation", "",
             coevolve_table.replace("](", "](coevolve/").replace("](coevolve/http", "](http"), "",
             "## 5. Failure detection on the BC policy's real rollouts", "",
             "Detectors read the features TinyVLA recorded while collecting; they are fitted on part of the "
             "rollouts, calibrated (constant conformal band) on held-out successes, and tested on the rest.", "",
             detect_table.replace("](", "](detect/"), "",
             "![ROC](detect/roc.png)", "",
             "## Stage timings", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {name} | {seconds} |" for name, seconds in summary["timings_s"].items()]
    path = out / "report.md"
    with atomic_path(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")
    write_json(out / "summary.json", summary)
    return path
