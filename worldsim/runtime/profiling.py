"""Where a training step's time goes: ``--profile N`` on any training command.

:class:`~worldsim.runtime.run.TrainingRun` traces ``N`` steps with ``torch.profiler`` once the
session's first ``PROFILE_AFTER`` steps are done (compilation, CUDA-graph recording and the
allocator's warm-up would otherwise fill the trace), and writes to ``out/profile/``:

- ``trace.json.gz``: the Chrome trace (open it in https://ui.perfetto.dev): every operator the host
  dispatched and, on a GPU, every kernel, on one time line (gzipped: about 0.7 MB per step of
  the ``tiny`` world model's training on the CPU);
- ``operations.md``: the operators by their own time (on a GPU, device time), the top 40;
- ``summary.json``: ``steps`` traced, ``ms_per_step`` (wall), and on a GPU ``device_busy_percent``
  (the share of that wall time with a kernel, copy or memset running) and the time the device sat
  idle in gaps of over a millisecond, where the host, not the arithmetic, bounds the step.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from worldsim.runtime.run_logging import write_json

PROFILE_AFTER = 10
# trace event categories that keep the device busy
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
IDLE_GAP_US = 1000.0


class StepProfiler:
    """``steps`` steps of a training loop traced into ``folder``; :meth:`step` after every step."""

    def __init__(self, folder: Path, steps: int, device: torch.device) -> None:
        self.folder = Path(folder)
        self.on_device = device.type == "cuda"
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.on_device else [])
        self.profile = profile(activities=activities, on_trace_ready=self._write,
                               schedule=schedule(wait=PROFILE_AFTER - 1, warmup=1, active=steps, repeat=1))
        self.profile.start()

    def step(self) -> None:
        self.profile.step()

    def stop(self) -> None:
        """End tracing (the files are written once the traced steps are done, or here if the run
        stops amid them)."""
        self.profile.stop()

    def _write(self, traced: profile) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        trace = self.folder / "trace.json.gz"
        traced.export_chrome_trace(str(trace))  # gzipped for a .gz name
        order = "self_device_time_total" if self.on_device else "self_cpu_time_total"
        (self.folder / "operations.md").write_text(traced.key_averages().table(sort_by=order, row_limit=40) + "\n")
        events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
        write_json(self.folder / "summary.json", step_summary(events))


def step_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The traced steps' count and wall time per step from a Chrome trace's ``events``, and, when
    it holds device work, the device's busy share of that time and its idle gaps of over 1 ms."""
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
    if not steps:
        return {"steps": 0, "ms_per_step": None, "device_busy_percent": None}
    start = min(float(e["ts"]) for e in steps)
    end = max(float(e["ts"]) + float(e["dur"]) for e in steps)
    work = sorted((max(float(e["ts"]), start), min(float(e["ts"]) + float(e["dur"]), end)) for e in events
                  if e.get("cat") in DEVICE_WORK and e.get("ph") == "X")
    summary: dict[str, Any] = {"steps": len(steps), "ms_per_step": round((end - start) / len(steps) / 1000, 3),
                               "device_busy_percent": None}
    if work:
        busy, gaps, reached = 0.0, [], start
        for begin, finish in work:
            if begin > reached:
                gaps.append(begin - reached)
            busy += max(0.0, finish - max(begin, reached))
            reached = max(reached, finish)
        gaps.append(max(0.0, end - reached))
        long = [g for g in gaps if g > IDLE_GAP_US]
        summary |= {"device_busy_percent": round(100 * busy / (end - start), 1), "idle_gaps_over_1ms": len(long),
                    "idle_ms_in_those_gaps_per_step": round(sum(long) / len(steps) / 1000, 3)}
    return summary
