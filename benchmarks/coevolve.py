"""Co-evolution benchmark: real success of the BC base, after each round of RL in imagination,
the ablations, and direct physics RL with the same real-episode budget.

For each seed, the full run (``coevolve``) goes first; the ablations reuse its round 0 (the
same base episodes, world model and base evaluation, ``--round0-from``), so that they differ
from it only in what they ablate:

- ``no-keyframes``: imagined episodes start at episode starts only (keyframe ratio 0);
- ``frozen``: the world model is trained once and never refined (no co-evolution);
- ``ppo``: PPO instead of GRPO;
- ``direct-rl``: GRPO in the physics env on as many real episodes as co-evolution collects.

Targets (issue 7): real success after imagination RL >= BC base + 30 points (mean over tasks)
with <= 2,500 real episodes in total, and better than direct-rl. Prints one JSON line last.

    python benchmarks/coevolve.py --base-policy runs/bench_bc/bc/policy --suite tabletop-4 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from common import report

from worldsim.pipelines.coevolve import CoevolveConfig, coevolve

VARIANTS = {"coevolve": {}, "no-keyframes": {"keyframe_ratio": 0.0}, "frozen": {"frozen_world_model": True},
            "ppo": {"algo": "ppo"}, "direct-rl": {"mode": "direct-rl"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-policy", type=Path, required=True)
    parser.add_argument("--suite", default="tabletop-4")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--real-episodes", type=int, default=600, help="per collection (budget: x rounds)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--wm-steps", type=int, default=4000)
    parser.add_argument("--wm-refine-steps", type=int, default=1500)
    parser.add_argument("--wm-time-budget", type=float, default=None)
    parser.add_argument("--rl-env-steps", type=int, default=200_000)
    parser.add_argument("--rl-time-budget", type=float, default=None)
    parser.add_argument("--rl-num-envs", type=int, default=64)
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--imagined-eval-episodes", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_coevolve"))
    args = parser.parse_args()
    if "coevolve" not in args.variants and len(args.variants) > 0:
        args.variants = ["coevolve", *args.variants]  # the ablations reuse its round 0

    runs: dict[str, list[dict]] = {v: [] for v in args.variants}
    for seed in args.seeds:
        full = args.out / f"coevolve_s{seed}"
        for variant in args.variants:
            out = args.out / f"{variant}_s{seed}"
            config = CoevolveConfig(
                base_policy=args.base_policy, suite=args.suite, real_episodes=args.real_episodes, rounds=args.rounds,
                wm_steps=args.wm_steps, wm_refine_steps=args.wm_refine_steps, wm_time_budget=args.wm_time_budget,
                rl_env_steps=args.rl_env_steps, rl_time_budget=args.rl_time_budget, rl_num_envs=args.rl_num_envs,
                eval_episodes=args.eval_episodes, imagined_eval_episodes=args.imagined_eval_episodes, seed=seed,
                out=out, resume=(out / "state.json").exists(), round0_from=None if variant == "coevolve" else full,
                videos=2 if variant == "coevolve" else 0, **VARIANTS[variant])
            runs[variant].append(coevolve(config))

    def figures(results: list[dict]) -> dict:
        final = [r["final_real_success"] for r in results]
        gain = [r["improvement"] for r in results]
        rounds = [[x["real"]["success_rate"] for x in r["rounds"]] for r in results]
        return {"final_real_success": float(np.mean(final)), "final_real_success_std": float(np.std(final)),
                "improvement_points": 100 * float(np.mean(gain)), "real_success_per_round": rounds,
                "real_budget": results[0]["real_budget"], "seeds": len(results),
                "imagined_success_per_round": [[x.get("imagined", {}).get("success_rate") for x in r["rounds"]]
                                               for r in results],
                "rolled_back_rounds": [[x["round"] for x in r["rounds"] if not x["accepted"]] for r in results]}

    summary = {"suite": args.suite, "base_policy": str(args.base_policy),
               "base_real_success": float(np.mean([r["base_real_success"] for r in runs["coevolve"]])),
               "variants": {v: figures(results) for v, results in runs.items()},
               "targets": {"improvement_points": 30.0, "real_budget_max": 2500}}
    (args.out / "result.json").write_text(json.dumps(summary, indent=2) + "\n")
    report("coevolve", summary)


if __name__ == "__main__":
    main()
