"""Which RL recipe lifts the imagination ladder's BC bases most in physics: chosen on validation episodes.

GRPO with the imagination arm's settings gains a few points at most over the ladder's BC bases
even in physics itself (``physics_ceiling.py``), so the recipe caps what imagination can give. This
study trains each recipe of ``--recipes`` (fields of the ladder's RL part,
:class:`~worldsim.pipelines.coevolve_parts.RLRounds`: ``algo``, ``num_envs``, ``group_size``,
``lr``, ``kl_coef``) from each seed's BC base in physics for ``--budget`` env steps on
``--reward``, and reads every policy, BC included, both ways (mean action and sampled) on
``--val-episodes`` validation episodes (seed ``--val-seed + 1000 x seed``: none of the ladder's
round evaluations or test episodes). It runs no test episode: the recipe it ranks first is then
tested once by ``physics_ceiling.py`` on new test seeds.

Each arm's reading is the one its validation episodes pooled over seeds rank first; its gain over
BC (read likewise) is over seeds with its interval, the pooled McNemar figure beside it.

    python benchmarks/studies/physics_recipes.py --only-seeds 0 --out runs/physics_recipes   # one process per seed
    python benchmarks/studies/physics_recipes.py --out runs/physics_recipes                  # gathers

Writes ``benchmarks/studies/results/<--name>.json`` (the protocol first).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmark scripts
sys.path.insert(0, str(Path(__file__).resolve().parent))
from coevolve import bc_base  # noqa: E402
from common import STUDY_RESULTS, check_only_seeds, fixed_protocol, plain_args, report, seed_records  # noqa: E402
from imagination_ladder import gains, real_outcomes_of, successes  # noqa: E402
from physics_ceiling import rl_in_physics  # noqa: E402

from worldsim.evaluation.compare import READINGS, better_reading  # noqa: E402
from worldsim.pipelines.coevolve_parts import RLRounds  # noqa: E402
from worldsim.runtime.run_logging import write_json  # noqa: E402

RUN_ONLY = ("threads", "out", "only_seeds", "name")
"""Arguments that say how a run is carried out, not what it measures: outside the protocol."""
RECIPE_FIELDS = {"algo": str, "num_envs": int, "group_size": int, "lr": float, "kl_coef": float}
"""The RL part's fields a recipe sets, with their types; the rest keep the part's defaults."""


def parse_recipe(text: str) -> RLRounds:
    """``"algo=grpo,num_envs=128,group_size=8,lr=1e-4"`` as the RL part it names; ``ValueError``
    (one line) for an unknown field, a bad value or a recipe the part refuses."""
    values: dict[str, Any] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in RECIPE_FIELDS:
            raise ValueError(f"recipe {text!r}: {item!r} is not FIELD=VALUE, FIELD one of {', '.join(RECIPE_FIELDS)}")
        try:
            values[key.strip()] = RECIPE_FIELDS[key.strip()](value.strip())
        except ValueError:
            raise ValueError(f"recipe {text!r}: {key.strip()}={value.strip()!r} is not a "
                             f"{RECIPE_FIELDS[key.strip()].__name__}") from None
    recipe = RLRounds(**values)
    if not recipe.groups_divide_envs:
        raise ValueError(f"recipe {text!r}: GRPO's groups of {recipe.group_size} must divide "
                         f"num_envs={recipe.num_envs}")
    return recipe


def recipe_name(recipe: RLRounds) -> str:
    """A folder-safe name that says the recipe, e.g. ``grpo-e128-g8-lr0.0001``."""
    name = f"{recipe.algo}-e{recipe.num_envs}" + (f"-g{recipe.group_size}" if recipe.algo == "grpo" else "")
    return name + f"-lr{recipe.lr:g}" + (f"-kl{recipe.kl_coef:g}" if recipe.kl_coef else "")


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One seed: its BC base, each recipe's RL in physics, every policy's validation episodes both
    ways; the seed's record, also written to ``seed_<seed>.json``."""
    _, bc = bc_base(args.task, seed, args.bc_demos, args.bc_steps, args.out / f"base_s{seed}", args.threads)
    policies = {"bc": bc}
    runs: dict[str, dict[str, Any]] = {}
    for text in args.recipes:
        recipe = parse_recipe(text)
        name = recipe_name(recipe)
        folder = args.out / f"{name}_s{seed}"
        runs[name] = rl_in_physics(recipe, args.budget, bc, args.task, seed, args.reward, folder,
                                   args.run_eval_episodes, args.threads)
        policies[name] = folder / "policy"
    record: dict[str, Any] = {"seed": seed, "arms": {}}
    episodes = (args.val_episodes, args.val_seed + 1000 * seed)
    for name, policy in policies.items():
        outcomes = {reading: real_outcomes_of(policy, args.task, *episodes, reading,
                                              args.out / "validation" / f"s{seed}" / f"{name}_{reading}.json")
                    for reading in READINGS}
        record["arms"][name] = {"validation": outcomes, "policy": str(policy)}
        if name in runs:
            record["arms"][name] |= {key: runs[name][key] for key in ("global_step", "iterations", "train_seconds")
                                     if key in runs[name]}
    write_json(args.out / f"seed_{seed}.json", record)
    return record


