"""What a detection run leaves behind: the results table, ROC curves, balanced accuracy vs
detection time over alpha, and rollout videos annotated with the score and the alarm."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, ImageDraw
from rich.console import Console
from rich.table import Table

from worldsim.data.reader import EpisodeReader
from worldsim.failure.protocol import WINDOWS, DetectorResult
from worldsim.failure.verdict import cell

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
from worldsim.runtime.atomic import atomic_path
from worldsim.runtime.video import write_video

COLUMNS = (
    ("roc_auc", "ROC-AUC, shortest success"),
    ("roc_auc_median", "ROC-AUC, median success"),
    ("roc_auc_per_task", "ROC-AUC within tasks"),
    ("tpr", "TPR"),
    ("tnr", "TNR"),
    ("balanced_accuracy", "bal. acc"),
    ("detection_time", "T-det"),
)


VERDICT_NOTE = ("ROC-AUC: running maximum of the score at the task's shortest successful length (all test "
                "rollouts), and at its median successful length (the rollouts still running then), mean over "
                "seeds with a 95% episode-bootstrap interval: 'separates' when the interval lies above 0.5, "
                "'below chance' when below (the score is inverted), 'chance' otherwise. TPR, TNR, balanced "
                "accuracy and T-det read each rollout to its end, where a failure that runs to the time limit "
                "has more steps to alarm on than a success that ends early. ROC-AUC within tasks: the first "
                "ROC-AUC computed per task and averaged over tasks; the task prior (each rollout scored by "
                "its task's failure rate in the fit rollouts) is the figure a detector must beat when "
                "tasks fail at different rates.")


def _cell(stats: dict[str, float]) -> str:
    return "-" if math.isnan(stats["mean"]) else f"{stats['mean']:.3f} ± {stats['std']:.3f}"


def _cells(result: DetectorResult) -> dict[str, list[str]]:
    """split -> the row's cells: ROC-AUC with its interval and call at both windows (mean ± std
    and "-" for a result run without per-rollout scores), then the alarm metrics."""
    summary, verdicts = result.summary(), result.verdicts()
    rows = {}
    for split, stats in summary.items():
        windows = verdicts.get(split)
        aucs = ([cell(windows[w]) for w in WINDOWS] if windows else [_cell(stats["roc_auc"]), "-"])
        rows[split] = [*aucs, *(_cell(stats[key]) for key, _ in COLUMNS[2:])]
    return rows


def results_table(results: dict[str, DetectorResult], alpha: float) -> Table:
    """A rich table: one row per detector and split, ROC-AUC with its interval and call, the alarm
    metrics as mean ± std over seeds. Names are never cut
    (piped output is 80 columns wide): the figures wrap at their "±" instead."""
    table = Table(title=f"failure detection (alpha = {alpha}; alarm metrics: mean ± std over seeds)")
    names = max([len("detector"), *map(len, results)])
    table.add_column("detector", no_wrap=True, min_width=names)
    table.add_column("split", no_wrap=True, min_width=len("unseen"))
    for column in (*(label for _, label in COLUMNS), "ms/step"):
        table.add_column(column, justify="right")
    for name, result in results.items():
        ms = f"{np.mean([s.score_ms_per_step for s in result.seeds]):.3f}"
        for split, cells in _cells(result).items():
            table.add_row(name, split, *cells, ms)
    table.caption = VERDICT_NOTE
    return table


def print_table(table: Table, console: Console | None = None) -> None:
    """Print ``table`` whole: on a terminal at its width (figures wrap, names do not), and piped
    or redirected (where rich assumes 80 columns and would cut cells to "…") at the table's own."""
    console = console or Console()
    if console.is_terminal:
        console.print(table)
        return
    width = console.width
    console.width = max(width, console.measure(table, options=console.options.update_width(10_000)).maximum)
    try:
        console.print(table)
    finally:
        console.width = width


