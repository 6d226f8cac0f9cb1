"""Failure-detection commands: ``worldsim record-features``, ``worldsim foresight`` and ``worldsim detect``."""

from __future__ import annotations

import json

from rich.console import Console

from worldsim.failure.detect import DetectionConfig
from worldsim.failure.foresight import ForesightRun
from worldsim.failure.rollouts import RecordFeaturesRun


def detect(config: DetectionConfig) -> None:
    """Evaluate failure detectors on recorded rollouts (SAFE protocol).

    Detectors are fitted on the seen tasks' rollouts, calibrated (conformal prediction) on their
    successes and tested on held-out and unseen-task rollouts, over several seeds. The last line
    printed is each detector's mean ROC-AUC per split, as JSON."""
    from worldsim.failure.detect import run_detection
    from worldsim.failure.report import print_table, results_table

    results = run_detection(config)
    print_table(results_table(results, config.alpha))
    Console().print(f"results -> {config.out}/ (results.json, table.md, roc.png, sweep.png, videos/, "
                    "detectors/)")
    print(json.dumps({name: {split: round(v["roc_auc"]["mean"], 3) for split, v in r.summary().items()}
                      for name, r in results.items()}))


def foresight(config: ForesightRun) -> None:
    """Add the world model's foresight to recorded rollouts, for the foresight detector.

    Every ``--every`` steps of each rollout the world model starts from the real frames seen so
    far and imagines the policy's next ``--look-ahead`` steps (``pixels`` rung: nothing from the
    simulator); its judge's success probability of each imagined step is the step's foresight,
    stored in the file as the per-step output ``foresight`` (the file is replaced atomically)."""
    import time

    from worldsim.failure.foresight import Foresight, record_foresight
    from worldsim.policies import load_policy
    from worldsim.runtime.threads import use_torch_threads

    use_torch_threads(config.torch_threads)
    start = time.perf_counter()
    look = Foresight(config.world_model, load_policy(config.policy), config.look)
    record_foresight(config.data, look)
    Console().print(f"foresight ({look.config.look_ahead} steps every {look.config.every}, {look.outcome} judging, "
                    f"{look.rung.name} rung) -> {config.data} in {time.perf_counter() - start:.0f} s")


def record_features(config: RecordFeaturesRun) -> None:
    """Record a policy's features and sampled chunks on recorded episodes, to fit detectors without its rollouts.

    The policy reads every recorded observation of --data (e.g. its expert demonstrations) and
    its features and --num-samples sampled chunks are stored at each step, as `worldsim collect
    --record-features` stores them while it acts; `worldsim detect --fit-data` then fits the
    detectors on them. Detectors that learn what success looks like (rnd, knn) need no failures."""
    from worldsim.failure.rollouts import record_policy_outputs
    from worldsim.policies import load_policy

    count = record_policy_outputs(config.data, load_policy(config.policy), config.out, config.task,
                                  config.num_samples, config.seed, config.overwrite)
    Console().print(f"{count} episodes with the policy's features and {config.num_samples} sampled chunks "
                    f"per step -> {config.out}")
