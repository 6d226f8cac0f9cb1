"""PPO from scratch on state observations: wall-clock and env steps to 90% success.

    python benchmarks/ppo_learning.py                    # reach (3 min budget) and push (20 min)
    python benchmarks/ppo_learning.py --tasks ReachCube-v0 --budgets 180

Each task trains with its family's tuned defaults (``worldsim.training.ppo.PPO_DEFAULTS``) under a
wall-clock budget, evaluating the deterministic policy every few iterations. Targets: reach
>= 95% success within 3 minutes, push >= 80% within 20 minutes (final evaluation, 200
episodes). Prints a table, then one JSON line: per task the env steps and seconds at which
evaluation first reached 90% success, the final success rate and whether the target was met.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tyro
from common import report
from rich.console import Console

from worldsim.evaluation.evaluate import evaluate_in_physics
from worldsim.policies import load_policy
from worldsim.runtime.run_logging import read_metrics
from worldsim.training.ppo import PPOConfig, train_ppo

TARGETS = {"ReachCube-v0": 0.95, "PushCube-v0": 0.80}


@dataclass
class Args:
    tasks: tuple[str, ...] = ("ReachCube-v0", "PushCube-v0")
    """Tasks to train, one after the other."""
    budgets: tuple[float, ...] = (180.0, 1200.0)
    """Wall-clock training budget per task, seconds (same order as --tasks)."""
    threshold: float = 0.9
    """Success rate whose first crossing is reported."""
    eval_seconds: float = 10.0
    """Evaluate about this often (converted to iterations from a short timing)."""
    eval_episodes: int = 100
    """Episodes per periodic evaluation."""
    final_episodes: int = 200
    """Episodes of the final evaluation."""
    seed: int = 0
    out: Path = Path("runs/bench_ppo")
    """Run folders go to <out>/<task>."""


def first_crossing(rows: list[dict[str, float]], threshold: float) -> tuple[int | None, float | None]:
    """Env step and wall-clock seconds of the first evaluation at or above ``threshold``."""
    for row in rows:
        if row.get("eval/success_rate", -1.0) >= threshold:
            return int(row["step"]), float(row["time"])
    return None, None


def main(args: Args) -> None:
    if len(args.budgets) != len(args.tasks):
        raise SystemExit(f"--budgets needs one value per task ({len(args.tasks)}); got {len(args.budgets)}")
    console = Console(stderr=True)
    results = {}
    for task, budget in zip(args.tasks, args.budgets, strict=True):
        probe = PPOConfig(task=task, out=args.out / task)
        # ~1.5 s per 8192 env steps on 2 cores: evaluate roughly every eval_seconds
        eval_every = max(1, round(args.eval_seconds * 5500 / (probe.num_envs * probe.num_steps)))
        config = PPOConfig(task=task, time_budget=budget, eval_every=eval_every,
                           eval_episodes=args.eval_episodes, seed=args.seed, out=args.out / task,
                           total_env_steps=10**10, overwrite=True)
        summary = train_ppo(config)
        rows = read_metrics(args.out / task / "metrics.jsonl")
        step, seconds = first_crossing(rows[:-1], args.threshold)  # the last row is the final evaluation
        final_eval = evaluate_in_physics(load_policy(args.out / task), [task], args.final_episodes,
                                         seed=args.seed + 20_000)
        final = final_eval["success_rate"]
        target = TARGETS.get(task)
        results[task] = {"budget_s": budget, "env_steps": summary["global_step"],
                         "train_seconds": round(summary["train_seconds"], 1),
                         f"steps_to_{args.threshold:g}": step,
                         f"seconds_to_{args.threshold:g}": None if seconds is None else round(seconds, 1),
                         "final_success_rate": final, "final_episodes": final_eval["episodes"],
                         "target": target, "target_met": None if target is None else final >= target}
        console.print(f"{task}: final success {final:.1%} after {summary['global_step']:,} steps "
                      f"({summary['train_seconds']:.0f} s); {args.threshold:.0%} first at step {step} "
                      f"/ {seconds} s")
    report("ppo_learning", {"results": results, "all_targets_met": all(r["target_met"] is not False
                                                                 for r in results.values())}, args)


if __name__ == "__main__":
    main(tyro.cli(Args))
