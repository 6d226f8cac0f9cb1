"""World-model fidelity after a stated training budget, on held-out episodes.

1. collect ``--episodes`` noisy scripted-expert episodes of the task (64x64, ``pixels+state``)
   for training and ``--val-episodes`` more with another seed for evaluation;
2. train the ``--config`` world model for ``--time-budget`` seconds (or ``--steps``);
3. evaluate it on the held-out episodes (:func:`worldsim.world_models.evaluate_world_model`):
   PSNR/SSIM per imagined step from episode starts and from keyframes up to ``--horizon``,
   episode-level success agreement.

Targets: PSNR >= 25 dB after 8 imagined steps, success agreement >= 90%. Prints one JSON
line last; the run folder (``--out``) keeps the model, metrics, plot and videos.

    python benchmarks/wm_fidelity.py --steps 5500 --time-budget 1800 --threads 1 --out runs/bench_wm
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from worldsim.collect import collect_episodes
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.world_models import TrainWMConfig, evaluate_world_model, train_world_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--config", default="tiny", choices=["tiny", "base"])
    parser.add_argument("--episodes", type=int, default=200, help="training episodes")
    parser.add_argument("--val-episodes", type=int, default=50, help="held-out episodes")
    parser.add_argument("--noise", type=float, default=0.3, help="expert action noise (std)")
    parser.add_argument("--steps", type=int, default=5500,
                        help="optimiser steps: the learning-rate schedule spans them (about what 30 minutes "
                             "give the tiny config on 2 shared CPU cores at one thread)")
    parser.add_argument("--time-budget", type=float, default=1800.0, help="training seconds")
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
    for path, count, seed in ((data, args.episodes, 0), (held_out, args.val_episodes, 1000)):
        if not path.exists():
            def expert(task: str, seed: int = seed) -> ScriptedExpert:
                return ScriptedExpert(ScriptedExpertConfig(task, args.noise, 0.0, seed))

            collect_episodes([args.task], expert, count, path, num_envs=16, seed=seed, progress=False)
    collect_s = time.time() - start
    summary = train_world_model(TrainWMConfig(
        data=data, out=args.out / "wm", config=args.config, steps=args.steps, batch_size=args.batch_size,
        time_budget=args.time_budget, val_fraction=0.05, val_every=500, video_every=2000,
        checkpoint_every=1000, device=args.device, torch_threads=args.threads or None))
    report = evaluate_world_model(args.out / "wm", held_out, horizon=args.horizon, out=args.out / "eval",
                                  progress=False)
    start_curve, key_curve = report["episode_start"], report["keyframe"]
    result = {
        "benchmark": "wm_fidelity", "task": args.task, "config": args.config,
        "train_episodes": args.episodes, "held_out_episodes": report["episodes"], "noise": args.noise,
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
        "targets": {"psnr_at_8": 25.0, "success_accuracy": 0.9}}
    (args.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
