"""Which rollouts must a failure detector be fitted on?

The same detectors, fitted per seed on one of several sets of the seen tasks' rollouts, then
calibrated on the real calibration successes and tested on the real test rollouts of SAFE's
protocol (``worldsim.failure.protocol``), as ``worldsim detect --fit-data`` does:

- ``real``: the seed's own training split of the policy's real rollouts (the protocol's default);
- each ``--fit LABEL=FILE``: rollouts recorded elsewhere, e.g. imagined by a world model
  (``worldsim collect --world-model ... --record-features``);
- ``expert-frames``: no rollout of the policy at all: its features and sampled chunks on the
  frames of ``--demo-episodes`` expert demonstrations per seen task (the episodes the world model
  learned from and starts at; ``worldsim record-features``, kept beside ``--demos``), labelled by
  the demonstrations' own outcomes. What a detector fitted on imagined rollouts must beat to show
  that the imagining, not the real frames it starts from, carries it. ``expert-frames-all``: every
  demonstration of the seen tasks.

    python benchmarks/studies/detector_fit_sources.py --fit imagined=runs/bench_fd/imagined.h5 \\
        imagined-90=runs/fd_study/imagined90.h5

Writes ``benchmarks/studies/results/detector_fit_sources.json``: under ``metrics.sources.<source>``,
the fit set's size and failures, and per detector and split the pooled ROC-AUC with its 95%
episode-bootstrap interval and verdict, and the ROC-AUC within tasks.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import tyro
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import STUDY_RESULTS, report  # noqa: E402

from worldsim.envs.tasks import get_suite  # noqa: E402
from worldsim.failure.protocol import ProtocolConfig, evaluate_detector  # noqa: E402
from worldsim.failure.rollouts import Rollout, load_rollouts, record_policy_outputs  # noqa: E402
from worldsim.policies import load_policy  # noqa: E402
from worldsim.runtime.threads import use_torch_threads  # noqa: E402


@dataclass
class Args:
    rollouts: Path = Path("runs/bench_fd/rollouts.h5")
    """The policy's real rollouts (``benchmarks/failure_detection.py``): calibration and test."""
    fit: tuple[str, ...] = ()
    """Other fit sets, each ``LABEL=FILE``."""
    demos: Path = Path("runs/bench_fd_policy/demos.h5")
    """Expert demonstrations of the suite's tasks."""
    demo_episodes: int = 30
    """Expert demonstrations per seen task for ``expert-frames`` (the training split's count)."""
    policy: Path = Path("runs/bench_fd_policy/bc/policy")
    suite: str = "tabletop-10"
    detectors: tuple[str, ...] = ("safe-mlp", "rnd", "knn", "mahalanobis", "stac")
    num_samples: int = 8
    seeds: tuple[int, ...] = (0, 1, 2)
    threads: int = 2
    name: str = "detector_fit_sources"
    """The result file's name."""


def first_per_task(rollouts: list[Rollout], count: int) -> list[Rollout]:
    """The first ``count`` rollouts of each task."""
    kept: dict[str, list[Rollout]] = {}
    for r in rollouts:
        kept.setdefault(r.task, [])
        if len(kept[r.task]) < count:
            kept[r.task].append(r)
    return [r for group in kept.values() for r in group]


def main(args: Args) -> None:
    use_torch_threads(args.threads)
    suite = get_suite(args.suite)
    protocol = ProtocolConfig(seen_tasks=suite.seen, unseen_tasks=suite.unseen, seeds=args.seeds)
    rollouts = load_rollouts(args.rollouts)
    policy = load_policy(args.policy).eval()
    sources: dict[str, list[Rollout] | None] = {"real": None}
    for spec in args.fit:
        label, _, path = spec.partition("=")
        if not path:
            raise SystemExit(f"--fit {spec!r}: give LABEL=FILE")
        sources[label] = load_rollouts(path)
    recorded = args.demos.with_name(f"{args.demos.stem}_features.h5")  # worldsim record-features
    if not recorded.exists():
        record_policy_outputs(args.demos, policy, recorded, suite.seen, args.num_samples)
    demonstrations = load_rollouts(recorded)
    sources["expert-frames"] = first_per_task(demonstrations, args.demo_episodes)
    sources["expert-frames-all"] = demonstrations
    console = Console(stderr=True)
    metrics: dict[str, dict] = {"sources": {}}
    for label, fit in sources.items():
        entry: dict = {"episodes": None if fit is None else len(fit),
                       "failures": None if fit is None else sum(not r.success for r in fit), "detectors": {}}
        for name in args.detectors:
            result = evaluate_detector(name, rollouts, protocol, fit=fit)
            summary, verdicts = result.summary(), result.verdicts()
            entry["detectors"][name] = {
                split: {"roc_auc": round(summary[split]["roc_auc"]["mean"], 3),
                        "roc_auc_ci": [round(x, 3) for x in verdicts[split]["shortest_success"].interval],
                        "call": verdicts[split]["shortest_success"].call,
                        "roc_auc_per_task": round(summary[split]["roc_auc_per_task"]["mean"], 3)}
                for split in summary}
            console.print(label, name, {s: v["roc_auc"] for s, v in entry["detectors"][name].items()})
        metrics["sources"][label] = entry
    report(args.name, metrics, args, STUDY_RESULTS)


if __name__ == "__main__":
    main(tyro.cli(Args))
