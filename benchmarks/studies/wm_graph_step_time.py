"""Where a recorded world-model training step's time goes on a GPU (``train-wm --cuda-graph``).

For each batch size, builds the ``--config`` preset on ``--data`` and takes the training step as
``train-wm --cuda-graph`` does (:func:`~worldsim.world_models.train_step.draw_step`, then
:func:`~worldsim.world_models.train_step.take_step` recorded by
:class:`~worldsim.world_models.train_step.StepGraph` after its warm-up), and reports medians over
``--steps`` steps taken one at a time: the host's time drawing the batch, its time copying it in
and launching the replay, and the GPU's time running the replay (CUDA events). Then
``--free-steps`` steps run back to back with no read in between: their wall time per step and
NVML's busy share of the GPU over them (sampled every 0.1 s). When the replay's GPU time is the
free-running step's time and the host's share is well under it, the step is bound by the GPU's
arithmetic, no longer by the host.

    python benchmarks/studies/wm_graph_step_time.py --data runs/study/default/train.h5 --batch-sizes 128 512
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from worldsim.data.reader import EpisodeReader
from worldsim.runtime.distributed import init_distributed
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.train import TrainWMConfig, build_model, generators
from worldsim.world_models.train_step import StepGraph, draw_step, optimisers, prepare_optimizer, take_step

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, GpuBusy, report  # noqa: E402

WARMUP = 10  # steps left out of the medians: the graph's warm-up and recording among them


def step_times(bank: EpisodeBank, data: Path, preset: str, batch_size: int, steps: int, free_steps: int
               ) -> dict[str, float | None]:
    """The medians and the free-running figures of one batch size (see the module docstring)."""
    device = torch.device("cuda")
    model = build_model(TrainWMConfig(data=data, out=Path("unused"), preset=preset, batch_size=batch_size,
                                      device="cuda"), bank).to(device)
    ids = {t: model.task_index(t) for t in bank.tasks}
    frames, dynamics = optimisers(model)
    prepare_optimizer(frames, device, recorded=True)
    prepare_optimizer(dynamics, device, recorded=True)
    dist = init_distributed("cuda")
    take = StepGraph(lambda draws: take_step(model, frames, dynamics, draws, 1.0, dist))

    def draw(step: int) -> dict:
        return draw_step(model, bank, batch_size, 0.25, ids, *generators(step, device), device)

    drawing, launching, events = [], [], []
    for step in range(WARMUP + steps):
        start = time.perf_counter()
        draws = draw(step)
        drawn = time.perf_counter()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        take(draws)
        end.record()
        launched = time.perf_counter()
        if step >= WARMUP:
            drawing.append(drawn - start)
            launching.append(launched - drawn)
            events.append((begin, end))
        torch.cuda.synchronize()  # each step timed alone
    with GpuBusy(every=0.1) as busy:
        start = time.perf_counter()
        for step in range(free_steps):
            take(draw(WARMUP + steps + step))
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start

    def median_ms(values: list[float]) -> float:
        return round(1000 * sorted(values)[len(values) // 2], 2)

    return {"batch_size": batch_size, "host_draw_ms": median_ms(drawing),
            "host_copy_and_launch_ms": median_ms(launching),
            "gpu_replay_ms": round(sorted(b.elapsed_time(e) for b, e in events)[len(events) // 2], 2),
            "free_running_ms_per_step": round(1000 * seconds / free_steps, 2), "nvml_busy_percent": busy.percent()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="an episode file with pixels and state")
    parser.add_argument("--config", choices=("tiny", "base"), default="base")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--steps", type=int, default=30, help="steps timed one at a time")
    parser.add_argument("--free-steps", type=int, default=150, help="steps run back to back")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("records a CUDA graph: needs a CUDA GPU")
    with EpisodeReader(args.data) as reader:
        bank = EpisodeBank(reader)
    rows = []
    for batch_size in args.batch_sizes:
        rows.append(step_times(bank, args.data, args.config, batch_size, args.steps, args.free_steps))
        print(json.dumps(rows[-1]))
        torch.cuda.empty_cache()
    report("wm_graph_step_time", {"config": args.config, "data": str(args.data), "rows": rows}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
