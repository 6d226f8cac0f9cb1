"""Policy evaluation in imagination: do imagined success rates rank policy checkpoints as real
success rates do? (Ctrl-World; issue 7 target: Spearman >= 0.9 over >= 5 checkpoints.)

Checkpoints with a spread of quality come from behaviour cloning stopped early: ``--bc-steps``
runs of TinyVLA on ``--demos`` (each reusing the folder if it exists), plus any ``--policies``
given (e.g. the co-evolution benchmark's policies). Each is evaluated in physics and in the
world model (:func:`worldsim.evaluation.rank.rank_policies`). Prints one JSON line last.

    python benchmarks/policy_ranking.py --world-model runs/bench_coevolve/coevolve_s0/round_1/wm \\
        --keyframes runs/bench_coevolve/coevolve_s0/round_1/data.h5 --demos runs/bench_bc/demos.h5 \\
        --policies runs/bench_bc/bc/policy runs/bench_coevolve/coevolve_s0/round_2/rl/policy
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import report

from worldsim.evaluation.rank import RankConfig, rank_policies
from worldsim.training.bc import BCConfig, train_bc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-model", type=Path, required=True)
    parser.add_argument("--keyframes", type=Path, required=True)
    parser.add_argument("--demos", type=Path, help="demonstrations for the early-stopped BC checkpoints")
    parser.add_argument("--bc-steps", type=int, nargs="*", default=[150, 400, 1000])
    parser.add_argument("--policies", type=Path, nargs="*", default=[])
    parser.add_argument("--suite", default="tabletop-4")
    parser.add_argument("--episodes", type=int, default=25, help="real episodes per policy and task")
    parser.add_argument("--imagined-episodes", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_ranking"))
    args = parser.parse_args()

    policies = list(args.policies)
    if args.demos is not None:
        for steps in args.bc_steps:
            run = args.out / f"bc_{steps}"
            if not (run / "summary.json").exists():
                train_bc(BCConfig(data=args.demos, out=run, steps=steps, checkpoint_every=steps, torch_threads=1,
                                          overwrite=True))
            policies.append(run / "policy")
    result = rank_policies(RankConfig(world_model=args.world_model, keyframes=args.keyframes,
                                      policies=tuple(policies), suite=args.suite, episodes=args.episodes,
                                      imagined_episodes=args.imagined_episodes, out=args.out, progress=False))
    report("policy_ranking", {"policies": len(policies),
                      "spearman": result["over_policies"]["spearman"], "pearson": result["over_policies"]["pearson"],
                      "pairs": result["over_policy_task_pairs"], "mean_abs_error": result["mean_abs_error"],
                      "real": [p["real"]["success_rate"] for p in result["policies"]],
                      "imagined": [p["imagined"]["success_rate"] for p in result["policies"]],
                      "target_spearman": 0.9})


if __name__ == "__main__":
    main()
