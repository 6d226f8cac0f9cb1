"""Scripted-expert success rate on every task variant (target: >= 95% on each), on any backend.

    python benchmarks/expert_success.py --episodes 500
    python benchmarks/expert_success.py --backend warp --families pick_place stack --episodes 200

Prints a table, then one JSON line: per-task success rate with its 95% Wilson interval, failure
rate, mean steps to success. Writes ``expert_success.json`` (MuJoCo) or
``expert_success_<backend>.json``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Literal

import tyro
from common import report
from rich.console import Console
from rich.progress import track

from worldsim.envs import TASKS
from worldsim.envs.expert import expert_success
from worldsim.envs.tasks import Family
from worldsim.evaluation.evaluate import wilson_interval


@dataclass
class Args:
    episodes: int = 500
    """Episodes per task variant (run as one parallel batch)."""
    seed: int = 0
    backend: Literal["mujoco", "mjx", "warp"] = "mujoco"
    device: str = "cpu"
    """Device of the Warp backend ("cpu": Warp's CPU device, "cuda")."""
    families: tuple[Family, ...] = ()
    """Only the variants of these families (default: every variant)."""


def main(args: Args) -> None:
    console = Console(stderr=True)
    start = time.perf_counter()
    results = {}
    options = {"device": args.device} if args.backend == "warp" else {}
    tasks = [name for name, spec in TASKS.items() if not args.families or spec.family in args.families]
    for task in track(tasks, description="expert episodes", console=console):
        stats = expert_success(task, args.episodes, args.seed, args.backend, **options)
        wins = round(stats.success_rate * stats.episodes)
        results[task] = asdict(stats) | {"success_ci95": list(wilson_interval(wins, stats.episodes))}
        console.print(f"{task:28s} success {stats.success_rate:.3f}  failure {stats.failure_rate:.3f}  "
                      f"steps {stats.mean_success_steps:.1f}")
    worst = min(r["success_rate"] for r in results.values())
    name = "expert_success" if args.backend == "mujoco" else f"expert_success_{args.backend}"
    report(name, {"backend": args.backend, "episodes_per_task": args.episodes, "min_success_rate": worst,
                      "all_at_least_0.95": worst >= 0.95, "seconds": round(time.perf_counter() - start, 1),
                      "tasks": results}, args)


if __name__ == "__main__":
    main(tyro.cli(Args))
