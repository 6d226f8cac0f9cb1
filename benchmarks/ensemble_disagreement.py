"""Does the dynamics ensemble's disagreement mark where imagination is wrong, and where policies lead it?

For each seed, a world model with a dynamics ensemble (``train-wm --init ... --dynamics-members
M --ensemble-only``) is read two ways:

1. **Against the truth.** Episodes the model never saw (``--held-out``, another policy's) are
   replayed with their recorded actions for 16 steps from first contact. At every step the
   members' disagreement is set against how far the model's own pathway has carried the cube
   from the real one: their rank correlation (Spearman, over every replay step), and the mean
   error of the steps in the top and the bottom quarter of disagreement.
2. **Under policies.** Each ``--policies`` policy drives the model for ``--horizon`` imagined
   steps from the same real episode starts (``--keyframes``, the starts RL trains from): the
   mean disagreement along its imagined episodes and its imagined success, beside its real
   success where its run folder has an ``eval.json``. A policy that exploits the model should
   lead it where the members part.

``{seed}`` in a path is the seed; ``{other}`` the next seed (the held-out data of seed s is
seed s+1's, a BC policy the model never saw).

    python benchmarks/ensemble_disagreement.py --seeds 0 1 2 --world-model 'runs/ensemble/s{seed}' \\
        --held-out 'runs/bench_coevolve_push/coevolve_s{other}/round_0/data.h5' \\
        --keyframes 'runs/bench_coevolve_push/coevolve_s{seed}/round_0/data.h5' \\
        --policies 'bc=runs/bench_coevolve_push/base_s{seed}/bc/policy' \\
                   'grpo_lr1e-4=runs/pilot_dense60k_lr1e4/s{seed}/policy'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import report
from scipy.stats import spearmanr
from tqdm import tqdm

from worldsim.policies.base import load_policy
from worldsim.world_models import EpisodeBank, WorldModel
from worldsim.world_models.evaluate import contact_starts
from worldsim.world_models.metrics import pathway_error
from worldsim.world_models.replay import open_loop

CONTACT_HORIZON = 16


def against_truth(model: WorldModel, bank: EpisodeBank, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Disagreement and pathway error (cm) of every valid step of 16-step replays from first contact."""
    episodes, starts = contact_starts(bank)
    run = open_loop(model, bank, episodes, starts, CONTACT_HORIZON, generator=torch.Generator().manual_seed(seed))
    assert run.disagreement is not None and run.points is not None and run.heights is not None
    error = pathway_error(bank, episodes, starts, run.points, run.heights)
    valid = run.valid[:, 1:]
    return 100 * run.disagreement[:, 1:][valid], error[:, 1:][valid]


def under_policy(model: WorldModel, bank: EpisodeBank, policy_path: Path, starts: int, horizon: int,
                 seed: int) -> dict[str, Any]:
    """Mean disagreement (cm) and imagined success of ``starts`` imagined episodes of a policy."""
    policy = load_policy(policy_path).eval()
    episodes = np.arange(min(starts, len(bank)))
    run = open_loop(model, bank, episodes, np.zeros(len(episodes), np.int64), horizon, policy=policy,
                    generator=torch.Generator().manual_seed(seed))
    assert run.disagreement is not None
    result = {"disagreement_cm": float(100 * run.disagreement[:, 1:].mean()),
              "disagreement_cm_per_episode": (100 * run.disagreement[:, 1:].mean(1)).round(3).tolist(),
              "imagined_success": float((run.success_prob[:, 1:] >= model.config.success_threshold).any(1).mean())}
    evaluation = policy_path.parent / "eval.json"
    if evaluation.exists():
        result["real_success"] = json.loads(evaluation.read_text())["success_rate"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--world-model", required=True, help="world model with an ensemble; {seed} is replaced")
    parser.add_argument("--held-out", required=True, help="episodes the model never saw; {seed}, {other}")
    parser.add_argument("--keyframes", required=True, help="real starts of the policies' imagined episodes; {seed}")
    parser.add_argument("--policies", nargs="*", default=[], help="NAME=PATH ({seed}) policies to imagine")
    parser.add_argument("--starts", type=int, default=64)
    parser.add_argument("--horizon", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(2)
    disagreement, error, per_seed = [], [], {}
    policies: dict[str, list[dict[str, Any]]] = {}
    for position, seed in enumerate(tqdm(args.seeds, desc="seeds")):
        names = {"seed": seed, "other": args.seeds[(position + 1) % len(args.seeds)]}
        model = WorldModel.from_pretrained(args.world_model.format(**names))
        if not len(model.ensemble):
            parser.error(f"{args.world_model.format(**names)} has no dynamics ensemble")
        spread_cm, error_cm = against_truth(model, EpisodeBank(args.held_out.format(**names)), seed)
        disagreement.append(spread_cm)
        error.append(error_cm)
        per_seed[seed] = {"steps": len(spread_cm), "spearman": round(float(spearmanr(spread_cm, error_cm)[0]), 3),
                          "disagreement_cm_median": round(float(np.median(spread_cm)), 3)}
        starts = EpisodeBank(args.keyframes.format(**names))
        for spec in args.policies:
            name, _, path = spec.partition("=")
            policies.setdefault(name, []).append(
                under_policy(model, starts, Path(path.format(**names)), args.starts, args.horizon, seed))
        print(seed, per_seed[seed], {n: {k: v for k, v in r[-1].items() if not k.endswith("per_episode")}
                                     for n, r in policies.items()})
    spread_cm, error_cm = np.concatenate(disagreement), np.concatenate(error)
    low, high = np.quantile(spread_cm, [0.25, 0.75])
    truth = {"steps": len(spread_cm), "spearman": round(float(spearmanr(spread_cm, error_cm)[0]), 3),
             "error_cm_top_quarter": round(float(error_cm[spread_cm >= high].mean()), 3),
             "error_cm_bottom_quarter": round(float(error_cm[spread_cm <= low].mean()), 3),
             "error_cm_all": round(float(error_cm.mean()), 3),
             "disagreement_cm_quartiles": [round(float(v), 3) for v in np.quantile(spread_cm, [0.25, 0.5, 0.75])],
             "per_seed": per_seed}
    summary = {name: {"disagreement_cm": round(float(np.mean([r["disagreement_cm"] for r in runs])), 3),
                      "disagreement_cm_per_seed": [round(r["disagreement_cm"], 3) for r in runs],
                      "imagined_success_per_seed": [round(r["imagined_success"], 3) for r in runs],
                      "real_success_per_seed": [r.get("real_success") for r in runs]}
               for name, runs in policies.items()}
    report("ensemble_disagreement", {"world_model": args.world_model, "held_out": args.held_out,
                                     "contact_horizon": CONTACT_HORIZON, "against_truth": truth,
                                     "policy_horizon": args.horizon, "policy_starts": args.starts,
                                     "under_policies": summary})


if __name__ == "__main__":
    main()
