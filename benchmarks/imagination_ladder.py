"""The imagination ladder: what each rung of imagination (``oracle``, ``sim-seeded``, ``pixels``,
``video``; :mod:`worldsim.envs.imagination`) gives a policy trained in it, on equal terms.

For each seed, one BC base (the co-evolution benchmark's: ``--bc-demos`` noisy scripted-expert
demonstrations, ``--bc-steps`` of behaviour cloning) and then, from it:

- ``direct-rl``: GRPO in physics on the whole real-episode budget co-evolution spends;
- co-evolution on each rung in ``--rungs``, with the same real-episode budget. ``oracle`` and
  ``sim-seeded`` reuse the ``pixels`` run's round 0 (the same base episodes and world model:
  they differ only in what imagination may take from the simulator); ``video`` trains its own
  world models without state.

A rung runs with the ``tiny`` world model, or with another preset when given as
``<rung>@<preset>`` (``pixels@video-tiny``: the video transformer), and is judged by the model's
own outcome, or by another judge when given as ``<rung>:<judge>`` (``pixels:head``: imagination
on the pixels rung judged, and rewarded, by the learned success head); ``--wm-steps`` gives round
0's steps, for all presets or per preset (``800 video-tiny=880``: the same CPU time); each row's
``wm_train_seconds`` says what its round 0 took.

Every policy of a seed is tested on the same ``--test-episodes`` real episodes that no round saw,
so every comparison is paired (McNemar; pooled over the seeds). Each rung's world model (round
0's) is also measured on ``--heldout-episodes`` new real episodes of the BC policy, balanced
between successes and failures, replayed on that rung
(:func:`~worldsim.world_models.evaluate.evaluate_world_model`): PSNR 8 and 32 steps from episode
starts, the task object's error 16 steps after contact, outcome agreement on balanced 8-step
keyframe windows, on the last 8 steps of every (balanced) held-out episode and over full
replays, beside physics' own agreement on the same episodes
with the cube 0.33 mm and 1 mm off; and the BC policy's action gap (``action_gap_8``,
``action_gap_32``: the mean L2 distance between its actions on the rung's imagined frames and on
the real ones over the first 8 / 32 steps, beside ``action_step_change``, how far its action
moves from one real step to the next). On ``pixels`` the outcomes are judged twice: by the model's
own judge (the task's rule on the positions it read and predicted) and by its learned success
head (``*_head``).

Writes ``benchmarks/results/imagination_ladder.json``: under ``metrics.rungs.<rung>``
``success``, ``gain_vs_bc`` and ``gain_vs_bc_ci`` (points), ``gain_vs_direct_rl`` and
``gain_vs_direct_rl_ci``, ``p_vs_bc``, ``p_vs_direct_rl``, ``real_episodes``, ``seeds`` and the
fidelity figures; ``metrics.bc`` and ``metrics.direct_rl`` the baselines.

    python benchmarks/imagination_ladder.py --task PushCube-v0 --seeds 0 1 2 --real-episodes 100 \\
        --rounds 2 --test-episodes 200 --out runs/ladder
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from coevolve import bc_base, outcomes
from common import report

from worldsim.envs.core import IMAGINED_REWARD_TYPES
from worldsim.envs.imagination import JUDGES, PIXELS, RUNGS, ImaginationConfig, Rung
from worldsim.evaluation.compare import paired_comparison
from worldsim.pipelines.coevolve import CoevolveConfig, coevolve
from worldsim.pipelines.coevolve_parts import RLRounds, WorldModelRounds
from worldsim.world_models.config import PRESETS


def heldout_episodes(policy: Path, task: str, episodes: int, out: Path, seed: int) -> Path:
    """``episodes`` new real episodes of ``policy`` (with state, for the fidelity figures)."""
    from worldsim.data.collect import collect_episodes
    from worldsim.policies import load_policy

    if not out.exists():
        loaded = load_policy(policy).eval()
        collect_episodes([task], lambda t: loaded, episodes, out, num_envs=min(episodes, 30), seed=seed + 50_000,
                         obs_mode="pixels+state", progress=False)
    return out


def fidelity(world_model: Path, heldout: Path, rung: Rung, out: Path, seed: int, judge: str | None = None,
             policy: Path | None = None) -> dict[str, Any]:
    """The rung's fidelity figures of ``world_model`` on the held-out episodes (balanced between
    successes and failures when both occur: ``heldout.balanced`` says); with ``policy``, its
    action gap on the rung's frames."""
    from worldsim.data.reader import EpisodeReader
    from worldsim.world_models.evaluate import evaluate_world_model

    kept = out / "fidelity.json"  # a finished evaluation is read back, not run again
    if kept.exists():
        fid = json.loads(kept.read_text())
    else:
        with EpisodeReader(heldout) as reader:
            both = {i.success for i in reader.episode_info()} == {True, False}
        fid = evaluate_world_model(world_model, heldout, balance=both, curve_steps=32,
                                   imagination=ImaginationConfig(rung=rung, judge=judge), policy=policy, out=out,
                                   videos=2, seed=seed, progress=False)
    by = fid["success_by_horizon"]
    contact = fid.get("object_error_after_contact") or {}
    physics = fid.get("physics_ceiling") or {}

    def accuracy(row: dict[str, Any] | None) -> float | None:
        return None if row is None else row["accuracy"]

    return {"psnr_8": fid["psnr_at_8"], "psnr_32": fid["psnr_at_horizon"],
            "object_error_cm_16": contact.get("at_horizon_cm"),
            "agreement_keyframe_8": accuracy(by.get("keyframe_8_balanced")),
            "agreement_keyframe_8_majority": (by.get("keyframe_8_balanced") or {}).get("majority_accuracy"),
            # the last 8 steps of every held-out episode: 8-step windows from real mid-episode states
            # whose outcomes keep the held-out set's balance (keyframe windows that end in a success
            # within 8 steps are few: their balanced set can be empty)
            "agreement_last_8": accuracy(by["last_8"]),
            "agreement_full": accuracy(by["full"]), "agreement_full_majority": by["full"]["majority_accuracy"],
            "physics_full_0.33mm": accuracy(physics.get("shift_0.33mm")),
            "physics_full_1mm": accuracy(physics.get("shift_1mm")),
            # the BC policy's action on the rung's frames against its action on the real ones
            "action_gap_8": fid.get("action_gap_at_8"), "action_gap_32": fid.get("action_gap_at_horizon"),
            "action_step_change": fid.get("step_change_mean"), "judge": fid["judge"], "heldout": fid["held_out"]}


