"""Failure detectors on recorded rollouts under the SAFE protocol (``worldsim detect``).

:func:`run_detection` reads an episode file written by ``worldsim collect --record-features``,
fits, calibrates and tests every detector on every seed (:mod:`~worldsim.failure.protocol`), and
writes to ``out``: ``results.json`` (every metric, seed and alpha; each ROC-AUC's interval and
verdict, :mod:`~worldsim.failure.verdict`), ``table.md``, ``roc.png``, ``sweep.png``, ``videos/``
(annotated rollouts of the best detectors) and ``detectors/<name>/``
(each detector fitted and calibrated on the first seed, ready for
:class:`~worldsim.failure.DetectorWrapper`). On rollouts of several tasks the task prior
(:mod:`~worldsim.failure.task_prior`, a rollout scored by its task's failure rate) is run beside
the detectors as the trivial figure each must beat (``task_prior`` in ``results.json``). With
``--fit-data`` (rollouts of the seen tasks recorded elsewhere, e.g. imagined by a world model),
each detector that learns is also fitted on those instead of a seed's training split and
calibrated and tested on the real split like the rest: rows ``<detector>@imagined``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console
from tqdm.auto import tqdm

from worldsim.data.reader import EpisodeReader
from worldsim.envs.registration import IMAGINED_PREFIX
from worldsim.envs.tasks import get_suite, get_task
from worldsim.failure.detectors import DETECTORS, make_detector
from worldsim.failure.protocol import (
    DEFAULT_SWEEP,
    DetectorResult,
    ProtocolConfig,
    calibrated_protocol,
    evaluate_detector,
)
from worldsim.failure.report import annotated_videos, plot_roc, plot_sweep, results_markdown
from worldsim.failure.rollouts import Rollout, load_rollouts, median_success_lengths, shortest_success_lengths
from worldsim.failure.task_prior import NAME as TASK_PRIOR
from worldsim.failure.task_prior import TaskPrior
from worldsim.runtime.atomic import atomic_path
from worldsim.runtime.run_logging import to_jsonable, write_json
from worldsim.runtime.validation import check_int

ALL = ",".join(DETECTORS)


def parse_detectors(spec: str) -> list[str]:
    """``"safe-mlp,fiper"`` -> names, each known (KeyError naming the unknown one otherwise)."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError(f"--detectors {spec!r} names no detector; known: {ALL}")
    for name in names:
        if name not in DETECTORS:
            raise KeyError(f"unknown detector {name!r} in --detectors; known: {ALL}")
    return list(dict.fromkeys(names))


@dataclass
class DetectionConfig:
    """A detection run (:func:`run_detection`): which detectors, on which recorded rollouts, under
    which split of the SAFE protocol, and where the report goes."""

    data: Path
    """Episode file from `worldsim collect --record-features`."""
    detectors: str = ALL
    """Comma-separated detector names (default: every detector whose inputs the rollouts hold)."""
    fit_data: Path | None = None
    """Also fit every detector on these rollouts of the seen tasks (e.g. collected in imagination,
    ``worldsim collect --world-model``), calibrated and tested on --data's like the rest: rows
    ``<detector>@imagined`` (``@fit-data`` for rollouts recorded in physics) beside each that
    learns from rollouts."""
    seen_tasks: tuple[str, ...] = ()
    """Task trained and calibrated on (repeat the flag; default: every task of --data not unseen)."""
    unseen_tasks: tuple[str, ...] = ()
    """Task only tested on (repeat the flag)."""
    suite: str | None = None
    """Take the seen/unseen split of this suite (instead of --seen-tasks/--unseen-tasks)."""
    alpha: float = 0.1
    """Allowed false-alarm rate on successes (raised, and said, when the successes are too few)."""
    cp: Literal["functional", "constant"] = "functional"
    """Conformal calibration: time-varying band or one constant (constant when the successes are too
    few to shape a band)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds (split + fit each)."""
    videos: int = 4
    """Annotated rollout videos per detector, for the best two by seen ROC-AUC (0: none)."""
    out: Path = Path("runs/detect")
    """Where results go."""

    def __post_init__(self) -> None:
        if self.suite and (self.seen_tasks or self.unseen_tasks):
            raise ValueError("give either --suite or --seen-tasks/--unseen-tasks, not both")
        check_int("videos", self.videos, 0)
        parse_detectors(self.detectors)

    def protocol(self, tasks_in_file: list[str]) -> ProtocolConfig:
        """The protocol's split: the suite's, the named tasks, or every task of the file seen."""
        if self.suite:
            suite = get_suite(self.suite)
            seen, unseen = suite.seen, suite.unseen
        else:
            seen = tuple(get_task(t).name for t in self.seen_tasks)
            unseen = tuple(get_task(t).name for t in self.unseen_tasks)
            if not seen:
                seen = tuple(t for t in tasks_in_file if t not in unseen)
        return ProtocolConfig(seen_tasks=seen, unseen_tasks=unseen, alpha=self.alpha, cp=self.cp,
                              seeds=self.seeds, sweep=tuple(sorted({*DEFAULT_SWEEP, self.alpha})))


