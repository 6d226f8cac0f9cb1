"""One optimisation step of world-model training (step 3 of :mod:`~worldsim.world_models.train`),
in two halves: :func:`draw_step` makes every random draw of the step, and :func:`take_step`
takes the step on them (the frame model's AdamW step, then each update of the low-dimensional
dynamics).

They are apart so that a step can be recorded once as a CUDA graph and replayed
(:class:`StepGraph`, ``train-wm --cuda-graph``). On a GPU the ``base`` step is bound by the host
launching its ~6,000 operations one by one, not by their arithmetic, and the GPU waits, even
with each loss compiled and replayed as CUDA graphs
(``--compile reduce-overhead``): the clipping, AdamW and the glue between them are still launched
from Python. Recorded whole, a step is one launch, and the host only draws the next batch. For
that, :func:`take_step` makes no random draw (the draws are its inputs), reads no value back
from the device and branches on none, and its optimisers read their learning rates from device
tensors that the schedules write in place (:func:`prepare_optimizer`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from worldsim.runtime.distributed import DistInfo, average_gradients
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.model import WorldModel

# what a recorded step needs settled before recording: compilation, the optimisers' state,
# cuDNN's algorithm choices (PyTorch's recipe for capturing a whole network takes three)
GRAPH_WARMUP = 3


def draw(bank: EpisodeBank, model: WorldModel, batch_size: int, success_fraction: float,
         task_ids: dict[str, int], generator: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """One training batch of ``bank``."""
    cfg = model.config
    return bank.sample(batch_size, cfg.context, cfg.patch, task_ids, generator, success_fraction, device)


def state_windows(bank: EpisodeBank, model: WorldModel, task_ids: dict[str, int], generator: torch.Generator,
                  device: torch.device) -> dict[str, torch.Tensor]:
    """One batch of the low-dimensional dynamics' state windows of ``bank``."""
    cfg = model.config
    return bank.state_windows(cfg.dynamics.batch, cfg.context, cfg.dynamics.horizon, task_ids, generator, device)


def draw_step(model: WorldModel, bank: EpisodeBank, batch_size: int, success_fraction: float,
              task_ids: dict[str, int], windows: torch.Generator, noise: torch.Generator, device: torch.device,
              updates: int = 1) -> dict[str, Any]:
    """Every random draw of one training step on ``bank``, windows from the CPU generator
    ``windows`` and noise from ``noise`` (on ``device``): ``frames``, a batch of ``batch_size``
    windows and its :meth:`~WorldModel.training_noise`, and ``dynamics``, for each of
    ``updates`` dynamics updates fresh state windows and their :meth:`~WorldModel.dynamics_noise`.
    Each generator draws in the order an eager step would, so the batches do not depend on
    whether the step is recorded."""
    batch = draw(bank, model, batch_size, success_fraction, task_ids, windows, device)
    frames = (batch, model.training_noise(batch, noise))
    dynamics = []
    for _ in range(updates):
        state = state_windows(bank, model, task_ids, windows, device)
        dynamics.append((state, model.dynamics_noise(state, noise)))
    return {"frames": frames, "dynamics": dynamics}


def take_step(model: WorldModel, frame_optimizer: torch.optim.Optimizer, dynamics_optimizer: torch.optim.Optimizer,
              draws: dict[str, Any], success_weight: float, dist: DistInfo, bf16: bool = False
              ) -> dict[str, torch.Tensor]:
    """One training step on :func:`draw_step`'s ``draws``: an AdamW step of the frame model on
    :meth:`~WorldModel.frame_loss` (under bfloat16 autocast with ``bf16``; gradients averaged
    across ranks and clipped to norm 1),
    then one of the dynamics per update, each on :meth:`~WorldModel.dynamics_terms`. Returns the
    terms to log, 0-d tensors left on the device: ``loss`` (the frame loss), the frame loss's
    terms and ``grad_norm``, and the dynamics' terms averaged over the updates."""
    batch, noise = draws["frames"]
    with torch.autocast(model.device.type, torch.bfloat16, enabled=bf16):
        loss, terms = model.frame_loss(batch, noise, success_weight)
    frame_optimizer.zero_grad(set_to_none=True)
    loss.backward()
    average_gradients(model, dist)
    logs = {"loss": loss.detach(), **terms, "grad_norm": torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)}
    frame_optimizer.step()
    parameters = model.dynamics_parameters()
    updates = []
    for windows, point_noise in draws["dynamics"]:
        loss, terms = model.dynamics_terms(windows, point_noise)
        dynamics_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        average_gradients(parameters, dist)
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        dynamics_optimizer.step()
        updates.append(terms)
    dynamics_optimizer.zero_grad(set_to_none=True)  # no stale gradients in the frame model's clipping and averaging
    dynamics = {name: torch.stack([terms[name] for terms in updates]).mean() for name in updates[0]}
    return logs | dynamics


