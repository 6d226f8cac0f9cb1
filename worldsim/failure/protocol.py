"""The evaluation protocol of SAFE, on recorded rollouts.

Tasks are split into *seen* and *unseen*. For each seed, the rollouts of every seen task are
split (stratified by task and outcome) into a training part (fit), a calibration part (its
successes calibrate the conformal thresholds) and a test part; unseen-task rollouts are only
ever tested. Reported per split (``seen``: the seen tasks' test part, ``unseen``):

- ``roc_auc``: ROC-AUC of the running maximum of the detection score at step ``T_task - 1``,
  ``T_task`` being the task's shortest successful rollout. Scores are never compared at
  different steps, so "failures run to the time limit" cannot leak the label: a detector that
  only counts steps scores exactly 0.5.
- where the rollouts differ: the same ROC-AUC at step ``M_task - 1``, ``M_task`` being the
  task's median successful length, among the test rollouts still running then (every failure
  that runs to the time limit, the later half of the successes). The shortest success can end
  before a weak policy has touched the scene, so the first comparison may read the rollouts
  before they differ; at the median, too, a task's rollouts are all read at one step, so length
  leaks nothing there either. Both are judged by :mod:`~worldsim.failure.verdict`: a 95%
  interval from an episode bootstrap, and "separates", "below chance" or "chance".
- ``roc_auc_per_task``: the first ROC-AUC computed within each task (of those whose test rollouts
  hold both outcomes) and averaged over tasks. Tasks fail at very different rates, so a pooled
  ROC-AUC rewards a score that only tells the hard tasks from the easy ones; within a task it
  cannot (the task prior of :mod:`~worldsim.failure.task_prior` scores exactly 0.5 there).
- with the thresholds calibrated at ``alpha``: ``tpr`` (failures alarmed), ``tnr`` (successes
  not alarmed), ``balanced_accuracy`` = (TPR + TNR) / 2, and ``detection_time``: the first
  alarm's step / the rollout's length, averaged over the alarmed failures (lower is earlier).

Each metric is reported as mean and standard deviation over the seeds. The alpha sweep
recalibrates the same fitted detector at several levels (balanced accuracy vs detection time).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from worldsim.failure.conformal import (
    CP_METHODS,
    Threshold,
    check_alpha,
    enough_successes,
    needed_successes,
    smallest_alpha,
)
from worldsim.failure.detectors import Detector, make_detector
from worldsim.failure.rollouts import Rollout, median_success_lengths, shortest_success_lengths
from worldsim.failure.verdict import AucVerdict, SeedScores, judge

SPLITS: tuple[str, ...] = ("seen", "unseen")
METRICS: tuple[str, ...] = ("roc_auc", "roc_auc_per_task", "tpr", "tnr", "balanced_accuracy", "detection_time")
WINDOWS: tuple[str, ...] = ("shortest_success", "median_success")
"""Where ROC-AUC reads the running maximum: the task's shortest and median successful length."""
DEFAULT_SWEEP: tuple[float, ...] = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)


@dataclass
class ProtocolConfig:
    """How detectors are trained, calibrated and tested."""

    seen_tasks: tuple[str, ...]
    """Tasks whose rollouts train, calibrate and test the detectors."""
    unseen_tasks: tuple[str, ...] = ()
    """Tasks only tested on."""
    alpha: float = 0.1
    """Allowed false-alarm rate on successes (conformal level)."""
    cp: str = "functional"
    """Conformal calibration: 'functional' (time-varying band) or 'constant'."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """One split and one detector fit per seed."""
    train_fraction: float = 0.5
    """Share of each seen task's rollouts that fits the detectors."""
    calibration_fraction: float = 0.25
    """Share that calibrates them (its successes); the rest is the seen test set."""
    sweep: tuple[float, ...] = DEFAULT_SWEEP
    """Alphas of the balanced-accuracy vs detection-time curve."""

    def __post_init__(self) -> None:
        self.seen_tasks, self.unseen_tasks = tuple(self.seen_tasks), tuple(self.unseen_tasks)
        self.seeds, self.sweep = tuple(self.seeds), tuple(self.sweep)
        if not self.seen_tasks:
            raise ValueError("seen_tasks is empty; detectors are trained on the seen tasks")
        both = sorted(set(self.seen_tasks) & set(self.unseen_tasks))
        if both:
            raise ValueError(f"tasks {both} are both seen and unseen")
        check_alpha(self.alpha)
        for a in self.sweep:
            check_alpha(a)
        if self.cp not in CP_METHODS:
            raise ValueError(f"cp={self.cp!r} must be one of {CP_METHODS}")
        if not self.seeds:
            raise ValueError("seeds is empty")
        if not (
            0 < self.train_fraction
            and 0 < self.calibration_fraction
            and self.train_fraction + self.calibration_fraction < 1
        ):
            raise ValueError(
                f"train_fraction={self.train_fraction} and calibration_fraction="
                f"{self.calibration_fraction} must be > 0 and leave a test share (sum < 1)"
            )