def run_detection(config: DetectionConfig) -> dict[str, DetectorResult]:
    """Fit, calibrate and test every detector of ``config`` on every seed, and write the report to
    ``config.out``: ``results.json`` (every metric, seed and alpha), ``table.md``, ``roc.png``,
    ``sweep.png``, ``videos/`` and ``detectors/<name>/``; with several tasks, the task prior beside
    them (``task_prior`` in ``results.json``, its rows in ``table.md``). Inputs are checked (features recorded,
    images for videos) before any detector is fitted. When the calibration successes are too few for
    ``cp`` at ``alpha``, the setting they can calibrate is used instead
    (:func:`~worldsim.failure.protocol.calibrated_protocol`), said on stderr, in ``table.md`` and
    in ``results.json`` (``calibration``: requested, used, reason). A detector
    that cannot be fitted or calibrated on these rollouts (``ValueError``, e.g. a supervised one
    without failures to learn from) is skipped, its reason in ``results.json`` (``skipped``),
    ``table.md`` and one line on stderr, while the others run."""
    names = parse_detectors(config.detectors)
    rollouts = load_rollouts(config.data)
    fit = load_rollouts(config.fit_data) if config.fit_data is not None else None
    everything = config.detectors == ALL  # by default, the detectors these rollouts can feed
    if everything:
        names = [n for n in names if readable(n, rollouts)]
    protocol = config.protocol(sorted({r.task for r in rollouts}))
    if fit is not None:  # refused before fitting: evaluate_detector's own refusal would only skip a row
        outside = sorted({r.task for r in fit} - set(protocol.seen_tasks))
        if outside:
            raise ValueError(f"--fit-data {config.fit_data} holds {', '.join(outside)}, not a seen task "
                             f"({', '.join(protocol.seen_tasks)}): a detector fitted on them would have seen the test")
    if config.videos:
        with EpisodeReader(config.data) as reader:
            if "image" not in reader.obs_keys:
                raise ValueError(f"{config.data} holds no camera images (obs_mode 'state'): pass --videos 0, "
                                 "or collect with pixels")
    requested = {"cp": protocol.cp, "alpha": protocol.alpha}
    protocol, changed = calibrated_protocol(rollouts, protocol)
    if changed:
        print(f"calibration: {changed}", file=sys.stderr)  # one line, however wide the terminal
    failures = sum(not r.success for r in rollouts)
    tasks = len({r.task for r in rollouts})
    Console().print(f"{len(rollouts)} rollouts ({failures} failures) of {tasks} tasks; "
                    f"seen {list(protocol.seen_tasks)}, unseen {list(protocol.unseen_tasks)}")
    results: dict[str, DetectorResult] = {}
    skipped: dict[str, str] = {}
    start = time.perf_counter()
    arms: list[tuple[str, str, list[Rollout] | None]] = [(name, name, None) for name in names]  # row, detector, fit
    if fit is not None and config.fit_data is not None:
        label = fit_label(config.fit_data)
        arms = [arm for name in names for arm in ((name, name, None), (f"{name}@{label}", name, fit))
                if arm[2] is None or (make_detector(name).learns and (not everything or readable(name, fit)))]
    for name, detector, fitted_on in tqdm(arms, desc="detectors", unit="detector"):
        try:
            result = evaluate_detector(detector, rollouts, protocol, fit=fitted_on)
            result.name = name
        except ValueError as err:  # this detector cannot be fitted or calibrated on these rollouts
            skipped[name] = " ".join(str(err).split())
            tqdm.write(f"skipped {name}: {skipped[name]}", file=sys.stderr)  # one line, above the bar
            continue
        if result.detector is None:
            raise RuntimeError(f"detector {name!r} ran no seed: nothing to save")
        results[name] = result
        result.detector.save(config.out / "detectors" / name)
    if not results:
        raise ValueError("no detector could be fitted and calibrated: "
                         + "; ".join(f"{name}: {reason}" for name, reason in skipped.items()))
    prior = evaluate_detector(TASK_PRIOR, rollouts, protocol, build=TaskPrior) if tasks > 1 else None
    baselines = {TASK_PRIOR: prior} if prior else {}
    write_json(config.out / "results.json", {
        "rollouts": str(config.data), "protocol": to_jsonable(protocol),
        "fit_rollouts": None if fit is None else {"path": str(config.fit_data), "episodes": len(fit),
                                                  "failures": sum(not r.success for r in fit)},
        "calibration": {"requested": requested, "used": {"cp": protocol.cp, "alpha": protocol.alpha},
                        "reason": changed}, "episodes": len(rollouts),
        "failures": failures, "failure_rates": failure_rates(rollouts), "lengths": rollout_lengths(rollouts),
        "seconds": round(time.perf_counter() - start, 1),
        "detectors": {n: r.to_json() for n, r in results.items()}, "skipped": skipped,
        "task_prior": prior.to_json() if prior else None})
    with atomic_path(config.out / "table.md") as tmp:
        tmp.write_text(results_markdown(results, protocol.alpha, baselines)
                       + (f"\ncalibration: {changed}\n" if changed else "")
                       + "".join(f"\nskipped {name}: {reason}\n" for name, reason in skipped.items()))
    plot_roc(results, config.out / "roc.png")
    plot_sweep(results, config.out / "sweep.png")
    if config.videos:
        for name in sorted(results, key=lambda n: -_seen_auc(results[n]))[:2]:
            annotated_videos(results[name], config.data, config.out / "videos", config.videos)
    return results


