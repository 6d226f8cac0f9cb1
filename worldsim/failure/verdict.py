"""Whether a detector's ROC-AUC tells failures from successes: a 95% interval and a verdict.

A detection run tests each seed's detector on that seed's test rollouts; the seeds' test sets are
drawn from the same episodes, so they overlap. :func:`auc_interval` bootstraps the episodes
themselves: each replicate draws the tested failures and the tested successes with replacement
(each outcome on its own, so every replicate keeps the base rate), weights every seed's test
rollouts by how often they were drawn, and averages the seeds' weighted ROC-AUCs. The interval
covers which rollouts were tested; the fitted detectors are held fixed. :func:`auc_verdict` calls
an AUC a result only when the whole interval lies on one side of chance (0.5):

- lower bound above 0.5: the score separates failures from successes;
- upper bound below 0.5: the score is inverted, it ranks successes as riskier; a finding about
  the score, not a detector that works;
- otherwise it cannot be told apart from chance on these rollouts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

BOOTSTRAP = 2000
"""Bootstrap replicates of :func:`auc_interval`."""
LEVEL = 0.95
"""Coverage of the interval."""
CALLS: tuple[str, ...] = ("separates", "below chance", "chance")
""":attr:`AucVerdict.call` values."""


@dataclass(frozen=True)
class SeedScores:
    """One seed's test rollouts: which episodes (positions in the evaluated rollouts), whether each
    failed, and each one's score (rollouts without a score at the compared step are left out)."""

    episodes: np.ndarray
    failed: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        if not len(self.episodes) == len(self.failed) == len(self.scores):
            raise ValueError(f"episodes, failed and scores differ in length: {len(self.episodes)}, "
                             f"{len(self.failed)}, {len(self.scores)}")


@dataclass(frozen=True)
class AucVerdict:
    """A mean ROC-AUC over seeds, its interval, and what it says."""

    auc: float
    interval: tuple[float, float]
    call: str
    """One of :data:`CALLS` ("chance" when the AUC is undefined)."""
    verdict: str
    """The call in words, with the rollouts it rests on."""
    rollouts: int
    """Test rollouts per seed (mean over seeds, rounded)."""
    failures: int
    """Failures among them (mean over seeds, rounded)."""
    seeds: int

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "interval": list(self.interval)}


def weighted_auc(scores_failed: np.ndarray, scores_succeeded: np.ndarray, w_failed: np.ndarray,
                 w_succeeded: np.ndarray) -> np.ndarray:
    """ROC-AUC (Mann-Whitney: the chance that a failure outscores a success, ties half) under
    rollout weights, for a batch of weightings: ``w_failed`` ``(B, F)``, ``w_succeeded`` ``(B, S)``
    -> ``(B,)``; equal to scikit-learn's ``roc_auc_score`` with ``sample_weight``."""
    a, b = np.asarray(scores_failed, float)[:, None], np.asarray(scores_succeeded, float)[None, :]
    pairs = (a > b) + 0.5 * (a == b)
    total = w_failed.sum(axis=1) * w_succeeded.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.einsum("bi,ij,bj->b", w_failed, pairs, w_succeeded) / total


def seed_auc(seed: SeedScores) -> float:
    """One seed's ROC-AUC (failures the positive class); NaN without both outcomes."""
    failed = seed.failed.astype(bool)
    if failed.all() or not failed.any():
        return math.nan
    return float(weighted_auc(seed.scores[failed], seed.scores[~failed], np.ones((1, failed.sum())),
                              np.ones((1, (~failed).sum())))[0])


