"""Does refitting the world model on a policy's rollouts make it right where the policy goes?

For each seed of a co-evolution benchmark run (``--run``, made by ``benchmarks/coevolve.py``),
the held-out episodes are the last collection: the real episodes of round ``K``'s policy
(``round_K/data.h5``, ``K`` the last round that collected), which neither model below saw. Two
models replay them (:func:`worldsim.world_models.evaluate_world_model`, ``--episodes`` of them,
no physics ceiling, seed 0):

- ``round_0/wm``: trained on BC's episodes and the demonstrations only;
- ``round_<K-1>/wm``: refined on every collection before round K's, the policies' own included.

For scale, ``round_0/wm`` also replays BC episodes it never saw: the next seed's
``round_0/data.h5`` (another BC policy, the same task), the data it was made for.

Per model: the pathway's and the frames' error on the task cube 16 imagined steps after first
contact (median over replays, cm), PSNR after 8 and 32 steps, and the imagined-vs-real outcome
agreement over full replays beside its base rate. Each evaluation is kept in
``--out/s<seed>_wm<round>/fidelity.json`` and reused when there. Prints one JSON line last
(``benchmarks/studies/results/refit_fidelity.json``).

    python benchmarks/studies/refit_fidelity.py --run runs/bench_coevolve_push_dense60k --seeds 0 1 2 \
        --episodes 50 --out runs/refit_eval
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from worldsim.world_models import evaluate_world_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402


def last_collection(seed_run: Path) -> int:
    """The last round whose policy collected real episodes (``round_K/data.h5``), K >= 2: with
    K = 1 the model before round K's collection would be round 0's, and there is no refit to read."""
    k = max((int(p.parent.name.split("_")[1]) for p in seed_run.glob("round_*/data.h5")), default=0)
    if k < 2:
        raise ValueError(f"{seed_run} has no collection after round 1, so no refit model is left that has not "
                         "seen the held-out episodes: run at least three rounds")
    return k


def figures(fidelity: dict) -> dict:
    """The figures this benchmark reads off one fidelity report."""
    contact, full = fidelity["object_error_after_contact"], fidelity["success_by_horizon"]["full"]
    return {"pathway_cm_16": contact["pathway_cm"][-1], "frames_cm_16": contact["imagined_cm"][-1],
            "psnr_at_8": fidelity["psnr_at_8"], "psnr_at_32": fidelity["psnr_at_horizon"],
            "agreement_full": full["accuracy"], "base_rate_full": full["base_rate"],
            "episodes": fidelity["held_out"]["episodes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a benchmarks/coevolve.py --out folder")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=50, help="held-out episodes per seed")
    parser.add_argument("--out", type=Path, default=Path("runs/refit_eval"))
    args = parser.parse_args()

    per_seed = []
    for seed in args.seeds:
        seed_run = args.run / f"coevolve_s{seed}"
        k = last_collection(seed_run)
        held_out = seed_run / f"round_{k}" / "data.h5"
        row: dict = {"seed": seed, "policy_round": k}
        other_bc = args.run / f"coevolve_s{args.seeds[(args.seeds.index(seed) + 1) % len(args.seeds)]}" / "round_0"
        for name, r, data, folder in (("original", 0, held_out, f"s{seed}_wm0"),
                                      ("refit", k - 1, held_out, f"s{seed}_wm{k - 1}"),
                                      ("original_on_bc", 0, other_bc / "data.h5", f"s{seed}_wm0_on_bc")):
            out = args.out / folder
            if not (out / "fidelity.json").exists():
                evaluate_world_model(seed_run / f"round_{r}" / "wm", data, episodes=args.episodes,
                                     physics_ceiling=False, videos=0, out=out)
            row[name] = {"world_model": str(seed_run / f"round_{r}" / "wm"), "held_out": str(data),
                         **figures(json.loads((out / "fidelity.json").read_text()))}
        per_seed.append(row)

    def mean(model: str, key: str) -> float:
        return float(np.mean([row[model][key] for row in per_seed]))

    keys = ("pathway_cm_16", "frames_cm_16", "psnr_at_8", "psnr_at_32", "agreement_full")
    report("refit_fidelity", {"run": str(args.run), "episodes": args.episodes, "per_seed": per_seed,
                              "mean": {model: {key: mean(model, key) for key in keys}
                                       for model in ("original", "refit", "original_on_bc")}}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