def readable(name: str, rollouts: list[Rollout]) -> bool:
    """Whether ``rollouts`` hold every input detector ``name`` reads."""
    return bool(rollouts) and all(getattr(rollouts[0], key) is not None for key in make_detector(name).needs)


def fit_label(path: Path) -> str:
    """``imagined`` for rollouts recorded in a world model, else ``fit-data``: the suffix of the
    rows of detectors fitted on them."""
    with EpisodeReader(path) as reader:
        imagined = all(info.env_id.startswith(f"worldsim/{IMAGINED_PREFIX}") for info in reader.episode_info())
    return "imagined" if imagined else "fit-data"


def failure_rates(rollouts: list[Rollout]) -> dict[str, float]:
    """Per task, the share of its rollouts that failed: the base rates a pooled ROC-AUC mixes."""
    tasks = dict.fromkeys(r.task for r in rollouts)
    return {task: sum(not r.success for r in rollouts if r.task == task) / sum(r.task == task for r in rollouts)
            for task in tasks}


def rollout_lengths(rollouts: list[Rollout]) -> dict[str, dict[str, int | None]]:
    """Per task, the steps ROC-AUC compares scores at (its shortest and median successful length)
    and the median failure's length (``None`` without failures): how far into the rollouts the
    scores are read."""
    shortest, median = shortest_success_lengths(rollouts), median_success_lengths(rollouts)
    out: dict[str, dict[str, int | None]] = {}
    for task in shortest:
        failed = sorted(r.length for r in rollouts if r.task == task and not r.success)
        out[task] = {"shortest_success": shortest[task], "median_success": median[task],
                     "median_failure": failed[(len(failed) - 1) // 2] if failed else None}
    return out


def _seen_auc(result: DetectorResult) -> float:
    value = result.summary().get("seen", {}).get("roc_auc", {}).get("mean", float("nan"))
    return value if value == value else -1.0
