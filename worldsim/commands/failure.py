"""Failure-detection command: ``worldsim detect``."""

from __future__ import annotations

import json

from rich.console import Console

from worldsim.failure.detect import DetectionConfig


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
