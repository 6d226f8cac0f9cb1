"""Scripted-expert success rate on every task variant (target: >= 95% on each).

    python benchmarks/expert_success.py --episodes 500

Prints a table, then one JSON line: per-task success and failure rates, mean steps to success.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import tyro
from common import report
from rich.console import Console
from rich.progress import track

from worldsim.envs import TASKS
from worldsim.envs.expert import expert_success


@dataclass
class Args:
    episodes: int = 500
    """Episodes per task variant (run as one parallel batch)."""
    seed: int = 0


def main(args: Args) -> None:
    console = Console(stderr=True)
    start = time.perf_counter()
    results = {}
    for task in track(list(TASKS), description="expert episodes", console=console):
        stats = expert_success(task, args.episodes, args.seed)
        results[task] = asdict(stats)
        console.print(f"{task:28s} success {stats.success_rate:.3f}  failure {stats.failure_rate:.3f}  "
                      f"steps {stats.mean_success_steps:.1f}")
    worst = min(r["success_rate"] for r in results.values())
    report("expert_success", {"episodes_per_task": args.episodes, "min_success_rate": worst,
                      "all_at_least_0.95": worst >= 0.95, "seconds": round(time.perf_counter() - start, 1),
                      "tasks": results})


if __name__ == "__main__":
    main(tyro.cli(Args))
