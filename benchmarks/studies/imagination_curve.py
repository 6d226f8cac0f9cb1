"""How the real success of GRPO in imagination moves with its imagined budget, beside its imagined
success: whether the ladder's imagination arm is worth running, with its controls, at the budget
where GRPO in physics lifts the same BC bases (``physics_ceiling.py``: 819,200 env steps, 64 envs
in groups of 16, lr 3e-5).

Each seed builds the ladder's round 0 (``imagination_ladder.py``'s pixels arm: its BC base from
``bc_base``, ``--real-episodes`` real episodes of it with sampled actions, a ``tiny`` world model
trained ``--wm-steps`` on them and the demonstrations, keyframes from those episodes), then one GRPO
run in that world on the success-only reward (``--reward``, the ladder's headline), evaluated in
physics every ``--eval-every`` iterations on the ladder's round-evaluation episodes (``--eval-episodes``,
seed ``seed + 10000``, by the mean action: the episodes physics_ceiling's runs were read on, and
never the test's). Its imagined success on its own rollouts (sampled, half of them from keyframes,
cut at the imagination horizon) is logged beside each evaluation: where the two part, the policy
exploits the model, which the ladder's guard would roll back.

With ``--rounds R`` (above 1) the same imagined budget is spent by co-evolution instead (``worldsim
coevolve`` from the same BC base, on the same settings): R rounds of ``--env-steps / R`` imagined
steps, each followed by ``--real-episodes`` real episodes of the round's policy and a refinement of
the world model on every episode so far (``--wm-refine-steps``), the guard rolling back a round
whose policy the round evaluations find exploits the model; each round's real and imagined success
and the guard's verdict are the curve (``--name`` names the result file).

This is a pilot on validation episodes, not a test: it runs no test episode and claims no gain.
The success-only reward's static placebo is not run (a world whose cubes never move never pays
it: the ladder's runs measured it at 0.0 points).

    python benchmarks/studies/imagination_curve.py --only-seeds 0 --threads 1 --out runs/imagination_curve
    python benchmarks/studies/imagination_curve.py --only-seeds 1 --threads 1 --out runs/imagination_curve
    python benchmarks/studies/imagination_curve.py --out runs/imagination_curve     # gathers
    python benchmarks/studies/imagination_curve.py --rounds 10 --name imagination_curve_coevolve \
        --only-seeds 0 --threads 1 --out runs/imagination_curve_coevolve          # likewise

Writes ``benchmarks/studies/results/<--name>.json`` (the protocol first; the curves once
every seed has run).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmark scripts
from coevolve import bc_base  # noqa: E402
from common import STUDY_RESULTS, check_only_seeds, checked_recipe, fixed_protocol, plain_args, report, seed_records  # noqa: E402

from worldsim.envs.core import IMAGINED_REWARD_TYPES  # noqa: E402
from worldsim.envs.imagination import PIXELS, ImaginationConfig  # noqa: E402
from worldsim.pipelines.coevolve import CoevolveConfig, build_round0  # noqa: E402
from worldsim.pipelines.coevolve_parts import RLRounds, WorldModelRounds  # noqa: E402
from worldsim.pipelines.coevolve_stages import STATE_FILE, Stages  # noqa: E402
from worldsim.runtime.run_logging import to_jsonable, write_json  # noqa: E402
from worldsim.training.rl import EVAL_SEED_OFFSET  # noqa: E402

RUN_ONLY = ("threads", "out", "only_seeds", "name")
"""Arguments that say how a run is carried out, not what it measures: outside the protocol."""
IMAGINED = "episode/success_rate"
"""GRPO's logged success on its own (imagined) rollouts."""
PREDATES = {"rounds": 1, "wm_refine_steps": 800}
"""The settings the first run's kept protocol predates, as it ran."""


def round0_config(args: argparse.Namespace, seed: int, bc: Path, demos: Path) -> CoevolveConfig:
    """The ladder's pixels arm's settings for ``seed`` (its round 0 is built from these)."""
    return CoevolveConfig(
        base_policy=bc, task=args.task, suite=None, demonstrations=demos, real_episodes=args.real_episodes,
        rounds=args.rounds, eval_episodes=args.eval_episodes, test_episodes=0, seed=seed,
        out=args.out / f"round0_s{seed}",
        videos=0, torch_threads=args.threads, progress=False,
        imagination=ImaginationConfig(rung=PIXELS, reward_type=args.reward),
        wm=WorldModelRounds(preset="tiny", steps=args.wm_steps, refine_steps=args.wm_refine_steps),
        rl=RLRounds(env_steps=args.env_steps // args.rounds, num_envs=args.num_envs, group_size=args.group_size,
                    lr=args.lr))


