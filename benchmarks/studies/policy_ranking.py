"""Policy evaluation in imagination: do imagined success rates rank policy checkpoints as real
success rates do? (Ctrl-World; issue 17's target: Spearman >= 0.8 over >= 6 checkpoints on
tabletop-4.)

Checkpoints with a spread of quality come from behaviour cloning stopped early: ``--bc-steps``
runs of TinyVLA on ``--demos`` (``benchmarks/bc_suite.py``'s file), plus any ``--policies``
given. Without ``--world-model`` the script builds one the way the contact study does for
PushCube, for every task ranked: noisy expert episodes (displacement noise 0.3 and 20% random
actions for reach and push; 0.05 and 5% for the grasping tasks, where more noise makes the
expert fail nearly always), the ``tiny`` model trained ``--wm-steps`` on them, and, as the
real starts of the imagined episodes, ``--keyframe-episodes`` further expert episodes of
another seed. Each policy is then evaluated in physics and in the world model
(:func:`worldsim.evaluation.rank.rank_policies`). Every stage reuses its output in ``--out``
when it exists. Prints one JSON line last. ``--seed 7`` (the fourth and fifth commands) redoes
the tabletop-4 ranking with new demonstrations, checkpoints, world model, keyframes and
evaluation episodes: a fresh test of a figure whose settings were chosen on the first.
``--wm-policies`` adds other policies' own episodes to the world model's data: with another
seed's checkpoints (the last command: seed 13's ranking, after the fifth command and
``bc_suite.py --seed 13``, with seed 7's checkpoints), the model sees the failures and near
misses of policies like those it ranks, none of them ranked. Its expert episodes shrink so
that the data stays 500 episodes per task.

    python benchmarks/bc_suite.py --suite tabletop-4 --eval-episodes 0 --out runs/bench_bc
    python benchmarks/studies/policy_ranking.py --demos runs/bench_bc/demos.h5 --policies runs/bench_bc/bc/policy \\
        --out runs/rank_suite
    python benchmarks/studies/policy_ranking.py \\
        --world-model runs/rank_suite/wm --keyframes runs/rank_suite/keyframes.h5 \\
        --outcome rule --policies runs/rank_suite/bc_*/policy runs/bench_bc/bc/policy --out runs/rank_tabletop4_rule
    python benchmarks/bc_suite.py --suite tabletop-4 --eval-episodes 0 --seed 7 --out runs/bench_bc_s7
    python benchmarks/studies/policy_ranking.py \\
        --seed 7 --demos runs/bench_bc_s7/demos.h5 --bc-steps 100 200 400 1000 \\
        2000 3000 --policies runs/bench_bc_s7/bc/policy --outcome rule --out runs/rank_s7
    python benchmarks/studies/policy_ranking.py --task PushCube-v0 --world-model runs/study/default/wm \\
        --keyframes runs/study/default/iid.h5 --policies runs/rank_suite/bc_*/policy runs/bench_bc/bc/policy \\
        --out runs/rank_push_rule --outcome rule
    python benchmarks/studies/policy_ranking.py \\
        --seed 13 --demos runs/bench_bc_s13/demos.h5 --bc-steps 100 200 400 1000 \\
        2000 3000 --policies runs/bench_bc_s13/bc/policy --outcome rule --wm-episodes 325 \\
        --wm-policies runs/rank_s7/bc_*/policy runs/bench_bc_s7/bc/policy --out runs/rank_s13_mixed

On the ``pixels`` rung (nothing from the simulator while imagining: the model finds the objects
in the real start frames itself), one world model built with seed 7's recipe ranks three seeds'
checkpoints (``bc_suite.py --seed S`` first, for S in 7, 11, 13). Given no policies, the study
builds the world model and its keyframes and stops:

    python benchmarks/studies/policy_ranking.py --seed 7 --bc-steps --rung pixels --outcome rule --out runs/rank_px_wm
    python benchmarks/studies/policy_ranking.py --seed S --demos runs/bench_bc_sS/demos.h5 \\
        --bc-steps 100 200 400 1000 2000 3000 --policies runs/bench_bc_sS/bc/policy \\
        --world-model runs/rank_px_wm/wm --keyframes runs/rank_px_wm/keyframes.h5 --rung pixels \\
        --outcome rule --out runs/rank_px_sS

The ranking recipe (Spearman >= 0.8 on all three seeds): the world model's data mixed with
another seed's checkpoints, as above; seed 13's checkpoints for the model that ranks seeds 7 and
11, seed 7's for the one that ranks seed 13 (then ``--world-model runs/rank_pxm7_wm/wm``):

    python benchmarks/studies/policy_ranking.py --seed 7 --bc-steps --rung pixels --outcome rule --wm-episodes 325 \
        --wm-policies runs/rank_px_s13/bc_100/policy runs/rank_px_s13/bc_200/policy runs/rank_px_s13/bc_400/policy \
        runs/rank_px_s13/bc_1000/policy runs/rank_px_s13/bc_2000/policy runs/rank_px_s13/bc_3000/policy \
        runs/bench_bc_s13/bc/policy --out runs/rank_pxm13_wm
    python benchmarks/studies/policy_ranking.py --seed S \
        --policies runs/bench_bc_sS/bc/policy runs/rank_px_sS/bc_*/policy \
        --world-model runs/rank_pxm13_wm/wm --keyframes runs/rank_pxm13_wm/keyframes.h5 --rung pixels \
        --outcome rule --out runs/rank_pxm_sS
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from worldsim.data.policy_episodes import policy_episodes
from worldsim.envs.imagination import RUNGS, ImaginationConfig
from worldsim.evaluation.rank import RankConfig, rank_policies
from worldsim.runtime.threads import use_torch_threads
from worldsim.training.bc import BCConfig, train_bc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, noisy_expert, report  # noqa: E402


def expert_episodes(tasks: list[str], episodes: int, path: Path, seed: int) -> None:
    """Noisy expert episodes of every task into ``path`` (skipped when the file exists)."""
    from worldsim.data.collect import collect_episodes

    if not path.exists():
        collect_episodes(tasks, lambda task: noisy_expert(task, 0.3, 0.05, 0.2, 0.05, seed), episodes, path,
                         num_envs=50, seed=seed, progress=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-model", type=Path, help="a trained world model (default: train one in --out)")
    parser.add_argument("--keyframes", type=Path, help="episode file the imagined episodes start from")
    parser.add_argument("--demos", type=Path, help="demonstrations for the early-stopped BC checkpoints")
    parser.add_argument("--bc-steps", type=int, nargs="*", default=[100, 200, 400, 1000, 2000])
    parser.add_argument("--policies", type=Path, nargs="*", default=[])
    parser.add_argument("--suite", default="tabletop-4")
    parser.add_argument("--task", nargs="*", default=[], help="rank on these tasks instead of the suite")
    parser.add_argument("--wm-episodes", type=int, default=500, help="expert episodes per task for the world model")
    parser.add_argument("--wm-policies", type=Path, nargs="*", default=[],
                        help="policies whose own episodes join the world model's data (another seed's "
                             "checkpoints: failures and near misses of the kind ranked, without its policies)")
    parser.add_argument("--wm-policy-episodes", type=int, default=25,
                        help="episodes per --wm-policies policy and task")
    parser.add_argument("--wm-steps", type=int, default=4000)
    parser.add_argument("--keyframe-episodes", type=int, default=64)
    parser.add_argument("--episodes", type=int, default=100, help="real episodes per policy and task")
    parser.add_argument("--imagined-episodes", type=int, default=64)
    parser.add_argument("--outcome", choices=("head", "rule"),
                        help="judge imagined success this way instead of as the world model was trained to")
    parser.add_argument("--rung", choices=RUNGS, default="sim-seeded",
                        help="the imagination rung (sim-seeded, as the committed results ran; oracle: the imagined "
                             "state drawn by the scene's renderer, an upper bound)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the BC checkpoints, the world model's data and training, the keyframes "
                             "(1000 + this) and the real and imagined evaluations: another seed is a fresh test")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_ranking"))
    args = parser.parse_args()
    if (args.world_model is None) != (args.keyframes is None):
        parser.error("--world-model and --keyframes go together (neither: both are built in --out)")
    use_torch_threads(args.threads)
    from worldsim.envs.tasks import get_suite, get_task

    tasks = [get_task(t).name for t in args.task] or list(get_suite(args.suite).seen)
    args.out.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}

    start = time.time()
    policies = list(args.policies)
    if args.demos is not None:
        for steps in args.bc_steps:
            run = args.out / f"bc_{steps}"
            if not (run / "summary.json").exists():
                train_bc(BCConfig(data=args.demos, out=run, steps=steps, checkpoint_every=steps, seed=args.seed,
                                  torch_threads=args.threads, progress=False, overwrite=True))
            policies.append(run / "policy")
    seconds["bc"] = time.time() - start

    world_model, keyframes = args.world_model, args.keyframes
    if world_model is None:
        from worldsim.world_models import TrainWMConfig, train_world_model

        start = time.time()
        expert_episodes(tasks, args.wm_episodes, args.out / "wm_data.h5", seed=args.seed)
        expert_episodes(tasks, args.keyframe_episodes, args.out / "keyframes.h5", seed=1000 + args.seed)
        data = args.out / "wm_data.h5"
        if args.wm_policies:
            data = args.out / "wm_data_mixed.h5"
            policy_episodes(tasks, args.wm_policies, args.wm_policy_episodes, data, seed=2000 + args.seed,
                            first=(args.out / "wm_data.h5",))
        seconds["collect"] = time.time() - start
        world_model, keyframes = args.out / "wm", args.out / "keyframes.h5"
        if not (world_model / "summary.json").exists():
            start = time.time()
            train_world_model(TrainWMConfig(
                data=data, out=world_model, steps=args.wm_steps, batch_size=32,
                val_fraction=0.05, val_every=500, video_every=1000, checkpoint_every=500, seed=args.seed,
                torch_threads=args.threads, device="cpu", progress=False, overwrite=True))
            seconds["train_wm"] = time.time() - start

    if not policies:
        print(f"world model {world_model} and keyframes {keyframes} built; no policies to rank")
        return
    from worldsim.world_models import WorldModel

    model = WorldModel.from_pretrained(world_model)
    if args.outcome is not None:
        model.config.judge.outcome = args.outcome
        world_model = args.out / f"world_model_{args.outcome}"
        model.save_pretrained(world_model)
    start = time.time()
    imagination = ImaginationConfig(world_model=world_model, keyframes=keyframes, rung=args.rung, device="cpu")
    result = rank_policies(RankConfig(policies=tuple(policies), task=tuple(tasks), episodes=args.episodes,
                                      imagined_episodes=args.imagined_episodes, out=args.out, seed=args.seed,
                                      progress=False, imagination=imagination))
    seconds["rank"] = time.time() - start

    def rates(side: str) -> dict[str, dict[str, float]]:
        return {p["policy"]: {t: round(r["success_rate"], 4) for t, r in p[side]["per_task"].items()}
                for p in result["policies"]}

    report("policy_ranking_" + args.out.name, {
        "tasks": tasks, "world_model": str(world_model), "outcome": model.config.judge.outcome,
        "rung": args.rung,
        "keyframes": str(keyframes), "policies": len(policies), "seed": args.seed,
        "wm_policies": [str(p) for p in args.wm_policies], "wm_policy_episodes": args.wm_policy_episodes,
        "real_episodes": args.episodes, "imagined_episodes": args.imagined_episodes,
        "over_policies": result["over_policies"], "over_policy_task_pairs": result["over_policy_task_pairs"],
        "per_task": result["per_task"], "mean_abs_error": result["mean_abs_error"],
        "real": [p["real"]["success_rate"] for p in result["policies"]],
        "imagined": [p["imagined"]["success_rate"] for p in result["policies"]],
        "real_per_task": rates("real"), "imagined_per_task": rates("imagined"),
        "seconds": {k: round(v, 1) for k, v in seconds.items()}, "target_spearman": 0.8}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
