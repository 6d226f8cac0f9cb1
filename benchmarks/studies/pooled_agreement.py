"""Finished ``worldsim eval-wm`` runs, one per seed, pooled: the imagined-vs-real outcome agreement
of each window kind (balanced keyframe windows of 8 and 16 steps, the last 8 steps, full replays)
over every seed's windows at once, with its 95% (Wilson) interval, beside physics' own agreement
on the same episodes with the task's cube a fraction of a millimetre off (``physics_ceiling``).
Balanced keyframe windows that end in a success within 8 steps are few on a policy's own
episodes; pooling seeds is what gives their figure an interval narrower than the gap it reads.

    python benchmarks/studies/pooled_agreement.py --evals runs/agree8/eval_s0 runs/agree8/eval_s1 \\
        runs/agree8/eval_s2 --name agreement_pixels_6rounds
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from worldsim.evaluation.evaluate import wilson_interval

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

WINDOWS = ("keyframe_8_balanced", "keyframe_16_balanced", "last_8", "full")


def pooled(rows: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Agreement over the windows of every row (``None`` rows, an empty set, count nothing)."""
    rows = [r for r in rows if r]
    episodes = sum(r["episodes"] for r in rows)
    if episodes == 0:
        return None
    agreed = sum(r["true_positive"] + r["true_negative"] for r in rows)
    return {"accuracy": agreed / episodes, "ci95": list(wilson_interval(agreed, episodes)), "windows": episodes,
            "per_run": [r["accuracy"] for r in rows], "base_rate": 0.5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=Path, nargs="+", required=True, help="eval-wm output folders")
    parser.add_argument("--name", required=True, help="the result file's name")
    args = parser.parse_args()
    runs = []
    for folder in args.evals:
        if not (folder / "fidelity.json").is_file():
            parser.error(f"--evals {folder}: no fidelity.json (an unfinished or missing eval-wm run)")
        runs.append(json.loads((folder / "fidelity.json").read_text()))
    unbalanced = [str(f) for f, r in zip(args.evals, runs, strict=True) if not r["held_out"].get("balanced")]
    if unbalanced:
        parser.error(f"--evals {' '.join(unbalanced)}: not balanced (eval-wm --balance): no 50% base rate")
    physics = sorted({k for r in runs for k in (r.get("physics_ceiling") or {})})
    report(args.name, {
        "evals": [str(f) for f in args.evals], "rung": sorted({r["rung"] for r in runs}),
        "judge": sorted({str(r["judge"]) for r in runs}),
        "held_out_episodes": [r["held_out"]["episodes"] for r in runs],
        "psnr_8": [r["psnr_at_8"] for r in runs], "psnr_32": [r["psnr_at_horizon"] for r in runs],
        "object_error_cm_16": [(r.get("object_error_after_contact") or {}).get("at_horizon_cm") for r in runs],
        "agreement": {w: pooled([r["success_by_horizon"].get(w) for r in runs]) for w in WINDOWS},
        "physics_full": {k: pooled([(r.get("physics_ceiling") or {}).get(k) for r in runs]) for k in physics},
    }, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
