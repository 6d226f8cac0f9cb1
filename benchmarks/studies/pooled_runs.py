"""Finished co-evolution runs (``worldsim coevolve --test-episodes N``), one per seed, pooled: each
run's final policy against its base on its test episodes, and all of them at once (McNemar,
paired by episode), with the real success per round and the rounds the guard rolled back.
``--against`` names, run for run, other runs of the same seeds whose final policies ran the same
test episodes (the same ``--seed``): the pooled comparison of ours against theirs.

    python benchmarks/studies/pooled_runs.py --runs runs/mr/pixels2_s0 runs/mr/pixels4_s1 runs/mr/pixels4_s2 \\
        --against runs/ladder/pixels_s0 runs/ladder/pixels_s1 runs/ladder/pixels_s2 --name coevolve_pixels_4rounds
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from worldsim.evaluation.compare import paired_comparison

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py, the ladder's helpers
from coevolve import outcomes  # noqa: E402
from common import STUDY_RESULTS, report  # noqa: E402
from imagination_ladder import points, pooled  # noqa: E402


def summary(comparison: dict[str, Any]) -> dict[str, Any]:
    """A paired comparison in points: both rates, the difference, its 95% interval, the p-value."""
    difference, interval = points(comparison)
    return {"before": comparison["before"]["success_rate"], "after": comparison["after"]["success_rate"],
            "difference": difference, "difference_ci95": interval, "p_value": comparison["p_value"],
            "episodes": comparison["episodes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="co-evolution run folders")
    parser.add_argument("--against", type=Path, nargs="*", default=[], help="one run per --runs entry")
    parser.add_argument("--name", required=True, help="the result file's name")
    args = parser.parse_args()
    if args.against and len(args.against) != len(args.runs):
        parser.error(f"--against names {len(args.against)} runs for {len(args.runs)} --runs: give one each")

    def load(flag: str, run: Path) -> dict[str, Any]:
        """A finished run's results.json, with its test episodes (else a one-line error)."""
        if not (run / "results.json").is_file():
            parser.error(f"{flag} {run}: no results.json (an unfinished or missing run)")
        result = json.loads((run / "results.json").read_text())
        if not result.get("test"):
            parser.error(f"{flag} {run}: no test episodes (coevolve --test-episodes)")
        return result

    results = [load("--runs", run) for run in args.runs]
    pairs = [outcomes(r) for r in results]
    metrics: dict[str, Any] = {
        "runs": [str(r) for r in args.runs], "real_budget": [r["real_budget"] for r in results],
        "per_run_vs_base": [summary(paired_comparison(*pair)) for pair in pairs],
        "pooled_vs_base": summary(pooled(pairs)),
        "real_success_per_round": [[x["real"]["success_rate"] for x in r["rounds"]] for r in results],
        "rolled_back_rounds": [[x["round"] for x in r["rounds"] if not x["accepted"]] for r in results],
        "wall_clock_s": [r["wall_clock_s"] for r in results]}
    if args.against:
        theirs = [outcomes(load("--against", run))[1] for run in args.against]
        metrics["against"] = [str(r) for r in args.against]
        metrics["pooled_vs_against"] = summary(pooled([(t, f) for t, (_, f) in zip(theirs, pairs, strict=True)]))
    report(args.name, metrics, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