def results_markdown(results: dict[str, DetectorResult], alpha: float,
                     baselines: dict[str, DetectorResult] | None = None) -> str:
    """The same table in Markdown (``table.md`` of a run), the trivial ``baselines`` (the task
    prior) in rows of their own below the detectors."""
    lines = [
        f"Failure detection at alpha = {alpha} (alarm metrics: mean ± std over seeds)", "", VERDICT_NOTE,
        "",
        "| detector | split | " + " | ".join(label for _, label in COLUMNS) + " |",
        "|---|---|" + "---:|" * len(COLUMNS),
    ]
    for name, result in results.items():
        for split, cells in _cells(result).items():
            lines.append(f"| {name} | {split} | " + " | ".join(cells) + " |")
    for name, result in (baselines or {}).items():
        for split, cells in _cells(result).items():
            lines.append(f"| {name} (trivial) | {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _save(fig: Figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path


def _split_panels(results: dict[str, DetectorResult], field: str,
                 width: float) -> tuple[Figure, list[tuple[Axes, str]]]:
    """A figure with one panel ``width`` inches wide per split (seen, then unseen) that the first
    seed's ``field`` (``roc`` or ``sweep``) holds, and its (axes, split) pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = sorted({s for r in results.values() for s in getattr(r.seeds[0], field)}, key=["seen", "unseen"].index)
    fig, axes = plt.subplots(1, len(splits), figsize=(width * len(splits), 4.5), squeeze=False)
    return fig, list(zip(axes[0], splits, strict=True))


def plot_roc(results: dict[str, DetectorResult], path: Path) -> Path:
    """ROC curves of the first seed, seen and unseen side by side (AUC: mean over seeds)."""
    fig, panels = _split_panels(results, "roc", 7)
    for ax, split in panels:
        for name, result in results.items():
            fpr, tpr = result.seeds[0].roc.get(split, ([], []))
            if fpr:
                verdict = result.verdicts().get(split, {}).get("shortest_success")
                auc = result.summary()[split]["roc_auc"]["mean"]
                ax.plot(fpr, tpr, label=f"{name} ({auc:.2f}{', ' + verdict.call if verdict else ''})")
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
        ax.set(title=f"{split} tasks", xlabel="false-positive rate", ylabel="true-positive rate")
        if ax.get_legend_handles_labels()[0]:  # beside the axes, where it covers no curve
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return _save(fig, path)


def plot_sweep(results: dict[str, DetectorResult], path: Path) -> Path:
    """Balanced accuracy against mean detection time as alpha varies (mean over seeds)."""
    fig, panels = _split_panels(results, "sweep", 5)
    for ax, split in panels:
        for name, result in results.items():
            rows = [s.sweep[split] for s in result.seeds if split in s.sweep]
            if not rows:
                continue
            with warnings.catch_warnings():  # an alpha no seed could calibrate stays NaN, unplotted
                warnings.simplefilter("ignore", RuntimeWarning)
                acc = np.nanmean([[r["balanced_accuracy"] for r in seed] for seed in rows], axis=0)
                t_det = np.nanmean([[r["detection_time"] for r in seed] for seed in rows], axis=0)
            ax.plot(t_det, acc, marker="o", markersize=3, label=name)
        ax.set(
            title=f"{split} tasks: alpha swept",
            xlabel="mean detection time (fraction of rollout)",
            ylabel="balanced accuracy",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def _annotate(
    frame: np.ndarray,
    t: int,
    curve: np.ndarray,
    threshold: np.ndarray,
    alarm: bool,
    label: str,
    scale: int = 4,
) -> np.ndarray:
    """One video frame: the camera image enlarged (64 px -> 256), a red border once the alarm has fired, and a
    strip plotting the score so far (white) against the threshold (yellow)."""
    h, w = frame.shape[0] * scale, frame.shape[1] * scale
    strip = 60
    canvas = Image.new("RGB", (w, h + strip), (20, 20, 20))
    canvas.paste(Image.fromarray(frame).resize((w, h), Image.Resampling.NEAREST), (0, 0))
    draw = ImageDraw.Draw(canvas)
    if alarm:
        draw.rectangle([0, 0, w - 1, h - 1], outline=(230, 30, 30), width=5)
    low = min(curve.min(), threshold.min())
    high = max(curve.max(), threshold.max())
    span = high - low if high > low else 1.0

    def y(v: float) -> float:
        return h + strip - 6 - (v - low) / span * (strip - 22)

    def x(i: int) -> float:
        return 4 + i / max(len(curve) - 1, 1) * (w - 8)

    draw.line([(x(i), y(v)) for i, v in enumerate(threshold)], fill=(230, 200, 40), width=1)
    if t > 0:
        draw.line([(x(i), y(v)) for i, v in enumerate(curve[: t + 1])], fill=(255, 255, 255), width=2)
    draw.text(
        (4, h + 2),
        f"{label}  t={t}" + ("  ALARM" if alarm else ""),
        fill=(255, 90, 90) if alarm else (220, 220, 220),
    )
    return np.asarray(canvas)


def pick_examples(result: DetectorResult, count: int) -> list[tuple[str, str, int]]:
    """Up to ``count`` (split, kind, index into ``result.test[split]``) examples, varied: detected
    failures, then a missed failure, a false alarm and a quiet success when there are some."""
    detector = result.detector
    if detector is None:
        raise ValueError(f"{result.name}: no fitted detector to replay")
    kinds: dict[str, list[tuple[str, int]]] = {
        "detected": [],
        "missed": [],
        "false alarm": [],
        "quiet success": [],
    }
    for split, pairs in result.test.items():
        for i, (rollout, curve) in enumerate(pairs):
            alarmed = bool(detector.alarm_curve(curve).any())
            kind = (
                ("detected" if alarmed else "missed")
                if not rollout.success
                else ("false alarm" if alarmed else "quiet success")
            )
            kinds[kind].append((split, i))
    picked: list[tuple[str, str, int]] = []
    order = ["detected", "missed", "false alarm", "quiet success", "detected", "detected"]
    while len(picked) < count and any(kinds.values()):
        for kind in order:
            if kinds[kind] and len(picked) < count:
                split, i = kinds[kind].pop(0)
                picked.append((split, kind, i))
    return picked


def annotated_videos(
    result: DetectorResult,
    rollouts_path: Path,
    out: Path,
    count: int,
    fps: int = 10,
) -> list[Path]:
    """Write ``count`` annotated rollout videos of ``result``'s first seed to ``out``;
    ``ValueError`` if the rollouts were recorded without camera images."""
    written: list[Path] = []
    detector = result.detector
    if detector is None:
        raise ValueError(f"{result.name}: no fitted detector to replay")
    with EpisodeReader(rollouts_path) as reader:
        if "image" not in reader.obs_keys:
            raise ValueError(
                f"{rollouts_path} holds no camera images to make videos of (obs_mode 'state'); "
                f"pass --videos 0"
            )
        for split, kind, i in pick_examples(result, count):
            rollout, curve = result.test[split][i]
            frames = reader.load(rollout.index, "image")[: len(curve)]
            margins = detector.margins(curve)
            score = detector.detection_score(curve)
            scales = detector.scales
            assert scales is not None  # margins() above refuses an uncalibrated detector
            threshold = score - margins * scales[0] if curve.shape[1] == 1 else np.zeros_like(score)
            alarm = np.maximum.accumulate(margins > 0)
            label = f"{detector.name} {rollout.task} {'success' if rollout.success else 'failure'}: {kind}"
            video = [_annotate(f, t, score, threshold, bool(alarm[t]), label) for t, f in enumerate(frames)]
            name = f"{detector.name}_{split}_{kind.replace(' ', '_')}_{rollout.index}.mp4"
            written.append(write_video(out / name, np.stack(video), fps))
    return written
