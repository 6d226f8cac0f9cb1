"""Where torch runs: the one ``device`` choice every command and library function takes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np
    import torch

Device = Literal["auto", "cpu", "cuda"]
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or a torch device as it is;
    ``ValueError`` for other names and for ``"cuda"`` where torch sees no CUDA device."""
    # torch is imported here, not above, so that commands can name the Device type without it
    import torch

    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in DEVICES:
        raise ValueError(f"device={device!r}; allowed: {', '.join(map(repr, DEVICES))}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch sees no CUDA device")
    return torch.device(device)


def host_to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` as a tensor on ``device`` (sharing its memory on the CPU). To a GPU it goes
    through pinned memory, asynchronously: a plain copy from pageable memory first waits for
    everything queued on the GPU, so the host could not prepare a batch while the GPU works."""
    import torch

    tensor = torch.from_numpy(array)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
