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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from worldsim.runtime.atomic import atomic_path
from worldsim.runtime.checkpoint import CHECKPOINT_FILE
from worldsim.envs.tasks import get_task
from worldsim.runtime.run_logging import write_json

console = Console()


@dataclass
class Quickstart:
    """The whole pipeline at small scale: expert data, BC TinyVLA, world model, RL in imagination,
    real evaluation, failure detection; writes one report."""

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

    def run(self) -> dict[str, Any]:
        import torch

        from worldsim.training.bc import BCConfig, train_bc
        from worldsim.pipelines.coevolve import CoevolveConfig, coevolve
        from worldsim.data.collect import collect_episodes
        from worldsim.failure.detect import Detect
        from worldsim.policies import ScriptedExpert, ScriptedExpertConfig

        spec = get_task(self.task)
        for name in ("demos", "bc_steps", "real_episodes", "wm_steps", "rl_env_steps", "eval_episodes",
                     "imagined_eval_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)} must be >= 1")
        if self.out.exists() and any(self.out.iterdir()) and not self.resume:
            raise ValueError(f"{self.out} is not empty: pass --resume to continue that run, or a new --out")
        torch.set_num_threads(self.torch_threads)
        start, timings = time.time(), {}

        def stage(name: str, done: Path, work) -> None:
            if self.resume and done.exists():
                console.print(f"[dim]{name}: done earlier[/]")
                return
            console.rule(f"[bold]quickstart: {name}")
            began = time.time()
            work()
            timings[name] = round(time.time() - began, 1)

        demos = self.out / "data" / "demos.h5"
        stage("expert demonstrations", demos, lambda: collect_episodes(
            [spec.name], lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.3, seed=self.seed)), self.demos,
            demos, num_envs=min(self.demos, 25), seed=self.seed, obs_mode="pixels+state", progress=self.progress))
        bc = self.out / "bc"
        stage("behaviour cloning", bc / "summary.json", lambda: train_bc(BCConfig(
            data=demos, out=bc, steps=self.bc_steps, seed=self.seed, torch_threads=self.torch_threads,
            resume=self.resume and (bc / CHECKPOINT_FILE).exists(),
            overwrite=not (self.resume and (bc / CHECKPOINT_FILE).exists()))))
        config = CoevolveConfig(
            base_policy=bc / "policy", task=spec.name, demonstrations=demos, real_episodes=self.real_episodes,
            rounds=1, wm_steps=self.wm_steps, wm_time_budget=self.wm_time_budget, rl_env_steps=self.rl_env_steps,
            rl_time_budget=self.rl_time_budget, rl_num_envs=32, group_size=8, eval_episodes=self.eval_episodes,
            imagined_eval_episodes=self.imagined_eval_episodes, record_features=True, videos=2,
            out=self.out / "coevolve", resume=self.resume and (self.out / "coevolve" / "state.json").exists(),
            seed=self.seed, device="cpu", torch_threads=self.torch_threads, progress=self.progress)
        results: dict[str, Any] = {}
        stage("world model + RL in imagination", self.out / "coevolve" / "results.json",
              lambda: results.update(coevolve(config)))
        results = results or json.loads((self.out / "coevolve" / "results.json").read_text())
        detect = self.out / "detect"
        stage("failure detection", detect / "results.json", lambda: Detect(
            rollouts=self.out / "coevolve" / "round_0" / "data.h5", detectors=self.detectors,
            seen_tasks=(spec.name,), alpha=0.2, cp="constant", seeds=(0, 1, 2), videos=2, out=detect).run())
        detection = json.loads((detect / "results.json").read_text())
        summary = {"task": spec.name, "timings_s": timings, "wall_clock_s": round(time.time() - start, 1),
                   "bc_real_success": results["base_real_success"],
                   "final_real_success": results["final_real_success"],
                   "imagined_success": [r["imagined"]["success_rate"] for r in results["rounds"]],
                   "detectors_roc_auc": {name: d["summary"]["seen"]["roc_auc"]["mean"]
                                         for name, d in detection["detectors"].items()}}
        write_report(self, summary, results)
        table = Table(title=f"quickstart on {spec.name} ({summary['wall_clock_s'] / 60:.1f} min)")
        table.add_column("what")
        table.add_column("figure", justify="right")
        table.add_row("BC TinyVLA, real success", f"{100 * summary['bc_real_success']:.0f}%")
        table.add_row("after GRPO in imagination, real success", f"{100 * summary['final_real_success']:.0f}%")
        for name, auc in summary["detectors_roc_auc"].items():
            table.add_row(f"failure detector {name}, ROC-AUC", f"{auc:.2f}")
        console.print(table)
        console.print(f"report -> {self.out / 'report.md'}")
        return summary


def write_report(quickstart: Quickstart, summary: dict[str, Any], results: dict[str, Any]) -> Path:
    """``out/report.md``: the pipeline's stages and their figures, linking the stage reports."""
    out = quickstart.out
    coevolve_table = (out / "coevolve" / "report.md").read_text().split("\n", 2)[2]
    detect_table = (out / "detect" / "table.md").read_text()
    lines = [f"# worldsim quickstart: {summary['task']}", "",
             f"Whole pipeline in {summary['wall_clock_s'] / 60:.1f} minutes "
             "(stage timings below). Each stage's own folder holds its metrics, curves and checkpoints.", "",
             "## 1-2. Expert demonstrations and behaviour cloning", "",
             f"{quickstart.demos} noisy scripted-expert episodes -> TinyVLA, {quickstart.bc_steps} steps "
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
