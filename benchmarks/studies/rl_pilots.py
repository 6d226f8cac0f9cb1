"""Compare `train-rl` runs of the same BC policies, seed by seed, on the same real episodes.

Each ``NAME=FOLDER`` holds one `train-rl` run per seed (``FOLDER/s0``, ``s1``, ...), each started
from the BC policy of that seed and evaluated on the 200 real episodes of its ``--eval-seed``.
The BC policies' own outcomes on the same episodes come from a `benchmarks/coevolve.py` run
(``--base``: its ``round 0: evaluate`` stage). For each run: the learning rate, steps, world model
(``null``: physics) and imagined reward it was trained with; real success per seed and pooled
against BC (a paired test over the same episodes); the mean real success at each periodic
evaluation (``--eval-every``) that every seed logged; the training episodes' success at the start
and the end of training (imagined ones for runs in imagination): a run whose imagined success
climbs while its real success falls is exploiting the world model's errors. Every pair of runs
is compared too.

    python benchmarks/studies/rl_pilots.py --base runs/bench_coevolve_push \\
        imagination=runs/pilot_dense60k imagination_lr1e-4=runs/pilot_dense60k_lr1e4 \\
        physics=runs/pilot_physics60k physics_lr1e-4=runs/pilot_physics60k_lr1e4
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from worldsim.evaluation.compare import paired_comparison
from worldsim.evaluation.evaluate import wilson_interval

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402


def outcomes(evaluation: dict[str, Any]) -> list[bool]:
    """The per-episode outcomes of a single-task evaluation."""
    (task,) = evaluation["per_task"].values()
    return task["outcomes"]


def training_success(folder: Path, share: float = 0.15) -> tuple[float, float]:
    """Mean success of the training episodes over the first and the last ``share`` of the logged
    iterations."""
    rows = [r for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())
            if "episode/success_rate" in r]
    k = max(1, round(share * len(rows)))
    return (round(sum(r["episode/success_rate"] for r in rows[:k]) / k, 3),
            round(sum(r["episode/success_rate"] for r in rows[-k:]) / k, 3))


def evaluation_curve(folders: list[Path]) -> list[list[float]]:
    """``[[iteration's env step, mean real success over the seeds], ...]`` from the periodic
    evaluations (``train-rl --eval-every``) that every seed logged at the same step."""
    per_seed = [{r["step"]: r["eval/success_rate"]
                 for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())
                 if "eval/success_rate" in r} for folder in folders]
    steps = sorted(set.intersection(*(set(curve) for curve in per_seed)))
    return [[step, round(sum(curve[step] for curve in per_seed) / len(per_seed), 3)] for step in steps]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="a coevolve.py run with the BC evaluations")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("runs", nargs="+", help="NAME=FOLDER of train-rl runs, one subfolder per seed")
    args = parser.parse_args()
    bc: list[bool] = []
    for seed in args.seeds:
        state = json.loads((args.base / f"coevolve_s{seed}" / "state.json").read_text())
        bc += outcomes(state["stages"]["round 0: evaluate"]["real"])
    runs: dict[str, dict[str, Any]] = {}
    for spec in args.runs:
        name, sep, folder = spec.partition("=")
        if not sep:
            parser.error(f"{spec!r}: give NAME=FOLDER")
        real: list[bool] = []
        per_seed, training = [], []
        for seed in args.seeds:
            run = Path(folder) / f"s{seed}"
            if not (run / "eval.json").exists():
                parser.error(f"{run} has no eval.json: a finished train-rl run with --eval-episodes is needed")
            seed_outcomes = outcomes(json.loads((run / "eval.json").read_text()))
            real += seed_outcomes
            per_seed.append(round(sum(seed_outcomes) / len(seed_outcomes), 3))
            training.append(training_success(run))
        config = json.loads((Path(folder) / f"s{args.seeds[0]}" / "config.json").read_text())
        versus_bc = paired_comparison(bc, real)
        imagination = config.get("imagination") or {}
        imagined = bool(imagination.get("world_model"))
        runs[name] = {
            "folder": folder, "algo": config["algo"], "lr": config["lr"], "total_env_steps": config["total_env_steps"],
            "world_model": imagination.get("world_model"),
            "reward_type": imagination.get("reward_type") if imagined else None,
            "horizon": imagination.get("horizon") if imagined else None,
            "real_success_per_seed": per_seed,
            "real_success": round(versus_bc["after"]["success_rate"], 3),
            "real_ci95": [round(v, 3) for v in versus_bc["after"]["ci95"]],
            "versus_bc": {"difference": round(versus_bc["difference"], 3),
                          "ci95": [round(v, 3) for v in versus_bc["difference_ci95"]],
                          "p_value": round(versus_bc["p_value"], 4)},
            "training_success_start_end_per_seed": training,
            "evaluation_curve": evaluation_curve([Path(folder) / f"s{seed}" for seed in args.seeds]),
            "outcomes": real}
        print(name, {k: v for k, v in runs[name].items() if k != "outcomes"})
    pairs = {}
    for first, second in itertools.combinations(runs, 2):
        result = paired_comparison(runs[first]["outcomes"], runs[second]["outcomes"])
        pairs[f"{second} - {first}"] = {"difference": round(result["difference"], 3),
                                        "ci95": [round(v, 3) for v in result["difference_ci95"]],
                                        "p_value": round(result["p_value"], 4)}
        print(f"{second} - {first}", pairs[f"{second} - {first}"])
    report("rl_pilots", {"base": str(args.base), "episodes_per_seed": len(bc) // len(args.seeds),
                         "bc_success": round(sum(bc) / len(bc), 3),
                         "bc_ci95": [round(v, 3) for v in wilson_interval(sum(bc), len(bc))],
                         "runs": {n: {k: v for k, v in r.items() if k != "outcomes"} for n, r in runs.items()},
                         "pairs": pairs}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
