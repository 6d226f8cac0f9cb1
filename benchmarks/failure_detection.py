"""Failure detection on TinyVLA rollouts: every detector, SAFE protocol, 3 seeds.

    python benchmarks/bc_suite.py --suite tabletop-10 --steps 8000 --eval-episodes 0 --out runs/bench_fd_policy
    python benchmarks/failure_detection.py
    python benchmarks/failure_detection.py --cp constant --rollouts runs/bench_fd/rollouts.h5 \
        --out runs/bench_fd_constant

The first command trains the policy watched here: TinyVLA (state-dependent action std) on 200
noisy expert episodes of each tabletop-10 task, stopped early enough to fail often. This
script then records ``--episodes`` rollouts per task (the policy executing its mean chunk, as
deployed) with the policy's features and 8 sampled chunks per step (``rollouts.h5``, reused if present),
runs the ``worldsim detect`` pipeline on them with
the suite's seen/unseen split (results, table, ROC and alpha-sweep plots, annotated videos in
``--out``), and measures the online overhead of each saved detector inside
:class:`~worldsim.failure.DetectorWrapper` on a 16-env pixel vector env. Prints one JSON line
last: failure rate, per-detector ROC-AUC (seen / unseen), balanced accuracy, TPR, TNR and
detection time at alpha, and milliseconds per env step.

Targets (issue 6): best SAFE ROC-AUC >= 0.85 seen, >= 0.80 unseen; FIPER balanced accuracy
>= 0.78; detector overhead < 1 ms per step.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import tyro
from common import report
from rich.console import Console

from worldsim.data.collect import collect_episodes
from worldsim.envs.tasks import get_suite
from worldsim.failure import DetectorWrapper, load_detector
from worldsim.failure.detect import ALL, DetectionConfig, parse_detectors, run_detection
from worldsim.policies import load_policy
from worldsim.policies.runner import ChunkQueue
from worldsim.runtime.threads import use_torch_threads


@dataclass
class Args:
    policy: Path = Path("runs/bench_fd_policy/bc/policy")
    """The policy to watch (see the module docstring for how it is trained)."""
    suite: str = "tabletop-10"
    """Suite whose seen/unseen split the detectors use."""
    episodes: int = 60
    """Rollouts per task."""
    num_samples: int = 8
    """Sampled chunks recorded per step."""
    detectors: str = ALL
    alpha: float = 0.1
    cp: str = "functional"
    """Conformal calibration of every detector: functional or constant."""
    rollouts: Path | None = None
    """Reuse this rollout file (default: ``out/rollouts.h5``, collected if missing)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    overhead_steps: int = 100
    """Vector-env steps of the online overhead measurement."""
    threads: int = 1
    """torch CPU threads."""
    out: Path = Path("runs/bench_fd")


def online_overhead(policy_path: Path, detector_dir: Path, task: str, steps: int, num_samples: int) -> dict:
    """Per-env-step milliseconds of the wrapper around a 16-env pixel env: policy passes, detector."""
    policy = load_policy(policy_path)
    detector = load_detector(detector_dir)
    env = DetectorWrapper(
        gym.make_vec(f"worldsim/{task}", num_envs=16, **policy.env_kwargs()),
        policy,
        detector,
        num_samples=num_samples,
    )
    try:
        queue = ChunkQueue(policy, env.num_envs)
        obs, info = env.reset(seed=0)
        alarms = 0
        for _ in range(steps):
            obs, _, _, _, info = env.step(np.clip(queue(obs), -1, 1))
            queue.restart(info["episode_step"] == 0)
            alarms += int(info["failure_alarm"].sum())
    finally:
        env.close()
    return {k: round(v, 4) for k, v in env.overhead_ms.items()}


def main(args: Args) -> None:
    console = Console(stderr=True)
    use_torch_threads(args.threads)
    if not (args.policy / "config.json").exists():
        raise SystemExit(f"no policy at {args.policy}; train it first (see this script's docstring)")
    suite = get_suite(args.suite)
    rollouts = args.rollouts or args.out / "rollouts.h5"
    policy = load_policy(args.policy)
    t0 = time.perf_counter()
    if not rollouts.exists():
        stats = collect_episodes(
            list(suite.tasks),
            lambda task: policy,
            args.episodes,
            rollouts,
            record_features=True,
            num_samples=args.num_samples,
            deterministic=True,
        )
        console.print({t: round(s.success_rate, 2) for t, s in stats.tasks.items()})
    t1 = time.perf_counter()
    run_detection(
        DetectionConfig(
            data=rollouts,
            detectors=args.detectors,
            suite=args.suite,
            alpha=args.alpha,
            cp=args.cp,
            seeds=args.seeds,
            out=args.out,
        )
    )
    t2 = time.perf_counter()
    results = json.loads((args.out / "results.json").read_text())
    overhead = {
        name: online_overhead(
            args.policy, args.out / "detectors" / name, suite.unseen[0], args.overhead_steps, args.num_samples
        )
        for name in parse_detectors(args.detectors)
    }
    per_detector = {}
    for name, result in results["detectors"].items():
        row = {}
        for split, stats in result["summary"].items():
            row[split] = {metric: round(v["mean"], 3) for metric, v in stats.items()}
            row[split]["roc_auc_std"] = round(stats["roc_auc"]["std"], 3)
        row["online_ms_per_step"] = overhead[name]
        row["fit_seconds"] = round(result["fit_seconds"], 1)
        per_detector[name] = row
    report("failure_detection", {
                "suite": args.suite,
                "episodes": results["episodes"],
                "failure_rate": round(results["failures"] / results["episodes"], 3),
                "alpha": args.alpha,
                "cp": args.cp,
                "seeds": len(args.seeds),
                "detectors": per_detector,
                "collect_s": round(t1 - t0, 1),
                "detect_s": round(t2 - t1, 1),
                "machine": "2 CPU cores",
                "results": str(args.out / "results.json"),
            }, args)


if __name__ == "__main__":
    main(tyro.cli(Args))
