"""What every benchmark does with its figures: print them as one JSON line (the last line of its
output) and keep that line as ``benchmarks/results/<name>.json``, with the machine it ran on, so
each figure in the README has its data in the repository (the latest run of each benchmark)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """The machine a figure was measured on: CPU cores, torch threads, GPU, commit, date."""
    info: dict[str, Any] = {"cpu_cores": os.cpu_count(), "platform": platform.platform(),
                            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        info["gpu"] = None
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=RESULTS.parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["commit"] = None
    return info


def report(name: str, result: dict[str, Any]) -> dict[str, Any]:
    """Print ``result`` (with ``benchmark`` and ``machine``) as one JSON line and write it to
    ``benchmarks/results/<name>.json`` (atomically: a reader never sees half a file)."""
    record = {"benchmark": name, **result, "machine": machine()}
    line = json.dumps(record)
    RESULTS.mkdir(exist_ok=True)
    tmp = RESULTS / f".{name}.json.tmp"
    tmp.write_text(line + "\n")
    tmp.replace(RESULTS / f"{name}.json")
    print(line)
    return record


def noisy_expert(task: str, noise: float, grasp_noise: float, epsilon: float = 0.0, grasp_epsilon: float = 0.0,
                 seed: int = 0) -> Any:
    """The scripted expert for ``task`` with displacement noise and a share of random actions,
    the smaller ``grasp_*`` ones for the grasping families (pick-and-place, stack): grasping is
    precise, and at noise 0.1 the expert already fails three times in four."""
    from worldsim.envs.tasks import get_task
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig

    grasping = get_task(task).family in ("pick_place", "stack")
    return ScriptedExpert(ScriptedExpertConfig(task, grasp_noise if grasping else noise,
                                               grasp_epsilon if grasping else epsilon, seed))


class GpuBusy:
    """The share of time a CUDA GPU was running kernels while a block ran: a thread reads
    ``torch.cuda.utilization()`` (NVML's share of the last sample period with a kernel running)
    every ``every`` seconds, with its ``time.time()``. :meth:`percent` is their mean, ``None``
    without CUDA; a GPU starved by host-side work reads low however fast its kernels are."""

    def __init__(self, every: float = 0.25) -> None:
        import threading

        import torch

        self.every = every
        self.samples: list[tuple[float, int]] = []
        self._cuda = torch.cuda.is_available()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import time

        import torch

        while not self._stop.wait(self.every):
            self.samples.append((time.time(), int(torch.cuda.utilization())))

    def __enter__(self) -> GpuBusy:
        if self._cuda:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cuda:
            self._stop.set()
            self._thread.join()

    def percent(self, since: float = float("-inf"), until: float = float("inf")) -> float | None:
        """The mean reading taken between ``since`` and ``until`` (``time.time()`` stamps)."""
        readings = [r for t, r in self.samples if since < t <= until]
        return round(sum(readings) / len(readings), 1) if readings else None
