"""Behaviour cloning on a suite: collect noisy expert demos, train TinyVLA, evaluate per task.

    python benchmarks/bc_suite.py --suite tabletop-4 --episodes 200 --steps 4000

Target (issue 4): >= 50% average success on tabletop-4 from 200 noisy expert episodes per task,
with room left for RL. Writes the dataset, the run folder and ``eval.json`` under ``--out``;
prints one JSON line last: per-task success, average, and the wall-clock of each stage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import tyro
from common import noisy_expert, report

from worldsim.data.collect import collect_episodes
from worldsim.envs.tasks import get_suite
from worldsim.policies.expert import DEMO_NOISE, GRASP_DEMO_NOISE
from worldsim.training.bc import BCConfig, train_bc


@dataclass
class Args:
    suite: str = "tabletop-4"
    """Suite whose tasks (all of them) are collected and trained on."""
    episodes: int = 200
    """Expert episodes per task."""
    noise: float = DEMO_NOISE
    """Gaussian displacement noise of the expert for reach and push."""
    grasp_noise: float = GRASP_DEMO_NOISE
    """The same for pick-and-place and stack (about 88% success)."""
    steps: int = 4000
    """BC optimiser steps."""
    batch_size: int = 128
    language: str = "minilm"
    eval_episodes: int = 100
    """Evaluation episodes per task."""
    threads: int = 1
    """torch CPU threads."""
    out: Path = Path("runs/bench_bc")
    seed: int = 0


def main(args: Args) -> None:
    tasks = list(get_suite(args.suite).tasks)
    data = args.out / "demos.h5"
    t0 = time.perf_counter()
    if not data.exists():
        collect_episodes(tasks, lambda task: noisy_expert(task, args.noise, args.grasp_noise, seed=args.seed),
                         args.episodes, data, seed=args.seed)
    t1 = time.perf_counter()
    summary = train_bc(BCConfig(data=data, out=args.out / "bc", steps=args.steps, batch_size=args.batch_size,
                                language=args.language, eval_episodes=args.eval_episodes, seed=args.seed,
                                torch_threads=args.threads, overwrite=True))
    t2 = time.perf_counter()
    report("bc_suite", {
        "suite": args.suite, "episodes_per_task": args.episodes, "noise": args.noise, "grasp_noise": args.grasp_noise,
        "bc_steps": summary["steps"],
        "per_task_success": summary.get("per_task_success"), "average_success": summary.get("success_rate"),
        "val_loss": summary["val_loss"], "collect_s": round(t1 - t0, 1), "train_and_eval_s": round(t2 - t1, 1),
        "machine": "2 CPU cores"}, args)


if __name__ == "__main__":
    main(tyro.cli(Args))
