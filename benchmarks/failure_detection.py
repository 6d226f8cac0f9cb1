"""Failure detection on TinyVLA rollouts: every detector, SAFE protocol, 3 seeds.

    python benchmarks/bc_suite.py --suite tabletop-10 --steps 8000 --eval-episodes 0 --out runs/bench_fd_policy
    worldsim train-wm --data runs/bench_fd_policy/demos.h5 --steps 3000 --out runs/fd_wm
    python benchmarks/failure_detection.py --world-model runs/fd_wm
    python benchmarks/failure_detection.py --cp constant --rollouts runs/bench_fd/rollouts.h5 \
        --out runs/bench_fd_constant

The first command trains the policy watched here: TinyVLA (state-dependent action std) on 200
noisy expert episodes of each tabletop-10 task, stopped early enough to fail often. This
script then records ``--episodes`` rollouts per task (the policy executing its mean chunk, as
deployed) with the policy's features and 8 sampled chunks per step (``rollouts.h5``, reused if present),
runs the ``worldsim detect`` pipeline on them with
the suite's seen/unseen split (results, table, ROC and alpha-sweep plots, annotated videos in
``--out``), and measures the online overhead of each saved detector inside
:class:`~worldsim.failure.DetectorWrapper` on a 16-env pixel vector env. Writes
``benchmarks/results/failure_detection.json``; under ``metrics.splits.<seen|unseen>.<detector>``:
``roc_auc`` (pooled over the split's tasks) with ``roc_auc_ci`` (95% episode bootstrap) and its
call, ``roc_auc_per_task`` (within each task, averaged), ``balanced_accuracy``, ``tpr``, ``tnr``
and ``detection_time`` at the calibrated alpha, ``ms_per_step`` (the detector's share of an env
step, online). ``task-prior`` is the trivial detector (each rollout scored by its task's failure
rate in the fit rollouts; unseen tasks by the nearest seen instruction): a pooled ROC-AUC that
does not clear it detects nothing but the task. ``metrics.best_unseen`` names the best detector
on unseen tasks and its margin over the task prior.

With ``--world-model`` (the second command: the ``tiny`` preset on the policy's expert
demonstrations of every task, never on its rollouts), the world model joins in two ways, both on
the ``pixels`` rung (nothing from the simulator while imagining):

- ``foresight``: every 4 steps of each rollout the model imagines the policy's next 8 steps from
  the real frames so far (``worldsim foresight``), and SAFE-MLP's model learns from the imagined
  success probabilities which futures precede failures;
- ``<detector>@imagined``: each detector fitted on the policy's rollouts imagined from real starts
  of the seen tasks (``--imagined-episodes`` per task: by default as many as the protocol's
  training split holds of real ones, judged by the model's own judge), then calibrated on the real
  calibration successes and tested on the real test rollouts like the others.
  ``metrics.imagined_vs_real.<detector>``: its unseen ROC-AUC over the real-fitted one's.

Targets: best detector's unseen ROC-AUC >= 0.85 and >= the task prior's + 0.1; overhead < 1 ms per
step; a detector fitted on imagined rollouts >= 0.9x the same detector fitted on real ones.
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
from worldsim.data.reader import EpisodeReader
from worldsim.envs.imagination import PIXELS, ImaginationConfig
from worldsim.envs.tasks import get_suite
from worldsim.failure import DetectorWrapper, load_detector
from worldsim.failure.detect import ALL, DetectionConfig, run_detection
from worldsim.failure.foresight import Foresight, record_foresight
from worldsim.failure.protocol import ProtocolConfig
from worldsim.failure.task_prior import NAME as TASK_PRIOR
from worldsim.policies import Policy, load_policy
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
    world_model: Path | None = None
    """A world model of the suite's tasks: adds the ``foresight`` detector and the detectors fitted
    on rollouts imagined in it (see the module docstring)."""
    keyframes: Path = Path("runs/bench_fd_policy/demos.h5")
    """Real episodes whose first frames start the imagined rollouts (their state is never read)."""
    imagined_episodes: int | None = None
    """Imagined rollouts per seen task (None: as many as the training split holds of real ones)."""


def online_overhead(policy_path: Path, detector_dir: Path, task: str, steps: int, num_samples: int,
                    world_model: Path | None = None) -> dict:
    """Per-env-step milliseconds of the wrapper around a 16-env pixel env: policy passes, detector
    (for ``foresight``, the world model's look-aheads included)."""
    policy = load_policy(policy_path)
    detector = load_detector(detector_dir)
    foresight = Foresight(world_model, policy) if "foresight" in detector.needs and world_model else None
    env = DetectorWrapper(
        gym.make_vec(f"worldsim/{task}", num_envs=16, **policy.env_kwargs()),
        policy,
        detector,
        num_samples=num_samples,
        foresight=foresight,
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


def with_world_model(args: Args, policy: Policy, rollouts: Path) -> tuple[Path, dict]:
    """The world model's two parts (see the module docstring): foresight added to ``rollouts``
    (unless there), and the seen tasks' imagined rollouts (``out/imagined.h5``, reused if present)."""
    assert args.world_model is not None
    suite, seconds = get_suite(args.suite), {}
    with EpisodeReader(rollouts) as reader:
        has_foresight = "foresight" in reader.policy_keys
    start = time.perf_counter()
    if not has_foresight:
        record_foresight(rollouts, Foresight(args.world_model, policy))
    seconds["foresight_s"] = round(time.perf_counter() - start, 1)
    imagined = args.out / "imagined.h5"
    episodes = args.imagined_episodes or round(ProtocolConfig(suite.seen).train_fraction * args.episodes)
    start = time.perf_counter()
    if not imagined.exists():
        stats = collect_episodes(
            list(suite.seen), lambda task: policy, episodes, imagined, record_features=True,
            num_samples=args.num_samples, deterministic=True, obs_mode="pixels",
            imagination=ImaginationConfig(world_model=args.world_model, keyframes=args.keyframes, keyframe_ratio=0.0,
                                          horizon=None, rung=PIXELS),
        )
        Console(stderr=True).print({t: round(s.success_rate, 2) for t, s in stats.tasks.items()})
    seconds["imagined_s"] = round(time.perf_counter() - start, 1)
    with EpisodeReader(imagined) as reader:
        infos = reader.episode_info()
    seconds["imagined_success"] = {task: round(float(np.mean([i.success for i in infos if i.task == task])), 3)
                                   for task in dict.fromkeys(i.task for i in infos)}
    return imagined, seconds


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
    imagined, world_model_s = (None, {}) if args.world_model is None else with_world_model(args, policy, rollouts)
    t2 = time.perf_counter()
    run_detection(
        DetectionConfig(
            data=rollouts,
            detectors=args.detectors,
            fit_data=imagined,
            suite=args.suite,
            alpha=args.alpha,
            cp=args.cp,
            seeds=args.seeds,
            out=args.out,
        )
    )
    t3 = time.perf_counter()
    results = json.loads((args.out / "results.json").read_text())
    overhead = {
        name: online_overhead(args.policy, args.out / "detectors" / name, suite.unseen[0], args.overhead_steps,
                              args.num_samples, args.world_model)
        for name in results["detectors"] if "@" not in name  # the same detector online, fitted elsewhere
    }
    rows = {**results["detectors"], **({TASK_PRIOR: results["task_prior"]} if results["task_prior"] else {})}
    splits: dict[str, dict[str, dict]] = {}
    for name, result in rows.items():
        for split, stats in result["summary"].items():
            window = result["verdicts"][split]["shortest_success"]
            splits.setdefault(split, {})[name] = {
                **{metric: _rounded(v["mean"]) for metric, v in stats.items()},
                "roc_auc_std": _rounded(stats["roc_auc"]["std"]),
                "roc_auc_ci": [_rounded(x) for x in window["interval"]],
                "call": window["call"],
                "ms_per_step": overhead.get(name.split("@")[0], {}).get("detector"),
                "fit_seconds": round(result["fit_seconds"], 2),
            }
    unseen = {n: m for n, m in splits["unseen"].items() if n != TASK_PRIOR and m["roc_auc"] is not None}
    best = max(unseen, key=lambda n: unseen[n]["roc_auc"])
    prior = splits["unseen"].get(TASK_PRIOR, {}).get("roc_auc")
    report("failure_detection", {
        "suite": args.suite,
        "episodes": results["episodes"],
        "failure_rate": round(results["failures"] / results["episodes"], 3),
        "failure_rate_per_task": {task: round(rate, 3) for task, rate in results["failure_rates"].items()},
        "calibration": results["calibration"],
        "seeds": len(args.seeds),
        "splits": splits,
        "best_unseen": {"detector": best, "roc_auc": unseen[best]["roc_auc"],
                        "roc_auc_per_task": unseen[best]["roc_auc_per_task"], "task_prior": prior,
                        "over_task_prior": None if prior is None else round(unseen[best]["roc_auc"] - prior, 3)},
        "imagined_vs_real": {
            name: _rounded(splits["unseen"][f"{name}@imagined"]["roc_auc"] / splits["unseen"][name]["roc_auc"])
            for name in splits["unseen"] if f"{name}@imagined" in splits["unseen"]
            and splits["unseen"][name]["roc_auc"] and splits["unseen"][f"{name}@imagined"]["roc_auc"] is not None},
        "fit_rollouts": results["fit_rollouts"],
        "world_model": None if args.world_model is None else {"path": str(args.world_model), **world_model_s},
        "overhead_ms": overhead,
        "collect_s": round(t1 - t0, 1),
        "world_model_s": round(t2 - t1, 1),
        "detect_s": round(t3 - t2, 1),
        "results": str(args.out / "results.json"),
    }, args)


def _rounded(value: float | None) -> float | None:
    return None if value is None or value != value else round(value, 3)


if __name__ == "__main__":
    main(tyro.cli(Args))