def auc_interval(seeds: Sequence[SeedScores], replicates: int = BOOTSTRAP, level: float = LEVEL,
                 seed: int = 0) -> tuple[float, tuple[float, float]]:
    """(mean ROC-AUC over seeds, its ``level`` percentile interval) by the module's episode
    bootstrap, ``replicates`` draws from ``np.random.default_rng(seed)`` (deterministic). NaN
    where no seed tested both outcomes."""
    if not 0 < level < 1:
        raise ValueError(f"level={level} must be in (0, 1)")
    if replicates < 1:
        raise ValueError(f"replicates={replicates} must be >= 1")
    aucs = [seed_auc(s) for s in seeds]
    usable = [s for s, a in zip(seeds, aucs, strict=True) if not math.isnan(a)]
    if not usable:
        return math.nan, (math.nan, math.nan)
    labels: dict[int, bool] = {}
    for s in usable:
        labels.update(zip(s.episodes.tolist(), s.failed.astype(bool).tolist(), strict=True))
    rng = np.random.default_rng(seed)
    weights: dict[int, np.ndarray] = {}
    for outcome in (True, False):
        pool = sorted(e for e, f in labels.items() if f == outcome)
        counts = rng.multinomial(len(pool), np.full(len(pool), 1 / len(pool)), size=replicates)
        weights.update({e: counts[:, i].astype(float) for i, e in enumerate(pool)})
    per_seed = []
    for s in usable:
        failed = s.failed.astype(bool)
        w = np.stack([weights[e] for e in s.episodes.tolist()], axis=1)
        per_seed.append(weighted_auc(s.scores[failed], s.scores[~failed], w[:, failed], w[:, ~failed]))
    stacked = np.stack(per_seed)  # a replicate can leave a seed without one outcome: NaN, left out
    finite = np.isfinite(stacked)
    counts = finite.sum(axis=0)
    means = np.where(finite, stacked, 0.0).sum(axis=0)[counts > 0] / counts[counts > 0]
    if not len(means):
        return float(np.mean([a for a in aucs if not math.isnan(a)])), (math.nan, math.nan)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(np.mean([a for a in aucs if not math.isnan(a)])), (float(low), float(high))


def auc_verdict(auc: float, interval: tuple[float, float], rollouts: int, failures: int, seeds: int = 1) -> AucVerdict:
    """The call of the module docstring on ``auc`` and its ``interval``, tested on ``rollouts``
    rollouts per seed of which ``failures`` failed."""
    low, high = interval
    per_seed = " per seed" if seeds > 1 else ""
    if not math.isnan(low) and low > 0.5:
        call, words = "separates", "separates failures from successes"
    elif not math.isnan(high) and high < 0.5:
        call, words = "below chance", ("below chance: the score is inverted, it ranks successes as riskier (a finding "
                                       "about the score, not a detector that works)")
    else:
        call = "chance"
        words = (f"cannot be told apart from chance on {rollouts} rollouts ({failures} failures){per_seed}"
                 if not math.isnan(auc) else f"undefined: the {rollouts} test rollouts{per_seed} hold one outcome only")
    return AucVerdict(auc, (low, high), call, words, rollouts, failures, seeds)


def judge(seeds: Sequence[SeedScores], replicates: int = BOOTSTRAP, seed: int = 0) -> AucVerdict:
    """:func:`auc_interval` and :func:`auc_verdict` on the seeds' test scores."""
    if not seeds:
        raise ValueError("no seed's scores to judge")
    auc, interval = auc_interval(seeds, replicates, seed=seed)
    rollouts = round(float(np.mean([len(s.scores) for s in seeds])))
    failures = round(float(np.mean([s.failed.astype(bool).sum() for s in seeds])))
    return auc_verdict(auc, interval, rollouts, failures, len(seeds))


def cell(v: AucVerdict | dict[str, Any]) -> str:
    """``0.451 (0.33-0.57) chance``: a table cell, the call always beside the figure (``v`` an
    :class:`AucVerdict` or its JSON)."""
    d = v.to_json() if isinstance(v, AucVerdict) else v
    if math.isnan(d["auc"]):
        return "-"
    low, high = d["interval"]
    return f"{d['auc']:.3f} ({low:.2f}-{high:.2f}) {d['call']}"


def sentence(v: AucVerdict | dict[str, Any]) -> str:
    """``cannot be told apart from chance on 25 rollouts (15 failures) per seed (ROC-AUC 0.45, 95%
    CI 0.33-0.57)``: the verdict in words, then the figure it rests on."""
    d = v.to_json() if isinstance(v, AucVerdict) else v
    if math.isnan(d["auc"]):
        return d["verdict"]
    low, high = d["interval"]
    return f"{d['verdict']} (ROC-AUC {d['auc']:.2f}, 95% CI {low:.2f}-{high:.2f})"
