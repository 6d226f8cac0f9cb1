"""How fast `train-wm` trains the world model, and how busy it keeps a GPU.

For each batch size, trains the ``--config`` preset on ``--data`` with ``--device`` for
``--seconds`` (``train_world_model`` with a time budget, no validation, video or checkpoint in
between) and reports the steady-state rate from the training log, after its first ``--skip``
steps (start-up, cuDNN's autotuning): training steps/s and frame windows/s, and, on CUDA, the
mean of NVML's busy share of the GPU over the same span and the peak memory torch allocated.
The target is a GPU at least 80% busy. ``--compile`` trains with ``train-wm --compile``:
give ``--seconds`` room for the compilation (2-3 minutes for ``base``) and a smaller
``--skip``; ``--cuda-graph`` with ``train-wm --cuda-graph`` (the whole step recorded as one
CUDA graph).

    python benchmarks/wm_train_throughput.py --data runs/study/default/train.h5 --config base \\
        --device cuda --batch-sizes 128 512 --seconds 60
    python benchmarks/wm_train_throughput.py --data runs/study/default/train.h5 --config base \\
        --device cuda --batch-sizes 128 512 --seconds 240 --skip 25 --compile reduce-overhead
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from common import GpuBusy, report

from worldsim.runtime.device import resolve_device
from worldsim.runtime.threads import use_torch_threads
from worldsim.world_models import PRESETS, TrainWMConfig, train_world_model
from worldsim.world_models.config import DynamicsConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="an episode file with pixels (and state)")
    parser.add_argument("--config", choices=tuple(PRESETS), default="tiny")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32])
    parser.add_argument("--seconds", type=float, default=60.0, help="training time per batch size")
    parser.add_argument("--skip", type=int, default=50, help="steps left out of the rate (start-up)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: the idle cores)")
    parser.add_argument("--compile", default="off", choices=("off", "default", "reduce-overhead"),
                        help="torch.compile the step's losses (train-wm --compile)")
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=("fp32", "bf16"),
                        help="train-wm --precision; one row per precision and batch size")
    parser.add_argument("--init-from", type=Path, default=None,
                        help="a diffusers Wan folder to start a video preset's transformer from (train-wm --init-from)")
    parser.add_argument("--lora-rank", type=int, default=0,
                        help="LoRA rank with --init-from (train-wm's [model.frames] lora_rank)")
    parser.add_argument("--name", default="wm_train_throughput", help="write benchmarks/results/NAME.json")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="record the whole step as one CUDA graph (train-wm --cuda-graph)")
    parser.add_argument("--profile", type=int, default=0,
                        help="trace this many steps after the first ten (train-wm --profile): the row gets the "
                             "trace's device-busy share and idle gaps")
    parser.add_argument("--dynamics-horizon", type=int, default=DynamicsConfig.horizon,
                        help="steps the proprio dynamics and object pathway roll out on their own (default: 16)")
    args = parser.parse_args()
    use_torch_threads(args.threads or None)
    device = resolve_device(args.device)
    rows = []
    for precision, batch_size in ((p, b) for p in args.precision for b in args.batch_sizes):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with tempfile.TemporaryDirectory() as out, GpuBusy() as busy:
            summary = train_world_model(TrainWMConfig(
                data=args.data, out=Path(out), steps=10**6, batch_size=batch_size,
                time_budget=args.seconds, val_fraction=0.0, video_every=0, checkpoint_every=10**9, device=args.device,
                compile=args.compile, cuda_graph=args.cuda_graph, precision=precision, init_from=args.init_from,
                preset=args.config, model={"dynamics": {"horizon": args.dynamics_horizon},
                                           **({"frames": {"lora_rank": args.lora_rank}} if args.lora_rank else {})},
                profile=args.profile, progress=False))
            metrics = Path(out) / "metrics.jsonl"  # absent when not one step was logged
            traced = Path(out) / "profile" / "summary.json"
            profile = json.loads(traced.read_text()) if traced.exists() else None
            logged = [r for r in map(json.loads, metrics.read_text().splitlines() if metrics.exists() else [])
                      if "train/loss" in r and r["step"] >= args.skip]
            # the metrics' times count from the run's clock, which starts as config.json is written:
            # the GPU's busy share is read over the rated steps alone, not the set-up or the end
            clock = (Path(out) / "config.json").stat().st_mtime
        if len(logged) < 2:
            parser.error(f"batch {batch_size}: fewer than two logged steps after --skip {args.skip} in "
                         f"{args.seconds} s; give more --seconds")
        first, last = logged[0], logged[-1]
        steps_per_s = (last["step"] - first["step"]) / (last["time"] - first["time"])
        rows.append({"batch_size": batch_size, "precision": precision, "steps": summary["steps"],
                     "steps_per_s": round(steps_per_s, 2),
                     "seconds_to_first_rated_step": round(first["time"], 1), "first_rated_loss": first["train/loss"],
                     "windows_per_s": round(steps_per_s * batch_size),
                     "gpu_busy_percent": busy.percent(since=clock + first["time"], until=clock + last["time"]),
                     "peak_memory_gib": (round(torch.cuda.max_memory_allocated() / 2**30, 1)
                                         if device.type == "cuda" else None),
                     "parameters": summary["parameters"], "trained_parameters": summary["trained_parameters"],
                     "profile": profile})
        print(json.dumps(rows[-1]))
    report(args.name, {"config": args.config, "init_from": args.init_from, "lora_rank": args.lora_rank,
                       "device": str(device), "compile": args.compile,
                  "cuda_graph": args.cuda_graph, "data": str(args.data),
                  "dynamics_horizon": args.dynamics_horizon,
                  "seconds_per_batch_size": args.seconds, "rows": rows}, args)


if __name__ == "__main__":
    main()
