"""Ranking policies of close quality: the world model against the rankers a user has without
rollouts, on tabletop-4.

For each seed of a candidate set, the benchmark builds policies a user would actually have to
choose between: behaviour cloning (TinyVLA) in four runs and three recipes (two training seeds
on ``--demos`` noisy expert episodes per task, one run on ``--small-demos`` episodes, one with
the learning rate ``--low-lr``), each run keeping its policies at the ``--checkpoints`` steps;
and GRPO fine-tunes in physics of the BC runs named by ``--rl-from`` (the task's dense reward, one
run per ``--rl-lrs``), each keeping its policies at the ``--rl-iterations``. Fine-tuning moves a
policy away from the demonstrations whether it helps or hurts, which is where the rankers
without rollouts are expected to fail. Every policy is then

- evaluated in physics on ``--real-episodes`` per task (deterministic; the real ranking, with
  its split-half Spearman as the ceiling any evaluator can reach on this many episodes);
- evaluated in the world model (``--world-model``, the ``--rung``, its own judge) from the real
  starts of ``--held-out`` expert episodes per task (a seed no policy trained on);
- read by the rankers that need no rollout (:func:`worldsim.evaluation.offline.offline_signals`
  on the same held-out episodes: validation loss, action error against the demonstrations,
  action entropy), by its training steps (a fine-tune's: its base's plus its own optimiser
  steps) and by the number of demonstrations it learned from.

``metrics.sets.<seed>`` holds ``policies``, ``band_points`` (the spread of real success),
``real_split_half`` and ``rankers.<name>.spearman`` for every ranker (its ``values`` signed so
that higher ranks higher: losses, errors and entropies negated); the world model's as
``rankers.world_model`` with ``spearman_ci`` (bootstrap over real and imagined episodes),
``pairwise_accuracy_10`` (pairs at least 10 points apart in real success), ``mean_abs_error``
and ``real_episodes_equivalent`` (the real episodes per task whose ranking matches the world
model's against the same reference half). ``metrics.over_sets`` has the means with intervals
over the sets and their episodes. The world model is trained on expert demonstrations only (no
ranked policy's episodes; the default ``runs/fd_wm`` is the failure-detection benchmark's
tabletop-10 model). Beside it, as ``rankers.world_model_mixed``, each set of ``--mixed-ring`` is
ranked by that model fine-tuned on the episodes of the previous set's policies (the ranking
recipe with data from policies like the ranked ones, never the ranked ones themselves):

    python benchmarks/policy_ranking.py --world-model runs/fd_wm

Every stage reuses its output under ``--out``; ``--sets 21`` and ``--sets 22`` in two processes
build two sets at once (a set's ring model needs the previous set built), and a last call with
every seed only gathers them.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tyro
from common import aids_of, noisy_expert, report

SUITE = "tabletop-4"
TASKS = ("ReachCube-v0", "PushCube-v0", "PickPlaceCube-v0", "StackCube-v0")  # the suite's tasks
@dataclass
class Args:
    world_model: Path = Path("runs/fd_wm")
    """The world model that ranks (trained on expert demonstrations of these tasks)."""
    rung: str = "pixels"
    """Imagination rung of the imagined evaluation."""
    sets: tuple[int, ...] = (21, 22, 23)
    """Seeds of the candidate sets (demonstrations, training, evaluation episodes)."""
    demos: int = 200
    """Noisy expert episodes per task for the main recipe."""
    small_demos: int = 100
    """Episodes per task for the small-data recipe."""
    low_lr: float = 3e-4
    """Learning rate of the low-learning-rate recipe (the others use BC's 1e-3)."""
    bc_steps: int = 2000
    """BC optimiser steps of every run."""
    checkpoints: tuple[int, ...] = (1200, 1600, 2000)
    """Steps at which each run's policy is a candidate."""
    rl_from: tuple[str, ...] = ("bc_a",)
    """The BC runs whose final policy GRPO fine-tunes in physics (the RL recipe; empty: none)."""
    rl_lrs: tuple[float, ...] = (3e-5, 1e-4)
    """One GRPO run per base and learning rate."""
    rl_iterations: tuple[int, ...] = (3, 6, 9)
    """Iterations at which each GRPO run's policy is a candidate (the run lasts the last)."""
    rl_num_envs: int = 64
    """GRPO's envs (split between the tasks), in groups of ``--rl-group-size`` from one start."""
    rl_group_size: int = 8
    """GRPO's rollouts per start."""
    held_out: int = 50
    """Held-out expert episodes per task: the offline rankers' data and the imagined starts."""
    real_episodes: int = 150
    """Real episodes per policy and task."""
    imagined_episodes: int = 64
    """Imagined episodes per policy and task."""
    mixed_ring: tuple[int, ...] = (21, 22, 23)
    """Also rank each of these sets with the world model fine-tuned on the previous set's
    candidates' episodes (``--mixed-runs``) beside its demonstrations, the sets taken as a ring
    (21 by 23's model, 22 by 21's, 23 by 22's): the ranking recipe, failures and near misses of
    policies like those ranked, never the ranked ones. Empty: skip."""
    mixed_runs: tuple[str, ...] = ("bc_a", "bc_b")
    """The runs of that set whose checkpoints' episodes join the data (the main recipe's two seeds)."""
    mixed_episodes: int = 25
    """Episodes per task of each of those checkpoints."""
    mixed_steps: int = 1000
    """Fine-tuning steps of the mixed model."""
    mixed_lr: float = 3e-4
    """Its learning rate."""
    bootstrap: int = 1000
    """Bootstrap resamples for the intervals."""
    threads: int = 1
    """torch CPU threads per process."""
    out: Path = Path("runs/policy_ranking")


def recipes(args: Args) -> dict[str, dict[str, Any]]:
    """The four BC runs of a set: name -> data file key, seed offset, learning rate."""
    return {"bc_a": {"recipe": "bc", "data": "demos", "seed": 0, "lr": 1e-3},
            "bc_b": {"recipe": "bc", "data": "demos", "seed": 1, "lr": 1e-3},
            "bc_small": {"recipe": "bc-small-data", "data": "small", "seed": 0, "lr": 1e-3},
            "bc_low_lr": {"recipe": "bc-low-lr", "data": "demos", "seed": 0, "lr": args.low_lr}}


def rl_runs(args: Args) -> dict[str, dict[str, Any]]:
    """The GRPO fine-tunes of a set: name -> the BC run it starts from and its learning rate."""
    unknown = sorted(set(args.rl_from) - set(recipes(args)))
    if unknown:
        raise SystemExit(f"--rl-from {' '.join(unknown)}: not a BC run; choose from {', '.join(recipes(args))}")
    return {f"grpo_{base}_lr{lr:g}": {"recipe": "grpo-physics", "from": base, "lr": lr}
            for base in args.rl_from for lr in args.rl_lrs}


def candidates(args: Args, seed: int) -> list[Path]:
    """The policies of set ``seed``, run by run: each BC run's kept steps, then each GRPO run's
    kept iterations."""
    root = args.out / f"set{seed}"
    return ([root / run / f"policy_step{steps}" for run in recipes(args) for steps in args.checkpoints]
            + [root / run / f"policy_iter{n}" for run in rl_runs(args) for n in args.rl_iterations])


def measured_path(policy: Path, suffix: str = "") -> Path:
    """Where a candidate's measurements are kept: ``ranking_<step N | iter N><suffix>.json`` in its run."""
    return policy.parent / f"ranking_{policy.name.removeprefix('policy_')}{suffix}.json"


def updates_until(run: Path, iteration: int) -> int:
    """The optimiser steps a GRPO run made in its first ``iteration`` iterations: each
    iteration's passes (fewer when the KL guard stopped it early) times its minibatches."""
    from worldsim.runtime.run_logging import read_metrics

    minibatches = json.loads((run / "config.json").read_text())["num_minibatches"]
    rows = [r for r in read_metrics(run / "metrics.jsonl") if "early_stop_epoch" in r]
    if len(rows) < iteration:
        raise SystemExit(f"{run} logged {len(rows)} iterations, fewer than {iteration}: delete it to train it again")
    return minibatches * sum(int(r["early_stop_epoch"]) for r in rows[:iteration])


def collect(path: Path, episodes: int, seed: int) -> None:
    from worldsim.data.collect import collect_episodes
    from worldsim.policies.expert import DEMO_NOISE, GRASP_DEMO_NOISE

    if not path.exists():
        collect_episodes(list(TASKS), lambda task: noisy_expert(task, DEMO_NOISE, GRASP_DEMO_NOISE, seed=seed),
                         episodes, path, seed=seed, progress=False)


def interval(draws: np.ndarray) -> list[float] | None:
    """The 2.5-97.5 percentiles of bootstrap draws (None when every draw is undefined)."""
    finite = draws[np.isfinite(draws)]
    return np.percentile(finite, [2.5, 97.5]).tolist() if len(finite) else None


def without_nan(value: Any) -> Any:
    """``value`` with every NaN float as None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: without_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_nan(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


def imagined_success(args: Args, policy: Any, seed: int, imagination: Any) -> dict[str, Any]:
    """A policy's success in imagination from the held-out starts (the same starts for every
    policy of a set), as :func:`~worldsim.evaluation.rank.per_task_summary` gives it."""
    from worldsim.evaluation.evaluate import evaluate_policy
    from worldsim.evaluation.rank import per_task_summary

    return per_task_summary(evaluate_policy(policy, list(TASKS), args.imagined_episodes, num_envs=32,
                                            seed=seed + 20_000, progress=False, imagination=imagination).to_json())


def build_set(args: Args, seed: int) -> None:
    """Data, BC runs and every per-policy measurement of one set, each cached under ``--out``."""
    from worldsim.envs.imagination import ImaginationConfig
    from worldsim.evaluation.evaluate import evaluate_in_physics
    from worldsim.evaluation.offline import offline_signals
    from worldsim.evaluation.rank import per_task_summary
    from worldsim.policies import load_policy
    from worldsim.runtime.run_logging import write_json

    if max(args.checkpoints) > args.bc_steps:
        raise SystemExit(f"--checkpoints {max(args.checkpoints)} is past --bc-steps {args.bc_steps}")
    root = args.out / f"set{seed}"
    root.mkdir(parents=True, exist_ok=True)
    data = {"demos": root / "demos.h5", "small": root / "small_demos.h5"}
    collect(data["demos"], args.demos, seed)
    collect(data["small"], args.small_demos, seed + 100)
    held_out = root / "held_out.h5"
    collect(held_out, args.held_out, seed + 500)
    imagination = ImaginationConfig(world_model=args.world_model, keyframes=held_out, rung=args.rung, device="cpu")
    about: dict[Path, dict[str, Any]] = {}  # candidate -> its record's recipe, run, steps, demonstrations
    for run_name, recipe in recipes(args).items():
        run = root / run_name
        train_run(args, run, data[recipe["data"]], recipe, seed)
        for steps in args.checkpoints:
            about[run / f"policy_step{steps}"] = {
                "recipe": recipe["recipe"], "run": run_name, "steps": steps,
                "demos": args.small_demos if recipe["data"] == "small" else args.demos}
    for run_name, rl in rl_runs(args).items():
        run = root / run_name
        fine_tune(args, root / rl["from"] / "policy", run, rl["lr"], seed)
        base = recipes(args)[rl["from"]]
        for n in args.rl_iterations:
            about[run / f"policy_iter{n}"] = {
                "recipe": rl["recipe"], "run": run_name, "iterations": n, "from": rl["from"],
                "steps": args.bc_steps + updates_until(run, n),
                "demos": args.small_demos if base["data"] == "small" else args.demos}
    for path in candidates(args, seed):
        measured = measured_path(path)
        if measured.exists():
            continue
        policy = load_policy(path).eval()
        start = time.time()
        real = evaluate_in_physics(policy, list(TASKS), args.real_episodes, seed=seed + 10_000)
        real_s = time.time() - start
        start = time.time()
        dream = imagined_success(args, policy, seed, imagination)
        dream_s = time.time() - start
        write_json(measured, {
            "policy": str(path), **about[path],
            "real": per_task_summary(real), "imagined": dream,
            "offline": offline_signals(policy, held_out),
            "seconds": {"real": round(real_s, 1), "imagined": round(dream_s, 1)}})


def train_run(args: Args, run: Path, data: Path, recipe: dict[str, Any], seed: int) -> None:
    """BC run ``run`` of a set (one of :func:`recipes`) on ``data``, its ``--checkpoints`` kept (once)."""
    from worldsim.training.bc import BCConfig, train_bc

    if not (run / "summary.json").exists():
        train_bc(BCConfig(data=data, out=run, steps=args.bc_steps, lr=recipe["lr"],
                          checkpoint_every=math.gcd(*args.checkpoints), keep_checkpoints=True,
                          seed=seed + recipe["seed"], torch_threads=args.threads, progress=False, overwrite=True))


def fine_tune(args: Args, policy: Path, out: Path, lr: float, seed: int) -> None:
    """GRPO in physics from ``policy`` on every task, its policies kept at ``--rl-iterations``:
    the task's dense reward, as a user fine-tuning without a world model would run it. Runs only
    when one of those policies is missing, afresh (a kept run's files, its candidates'
    measurements among them, are removed first)."""
    from worldsim.envs.tasks import get_task
    from worldsim.policies import load_policy
    from worldsim.training.grpo import GRPOConfig, iteration_steps, train_grpo

    if all((out / f"policy_iter{n}").exists() for n in args.rl_iterations):
        return
    episode = max(get_task(task).max_episode_steps for task in TASKS)
    chunk = load_policy(policy).chunk_size
    train_grpo(GRPOConfig(
        suite=SUITE, obs_mode="pixels", policy=policy, num_envs=args.rl_num_envs, group_size=args.rl_group_size,
        total_env_steps=max(args.rl_iterations) * iteration_steps(episode, chunk, args.rl_num_envs), lr=lr,
        eval_every=0, eval_episodes=10, checkpoint_every=math.gcd(*args.rl_iterations), keep_checkpoints=True,
        seed=seed, torch_threads=args.threads, progress=False, overwrite=True, out=out))


def mixed_source(args: Args, seed: int) -> int:
    """The set whose candidates' episodes fine-tune the model that ranks set ``seed``: the one
    before it in ``--mixed-ring``."""
    ring = args.mixed_ring
    return ring[(ring.index(seed) - 1) % len(ring)]


def mixed_world_model(args: Args, source: int) -> Path:
    """``--world-model`` fine-tuned on set ``source``'s demonstrations and its candidates' own
    episodes (built once)."""
    from worldsim.data.policy_episodes import policy_episodes
    from worldsim.world_models import TrainWMConfig, train_world_model

    sources = [p for p in candidates(args, source) if p.parent.name in args.mixed_runs]
    if not sources or not all(p.exists() for p in sources):
        raise SystemExit(f"the mixed world model needs set {source}'s {', '.join(args.mixed_runs)}: "
                         f"run --sets {source} first")
    root = args.out / f"wm_mixed{source}"
    data = root / "data.h5"
    root.mkdir(parents=True, exist_ok=True)
    policy_episodes(list(TASKS), sources, args.mixed_episodes, data, seed=source + 3000,
                    first=(args.out / f"set{source}" / "demos.h5",))
    if not (root / "wm" / "summary.json").exists():
        train_world_model(TrainWMConfig(
            data=data, out=root / "wm", init=args.world_model, steps=args.mixed_steps, lr=args.mixed_lr, batch_size=32,
            val_fraction=0.05, val_every=500, video_every=0, checkpoint_every=500, seed=source,
            torch_threads=args.threads, device="cpu", progress=False, overwrite=True))
    return root / "wm"


def rank_with_mixed(args: Args, seed: int) -> None:
    """The mixed world model's imagined success of every candidate of set ``seed``."""
    from worldsim.envs.imagination import ImaginationConfig
    from worldsim.policies import load_policy
    from worldsim.runtime.run_logging import write_json

    model = mixed_world_model(args, mixed_source(args, seed))
    imagination = ImaginationConfig(world_model=model, keyframes=args.out / f"set{seed}" / "held_out.h5",
                                    rung=args.rung, device="cpu")
    for path in candidates(args, seed):
        measured = measured_path(path, "_mixed")
        if measured.exists():
            continue
        start = time.time()
        dream = imagined_success(args, load_policy(path).eval(), seed, imagination)
        write_json(measured, {"policy": str(path), "world_model": str(model), "imagined": dream,
                              "seconds": round(time.time() - start, 1)})