@dataclass
class SeedResult:
    """One detector, one seed."""

    metrics: dict[str, dict[str, float]]
    """split -> metric -> value."""
    roc: dict[str, tuple[list[float], list[float]]]
    """split -> (false-positive rates, true-positive rates)."""
    sweep: dict[str, list[dict[str, float]]]
    """split -> one row per alpha: alpha, balanced_accuracy, detection_time, tpr, tnr."""
    fit_seconds: float
    score_ms_per_step: float
    scores: dict[str, dict[str, SeedScores]] = field(default_factory=dict)
    """split -> window (:data:`WINDOWS`) -> the test rollouts' running-max scores there."""


@dataclass
class DetectorResult:
    """One detector over all seeds; :attr:`detector` is the one fitted on the first seed."""

    name: str
    seeds: list[SeedResult] = field(default_factory=list)
    detector: Detector | None = None
    test: dict[str, list[tuple[Rollout, np.ndarray]]] = field(default_factory=dict)
    """split -> (rollout, score curve) of the first seed's test rollouts (for videos)."""

    def summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """split -> metric -> {mean, std} over seeds (NaN where undefined)."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for split in self.seeds[0].metrics:
            out[split] = {}
            for metric in METRICS:
                values = np.array([s.metrics[split].get(metric, math.nan) for s in self.seeds], dtype=float)
                finite = values[np.isfinite(values)]
                out[split][metric] = {
                    "mean": float(finite.mean()) if len(finite) else math.nan,
                    "std": float(finite.std()) if len(finite) else math.nan,
                }
        return out

    def verdicts(self) -> dict[str, dict[str, AucVerdict]]:
        """split -> window (:data:`WINDOWS`) -> the ROC-AUC's interval and verdict over seeds
        (:func:`~worldsim.failure.verdict.judge`); empty for seeds run without scores."""
        out: dict[str, dict[str, AucVerdict]] = {}
        for split in self.seeds[0].scores:
            out[split] = {window: judge([s.scores[split][window] for s in self.seeds]) for window in WINDOWS}
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "verdicts": {split: {w: v.to_json() for w, v in windows.items()}
                         for split, windows in self.verdicts().items()},
            "fit_seconds": float(np.mean([s.fit_seconds for s in self.seeds])),
            "score_ms_per_step": float(np.mean([s.score_ms_per_step for s in self.seeds])),
            "seeds": [{"metrics": s.metrics, "sweep": s.sweep} for s in self.seeds],
        }


def split_rollouts(
    rollouts: Sequence[Rollout],
    config: ProtocolConfig,
    seed: int,
) -> tuple[list[Rollout], list[Rollout], dict[str, list[Rollout]]]:
    """(train, calibration successes, {"seen": test, "unseen": test}) for one seed."""
    rng = np.random.default_rng(seed)
    train: list[Rollout] = []
    calibration: list[Rollout] = []
    test: dict[str, list[Rollout]] = {
        "seen": [],
        "unseen": [r for r in rollouts if r.task in config.unseen_tasks],
    }
    for task in config.seen_tasks:
        for outcome in (True, False):
            group = [r for r in rollouts if r.task == task and r.success == outcome]
            order = rng.permutation(len(group))
            n_train = int(round(config.train_fraction * len(group)))
            n_cal = int(round(config.calibration_fraction * len(group)))
            train += [group[i] for i in order[:n_train]]
            if outcome:
                calibration += [group[i] for i in order[n_train : n_train + n_cal]]
            test["seen"] += [group[i] for i in order[n_train + n_cal :]]
    return train, calibration, test


NO_SUCCESSES = ("the calibration set holds no successful rollouts; conformal calibration needs successes "
                "(check the seen tasks and the split)")


def calibration_problem(rollouts: Sequence[Rollout], config: ProtocolConfig, count: int) -> tuple[str, str] | None:
    """Why ``config.cp`` at ``config.alpha`` cannot calibrate on ``count`` successes (the fewest
    any seed's calibration part holds), and what would do (more rollouts, another alpha or CP);
    None when they suffice. Functional CP splits the successes (half shape the band); constant
    CP, joint bands included (:func:`~worldsim.failure.conformal.calibrate_components`), uses them all."""
    split = config.cp == "functional"
    if enough_successes(count, config.alpha, split):
        return None
    needed = needed_successes(config.alpha, split)
    seen = [r for r in rollouts if r.task in config.seen_tasks]
    n_fit = max(1, int(round(0.5 * count)))  # functional CP's split (conformal.functional_threshold)
    band = f": {n_fit} shape the band, {count - n_fit} calibrate it" if split else ""
    options = [f"collect about {math.ceil(len(seen) * needed / count)} rollouts of the seen tasks "
               f"(at their success rate, {sum(r.success for r in seen)} of {len(seen)} here)"]
    alpha = smallest_alpha(count, split)
    if alpha is not None:
        options.append(f"pass --alpha {alpha}")
    constant_alpha = smallest_alpha(count, split=False)
    if split and constant_alpha is not None:
        options.append("pass --cp constant" + (f" --alpha {constant_alpha}" if constant_alpha > config.alpha else ""))
    return (f"{config.cp} CP at alpha={config.alpha} needs at least {needed} successful calibration rollouts "
            f"(here {count}{band})"), ", or ".join(options)


def calibrated_protocol(rollouts: Sequence[Rollout], config: ProtocolConfig) -> tuple[ProtocolConfig, str | None]:
    """The protocol these rollouts can calibrate, and why it differs from ``config`` (None: it does
    not). When ``config.cp`` at ``config.alpha`` needs more successful calibration rollouts than a
    seed's split holds, constant CP at the same alpha is used (it needs no successes to shape a
    band, so the false-alarm guarantee stays the one asked for); failing that, constant CP at the
    smallest alpha the successes calibrate. ``ValueError`` (with what would make it work) only when
    nothing can: no successes, or too few even for constant CP at alpha 0.5."""
    count = min(len(split_rollouts(rollouts, config, seed)[1]) for seed in config.seeds)
    if count == 0:
        raise ValueError(NO_SUCCESSES)
    problem = calibration_problem(rollouts, config, count)
    if problem is None:
        return config, None
    alpha = config.alpha if enough_successes(count, config.alpha, split=False) else smallest_alpha(count, split=False)
    if alpha is None:
        raise ValueError("; ".join(problem))
    used = replace(config, cp="constant", alpha=alpha, sweep=tuple(sorted({*config.sweep, alpha})))
    return used, f"{problem[0]}, so constant CP at alpha={alpha} was used ({count} successes per seed calibrate it)"


def roc_scores(
    detector: Detector, curves: Sequence[np.ndarray], rollouts: Sequence[Rollout], lengths: dict[str, int]
) -> np.ndarray:
    """Running max of each rollout's detection score at step ``lengths[task] - 1``; NaN for a
    rollout that ended before that step."""
    return np.array([detector.detection_score(c)[: lengths[r.task]].max() if r.length >= lengths[r.task]
                     else math.nan for c, r in zip(curves, rollouts, strict=True)])


def per_task_auc(rollouts: Sequence[Rollout], scores: np.ndarray) -> float:
    """ROC-AUC within each task (failures the positive class; rollouts without a score left out),
    averaged over the tasks that hold both outcomes; NaN when none does."""
    failed = np.array([not r.success for r in rollouts])
    tasks = np.array([r.task for r in rollouts])
    aucs = []
    for task in dict.fromkeys(tasks.tolist()):
        mine = (tasks == task) & np.isfinite(scores)
        if 0 < failed[mine].sum() < mine.sum():
            aucs.append(roc_auc_score(failed[mine], scores[mine]))
    return float(np.mean(aucs)) if aucs else math.nan


def alarm_metrics(
    detector: Detector,
    curves: Sequence[np.ndarray],
    rollouts: Sequence[Rollout],
    thresholds: Sequence[Threshold] | None = None,
) -> dict[str, float]:
    """TPR, TNR, balanced accuracy and mean detection time under ``thresholds``."""
    failed = np.array([not r.success for r in rollouts])
    first = np.array([alarm[0] if len(alarm) else -1
                      for alarm in (np.flatnonzero(detector.alarm_curve(curve, thresholds)) for curve in curves)])
    alarmed = first >= 0
    tpr = float(alarmed[failed].mean()) if failed.any() else math.nan
    tnr = float((~alarmed[~failed]).mean()) if (~failed).any() else math.nan
    detected = np.flatnonzero(alarmed & failed)
    t_det = float(np.mean([(first[i] + 1) / len(curves[i]) for i in detected.tolist()])) if len(detected) else math.nan
    return {"tpr": tpr, "tnr": tnr, "balanced_accuracy": (tpr + tnr) / 2, "detection_time": t_det}


def _swept(
    detector: Detector,
    curves: Sequence[np.ndarray],
    rollouts: Sequence[Rollout],
    calibration_curves: Sequence[np.ndarray],
    alpha: float,
    cp: str,
    seed: int,
) -> dict[str, float]:
    """Alarm metrics at another alpha; NaN where the calibration set is too small for it."""
    try:
        thresholds = detector.recalibrate(calibration_curves, alpha, cp, seed)
    except ValueError:
        return dict.fromkeys(("tpr", "tnr", "balanced_accuracy", "detection_time"), math.nan)
    return alarm_metrics(detector, curves, rollouts, thresholds)


def evaluate_detector(
    name: str,
    rollouts: Sequence[Rollout],
    config: ProtocolConfig,
    detector_config: dict[str, Any] | None = None,
    build: Callable[[], Detector] | None = None,
    fit: Sequence[Rollout] | None = None,
) -> DetectorResult:
    """Fit, calibrate and test detector ``name`` on every seed of the protocol (a fresh one from
    ``build`` per seed where given, e.g. the task prior, which is not in the registry). ``fit``:
    fit every seed's detector on these rollouts instead of the seed's training split (rollouts
    collected in imagination, say); calibration and test stay the seed's real ones. They must be
    of seen tasks only (``ValueError`` otherwise: fitting on an unseen task leaks it)."""
    missing = sorted(set(config.seen_tasks + config.unseen_tasks) - {r.task for r in rollouts})
    if missing:
        raise ValueError(
            f"no rollouts of task(s) {missing}; the rollouts hold {sorted({r.task for r in rollouts})}"
        )
    if fit is not None:
        outside = sorted({r.task for r in fit} - set(config.seen_tasks))
        if outside or not fit:
            raise ValueError(f"the fit rollouts must be of seen tasks ({', '.join(config.seen_tasks)}); they hold "
                             f"{', '.join(outside) if outside else 'none'}")
    lengths = shortest_success_lengths(rollouts)
    medians = median_success_lengths(rollouts)
    episode = {id(r): i for i, r in enumerate(rollouts)}
    result = DetectorResult(name)
    for k, seed in enumerate(config.seeds):
        train, calibration, test = split_rollouts(rollouts, config, seed)
        detector = build() if build is not None else make_detector(name, **(detector_config or {}))
        start = time.perf_counter()
        detector.fit(train if fit is None else fit, seed=seed)
        fit_seconds = time.perf_counter() - start
        calibration_curves = detector.score_rollouts(calibration)
        detector.calibrate(calibration, config.alpha, config.cp, seed=seed)
        metrics: dict[str, Any] = {}
        roc: dict[str, Any] = {}
        sweep: dict[str, Any] = {}
        kept: dict[str, Any] = {}
        steps, score_seconds = 0, 0.0
        for split in SPLITS:
            tested = test[split]
            if not tested:
                continue
            start = time.perf_counter()
            curves = detector.score_rollouts(tested)
            score_seconds += time.perf_counter() - start
            steps += sum(len(c) for c in curves)
            failed = np.array([not r.success for r in tested])
            scores = roc_scores(detector, curves, tested, lengths)
            auc = float(roc_auc_score(failed, scores)) if 0 < failed.sum() < len(failed) else math.nan
            fpr, tpr, _ = roc_curve(failed, scores) if not math.isnan(auc) else ([], [], None)
            metrics[split] = {"roc_auc": auc, "roc_auc_per_task": per_task_auc(tested, scores),
                              **alarm_metrics(detector, curves, tested)}
            roc[split] = (list(map(float, fpr)), list(map(float, tpr)))
            episodes = np.array([episode[id(r)] for r in tested])
            kept[split] = {}
            for window, values in (("shortest_success", scores),
                                   ("median_success", roc_scores(detector, curves, tested, medians))):
                running = np.isfinite(values)
                kept[split][window] = SeedScores(episodes[running], failed[running], values[running])
            sweep[split] = [
                {"alpha": a, **_swept(detector, curves, tested, calibration_curves, a, config.cp, seed)}
                for a in config.sweep
            ]
            if k == 0:
                result.test[split] = list(zip(tested, curves, strict=True))
        score_ms = 1000 * score_seconds / max(steps, 1)
        result.seeds.append(SeedResult(metrics, roc, sweep, fit_seconds, score_ms, kept))
        if k == 0:
            result.detector = detector
    return result
