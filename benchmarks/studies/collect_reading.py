"""Does the world model imagine the policy's grasps once it has seen them?

On PickPlaceCube the BC policy grasps only by its mean action (17.6% of test episodes; 1.0%
sampled), but the imagination ladder collects each round's real episodes with sampled actions, so
its round-0 world model learns from the demonstrations and from 1-4 of the policy's own
successes a seed. Replayed on BC's episodes read by the mean action, that model's rule finds 7 of
56 real successes. This study trains each seed's round-0 model again, exactly as the ladder did
(:func:`anchor_clearing.trained`: its settings, seed and steps), on the same demonstrations and
the same number of the BC policy's real episodes from the same starts, collected with the reading
the ladder tests BC by (``--reading``, the mean action), and replays both models on the ladder's
held-out episodes of that reading (:func:`imagination_ladder.fidelity`: balanced, 32 steps, the
``pixels`` rung, the rule judging, physics' own agreement beside it). Per seed and for each model:
the rule's recall and specificity over full replays, outcome agreement (full replays, last 8
steps, 8-step keyframe windows), PSNR and the task cube's error after contact, and the
difference (``minus_ladder``). Both models are also replayed on the ladder's held-out episodes read
with sampled actions (``on_sampled``: PSNR, the cube's error, BC's action gap), the actions RL
explores with in imagination, where a model that saw fewer varied actions could lose. With
``--reading mixed`` half the round's episodes are sampled and half read by the mean action (its
judge scored on the mean-action held-out set). ``--closed-loop`` also runs BC from the same 200
starts (the ladder's GRPO draws: episode starts and keyframes of each model's round data, horizon
40) in each model and in physics, read both ways: the success each model pays, the real
successes it finds and the false ones (``closed_<reading>_*``). It measures the world model only;
what the change gives a policy is the ladder's to measure, on a new run.
Writes ``benchmarks/studies/results/collect_reading.json`` (``collect_reading_<reading>.json`` for
another ``--reading``).

    python benchmarks/studies/collect_reading.py --ladder runs/ladder_pick --seeds 0 1 2 3 4 \\
        --out runs/collect_reading
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # anchor_clearing.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from anchor_clearing import trained  # noqa: E402
from common import STUDY_RESULTS, report  # noqa: E402
from imagination_ladder import fidelity  # noqa: E402

from worldsim.envs.imagination import PIXELS, ImaginationConfig  # noqa: E402
from worldsim.evaluation.compare import READINGS  # noqa: E402
from worldsim.runtime.run_logging import write_json  # noqa: E402

FIGURES = ("recall", "specificity", "agreement_full", "agreement_last_8", "agreement_keyframe_8", "psnr_8",
           "psnr_32", "object_error_cm_16", "physics_full_0.33mm")
"""What the study reports per model and seed."""
CLOSED_LOOP_STARTS = 200
"""Starts per seed and reading of ``--closed-loop``."""
ON_SAMPLED = ("psnr_8", "psnr_32", "object_error_cm_16", "action_gap_8", "action_gap_32")
"""What it reports of the replays of the sampled held-out episodes."""


def collected(ladder: Path, seed: int, reading: str, out: Path) -> Path:
    """The ladder's round-0 real episodes of ``seed`` collected again with ``reading``: the round's
    own collection (:func:`~worldsim.pipelines.coevolve.collect_real`: the same policy, starts,
    count and settings), merged after the same demonstrations. ``mixed``: half the count with
    sampled actions from the round's seed, half by the mean action from the next seed's starts.
    The round's episodes alone (the imagination's keyframes) are ``out/data.h5``."""
    from worldsim.data.merge import merge_episode_files
    from worldsim.pipelines.coevolve import CoevolveConfig, collect_real

    merged = out / "all.h5"
    if merged.exists():
        return merged
    ran = json.loads((ladder / f"pixels_s{seed}" / "state.json").read_text())["config"]
    out.mkdir(parents=True, exist_ok=True)
    parts = [(reading, ran["real_episodes"], ran["seed"])] if reading != "mixed" else [
        ("sampled", ran["real_episodes"] // 2, ran["seed"]), ("mean", ran["real_episodes"] // 2, ran["seed"] + 1)]
    files = [out / "data.h5"] if len(parts) == 1 else [out / f"data_{name}.h5" for name, _, _ in parts]
    for (name, episodes, start_seed), file in zip(parts, files, strict=True):
        config = CoevolveConfig(base_policy=Path(ran["base_policy"]), task=ran["task"], suite=ran["suite"],
                                real_episodes=episodes, seed=ran["seed"], progress=False,
                                collect_deterministic=READINGS[name])
        collect_real(config, config.base_policy, file, start_seed)
    if len(files) > 1:
        merge_episode_files(files, out / "data.h5")
    merge_episode_files([Path(ran["demonstrations"]), out / "data.h5"], merged)
    return merged


def closed_loop(imagination: ImaginationConfig, policy: Path, task: str, seed: int, reading: str,
                out: Path) -> dict[str, Any]:
    """BC run from ``CLOSED_LOOP_STARTS`` starts (episode starts and keyframes, as GRPO draws them
    in ``imagination``) in its world model and in physics, read as ``reading``
    (:func:`~worldsim.evaluation.start_agreement.compare_from_starts`); kept in ``out``."""
    from worldsim.evaluation.start_agreement import compare_from_starts
    from worldsim.policies import load_policy

    kept = out / "closed_loop.json"
    if kept.exists():
        return json.loads(kept.read_text())
    result = compare_from_starts(load_policy(policy).eval(), task, imagination, starts=CLOSED_LOOP_STARTS,
                                 seed=seed, deterministic=READINGS[reading], videos=0, progress=False)
    a = result["agreement"]
    figures = {"imagined_success": result["imagined_success"], "real_success": result["real_success"],
               "real_successes_found": a["true_positive"], "real_successes": a["true_positive"] + a["false_negative"],
               "false_successes": a["false_positive"], "balanced_accuracy": a["balanced_accuracy"]}
    write_json(kept, figures)
    return figures


def read(fid: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The study's figures from :func:`imagination_ladder.fidelity`'s and the full replays' counts."""
    full = json.loads((folder / "fidelity.json").read_text())["success_by_horizon"]["full"]
    return {"recall": full["recall"], "specificity": full["specificity"],
            "real_successes": full["true_positive"] + full["false_negative"],
            "imagined_of_real_successes": full["true_positive"], "false_successes": full["false_positive"],
            **{k: fid[k] for k in FIGURES if k in fid}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", type=Path, default=Path("runs/ladder_pick"),
                        help="a finished imagination-ladder run (its seeds' round-0 data and held-out sets)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--reading", choices=[*READINGS, "mixed"], default="mean",
                        help="how the round's real episodes are collected again (mixed: half each)")
    parser.add_argument("--closed-loop", action="store_true",
                        help="also run BC closed loop from the same starts in each model and in physics")
    parser.add_argument("--out", type=Path, default=Path("runs/collect_reading"))
    parser.add_argument("--threads", type=int, default=1, help="for the evaluations (training takes the base's)")
    args = parser.parse_args()

    from worldsim.runtime.threads import use_torch_threads

    use_torch_threads(args.threads)
    rows: dict[str, dict[str, dict[str, Any]]] = {"ladder": {}, args.reading: {}}
    judged = "mean" if args.reading == "mixed" else args.reading  # the held-out set the judge is scored on
    for seed in args.seeds:
        heldout = args.ladder / f"base_s{seed}" / f"heldout_{judged}.h5"
        if not heldout.exists():
            parser.error(f"{heldout} is missing: replay the ladder's models on its {judged} held-out set first")
        base = args.ladder / f"pixels_s{seed}" / "round_0" / "wm"
        folder = args.out / f"s{seed}"
        model = trained(base, {}, collected(args.ladder, seed, args.reading, folder), folder / "wm")
        bc = args.ladder / f"base_s{seed}" / "bc"
        ladder_keyframes = args.ladder / f"pixels_s{seed}" / "round_0" / "data.h5"
        models = {"ladder": (base, args.ladder / f"pixels_s{seed}", ladder_keyframes),
                  args.reading: (model, folder, folder / "data.h5")}
        # the imagination the ladder's GRPO ran in (its starts and horizon), with each model and its keyframes
        rl = json.loads((args.ladder / f"pixels_s{seed}" / "round_1" / "rl" / "config.json").read_text())
        ladder_imagination = ImaginationConfig(**{**rl["imagination"], "device": "cpu"})
        for name, (wm, home, keyframes) in models.items():
            at = home / f"fidelity@{judged}"
            rows[name][str(seed)] = read(fidelity(wm, heldout, PIXELS, at, seed, policy=bc), at)
            if args.closed_loop:
                for reading in READINGS:
                    imagination = ladder_imagination.replace(world_model=wm, keyframes=keyframes)
                    figures = closed_loop(imagination, bc, rl["task"], seed, reading, home / f"closed_loop@{reading}")
                    rows[name][str(seed)] |= {f"closed_{reading}_{k}": v for k, v in figures.items()}
            if judged != "sampled":
                sampled = fidelity(wm, args.ladder / f"base_s{seed}" / "heldout_sampled.h5", PIXELS,
                                   home / "fidelity@sampled", seed, policy=bc)
                rows[name][str(seed)] |= {f"on_sampled_{k}": sampled[k] for k in ON_SAMPLED}
            print(f"seed {seed} {name}: {json.dumps(rows[name][str(seed)])}", file=sys.stderr)

    def mean(values: list[Any]) -> float | None:
        kept = [v for v in values if v is not None and not np.isnan(v)]
        return round(float(np.mean(kept)), 4) if kept else None

    keys = list(next(iter(rows["ladder"].values())))
    metrics: dict[str, Any] = {"seeds": args.seeds, "reading": args.reading, "closed_loop_starts":
                               CLOSED_LOOP_STARTS if args.closed_loop else None, "models": {}}
    for name, per_seed in rows.items():
        entry: dict[str, Any] = {"mean": {k: mean([r[k] for r in per_seed.values()]) for k in keys},
                                 "totals": {k: int(sum(r[k] for r in per_seed.values())) for k in keys
                                            if k.endswith(("real_successes", "imagined_of_real_successes",
                                                           "false_successes", "real_successes_found"))},
                                 "per_seed": per_seed}
        if name != "ladder":
            entry["minus_ladder_per_seed"] = {
                k: [None if r[k] is None or rows["ladder"][s][k] is None else round(r[k] - rows["ladder"][s][k], 4)
                    for s, r in per_seed.items()] for k in keys}
        metrics["models"][name] = entry
    report("collect_reading" if args.reading == "mean" else f"collect_reading_{args.reading}", metrics, args,
           STUDY_RESULTS)


if __name__ == "__main__":
    main()