def optimisers(model: WorldModel, lr: float = 1e-3, weight_decay: float = 1e-5
               ) -> tuple[torch.optim.AdamW, torch.optim.AdamW]:
    """The frame model's AdamW and the low-dimensional dynamics' own (the proprio head and the
    pathway learn on their own state windows, on the same schedule per step), on the model's
    device: fused on a GPU, a few kernels per step for all parameters instead of ~900 (launches,
    not arithmetic, bound the step there). For a recorded step, :func:`prepare_optimizer` them."""
    dynamics = model.dynamics_parameters()
    owned = {id(p) for p in dynamics}
    fused = model.device.type == "cuda"
    frames = [p for p in model.parameters() if id(p) not in owned and p.requires_grad]  # LoRA freezes the rest
    return (torch.optim.AdamW(frames, lr=lr,
                              weight_decay=weight_decay, fused=fused),
            torch.optim.AdamW(dynamics, lr=lr, weight_decay=weight_decay, fused=fused))


def prepare_optimizer(optimizer: torch.optim.Optimizer, device: torch.device, recorded: bool) -> None:
    """Set ``optimizer`` up, in place, for a step taken eagerly or (``recorded``) replayed as a
    CUDA graph: then capturable, and its learning rate a 0-d tensor on ``device`` (a schedule
    writes the rate into it, and the recorded step reads the current one: a number would be
    recorded as it was); else not capturable, the rate a number. Also after loading a saved
    state, whose groups replace these (a run may resume with or without ``cuda_graph``)."""
    for group in optimizer.param_groups:
        group["capturable"] = recorded
        group["lr"] = torch.tensor(float(group["lr"]), device=device) if recorded else float(group["lr"])


class StepGraph:
    """``step`` (a function of tensors that draws nothing, reads nothing back from the device and
    branches on no value) recorded as one CUDA graph on its ``warmup + 1``-th call, and replayed
    from then on.

    The first ``warmup`` calls run ``step`` as it is, on a side stream (PyTorch's recipe for
    capturing a whole network). The next records it on a copy of its inputs, and from then on
    each call copies its inputs (nested dicts, lists and tuples of tensors, of the shapes
    recorded) into that copy and replays the graph. It returns the graph's own outputs, which
    the next call overwrites: read them, or copy them, before."""

    def __init__(self, step: Callable[[Any], dict[str, torch.Tensor]], warmup: int = GRAPH_WARMUP) -> None:
        self.step, self.warmup, self.calls = step, warmup, 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: list[torch.Tensor] = []
        self.outputs: dict[str, torch.Tensor] = {}
        self.side = torch.cuda.Stream()

    def __call__(self, inputs: Any) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.calls <= self.warmup:
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="This instance was constructed with capturable=True")
                outputs = self.step(inputs)
            torch.cuda.current_stream().wait_stream(self.side)
            return outputs
        if self.graph is None:
            recorded = copied(inputs)
            self.inputs = tensors(recorded)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.outputs = self.step(recorded)
        else:
            new = tensors(inputs)
            if [t.shape for t in new] != [t.shape for t in self.inputs]:
                raise ValueError("a recorded training step takes inputs of the shapes it was recorded with")
            for mine, theirs in zip(self.inputs, new, strict=True):
                mine.copy_(theirs, non_blocking=True)
        self.graph.replay()
        return self.outputs


def copied(value: Any) -> Any:
    """A copy of the tensors in ``value`` (a tensor, None, or dicts, lists and tuples of them),
    still attached to the autograd graph."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {name: copied(v) for name, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(copied(v) for v in value)
    return value


def tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in ``value`` (as :func:`copied` takes it), in a fixed order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    return []
