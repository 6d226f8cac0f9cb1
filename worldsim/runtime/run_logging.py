"""What every training run leaves behind: its config, metrics as JSONL and TensorBoard, plots.

A run folder looks like::

    runs/bc_push/
        config.json          the run's full config (written first)
        metrics.jsonl        one JSON object per logged step: {"step": ..., "time": ..., <metrics>}
        tb/                  the same metrics for TensorBoard (``tensorboard --logdir runs``)
        curves.png           every metric against the step (written by :meth:`RunLogger.close`)
        policy/              the latest policy checkpoint (``load_policy(run_folder)`` finds it)
        checkpoint.pt        the full training state, for ``--resume``
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from worldsim.runtime.atomic import atomic_path


def to_jsonable(value: Any) -> Any:
    """Dataclasses, paths, tuples and numpy scalars as plain JSON values (a value that names itself,
    as a rung does, by its ``to_json``)."""
    if hasattr(value, "to_json") and not isinstance(value, type):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value


def prepare_run_folder(out: str | Path, *, resume: bool, overwrite: bool) -> None:
    """Keep a new run from mixing with an earlier one in ``out`` (metrics, TensorBoard events,
    checkpoints): a non-empty ``out`` is refused with ``FileExistsError`` unless ``resume`` (the
    run continues there) or ``overwrite`` (its contents are removed first, by rank 0 alone under
    ``torchrun``). Call it before the process group forms, so no rank has written yet."""
    out = Path(out)
    rank = int(os.environ.get("RANK", "0"))
    # the other ranks must not look into out while rank 0 clears it
    if resume or (overwrite and rank != 0) or not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not overwrite:
        raise FileExistsError(f"out={str(out)!r} already holds files (an earlier run?); pass "
                              "overwrite=True (--overwrite) to start afresh there, removing them, or "
                              "resume=True (--resume) to continue that run")
    shutil.rmtree(out) if out.is_dir() else out.unlink()


def write_json(path: str | Path, value: Any) -> Path:
    """Write ``value`` as indented JSON, atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(to_jsonable(value), indent=2) + "\n")
    return path


class RunLogger:
    """Metrics sink of one run: appends to ``metrics.jsonl`` and TensorBoard.

    ``enabled=False`` (non-zero ranks of a distributed run) makes every method a no-op. On
    resume, the JSONL is cut back to ``resume_step`` so the file holds one history."""

    def __init__(self, out: str | Path, config: Any, enabled: bool = True, resume_step: int | None = None) -> None:
        self.out = Path(out)
        self.enabled = enabled
        self.start = time.time()
        self._writer = None
        if not enabled:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        write_json(self.out / "config.json", config)
        self.path = self.out / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            with atomic_path(self.path) as tmp:
                tmp.write_text("".join(line + "\n" for line in kept))
        elif self.path.exists():
            self.path.unlink()
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(self.out / "tb"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` at ``step`` (env steps for RL, optimiser steps for BC)."""
        if self._writer is None:  # disabled
            return
        row = {"step": int(step), "time": round(time.time() - self.start, 3)}
        row.update({k: float(v) for k, v in metrics.items()})
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        for key, value in row.items():
            if key != "step" and math.isfinite(value):
                self._writer.add_scalar(key, value, int(step))

    def close(self) -> None:
        """Flush TensorBoard and draw ``curves.png``."""
        if self._writer is None:  # disabled
            return
        self._writer.flush()
        self._writer.close()
        plot_metrics(self.path, self.out / "curves.png")


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """The rows of a ``metrics.jsonl``."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_metrics(metrics_path: str | Path, out: str | Path) -> Path | None:
    """One small panel per metric against the step; ``None`` if there is nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path) if Path(metrics_path).exists() else []
    keys = sorted({k for row in rows for k in row} - {"step", "time"})
    if not keys:
        return None
    cols = min(4, len(keys))
    nrows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.4 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        points = [(r["step"], r[key]) for r in rows if key in r]
        # Markers keep a curve of one point (one validation, one evaluation) visible.
        ax.plot([p[0] for p in points], [p[1] for p in points], lw=1, marker=".", markersize=3)
        ax.set_title(key, fontsize=8)
        ax.set_xlabel("step", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return Path(out)
