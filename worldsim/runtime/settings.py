"""The run settings every trainer's config shares (:class:`RunSettings`), apart from the run
itself (:mod:`worldsim.runtime.run`) so that the command line can read them without importing
torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from worldsim.runtime.device import Device
from worldsim.runtime.threads import check_torch_threads


@dataclass(kw_only=True)
class RunSettings:
    """Where a training run writes and how it runs: the settings every trainer's config shares
    (behaviour cloning, PPO, GRPO, world models) by extending this one dataclass. A trainer may
    give ``out`` and ``torch_threads`` defaults of its own (redeclared with ``kw_only=True``)."""

    COMMAND_LINE: ClassVar[tuple[str, ...]] = ("out", "resume", "overwrite", "seed", "device", "torch_threads",
                                               "progress")
    """The run settings that are flags of every trainer's command; the rest a config file sets."""

    out: Path = Path("runs/run")
    """Run folder: config.json, metrics.jsonl, tb/, the model folder, checkpoint.pt, summary.json."""
    resume: bool = False
    """Continue the run in `out` from its checkpoint.pt, exactly."""
    overwrite: bool = False
    """Start afresh in a non-empty `out`, removing the earlier run's files (without this or resume
    such an `out` is refused)."""
    seed: int = 0
    """Seed of everything (rank r uses seed + r)."""
    device: Device = "auto"
    """Where torch runs (auto: CUDA when available)."""
    torch_threads: int | None = None
    """Torch CPU threads (None: the cores idle when the run starts, see `worldsim.runtime.threads`;
    1 on cores that other jobs come and go on)."""
    time_budget: float | None = None
    """Safety net: stop cleanly (final checkpoint, a warning) after this many seconds, short of the
    step budget; a run it cuts short is not reproducible."""
    progress: bool = True
    """Show a progress bar."""
    profile: int = 0
    """Trace this many steps with torch.profiler after the first ten, into `out/profile/`."""

    def check_run(self) -> None:
        """``ValueError`` for run settings that cannot work (:func:`check_run_settings`)."""
        self.out = Path(self.out)
        check_run_settings(self)



def check_run_settings(config: RunSettings) -> None:
    """``ValueError`` for run settings that cannot work together or at all; trainers' configs
    call it when they validate themselves."""
    budget = config.time_budget
    if budget is not None and not (isinstance(budget, (int, float)) and math.isfinite(budget) and budget > 0):
        raise ValueError(f"time_budget={budget!r} must be a number of seconds > 0 (or None: no limit)")
    if isinstance(config.profile, bool) or not isinstance(config.profile, int) or config.profile < 0:
        raise ValueError(f"profile={config.profile!r} must be a number of steps >= 0 (0: no profile)")
    check_torch_threads(config.torch_threads)
    if isinstance(config.seed, bool) or not isinstance(config.seed, int) or config.seed < 0:
        raise ValueError(f"seed={config.seed!r} must be an int >= 0")
    if config.resume and config.overwrite:
        raise ValueError("resume=True continues the run in out and overwrite=True removes it: pass one")
