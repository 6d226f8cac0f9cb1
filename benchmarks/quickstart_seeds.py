"""The quickstart over several seeds: each run's paired comparison of the BC policy and the policy
after GRPO in imagination, and the comparison pooled over the runs.

Each run is a ``worldsim quickstart --seed S --out DIR`` folder. Its ``summary.json`` holds the
comparison on its 200 paired real episodes (episode k starts from the same state for both
policies); the pooled comparison takes every run's episodes together (McNemar's exact test on
the discordant episodes, the difference with its 95% interval), since one seed of one short
round swings by several points. It also gives what the guard decided and the run's final policy.

    for s in 0 1 2 3; do worldsim quickstart --seed $s --out runs/quickstart_s$s; done
    python benchmarks/quickstart_seeds.py runs/quickstart_s0 runs/quickstart_s1 runs/quickstart_s2 runs/quickstart_s3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import report

from worldsim.evaluation.compare import paired_comparison


def outcomes(comparison: dict) -> tuple[list[bool], list[bool]]:
    """Per-episode outcomes with the counts of a run's comparison: McNemar's test and the paired
    interval depend on those counts alone (both succeeded, only one did, neither)."""
    n = comparison["episodes"]
    gained, lost = comparison["only_after_succeeded"], comparison["only_before_succeeded"]
    both = round(comparison["before"]["success_rate"] * n) - lost
    neither = n - both - gained - lost
    before = [True] * both + [False] * gained + [True] * lost + [False] * neither
    after = [True] * both + [True] * gained + [False] * lost + [False] * neither
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="quickstart --out folders")
    args = parser.parse_args()
    rows, before, after = [], [], []
    for run in args.runs:
        path = run / "summary.json"
        if not path.exists():
            parser.error(f"{path}: no such file (a finished `worldsim quickstart --out {run}` writes it)")
        summary = json.loads(path.read_text())
        first, then = outcomes(summary["comparison"])
        before += first
        after += then
        comparison = paired_comparison(first, then)
        rows.append({"run": str(run), "seed": summary["seed"], "minutes": round(summary["wall_clock_s"] / 60, 1),
                     "bc": comparison["before"]["success_rate"], "after_grpo": comparison["after"]["success_rate"],
                     "difference": comparison["difference"], "difference_ci95": comparison["difference_ci95"],
                     "p_value": comparison["p_value"], "imagined_success": summary["imagined_success"],
                     "guard": summary["guard"], "final_real_success": summary["final_real_success"]})
        print(json.dumps(rows[-1]))
    pooled = paired_comparison(before, after)
    report("quickstart_seeds", {"runs": rows, "pooled": pooled,
                                "pooled_final_real_success": sum(r["final_real_success"] for r in rows) / len(rows)},
           args)


if __name__ == "__main__":
    main()
