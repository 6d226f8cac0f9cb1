"""Staggered vs synchronous resets for PPO with short rollouts (PushCube-v0, horizon 100).

    python benchmarks/studies/staggered_resets.py                 # full study: 2 x 3 x 3 runs of 1M steps
    python benchmarks/studies/staggered_resets.py --short         # a quick sanity version

With every env starting at step 0 and rollouts much shorter than the episode, each PPO batch
holds one phase of the episode (first the approach, later the push); staggered starts put
every phase in every batch. Training episodes run to the time limit
(``terminate_on_success=False``, as PPO trains by default), so a synchronous start stays
synchronous for the whole run. For each schedule, rollout length (steps per rollout) and
seed, PPO trains from scratch for the same number of env steps; the curves (rollout success
and return against env steps, mean and range over seeds) go to ``curves.png`` and the final
numbers (deterministic evaluation on fresh envs, plus rollout figures over the last 5
iterations) to ``results.json`` in ``--out``. Runs already finished in ``--out`` are reused, so
an interrupted study picks up where it stopped. Prints one JSON line last.

Read early rollout curves with care: a staggered env's first episode starts at its offset, so
it is shorter than H; only once every env has finished a few episodes are the rollout figures
of the two schedules comparable. The evaluation numbers are comparable throughout.
"""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro
from rich.console import Console

from worldsim.runtime.run_logging import read_metrics, write_json
from worldsim.training.ppo import PPOConfig, train_ppo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

SCHEDULES = ("synchronous", "staggered")


@dataclass
class Args:
    task: str = "PushCube-v0"
    """Task (horizon >= 100 for the study to mean anything)."""
    num_envs: int = 256
    """Parallel envs."""
    rollout_steps: tuple[int, ...] = (4, 8, 16)
    """Steps per rollout to compare."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds per setting."""
    total_env_steps: int = 1_000_000
    """Env steps per run (equal for every run)."""
    num_minibatches: int = 4
    """Minibatches per update epoch (must divide num_envs x steps per rollout)."""
    eval_episodes: int = 100
    """Episodes of each run's final deterministic evaluation."""
    short: bool = False
    """Quick sanity mode: 2 seeds, rollouts of 4 and 16 steps, 40k env steps."""
    out: Path = Path("runs/bench_staggered")
    """Where run folders, curves.png and results.json go."""


def curve(rows: list[dict[str, float]], key: str, grid: np.ndarray) -> np.ndarray:
    """``key`` against env steps, interpolated onto ``grid`` (NaN before the first value)."""
    points = [(r["step"], r[key]) for r in rows if key in r and "approx_kl" in r]
    if not points:
        return np.full(len(grid), np.nan)
    steps, values = map(np.asarray, zip(*points, strict=True))
    return np.where(grid >= steps[0], np.interp(grid, steps, values), np.nan)


def finished_run(out: Path, total_env_steps: int) -> dict | None:
    """The summary of a run already finished in ``out`` (so an interrupted study resumes), else None."""
    path = out / "eval.json"
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    if result.get("env_steps", 0) < total_env_steps:
        return None
    return {"eval": result, "train_seconds": result["train_seconds"]}


def plot(curves: dict, grid: np.ndarray, rollout_steps: tuple[int, ...], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from worldsim.runtime.atomic import atomic_path

    metrics = (("episode/success_rate", "rollout success"), ("episode/return", "episode return"))
    fig, axes = plt.subplots(2, len(rollout_steps), figsize=(4 * len(rollout_steps), 6), squeeze=False)
    for col, steps in enumerate(rollout_steps):
        for row, (key, label) in enumerate(metrics):
            ax = axes[row, col]
            for schedule in SCHEDULES:
                runs = np.stack(curves[schedule][steps][key])
                with warnings.catch_warnings():  # grid points before any run's first episode are all NaN
                    warnings.simplefilter("ignore", RuntimeWarning)
                    mean, low, high = np.nanmean(runs, 0), np.nanmin(runs, 0), np.nanmax(runs, 0)
                ax.plot(grid, mean, label=schedule)
                ax.fill_between(grid, low, high, alpha=0.2)
            ax.set_title(f"{steps} steps per rollout", fontsize=9)
            ax.set_xlabel("env steps", fontsize=8)
            ax.set_ylabel(label, fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)


def main(args: Args) -> None:
    if args.short:
        args.seeds, args.rollout_steps, args.total_env_steps = (0, 1), (4, 16), 40_000
    console = Console(stderr=True)
    grid = np.linspace(0, args.total_env_steps, 101)
    curves: dict = {s: {n: {"episode/success_rate": [], "episode/return": []} for n in args.rollout_steps}
                    for s in SCHEDULES}
    final: dict = {s: {n: [] for n in args.rollout_steps} for s in SCHEDULES}
    for steps in args.rollout_steps:
        for schedule in SCHEDULES:
            for seed in args.seeds:
                out = args.out / f"{schedule}_n{steps}_s{seed}"
                config = PPOConfig(task=args.task, num_envs=args.num_envs, num_steps=steps,
                                   reset_schedule=schedule, num_minibatches=args.num_minibatches,
                                   total_env_steps=args.total_env_steps, eval_every=0,
                                   eval_episodes=args.eval_episodes, checkpoint_every=0, seed=seed, out=out,
                                   overwrite=True, progress=False)
                summary = finished_run(out, args.total_env_steps) or train_ppo(config)
                rows = read_metrics(out / "metrics.jsonl")
                for key in curves[schedule][steps]:
                    curves[schedule][steps][key].append(curve(rows, key, grid))
                tail = [r for r in rows if "episode/return" in r][-5:]
                final[schedule][steps].append({
                    "seed": seed, "eval_success_rate": summary["eval"]["success_rate"],
                    "rollout_success_rate": float(np.mean([r["episode/success_rate"] for r in tail])),
                    "rollout_return": float(np.mean([r["episode/return"] for r in tail])),
                    "train_seconds": round(summary["train_seconds"], 1)})
                result = final[schedule][steps][-1]
                console.print(f"{schedule:12s} {steps:2d} steps/rollout seed {seed}: eval success "
                              f"{result['eval_success_rate']:.2f}, return {result['rollout_return']:.1f}")
    plot(curves, grid, args.rollout_steps, args.out / "curves.png")
    summary = {s: {str(n): {"eval_success_mean": float(np.mean([r["eval_success_rate"] for r in runs])),
                            "eval_success_std": float(np.std([r["eval_success_rate"] for r in runs])),
                            "return_mean": float(np.mean([r["rollout_return"] for r in runs])),
                            "runs": runs}
                   for n, runs in per_steps.items()}
               for s, per_steps in final.items()}
    document = {"task": args.task, "num_envs": args.num_envs, "total_env_steps": args.total_env_steps,
                "seeds": list(args.seeds), "results": summary, "plot": str(args.out / "curves.png")}
    write_json(args.out / "results.json", document)
    report("staggered_resets", {"task": args.task, "total_env_steps": args.total_env_steps, "seeds": len(args.seeds),
                      "eval_success": {s: {n: round(v["eval_success_mean"], 3) for n, v in per.items()}
                                       for s, per in summary.items()},
                      "return": {s: {n: round(v["return_mean"], 2) for n, v in per.items()}
                                 for s, per in summary.items()},
                      "results": str(args.out / "results.json")}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main(tyro.cli(Args))
