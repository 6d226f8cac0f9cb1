"""Data-parallel training under ``torchrun``: one learner process per device (or CPU slot).

Every trainer (BC, world model, PPO, GRPO) follows the same recipe, as in
DistributedDataParallel: each rank computes gradients on its own share of the data (its own
minibatches, or its own envs), :func:`average_gradients` all-reduces them before every optimiser
step, so the ranks hold identical weights throughout; rank 0 writes the logs, the model and the
checkpoint, every other rank only its own part of the checkpoint
(:class:`~worldsim.runtime.run.TrainingRun`). Launch with::

    torchrun --nproc-per-node 2 -m worldsim train-bc --data data/push.h5 --out runs/bc

Without ``torchrun`` (no ``WORLD_SIZE`` in the environment) everything runs in one process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from worldsim.runtime.device import resolve_device


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the ``torchrun`` process group if there is one (NCCL on GPUs, gloo on CPU) and pick
    this rank's device. ``device`` is ``"auto"``, ``"cpu"`` or ``"cuda"``."""
    use_cuda = resolve_device(device).type == "cuda"
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        return DistInfo(rank, world_size, local_rank, torch.device("cuda", local_rank))
    return DistInfo(rank, world_size, local_rank, torch.device("cpu"))


def average_gradients(module: nn.Module | Iterable[nn.Parameter], info: DistInfo) -> None:
    """All-reduce and average the gradients of ``module`` (or of these parameters) across ranks
    (no-op alone)."""
    if info.world_size == 1:
        return
    parameters = module.parameters() if isinstance(module, nn.Module) else module
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= info.world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def broadcast_module(module: nn.Module, info: DistInfo) -> None:
    """Copy rank 0's parameters and buffers to every rank (after construction or loading)."""
    if info.world_size == 1:
        return
    for tensor in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(tensor.data, src=0)


def all_reduce_mean(values: dict[str, float], info: DistInfo) -> dict[str, float]:
    """Average scalar metrics across ranks, so rank 0 logs the global figures."""
    if info.world_size == 1 or not values:
        return values
    keys = sorted(values)
    tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
    dist.all_reduce(tensor)
    return {k: v / info.world_size for k, v in zip(keys, tensor.tolist(), strict=True)}


def any_rank(flag: bool, info: DistInfo) -> bool:
    """True if ``flag`` is True on any rank (so that all ranks stop at the same step)."""
    if info.world_size == 1:
        return flag
    tensor = torch.tensor([float(flag)])
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item() > 0)


def barrier(info: DistInfo) -> None:
    if info.world_size > 1:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def ranks_in_sync(module: nn.Module, info: DistInfo) -> bool:
    """True if every rank holds exactly the same parameters as rank 0 (compares checksums)."""
    if info.world_size == 1:
        return True
    checksum = torch.stack([p.detach().double().sum() for p in module.parameters()]).cpu()
    gathered = [torch.zeros_like(checksum) for _ in range(info.world_size)]
    dist.all_gather(gathered, checksum)
    return all(torch.equal(g, gathered[0]) for g in gathered)