def bc_success(policy: Path, args: argparse.Namespace, seed: int) -> float:
    """The BC base's success on the evaluations' episodes by its mean action (kept)."""
    kept = args.out / f"bc_eval_s{seed}.json"
    if not kept.exists():
        from worldsim.evaluation.evaluate import evaluate_in_physics
        from worldsim.policies import load_policy

        result = evaluate_in_physics(load_policy(policy), [args.task], args.eval_episodes, seed + EVAL_SEED_OFFSET)
        write_json(kept, {"success_rate": result["success_rate"]})
    return float(json.loads(kept.read_text())["success_rate"])


def grpo_curve(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A GRPO run's curve from its ``metrics.jsonl`` lines: at each evaluation (the trainer logs its
    final one too, as the last line) the real success, and the imagined success of the iterations
    since the evaluation before (None where none ran)."""
    imagined = [(line["step"], line[IMAGINED]) for line in lines if IMAGINED in line]
    curve, before = [], 0
    for line in lines:
        if "eval/success_rate" in line:
            step = line["step"]
            since = [rate for at, rate in imagined if before < at <= step]
            curve.append({"env_steps": step, "real": line["eval/success_rate"],
                          "imagined": float(np.mean(since)) if since else None})
            before = step
    return curve


def coevolution_curve(config: CoevolveConfig) -> tuple[list[dict[str, Any]], float, float]:
    """Co-evolution as ``config`` says (resumed where ``config.out`` holds part of it): each round's
    imagined env steps so far, real and imagined success and the guard's verdict; the base policy's
    real success (round 0's evaluation, on the rounds' episodes); and the run's seconds."""
    from worldsim.pipelines.coevolve import coevolve

    results = coevolve(replace(config, resume=(config.out / STATE_FILE).exists()))
    curve = [{"env_steps": row["round"] * config.rl.env_steps, "real": row["real"]["success_rate"],
              "imagined": row["imagined"]["success_rate"], "accepted": row["accepted"],
              "real_episodes_used": row["real_episodes_used"]}
             for row in results["rounds"][1:]]
    return curve, results["base_real_success"], results["wall_clock_s"]


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One seed: the ladder's round 0, one GRPO run in its world with evaluations along it (or
    ``args.rounds`` rounds of co-evolution); the seed's curve, also written to ``seed_<seed>.json``."""
    from worldsim.training.grpo import train_grpo

    demos, bc = bc_base(args.task, seed, args.bc_demos, args.bc_steps, args.out / f"base_s{seed}", args.threads)
    config = round0_config(args, seed, bc, demos)
    if args.rounds > 1:
        curve, base, seconds = coevolution_curve(replace(config, out=args.out / f"coevolve_s{seed}"))
        record = {"seed": seed, "bc": base, "curve": curve, "train_seconds": seconds}
        write_json(args.out / f"seed_{seed}.json", record)
        return record
    config.out.mkdir(parents=True, exist_ok=True)
    stages = Stages(config.out, to_jsonable(config), (config.out / STATE_FILE).exists())
    world_model, _, _ = build_round0(config, stages, config.out)
    keyframes = config.out / "data.h5"
    out = args.out / f"rl_s{seed}"
    if not (out / "summary.json").exists():
        rl = config.rl.train_config(
            args.env_steps, policy=str(bc), task=args.task, obs_mode="pixels", eval_every=args.eval_every,
            eval_episodes=args.eval_episodes, checkpoint_every=0, seed=seed, out=out, overwrite=True,
            torch_threads=args.threads, progress=False,
            imagination=config.imagination.replace(world_model=world_model, keyframes=keyframes))
        train_grpo(rl)  # type: ignore[arg-type]
    summary = json.loads((out / "summary.json").read_text())
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    record = {"seed": seed, "bc": bc_success(bc, args, seed), "curve": grpo_curve(lines),
              "train_seconds": summary["train_seconds"], "world_model": str(world_model)}
    write_json(args.out / f"seed_{seed}.json", record)
    return record