def gather(args: argparse.Namespace, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Each arm's validation success and gain over BC, each arm read the way its validation
    episodes pooled over seeds rank first; the recipes ranked by that gain."""
    names = list(records[0]["arms"])
    views = [{"arms": {}} for _ in records]
    for name in names:
        pooled = {reading: sum((r["arms"][name]["validation"][reading] for r in records), []) for reading in READINGS}
        reading = better_reading(*(sum(pooled[k]) / len(pooled[k]) for k in ("mean", "sampled")))
        for view, r in zip(views, records, strict=True):
            view["arms"][name] = {"test": r["arms"][name]["validation"], "reading": reading}
    arms: dict[str, Any] = {}
    for name in names[1:]:
        vs_bc = gains(views, name, "bc")
        arms[name] = successes(views, name) | {
            "gain_vs_bc": vs_bc["gain"], "gain_vs_bc_ci": vs_bc["ci"], "gain_vs_bc_pooled": vs_bc["gain_pooled"],
            "gain_vs_bc_ci_pooled": vs_bc["ci_pooled"], "per_seed": vs_bc["per_seed"],
            "iterations": [r["arms"][name].get("iterations") for r in records],
            "train_seconds": [r["arms"][name].get("train_seconds") for r in records]}
    ranked = sorted(arms, key=lambda name: arms[name]["gain_vs_bc"], reverse=True)
    return {"bc": successes(views, "bc"), "arms": arms, "ranked": ranked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--bc-demos", type=int, default=100, help="the ladder's")
    parser.add_argument("--bc-steps", type=int, default=1500, help="the ladder's")
    parser.add_argument("--recipes", nargs="+", required=True,
                        help="FIELD=VALUE,... of the RL part (" + ", ".join(RECIPE_FIELDS) + ") per recipe")
    parser.add_argument("--budget", type=int, default=204_800, help="physics env steps of each recipe's RL")
    parser.add_argument("--reward", default="sparse", choices=["sparse", "dense"])
    parser.add_argument("--run-eval-episodes", type=int, default=50, help="each RL run's own final evaluation")
    parser.add_argument("--val-episodes", type=int, default=200)
    parser.add_argument("--val-seed", type=int, default=200_000)
    parser.add_argument("--only-seeds", type=int, nargs="+", default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=Path("runs/physics_recipes"))
    parser.add_argument("--name", default="physics_recipes", help="the result file's name")
    args = parser.parse_args()
    for value, flag in ((args.budget, "--budget"), (args.val_episodes, "--val-episodes"),
                        (args.run_eval_episodes, "--run-eval-episodes")):
        if value < 1:
            parser.error(f"{flag} must be positive")
    try:
        recipes = [parse_recipe(text) for text in args.recipes]
    except ValueError as error:
        parser.error(str(error))
    names = [recipe_name(recipe) for recipe in recipes]
    if len(set(names)) < len(names):
        parser.error(f"--recipes name one recipe twice: {names}")
    check_only_seeds(parser, args)

    protocol = {k: v for k, v in plain_args(args).items() if k not in RUN_ONLY}
    protocol["recipes"] = {name: dataclasses.asdict(recipe) for name, recipe in zip(names, recipes, strict=True)}
    if fixed_protocol(parser, args, protocol):
        report(args.name, {"protocol": protocol}, args, STUDY_RESULTS)
    records = seed_records(args, run_seed)
    if records is None:
        return
    report(args.name, {"protocol": protocol, **gather(args, records)}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
