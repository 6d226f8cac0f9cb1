"""What GRPO gains from the ladder's BC bases when the world it trains in is physics itself.

A world model can at best be as good as the simulator it imitates, so GRPO trained in physics on
as many env steps as the imagination ladder's arm imagines (and more) bounds what any world model
could give that arm at that budget. Each seed's BC base is the ladder's (``bc_base``: the same
demonstrations and behaviour cloning); from it, GRPO runs in physics with the imagination arm's
settings (``--num-envs`` envs in groups of ``--group-size`` 8, lr ``--lr``) on a success-only
reward (``sparse``: 1 each step the task is solved; the ladder's headline rewards the step success
is reached) for each budget of ``--budgets`` env steps; ``--algo ppo`` trains PPO instead (the
recipe ``physics_recipes.py`` chooses on validation episodes is tested here). Unlike imagination,
physics here costs no real episodes (this is a simulator's bound, not a baseline on the real
budget) and every episode starts from a reset and runs its full length (the imagination arm starts
half its episodes at keyframes and cuts them at 40 steps).

Every policy, BC included, is read with its mean action and sampled; each seed takes the reading
its round evaluations rank first (``--eval-episodes`` real episodes, seed ``seed + 10000``, the
ladder's), and is tested once on the ladder's test episodes (``--test-episodes``, seed
``--test-seed + 1000 x seed``), both readings. Gains over BC's chosen reading are over seeds (its
95% interval resampling seeds, then episodes), the pooled McNemar figure beside them.

    python benchmarks/studies/physics_ceiling.py --only-seeds 0 2 4 --threads 1 --out runs/physics_ceiling
    python benchmarks/studies/physics_ceiling.py --only-seeds 1 3 --threads 1 --out runs/physics_ceiling
    python benchmarks/studies/physics_ceiling.py --out runs/physics_ceiling       # gathers

Writes ``benchmarks/studies/results/<--name>.json`` (the protocol first, before any test
episode runs; the figures once every seed is tested).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmark scripts
from coevolve import bc_base  # noqa: E402
from common import STUDY_RESULTS, check_only_seeds, checked_recipe, fixed_protocol, plain_args, report, seed_records  # noqa: E402
from imagination_ladder import chosen, gains, real_outcomes_of, successes  # noqa: E402

from worldsim.evaluation.compare import READINGS  # noqa: E402
from worldsim.evaluation.rank import REAL_EVAL_SEED_OFFSET  # noqa: E402
from worldsim.pipelines.coevolve_parts import RLRounds  # noqa: E402
from worldsim.runtime.run_logging import write_json  # noqa: E402

RUN_ONLY = ("threads", "out", "only_seeds", "name")
"""Arguments that say how a run is carried out, not what it measures: outside the protocol."""
PREDATES = {"algo": "grpo", "group_size": 8}
"""The recipe of runs whose protocol predates choosing it (GRPO in groups of 8)."""


def arm_name(reward: str, budget: int) -> str:
    return f"physics-{reward}@{budget}"


def rl_in_physics(recipe: RLRounds, budget: int, policy: Path, task: str, seed: int, reward: str, out: Path,
                  eval_episodes: int, threads: int) -> dict[str, Any]:
    """``recipe``'s RL from ``policy`` in physics for ``budget`` env steps on ``reward``, in ``out``;
    its summary (kept: a finished run is read back, not run again)."""
    from worldsim.training.grpo import train_grpo
    from worldsim.training.ppo import train_ppo

    done = out / "summary.json"
    if done.exists():
        return json.loads(done.read_text())
    config = recipe.train_config(
        budget, policy=str(policy), task=task, obs_mode="pixels", physics_reward=reward, eval_every=0,
        eval_episodes=eval_episodes, checkpoint_every=0, seed=seed, out=out, overwrite=True,
        torch_threads=threads, progress=False)
    return train_grpo(config) if recipe.algo == "grpo" else train_ppo(config)  # type: ignore[arg-type]


def recipe_of(args: argparse.Namespace) -> RLRounds:
    return RLRounds(algo=args.algo, num_envs=args.num_envs, group_size=args.group_size, lr=args.lr)


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One seed: its BC base, a GRPO run per reward and budget, both readings' round evaluations
    and the test; the seed's record, also written to ``seed_<seed>.json``."""
    _, bc = bc_base(args.task, seed, args.bc_demos, args.bc_steps, args.out / f"base_s{seed}", args.threads)
    policies = {"bc": bc}
    runs: dict[str, dict[str, Any]] = {}
    for reward in args.rewards:
        for budget in args.budgets:
            name = arm_name(reward, budget)
            runs[name] = rl_in_physics(recipe_of(args), budget, bc, args.task, seed, reward,
                                       args.out / f"{name}_s{seed}", args.eval_episodes, args.threads)
            policies[name] = args.out / f"{name}_s{seed}" / "policy"
    def round_eval(name: str, policy: Path, reading: str) -> list[bool]:
        """``policy``'s outcomes on the round evaluations' episodes: a run's own final evaluation
        (the same episodes, by its mean action) for that reading, run here otherwise."""
        if name in runs and READINGS[reading] == runs[name]["eval"]["deterministic"]:
            return runs[name]["eval"]["per_task"][args.task]["outcomes"]
        return real_outcomes_of(policy, args.task, args.eval_episodes, seed + REAL_EVAL_SEED_OFFSET, reading,
                                args.out / "readings" / f"s{seed}" / f"{name}_{reading}.json")

    evals = {name: {reading: round_eval(name, policy, reading) for reading in READINGS}
             for name, policy in policies.items()}
    round_evals = {name: {reading: sum(o) / len(o) for reading, o in e.items()} for name, e in evals.items()}
    record: dict[str, Any] = {"seed": seed, "arms": {}}
    for name, policy in policies.items():  # the test: once, after every run, both readings
        outcomes = {reading: real_outcomes_of(policy, args.task, args.test_episodes, args.test_seed + 1000 * seed,
                                              reading, args.out / "test" / f"s{seed}" / f"{name}_{reading}.json")
                    for reading in READINGS}
        record["arms"][name] = {"round_eval": round_evals[name], "reading": chosen(round_evals[name]),
                                "test": outcomes, "policy": str(policy)}
        if name in runs:
            record["arms"][name] |= {key: runs[name][key] for key in ("global_step", "iterations", "train_seconds")
                                     if key in runs[name]}
    write_json(args.out / f"seed_{seed}.json", record)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--bc-demos", type=int, default=100, help="the ladder's")
    parser.add_argument("--bc-steps", type=int, default=1500, help="the ladder's")
    parser.add_argument("--budgets", type=int, nargs="+", default=[12_800, 51_200, 204_800],
                        help="physics env steps of GRPO (the ladder's imagination arm imagines 12,800)")
    parser.add_argument("--rewards", nargs="+", default=["sparse"], choices=["sparse", "dense"])
    parser.add_argument("--algo", default="grpo", choices=["grpo", "ppo"], help="the ladder's: grpo")
    parser.add_argument("--num-envs", type=int, default=32, help="the ladder's")
    parser.add_argument("--group-size", type=int, default=8, help="GRPO's rollouts per start (the ladder's)")
    parser.add_argument("--lr", type=float, default=3e-5, help="the ladder's imagination arms'")
    parser.add_argument("--eval-episodes", type=int, default=50, help="the round evaluations (the readings')")
    parser.add_argument("--test-episodes", type=int, default=200)
    parser.add_argument("--test-seed", type=int, default=70_000, help="the standing PushCube ladder's")
    parser.add_argument("--only-seeds", type=int, nargs="+", default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=Path("runs/physics_ceiling"))
    parser.add_argument("--name", default="physics_ceiling", help="the result file's name (another protocol: another)")
    args = parser.parse_args()
    for value, flag in ((args.budgets, "--budgets"), ([args.num_envs], "--num-envs"),
                        ([args.test_episodes], "--test-episodes"), ([args.eval_episodes], "--eval-episodes")):
        if min(value) < 1:
            parser.error(f"{flag} must be positive")
    checked_recipe(parser, lambda: recipe_of(args))
    check_only_seeds(parser, args)

    protocol = {k: v for k, v in plain_args(args).items() if k not in RUN_ONLY}
    if fixed_protocol(parser, args, protocol, PREDATES):
        report(args.name, {"protocol": protocol}, args, STUDY_RESULTS)
    records = seed_records(args, run_seed)
    if records is None:
        return
    arms = [arm_name(reward, budget) for reward in args.rewards for budget in args.budgets]
    metrics: dict[str, Any] = {"protocol": protocol, "bc": successes(records, "bc"), "arms": {}}
    for name in arms:
        metrics["arms"][name] = successes(records, name) | {
            "gain_vs_bc": gains(records, name, "bc"),
            "iterations": [r["arms"][name].get("iterations") for r in records],
            "train_seconds": [r["arms"][name].get("train_seconds") for r in records]}
    report(args.name, metrics, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
