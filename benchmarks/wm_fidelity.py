"""World-model fidelity after a stated training budget, on held-out episodes.

1. collect ``--episodes`` noisy scripted-expert episodes of the task (64x64, ``pixels+state``;
   displacement noise ``--noise``, random actions with probability ``--epsilon``, so that some
   fail) for training and ``--val-episodes`` more with another seed and ``--val-noise`` /
   ``--val-epsilon`` for evaluation (by default a quarter of them fail, enough failures for the
   success agreement to mean something);
2. train the ``--config`` world model for ``--time-budget`` seconds (or ``--steps``); its
   success threshold is calibrated on the training file's validation split;
3. evaluate it on the held-out episodes (:func:`worldsim.world_models.evaluate_world_model`):
   PSNR/SSIM per imagined step from episode starts and from keyframes up to ``--horizon``,
   episode-level success agreement (full replays, by horizon and by threshold), and the
   agreement on the failed episodes split into near misses (the task object came within
   ``--near-miss`` metres of the goal in x-y: at 64x64 pixels a near miss and a success can
   differ by a pixel or two, or only in height) and clear failures; the success head's
   agreement on the real frames themselves (what perfect dynamics would give); and the task
   object's position error in the imagined frames (cm, found by the head's keypoint detector).

Targets: PSNR >= 25 dB after 8 imagined steps, success agreement >= 90%. Prints one JSON
line last; the run folder (``--out``) keeps the model, metrics, plot and videos.

    python benchmarks/wm_fidelity.py --steps 3600 --time-budget 1500 --threads 1 --out runs/bench_wm
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from worldsim.data.collect import collect_episodes
from worldsim.envs.observations import STATE_LAYOUT
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.world_models import EpisodeBank, TrainWMConfig, evaluate_world_model, train_world_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--config", default="tiny", choices=["tiny", "base"])
    parser.add_argument("--episodes", type=int, default=200, help="training episodes")
    parser.add_argument("--val-episodes", type=int, default=60, help="held-out episodes")
    parser.add_argument("--noise", type=float, default=0.3, help="expert action noise (std), training")
    parser.add_argument("--epsilon", type=float, default=0.2, help="expert random-action rate, training")
    parser.add_argument("--continue-after-success", action="store_true",
                        help="training episodes run to the time limit instead of ending at success (many "
                             "success frames per episode); held-out ones still end there")
    parser.add_argument("--val-noise", type=float, default=0.3, help="expert action noise, held-out")
    parser.add_argument("--val-epsilon", type=float, default=0.3, help="expert random-action rate, held-out")
    parser.add_argument("--near-miss", type=float, default=0.04,
                        help="metres: a failed episode whose object came this close to the goal is a near miss")
    parser.add_argument("--steps", type=int, default=3600,
                        help="optimiser steps: the learning-rate schedule spans them (about what 25 minutes "
                             "give the tiny config on 2 shared CPU cores at one thread)")
    parser.add_argument("--time-budget", type=float, default=1500.0, help="training seconds")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--horizon", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_wm"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    data, held_out = args.out / "train.h5", args.out / "val.h5"
    for path, count, seed, noise, epsilon, past in (
            (data, args.episodes, 0, args.noise, args.epsilon, args.continue_after_success),
            (held_out, args.val_episodes, 1000, args.val_noise, args.val_epsilon, False)):
        if not path.exists():
            def expert(task: str, seed: int = seed, noise: float = noise, epsilon: float = epsilon
                       ) -> ScriptedExpert:
                return ScriptedExpert(ScriptedExpertConfig(task, noise, epsilon, seed))

            collect_episodes([args.task], expert, count, path, num_envs=16, seed=seed, progress=False,
                             continue_after_success=past)
    collect_s = time.time() - start
    summary = train_world_model(TrainWMConfig(
        data=data, out=args.out / "wm", config=args.config, steps=args.steps, batch_size=args.batch_size,
        time_budget=args.time_budget, val_fraction=0.1, val_every=500, video_every=2000,
        checkpoint_every=1000, device=args.device, torch_threads=args.threads or None))
    report = evaluate_world_model(args.out / "wm", held_out, horizon=args.horizon, out=args.out / "eval",
                                  progress=False)
    start_curve, key_curve = report["episode_start"], report["keyframe"]
    bank = EpisodeBank(held_out)
    gap = STATE_LAYOUT["goal_minus_object"]
    closest = np.array([np.linalg.norm(bank.episode(j, "state")[:, gap][:, :2], axis=1).min()
                        for j in range(len(bank))])
    real = np.array(report["success_episodes"]["real"])
    imagined = np.array(report["success_episodes"]["max_prob"]) >= report["success_threshold"]
    near = ~real & (closest < args.near_miss)
    clear = ~real & ~near
    result = {
        "benchmark": "wm_fidelity", "task": args.task, "config": args.config,
        "train_episodes": args.episodes, "train_noise": args.noise, "train_epsilon": args.epsilon,
        "train_continue_after_success": args.continue_after_success,
        "held_out": {"episodes": report["episodes"], "successes": int(real.sum()),
                     "near_miss_failures": int(near.sum()), "clear_failures": int(clear.sum()),
                     "noise": args.val_noise, "epsilon": args.val_epsilon, "near_miss_m": args.near_miss},
        "train_steps": summary["steps"],
        "train_seconds": summary["wall_clock_s"], "collect_seconds": round(collect_s, 1),
        "parameters": summary["parameters"], "torch_threads": torch.get_num_threads(),
        "psnr_at_1": start_curve["psnr"][0], "psnr_at_8": report["psnr_at_8"],
        "ssim_at_8": report["ssim_at_8"],
        f"psnr_at_{args.horizon}": report["psnr_at_horizon"],
        "psnr_curve": start_curve["psnr"], "psnr_curve_keyframe": key_curve["psnr"],
        "success_accuracy": report["success"]["accuracy"],
        "success_precision": report["success"]["precision"], "success_recall": report["success"]["recall"],
        "success_counts": {k: report["success"][k]
                           for k in ("true_positive", "false_positive", "false_negative", "true_negative")},
        "success_threshold": report["success_threshold"],
        "success_accuracy_by_horizon": {h: r["accuracy"] for h, r in report["success_by_horizon"].items()},
        "success_accuracy_by_threshold": report["success_by_threshold"],
        "agreement_on_successes": float(imagined[real].mean()) if real.any() else None,
        "agreement_on_near_misses": float((~imagined[near]).mean()) if near.any() else None,
        "agreement_on_clear_failures": float((~imagined[clear]).mean()) if clear.any() else None,
        "success_accuracy_head_on_real_frames": report["success_head_on_real_frames"]["episode"]["accuracy"],
        "object_error_cm_at_1": report["object_error"]["imagined_cm"][1],
        "object_error_cm_at_8": report["object_error"]["imagined_cm"][8],
        "object_error_cm_final": report["object_error"]["final_imagined_cm"],
        "object_error_cm_detector_on_real_frames": float(np.median(report["object_error"]["real_cm"])),
        "targets": {"psnr_at_8": 25.0, "success_accuracy": 0.9}}
    (args.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