RANKERS = {  # name -> (the policy record's value, sign: +1 when higher ranks higher)
    "training_steps": (lambda r: r["steps"], 1),
    "demonstrations": (lambda r: r["demos"], 1),
    "val_loss": (lambda r: r["offline"]["val_loss"], -1),
    "action_error": (lambda r: r["offline"]["action_error"], -1),
    "action_entropy": (lambda r: r["offline"]["action_entropy"], -1),
}


def set_metrics(args: Args, seed: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Every ranker's agreement with the real ranking on one set, and each ranker's bootstrap
    draws of it (real episodes resampled; the world model's imagined ones too)."""
    from worldsim.evaluation.rank import (
        episodes_equivalent,
        outcome_matrix,
        pairwise_accuracy,
        resampled_rates,
        rowwise_spearman,
        spearman_kendall,
        split_half,
    )

    paths = [measured_path(p) for p in candidates(args, seed)]
    missing = [f"{p.parent.name}@{p.stem.removeprefix('ranking_')}" for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"set {seed} is not built ({', '.join(missing)} missing): run --sets {seed} first")
    rows = [json.loads(p.read_text()) for p in paths]
    real = outcome_matrix([r["real"] for r in rows], TASKS)  # (policies, tasks, episodes)
    imagined = {"world_model": outcome_matrix([r["imagined"] for r in rows], TASKS)}
    mixed = [measured_path(p, "_mixed") for p in candidates(args, seed)]
    if all(p.exists() for p in mixed):
        imagined["world_model_mixed"] = outcome_matrix([json.loads(p.read_text())["imagined"] for p in mixed], TASKS)
    real_rate = real.mean(axis=(1, 2))
    rng = np.random.default_rng(seed)
    real_draws = resampled_rates(real, args.bootstrap, rng)
    values = {name: np.array([sign * value(r) for r in rows], float) for name, (value, sign) in RANKERS.items()}
    values |= {name: outcomes.mean(axis=(1, 2)) for name, outcomes in imagined.items()}
    draws = {name: rowwise_spearman(real_draws, np.broadcast_to(v, real_draws.shape)) for name, v in values.items()}
    draws |= {name: rowwise_spearman(real_draws, resampled_rates(outcomes, args.bootstrap, rng))
              for name, outcomes in imagined.items()}
    rankers: dict[str, Any] = {}
    for name, v in values.items():
        rankers[name] = spearman_kendall(real_rate, v) | {
            "spearman_ci": interval(draws[name]),
            "pairwise_accuracy_10": pairwise_accuracy(real_rate, v, 0.10)["accuracy"],
            "values": v.tolist()}
    trivial = {k: rankers[k]["spearman"] for k in RANKERS}
    best = max(trivial, key=lambda k: -np.inf if np.isnan(trivial[k]) else trivial[k])
    for name in imagined:
        rate = values[name]
        rankers[name] |= {"pairs_10": pairwise_accuracy(real_rate, rate, 0.10)["pairs"],
                          "mean_abs_error": float(np.abs(real_rate - rate).mean()),
                          "margin_over_best_trivial": rankers[name]["spearman"] - trivial[best],
                          "margin_ci": interval(draws[name] - draws[best])}
        rankers[name] |= episodes_equivalent(real, rate, rng)
        draws[f"{name}_margin"] = draws[name] - draws[best]
    metrics = {
        "policies": len(rows), "recipes": sorted({r["recipe"] for r in rows}),
        "names": [f"{r['run']}@iter{r['iterations']}" if "iterations" in r else f"{r['run']}@{r['steps']}"
                  for r in rows],
        "real": real_rate.tolist(), "real_per_task": real.mean(axis=2).tolist(),
        "imagined_per_task": {name: outcomes.mean(axis=2).tolist() for name, outcomes in imagined.items()},
        "band_points": float(100 * np.ptp(real_rate)),
        "real_split_half": split_half(real, rng),
        "rankers": rankers, "best_trivial": best,
        "seconds": {k: round(sum(r["seconds"][k] for r in rows), 1) for k in ("real", "imagined")}}
    return metrics, draws


def over_sets(draws: list[dict[str, np.ndarray]], rng: np.random.Generator) -> dict[str, Any]:
    """95% intervals of each ranker's mean over the sets that hold it: the sets resampled, then
    each set's episodes (its bootstrap draws)."""
    out: dict[str, Any] = {}
    for name in sorted(set().union(*draws)):
        stacked = np.stack([d[name] for d in draws if name in d])  # (sets, draws)
        if not np.isfinite(stacked).any():
            continue
        b = stacked.shape[1]
        pick = rng.integers(0, len(stacked), size=(b, len(stacked)))
        with np.errstate(invalid="ignore"):
            means = np.nanmean(stacked[pick, np.arange(b)[:, None]], axis=1)
        out[name] = interval(means)
    return out


def main(args: Args) -> None:
    from worldsim.envs.imagination import ImaginationConfig
    from worldsim.runtime.threads import use_torch_threads

    use_torch_threads(args.threads)
    if len(set(args.mixed_ring)) != len(args.mixed_ring) or len(args.mixed_ring) == 1:
        raise SystemExit(f"--mixed-ring {' '.join(map(str, args.mixed_ring))}: give at least two distinct sets "
                         "(a model never ranks the policies of its own data)")
    for seed in args.sets:
        build_set(args, seed)
        if seed in args.mixed_ring:
            rank_with_mixed(args, seed)
    if len(args.sets) < 2:
        print(f"set {args.sets[0]} built under {args.out}; gather with every seed in --sets")
        return
    built = {str(seed): set_metrics(args, seed) for seed in args.sets}
    sets = {k: m for k, (m, _) in built.items()}
    intervals = over_sets([d for _, d in built.values()], np.random.default_rng(0))
    summary: dict[str, Any] = {}
    for name in ("world_model", "world_model_mixed", *RANKERS):
        per_set = {k: m["rankers"][name] for k, m in sets.items() if name in m["rankers"]}
        if not per_set:
            continue
        summary[name] = {"sets": list(per_set), "spearman": [r["spearman"] for r in per_set.values()],
                         "spearman_mean": float(np.nanmean([r["spearman"] for r in per_set.values()])),
                         "spearman_ci": intervals.get(name)}
        if name.startswith("world_model"):
            accuracy = [r["pairwise_accuracy_10"] for r in per_set.values()
                        if r["pairwise_accuracy_10"] is not None]
            summary[name] |= {"pairwise_accuracy_10": float(np.mean(accuracy)) if accuracy else None,
                              "margin_over_best_trivial": [r["margin_over_best_trivial"] for r in per_set.values()],
                              "margin_ci": intervals.get(f"{name}_margin")}
    report("policy_ranking", {
        "tasks": list(TASKS), "world_model": str(args.world_model), "rung": args.rung,
        "aids": aids_of(ImaginationConfig(rung=args.rung), [args.world_model]),
        "world_model_data": {
            "world_model": "expert demonstrations only (none of the ranked policies' episodes)",
            "world_model_mixed": (f"world_model fine-tuned on another set's demonstrations and "
                                  f"{args.mixed_episodes} episodes per task of each checkpoint of its runs "
                                  f"{', '.join(args.mixed_runs)}: "
                                  + ", ".join(f"set {s} by set {mixed_source(args, s)}'s" for s in args.mixed_ring))},
        "sets": without_nan(sets), "over_sets": without_nan(summary),
        "targets": {"spearman": 0.8, "margin_over_best_trivial": 0.2, "pairwise_accuracy_10": 0.85}}, args)


if __name__ == "__main__":
    main(tyro.cli(Args))
