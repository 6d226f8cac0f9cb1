"""How long the host spends on each part of a world-model training step, with the arithmetic
shrunk away: eager against ``train-wm --compile``.

On a GPU the host launches a step's kernels one by one and the GPU waits when the host is slower
than its arithmetic: ``wm_train_throughput.py`` measured the ``base`` step at the same rate at
batch 128 and 512, the GPU 19% busy. This times the host's share on the CPU: the preset's step
with its width cut to 8 channels, 2 frame windows and 4 state windows, so that what is left of
each part is the cost of dispatching it (Python, the dispatcher, autograd, guards), the part a
GPU cannot hide. Parts: drawing the batch, the frame loss forward and backward, its clipping and
AdamW, and per dynamics update the same; means over ``--steps`` after ``--warmup``.

    python benchmarks/studies/wm_step_host_time.py --data runs/bench_coevolve_push/coevolve_s0/round_0/all.h5
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import pairwise
from pathlib import Path

import numpy as np
import torch

from worldsim.data.reader import EpisodeReader
from worldsim.runtime.threads import use_torch_threads
from worldsim.world_models.config import build_config
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.model import WorldModel
from worldsim.world_models.train import compile_losses, generators
from worldsim.world_models.train_step import optimisers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402


def host_times(bank: EpisodeBank, preset_name: str, compile_mode: str, steps: int, warmup: int) -> dict[str, float]:
    """Mean milliseconds per step of each part, and the compile (first step) seconds."""
    channels = len(build_config(preset_name).frames.channels)  # type: ignore[union-attr]  # the UNet presets
    small = {"channels": (8,) * channels, "norm_groups": 4, "cond_hidden": 8}
    config = build_config(preset_name, tasks=tuple(bank.tasks),
                          instructions=tuple(bank.instructions[t] for t in bank.tasks), image_size=bank.image_shape[0],
                          dynamics={"batch": 4}, frames=small, objects={"hidden": 8}, proprio={"hidden": 8},
                          judge={"hidden": 8})
    model = WorldModel(config)
    model.set_normalization(bank.proprio.mean(axis=0), bank.proprio.std(axis=0))
    if compile_mode != "off":
        compile_losses(model, compile_mode)
    ids = {t: model.task_index(t) for t in bank.tasks}
    cpu = torch.device("cpu")
    frame_optimizer, dynamics_optimizer = optimisers(model)
    seconds: dict[str, float] = defaultdict(float)
    first = 0.0
    marks: list[tuple[str, float]] = []

    def mark(name: str) -> None:
        marks.append((name, time.perf_counter()))

    for step in range(warmup + steps):
        windows, noise = generators(step, cpu)
        marks.clear()
        mark("start")
        batch = bank.sample(2, config.context, config.patch, ids, windows, 0.25, cpu)
        mark("draw frames")
        update("frame", model.loss(batch, noise)[0], frame_optimizer, model.parameters(), mark)
        for _ in range(2):
            state = bank.state_windows(4, config.context, config.dynamics.horizon, ids, windows, cpu)
            mark("draw state windows")
            update("dynamics", model.dynamics_loss(state, noise)[0], dynamics_optimizer, model.dynamics_parameters(),
                   mark)
        if step == 0:
            first = marks[-1][1] - marks[0][1]
        if step >= warmup:
            for (_, before), (name, after) in pairwise(marks):
                seconds[name] += after - before
    parts = {name: round(1000 * value / steps, 2) for name, value in seconds.items()}
    return {"ms_per_part": parts, "ms_per_step": round(sum(parts.values()), 1), "first_step_s": round(first, 1)}


def update(part: str, loss: torch.Tensor, optimizer: torch.optim.Optimizer, parameters: Iterable[torch.Tensor],
           mark: Callable[[str], None]) -> None:
    """Mark the end of ``loss``'s forward (computed as the argument), then take one optimiser step
    on it as train-wm does, marking its backward and its clipping + AdamW."""
    mark(f"{part} forward")
    optimizer.zero_grad()
    loss.backward()
    mark(f"{part} backward")
    torch.nn.utils.clip_grad_norm_(parameters, 1.0)
    optimizer.step()
    mark(f"{part} clip + AdamW")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="an episode file with pixels and state")
    parser.add_argument("--config", choices=("tiny", "base"), default="base")
    parser.add_argument("--modes", nargs="+", default=["off", "default"], choices=("off", "default"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    use_torch_threads(1)
    # the gripper's servo target goes through array_api_compat, whose cached helpers dynamo warns about
    warnings.filterwarnings("ignore", message="Dynamo detected a call to a `functools.lru_cache`")
    with EpisodeReader(args.data) as reader:
        bank = EpisodeBank(reader, episodes=np.arange(min(len(reader.episode_info()), 50)))
    rows = {}
    for mode in args.modes:
        rows[mode] = host_times(bank, args.config, mode, args.steps, args.warmup)
        print(mode, rows[mode])
    report("wm_step_host_time", {"data": str(args.data), "config": args.config, "frame_windows": 2,
                                 "state_windows": 4, "channels": 8, "steps": args.steps, "compile": rows},
           args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
