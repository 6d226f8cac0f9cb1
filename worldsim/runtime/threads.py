"""How many CPU threads torch uses: the cores left idle by other work, unless told.

On a machine whose cores other processes also use, torch's default (one thread per core) is the
slowest choice there is: its intra-op workers wait at every operator for a thread the scheduler
has given to the neighbour, so a training loop beside one busy process on two cores runs at about
a third of its quiet speed, and beside a multi-threaded neighbour at a fiftieth. One thread per
core that is actually idle keeps the quiet speed on quiet cores and degrades gracefully beside a
neighbour (``benchmarks/contention.py`` measures both, stage by stage).

:func:`use_torch_threads` is the one place that sets the count: a number asked for is used as is;
``None`` (every command's default) takes :func:`idle_cores`, read once per process from the time
this process's cores spent idle over a quarter of a second, when a command starts: a neighbour that
starts later is not seen (pass ``--torch-threads 1`` on cores that other jobs come and go on).
"""

from __future__ import annotations

import functools
import os
import time

SAMPLE_SECONDS = 0.25
"""How long :func:`idle_cores` watches the machine."""


def usable_cores() -> list[int]:
    """The cores this process may run on: its affinity mask, or every core where the OS has none."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return list(range(os.cpu_count() or 1))


def check_torch_threads(threads: object) -> None:
    """``ValueError`` unless ``threads`` is a thread count (an int >= 1) or None (the idle cores)."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"torch_threads={threads!r} must be an int >= 1 (or None: the idle cores)")


def _cpu_times() -> dict[int, tuple[int, int]] | None:
    """Per core, (idle, total) jiffies since boot, from ``/proc/stat``; None off Linux."""
    try:
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and line[3].isdigit()]
        times = {}
        for fields in lines:
            jiffies = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
            times[int(fields[0][3:])] = (jiffies[3] + jiffies[4], sum(jiffies))
    except (OSError, ValueError, IndexError):
        return None
    return times or None


@functools.cache
def idle_cores() -> int:
    """This process's usable cores not busy with other work, at least 1: each usable core's idle
    share over :data:`SAMPLE_SECONDS` (this process is asleep meanwhile), summed and rounded.
    Measured once per process; every usable core where ``/proc/stat`` is unreadable."""
    cores = usable_cores()
    before = _cpu_times()
    if before is None:
        return len(cores)
    time.sleep(SAMPLE_SECONDS)
    after = _cpu_times() or {}
    idle = 0.0
    for core in cores:
        if core not in before or core not in after or after[core][1] <= before[core][1]:
            idle += 1.0  # no reading for this core: count it idle rather than guess it busy
            continue
        idle += (after[core][0] - before[core][0]) / (after[core][1] - before[core][1])
    return max(1, round(idle))


_decided: int | None = None
"""The count this process set last (None: not set yet)."""


def use_torch_threads(requested: int | None = None) -> int:
    """Set torch's intra-op CPU threads to ``requested``; with ``None``, keep the count an earlier
    call in this process set, or else take :func:`idle_cores`. Returns the count in use. Library
    entry points call it with ``None`` so that they never undo a count a caller chose."""
    import torch

    global _decided
    if requested is None and _decided is not None:
        return _decided
    check_torch_threads(requested)
    threads = idle_cores() if requested is None else requested
    torch.set_num_threads(threads)
    _decided = threads
    return threads
