"""Co-evolution benchmark: real success of the BC base, after each round of RL in imagination,
the ablations, and direct physics RL with the same real-episode budget.

For each seed, the full run (``coevolve``) goes first; the ablations reuse its round 0 (the
same base episodes, world model and base evaluation, ``--round0-from``), so that they differ
from it only in what they ablate:

- ``no-keyframes``: imagined episodes start at episode starts only (keyframe ratio 0);
- ``frozen``: the world model is trained once and never refined (no co-evolution);
- ``ppo``: PPO instead of GRPO;
- ``direct-rl``: GRPO in the physics env on as many real episodes as co-evolution collects.

The base policy is ``--base-policy``, or, without it, the quickstart's per seed: ``--bc-demos``
noisy scripted-expert demonstrations, behaviour cloning for ``--bc-steps``; the world model then
also trains on those demonstrations. ``--round0-from`` an earlier benchmark's folder starts every
seed from that run's base policy and round 0 (data, world model, base evaluation), to compare
what follows round 0 (``--reward-type``, say) on the same footing at a third of the cost.
Every policy of a seed is evaluated on the same real episodes, so each comparison is paired
(McNemar); the pooled one joins the seeds' episodes.

Targets (issue 17, PushCube): real success after imagination RL >= BC base + 15 points (mean
over seeds) with <= 1,000 real episodes and >= 200 evaluation episodes, and better than
direct-rl. Prints one JSON line last, kept as ``benchmarks/results/coevolve.json`` (and the
summary alone as ``<out>/result.json``).

    python benchmarks/coevolve.py --task PushCube-v0 --seeds 0 1 2 --variants coevolve direct-rl \
        --real-episodes 100 --rounds 2 --wm-steps 800 --wm-refine-steps 800 --rl-env-steps 30000 \
        --rl-num-envs 32 --eval-episodes 200 --out runs/bench_coevolve_push
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
from common import report

from worldsim.envs.core import IMAGINED_REWARD_TYPES
from worldsim.envs.imagination import RUNGS, ImaginationConfig
from worldsim.evaluation.compare import paired_comparison
from worldsim.pipelines.coevolve import CoevolveConfig, GuardConfig, coevolve, last_accepted, real_outcomes
from worldsim.pipelines.coevolve_parts import RLRounds, WorldModelRounds

VARIANTS = {"coevolve": {}, "no-keyframes": {"imagination": {"keyframe_ratio": 0.0}},
            "frozen": {"frozen_world_model": True},
            "ppo": {"rl": {"algo": "ppo"}}, "direct-rl": {"mode": "direct-rl"}}


def bc_base(task: str, seed: int, demos: int, steps: int, out: Path, threads: int) -> tuple[Path, Path]:
    """The quickstart's base policy for ``seed`` (made once, reused when ``out`` has it): its
    demonstrations file and its BC policy."""
    from worldsim.pipelines.quickstart import expert_demonstrations
    from worldsim.training.bc import BCConfig, train_bc

    demos_file, bc = out / "demos.h5", out / "bc"
    if not demos_file.exists():
        expert_demonstrations(task, demos, demos_file, seed)
    if not (bc / "summary.json").exists():
        train_bc(BCConfig(data=demos_file, out=bc, steps=steps, seed=seed, torch_threads=threads, overwrite=True))
    return demos_file, bc / "policy"


def outcomes(result: dict) -> tuple[list[bool], list[bool]]:
    """Per-episode real outcomes of a run's base and final policies (every task, in order): on its
    test episodes when it has them, since the guard chose the final policy by the round evaluations."""
    if result.get("test"):
        return (real_outcomes(result["tasks"], result["test"]["base"]),
                real_outcomes(result["tasks"], result["test"]["final"]))
    return (real_outcomes(result["tasks"], result["rounds"][0]),
            real_outcomes(result["tasks"], last_accepted(result["rounds"])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-policy", type=Path, default=None, help="default: the quickstart's BC, per seed")
    parser.add_argument("--bc-demos", type=int, default=100)
    parser.add_argument("--bc-steps", type=int, default=1500)
    tasks = parser.add_mutually_exclusive_group()
    tasks.add_argument("--suite", default=None, help="default: tabletop-4 unless --task")
    tasks.add_argument("--task", default=None)
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
    parser.add_argument("--reward-type", default="transition", choices=IMAGINED_REWARD_TYPES,
                        help="the reward RL sees in imagination")
    parser.add_argument("--rung", default="sim-seeded", choices=RUNGS,
                        help="the imagination rung (worldsim.envs.imagination): sim-seeded, as the committed "
                             "results ran; oracle draws the imagined state with the scene's renderer (an upper bound)")
    parser.add_argument("--lr", type=float, default=3e-5, help="RL learning rate")
    # Physics GRPO learns best at another rate and batch than GRPO in imagination (the RL pilots:
    # lr 1e-4 in physics), and a baseline held to the other's settings would be a straw man.
    parser.add_argument("--direct-rl-lr", type=float, default=None, help="direct-rl's learning rate (default: --lr)")
    parser.add_argument("--direct-rl-num-envs", type=int, default=None,
                        help="direct-rl's parallel envs (default: --rl-num-envs)")
    parser.add_argument("--max-real-drop", type=float, default=0.1,
                        help="the guard rolls a round back when its real success falls this far below the best")
    parser.add_argument("--test-episodes", type=int, default=0,
                        help="per task: base and final policies on episodes no round saw; the headline figures then")
    parser.add_argument("--kl-coef", type=float, default=0.0, help="GRPO's KL term to each round's start")
    parser.add_argument("--round0-from", type=Path, default=None,
                        help="an earlier benchmark folder whose base policies and round 0 every seed adopts")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_coevolve"))
    args = parser.parse_args()
    if args.base_policy is None and args.task is None:
        parser.error("--base-policy is needed with a suite (the quickstart's BC base is one task's): "
                     "name one, or a --task")
    suite = None if args.task else args.suite or "tabletop-4"
    if "coevolve" not in args.variants:
        args.variants = ["coevolve", *args.variants]  # the ablations reuse its round 0

    runs: dict[str, list[dict]] = {v: [] for v in args.variants}
    for seed in args.seeds:
        demonstrations, base_policy = None, args.base_policy
        if base_policy is None:
            demonstrations, base_policy = bc_base(args.task, seed, args.bc_demos, args.bc_steps,
                                                  (args.round0_from or args.out) / f"base_s{seed}", args.threads)
        full = args.out / f"coevolve_s{seed}"
        earlier = args.round0_from / f"coevolve_s{seed}" if args.round0_from else None
        for variant in args.variants:
            out = args.out / f"{variant}_s{seed}"
            lr, num_envs = args.lr, args.rl_num_envs
            if variant == "direct-rl":
                lr, num_envs = args.direct_rl_lr or lr, args.direct_rl_num_envs or num_envs
            config = CoevolveConfig(
                base_policy=base_policy, suite=suite, task=args.task, demonstrations=demonstrations,
                real_episodes=args.real_episodes, rounds=args.rounds,
                wm=WorldModelRounds(steps=args.wm_steps, refine_steps=args.wm_refine_steps,
                                    time_budget=args.wm_time_budget),
                rl=RLRounds(env_steps=args.rl_env_steps, time_budget=args.rl_time_budget, num_envs=num_envs, lr=lr,
                            kl_coef=args.kl_coef, **VARIANTS[variant].get("rl", {})),
                eval_episodes=args.eval_episodes, imagined_eval_episodes=args.imagined_eval_episodes, seed=seed,
                out=out, resume=(out / "state.json").exists(), round0_from=earlier if variant == "coevolve" else full,
                videos=2 if variant == "coevolve" else 0,
                test_episodes=args.test_episodes, torch_threads=args.threads,
                guard=GuardConfig(max_real_drop=args.max_real_drop),
                **{k: v for k, v in VARIANTS[variant].items() if k not in ("imagination", "rl")},
                imagination=ImaginationConfig(reward_type=args.reward_type, rung=args.rung,
                                              **VARIANTS[variant].get("imagination", {})))
            runs[variant].append(coevolve(config))

    def figures(results: list[dict]) -> dict:
        pairs = [outcomes(r) for r in results]
        final = [float(np.mean(after)) for _, after in pairs]
        gain = [float(np.mean(after) - np.mean(before)) for before, after in pairs]
        rounds = [[x["real"]["success_rate"] for x in r["rounds"]] for r in results]
        # per round, pooled over the seeds: against BC, and against the round before (did it add?)
        per_round = [[real_outcomes(r["tasks"], x) for x in r["rounds"]] for r in results]
        depth = min(len(p) for p in per_round)

        def pooled(a: int, b: int) -> dict:
            return paired_comparison(sum((p[a] for p in per_round), []), sum((p[b] for p in per_round), []))
        return {"final_real_success": float(np.mean(final)), "final_real_success_std": float(np.std(final)),
                "improvement_points": 100 * float(np.mean(gain)),
                "improvement_points_per_seed": [100 * g for g in gain],
                "pooled_vs_base": paired_comparison(sum((b for b, _ in pairs), []), sum((f for _, f in pairs), [])),
                "measured_on": "test episodes" if all(r.get("test") for r in results) else "round evaluations",
                "per_seed_vs_base": [paired_comparison(*pair) for pair in pairs],
                "real_success_per_round": rounds,
                "final_round": [last_accepted(r["rounds"])["round"] for r in results],
                "pooled_round_vs_base": [pooled(0, k) for k in range(1, depth)],
                "pooled_round_vs_previous": [pooled(k - 1, k) for k in range(1, depth)],
                "real_budget": results[0]["real_budget"], "seeds": len(results),
                "imagined_success_per_round": [[x.get("imagined", {}).get("success_rate") for x in r["rounds"]]
                                               for r in results],
                "rolled_back_rounds": [[x["round"] for x in r["rounds"] if not x["accepted"]] for r in results],
                "wall_clock_s": [r["wall_clock_s"] for r in results]}

    # Every variant of a seed is evaluated on the same real episodes: co-evolution's final policy
    # against each ablation's, paired, pooled over the seeds.
    full_final = sum((outcomes(r)[1] for r in runs["coevolve"]), [])
    against = {v: paired_comparison(sum((outcomes(r)[1] for r in results), []), full_final)
               for v, results in runs.items() if v != "coevolve"}
    summary = {"suite": suite, "task": args.task, "seeds": args.seeds,
               "base_policy": str(args.base_policy) if args.base_policy else
               f"quickstart BC: {args.bc_demos} noisy expert demos, {args.bc_steps} steps, per seed",
               "base_real_success": float(np.mean([np.mean(outcomes(r)[0]) for r in runs["coevolve"]])),
               "eval_episodes_per_task": args.eval_episodes,
               "settings": {k: getattr(args, k) for k in ("real_episodes", "rounds", "wm_steps", "wm_refine_steps",
                                                          "rl_env_steps", "rl_num_envs", "reward_type",
                                                          "rung", "lr",
                                                          "kl_coef",
                                                          "max_real_drop", "test_episodes",
                                                          "threads", "direct_rl_lr", "direct_rl_num_envs")}
               | {"round0_from": str(args.round0_from) if args.round0_from else None},
               "variants": {v: figures(results) for v, results in runs.items()},
               "coevolve_vs_ablation": against,
               "targets": {"improvement_points": 15.0, "real_budget_max": 1000, "eval_episodes_min": 200}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "result.json").write_text(json.dumps(summary, indent=2) + "\n")
    report("coevolve", summary, args)


if __name__ == "__main__":
    main()
