"""How many operations one world-model training step dispatches, by part of the step.

On a GPU each operation is at least one kernel launched by the host, one at a time; when a step's
kernels are small, their number, not their arithmetic, sets the rate (``wm_train_throughput.py``
measured the ``base`` preset at the same steps/s at batch 128 and 512 on an H200). This counts the
aten operations of one step of ``train_world_model`` (views left out: they launch nothing) with a
dispatch-mode counter, on the CPU: the count does not depend on the device or the batch size.

    python benchmarks/studies/wm_step_operations.py --data runs/study/default/train.h5
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from worldsim.data.reader import EpisodeReader
from worldsim.runtime.threads import use_torch_threads
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.train import TrainWMConfig, build_model, generators
from worldsim.world_models.train_step import draw, state_windows

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

VIEWS = {"view", "_unsafe_view", "expand", "slice", "select", "t", "transpose", "permute", "unsqueeze", "squeeze",
         "as_strided", "alias", "detach", "reshape", "unflatten", "flatten", "split", "chunk", "unbind", "narrow",
         "lift_fresh"}


class OperationCounter(TorchDispatchMode):
    """Counts the non-view aten operations dispatched inside the ``with`` block, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.__name__.split(".")[0]
        if name not in VIEWS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def step_operations(config: TrainWMConfig) -> dict[str, Any]:
    """The operations of one training step of ``config``'s preset, by part."""
    device = torch.device("cpu")
    with EpisodeReader(config.data) as reader:
        bank = EpisodeBank(reader)
    model = build_model(config, bank)
    task_ids = {t: model.task_index(t) for t in bank.tasks}
    owned = {id(p) for p in model.dynamics_parameters()}
    # fused, as train-wm's optimisers are on a GPU
    frame_optimizer = torch.optim.AdamW([p for p in model.parameters() if id(p) not in owned], fused=True)
    dynamics_optimizer = torch.optim.AdamW(model.dynamics_parameters(), fused=True)
    windows, noise = generators(0, device)
    parts: dict[str, int] = {}
    with OperationCounter() as counter:
        loss, _ = model.loss(draw(bank, model, config.batch_size, config.success_fraction, task_ids, windows, device),
                             noise)
    parts["frame forward"] = counter.total
    with OperationCounter() as counter:
        loss.backward()
    parts["frame backward"] = counter.total
    with OperationCounter() as counter:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        frame_optimizer.step()
    parts["frame clip + optimiser"] = counter.total
    with OperationCounter() as counter:
        dynamics, _ = model.dynamics_loss(state_windows(bank, model, task_ids, windows, device), noise)
    parts["dynamics forward, one update"] = counter.total
    with OperationCounter() as counter:
        dynamics.backward()
        dynamics_optimizer.step()
    parts["dynamics backward + optimiser, one update"] = counter.total
    updates = 1
    per_update = parts["dynamics forward, one update"] + parts["dynamics backward + optimiser, one update"]
    total = sum(v for k, v in parts.items() if not k.startswith("dynamics")) + updates * per_update
    return {"parts": parts, "dynamics_updates": updates, "dynamics_horizon": model.config.dynamics.horizon,
            "total_per_step": total, "dynamics_share": round(updates * per_update / total, 3),
            "parameters": model.num_parameters()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="an episode file with pixels and state")
    parser.add_argument("--configs", nargs="+", default=["tiny", "base"], choices=["tiny", "base"])
    args = parser.parse_args()
    use_torch_threads(1)
    presets = {}
    for preset in args.configs:
        presets[preset] = step_operations(TrainWMConfig(data=args.data, preset=preset, batch_size=2))
        print(preset, presets[preset])
    report("wm_step_operations", {"data": str(args.data), "presets": presets}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