def plot_curve(metrics: dict[str, Any], path: Path) -> Path:
    """Each seed's real success (solid) and imagined success (dashed) against imagined env steps,
    BC's real success at 0; with rounds, a rolled-back round's real point hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [0] + [point["env_steps"] for point in metrics["curve"]]
    for i, (seed, bc) in enumerate(zip(metrics["protocol"]["seeds"], metrics["bc"], strict=True)):
        colour = f"C{i}"
        real = [bc] + [point["real"][i] for point in metrics["curve"]]
        ax.plot(steps, real, "o-", color=colour, label=f"seed {seed}: real (mean action)")
        ax.plot(steps[1:], [point["imagined"][i] for point in metrics["curve"]], "s--", color=colour, alpha=0.6,
                label=f"seed {seed}: imagined")
        rolled_back = [(s, r) for s, r, point in zip(steps[1:], real[1:], metrics["curve"], strict=True)
                       if not point.get("accepted", [True] * (i + 1))[i]]
        if rolled_back:
            ax.plot(*zip(*rolled_back, strict=True), "o", color="white", markeredgecolor=colour,
                    label=f"seed {seed}: rolled back")
    ax.set_xlabel("imagined env steps")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--bc-demos", type=int, default=100, help="the ladder's")
    parser.add_argument("--bc-steps", type=int, default=1500, help="the ladder's")
    parser.add_argument("--real-episodes", type=int, default=100, help="the ladder's round 0")
    parser.add_argument("--wm-steps", type=int, default=800, help="the ladder's round 0")
    parser.add_argument("--rounds", type=int, default=1,
                        help="1: one GRPO run in round 0's world; more: co-evolution rounds sharing --env-steps")
    parser.add_argument("--wm-refine-steps", type=int, default=800, help="the ladder's (with --rounds above 1)")
    parser.add_argument("--reward", default="transition", choices=IMAGINED_REWARD_TYPES, help="the ladder's headline")
    parser.add_argument("--env-steps", type=int, default=819_200, help="imagined env steps of GRPO")
    parser.add_argument("--num-envs", type=int, default=64, help="physics_ceiling's recipe")
    parser.add_argument("--group-size", type=int, default=16, help="physics_ceiling's recipe")
    parser.add_argument("--lr", type=float, default=3e-5, help="physics_ceiling's recipe")
    parser.add_argument("--eval-every", type=int, default=32, help="GRPO iterations between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=50, help="the ladder's round evaluations")
    parser.add_argument("--only-seeds", type=int, nargs="+", default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=Path("runs/imagination_curve"))
    parser.add_argument("--name", default="imagination_curve", help="the result file's name")
    args = parser.parse_args()
    for value, flag in ((args.env_steps, "--env-steps"), (args.eval_every, "--eval-every"),
                        (args.eval_episodes, "--eval-episodes"), (args.real_episodes, "--real-episodes"),
                        (args.rounds, "--rounds"), (args.wm_refine_steps, "--wm-refine-steps")):
        if value < 1:
            parser.error(f"{flag} must be positive")
    if args.env_steps % args.rounds:
        parser.error(f"--env-steps {args.env_steps} must divide into --rounds {args.rounds} equal rounds")
    checked_recipe(parser, lambda: RLRounds(num_envs=args.num_envs, group_size=args.group_size, lr=args.lr))
    check_only_seeds(parser, args)

    protocol = {k: v for k, v in plain_args(args).items() if k not in RUN_ONLY}
    if fixed_protocol(parser, args, protocol, PREDATES):
        report(args.name, {"protocol": protocol}, args, STUDY_RESULTS)
    records = seed_records(args, run_seed)
    if records is None:
        return
    steps = [point["env_steps"] for point in records[0]["curve"]]
    metrics: dict[str, Any] = {
        "protocol": protocol, "bc": [r["bc"] for r in records],
        # per point, each seed's figures (real and imagined success; with rounds, the guard's verdicts)
        "curve": [{"env_steps": step,
                   **{key: [r["curve"][i][key] for r in records]
                      for key in records[0]["curve"][i] if key != "env_steps"},
                   "real_minus_bc_points": float(100 * np.mean([r["curve"][i]["real"] - r["bc"] for r in records]))}
                  for i, step in enumerate(steps)],
        "train_seconds": [r["train_seconds"] for r in records]}
    report(args.name, metrics, args, STUDY_RESULTS)
    print(f"plot: {plot_curve(metrics, args.out / 'curve.png')}")


if __name__ == "__main__":
    main()