def row(rung: Rung, preset: str, judge: str | None = None) -> str:
    """A result row's name: the rung, with ``@<preset>`` for a world model other than ``tiny`` and
    ``:<judge>`` for a judge other than the model's own."""
    return (rung.name if preset == "tiny" else f"{rung.name}@{preset}") + (f":{judge}" if judge else "")


def pooled(pairs: list[tuple[list[bool], list[bool]]]) -> dict[str, Any]:
    """One paired comparison over every seed's episodes."""
    return paired_comparison(sum((a for a, _ in pairs), []), sum((b for _, b in pairs), []))


def points(comparison: dict[str, Any]) -> tuple[float, list[float]]:
    """A comparison's difference and its 95% interval, in points."""
    return 100 * comparison["difference"], [100 * x for x in comparison["difference_ci95"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rungs", nargs="+", default=["pixels", "video", "sim-seeded", "oracle"],
                        help=f"rungs ({', '.join(RUNGS)}), each as RUNG[@PRESET][:JUDGE] (PRESET in "
                             f"{', '.join(PRESETS)}, JUDGE in {', '.join(JUDGES)})")
    parser.add_argument("--bc-demos", type=int, default=100)
    parser.add_argument("--bc-steps", type=int, default=1500)
    parser.add_argument("--real-episodes", type=int, default=100, help="per collection (budget: x rounds)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--wm-steps", nargs="+", default=["800"],
                        help="round 0's world-model steps: N for every preset, PRESET=N for one")
    parser.add_argument("--wm-refine-steps", type=int, default=800)
    parser.add_argument("--rl-env-steps", type=int, default=12_800)
    parser.add_argument("--rl-num-envs", type=int, default=32)
    parser.add_argument("--reward-type", default="transition", choices=IMAGINED_REWARD_TYPES)
    parser.add_argument("--eval-episodes", type=int, default=50, help="per round (the guard's)")
    parser.add_argument("--test-episodes", type=int, default=200, help="paired test episodes per seed")
    parser.add_argument("--heldout-episodes", type=int, default=60, help="for the fidelity figures")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=Path("runs/ladder"))
    args = parser.parse_args()
    rows: dict[str, tuple[Rung, str, str | None]] = {}  # row name: (rung, world-model preset, judge)
    for name in args.rungs:
        spec, _, given_judge = name.partition(":")
        rung_name, _, given_preset = spec.partition("@")
        preset, judge = given_preset or "tiny", given_judge or None
        try:  # the config's own refusals (unknown rung or judge, a judge the rung cannot take)
            rung = ImaginationConfig(rung=rung_name, judge=judge).rung
        except ValueError as error:
            parser.error(f"--rungs {name}: {error}")
        if preset not in PRESETS:
            parser.error(f"--rungs {name}: give RUNG[@PRESET][:JUDGE], PRESET in {', '.join(PRESETS)}")
        rows[row(rung, preset, judge)] = (rung, preset, judge)
    for rung, preset, judge in list(rows.values()):  # a seeded rung reuses the pixels run's round 0
        if rung.seeded:
            rows.setdefault(row(PIXELS, preset, judge), (PIXELS, preset, judge))
    rows = dict(sorted(rows.items(), key=lambda item: item[1][0].seeded))
    steps: dict[str, int] = {}
    try:
        for entry in sorted(args.wm_steps, key=lambda e: "=" in e):  # N first, PRESET=N over it
            preset, _, value = entry.rpartition("=")
            for name in [preset] if preset else list(PRESETS):
                steps[name] = int(value)
    except ValueError:
        parser.error(f"--wm-steps {' '.join(args.wm_steps)}: give N or PRESET=N")

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in ("direct-rl", *rows)}
    fidelities: dict[str, list[dict[str, Any]]] = {r: [] for r in rows}
    for seed in args.seeds:
        demos, bc = bc_base(args.task, seed, args.bc_demos, args.bc_steps, args.out / f"base_s{seed}", args.threads)
        heldout = heldout_episodes(bc, args.task, args.heldout_episodes, args.out / f"base_s{seed}" / "heldout.h5",
                                   seed)
        for name in runs:
            out = args.out / f"{name}_s{seed}"
            rung, preset, judge = rows.get(name, (PIXELS, "tiny", None))
            config = CoevolveConfig(
                base_policy=bc, task=args.task, suite=None, demonstrations=demos, real_episodes=args.real_episodes,
                rounds=args.rounds, mode="direct-rl" if name == "direct-rl" else "coevolve",
                wm=WorldModelRounds(preset=preset, steps=steps[preset], refine_steps=args.wm_refine_steps),
                rl=RLRounds(env_steps=args.rl_env_steps, num_envs=args.rl_num_envs),
                eval_episodes=args.eval_episodes, test_episodes=args.test_episodes, seed=seed, out=out,
                resume=(out / "state.json").exists(), videos=2 if name != "direct-rl" else 0,
                round0_from=args.out / f"{row(PIXELS, preset, judge)}_s{seed}" if rung.seeded else None,
                torch_threads=args.threads, progress=False,
                imagination=ImaginationConfig(rung=rung, judge=judge, reward_type=args.reward_type))
            done = out / "results.json"
            runs[name].append(json.loads(done.read_text()) if done.exists() else coevolve(config))
            if name != "direct-rl":
                world_model = Path(runs[name][-1]["rounds"][0]["world_model"])
                figures = fidelity(world_model, heldout, rung, out / "fidelity", seed, judge=judge, policy=bc)
                figures["wm_train_seconds"] = json.loads((world_model / "summary.json").read_text())["train_seconds"]
                if rung is PIXELS and figures["judge"] == "rule":  # the learned head, judging the same replays
                    head = fidelity(world_model, heldout, rung, out / "fidelity_head", seed, judge="head")
                    figures |= {f"{k}_head": head[k] for k in ("agreement_keyframe_8", "agreement_last_8",
                                                                "agreement_full")}
                fidelities[name].append(figures)

    bc_pairs = [outcomes(r) for r in runs["direct-rl"]]  # test episodes: (BC, direct RL)
    direct = pooled(bc_pairs)
    metrics: dict[str, Any] = {
        "task": args.task, "seeds": args.seeds, "test_episodes_per_seed": args.test_episodes,
        "bc": {"success": float(np.mean(sum((b for b, _ in bc_pairs), [])))},
        "direct_rl": {"success": direct["after"]["success_rate"], "gain_vs_bc": points(direct)[0],
                      "gain_vs_bc_ci": points(direct)[1], "p_vs_bc": direct["p_value"],
                      "real_episodes": runs["direct-rl"][0]["real_budget"]},
        "rungs": {}}
    for rung, (kind, preset, _) in rows.items():
        mine = [outcomes(r) for r in runs[rung]]
        vs_bc = pooled(mine)
        vs_direct = pooled([(d, m) for (_, d), (_, m) in zip(bc_pairs, mine, strict=True)])
        figures = {k: float(np.mean([f[k] for f in fidelities[rung] if f[k] is not None]))
                   if any(f[k] is not None for f in fidelities[rung]) else None
                   for k in fidelities[rung][0] if k not in ("heldout", "judge")}
        metrics["rungs"][rung] = {
            "success": vs_bc["after"]["success_rate"], "success_ci": vs_bc["after"]["ci95"],
            "gain_vs_bc": points(vs_bc)[0], "gain_vs_bc_ci": points(vs_bc)[1], "p_vs_bc": vs_bc["p_value"],
            "gain_vs_direct_rl": points(vs_direct)[0], "gain_vs_direct_rl_ci": points(vs_direct)[1],
            "p_vs_direct_rl": vs_direct["p_value"], "real_episodes": runs[rung][0]["real_budget"],
            "seeds": len(runs[rung]), "per_seed_gain_vs_bc": [points(paired_comparison(*p))[0] for p in mine],
            "wall_clock_s": [r["wall_clock_s"] for r in runs[rung]], **figures,
            "judge": fidelities[rung][0]["judge"], "wm_preset": preset, "wm_steps": steps[preset],
            "oracle": kind.rendered, "aids": list(kind.aids)}
    report("imagination_ladder", metrics, args)


if __name__ == "__main__":
    main()
