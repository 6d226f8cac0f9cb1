"""Is one policy better than another? A paired comparison on the same episodes.

Evaluated with the same seed, two policies run the same episodes: episode k starts from the same
state for both (:func:`worldsim.rollout.slot_seed`). Their outcomes then pair up, and the
difference in success is judged on the episodes where they disagree, which removes the spread
of easy and hard starts from the comparison:

- **McNemar's exact test**: under "neither is better", each discordant episode (one succeeded,
  the other failed) is a fair coin; the two-sided p-value is the binomial test of the one
  policy's discordant wins among all discordant episodes;
- **the difference in success rate** with its 95% (Wald) interval for paired proportions:
  ``d = (b - c) / n``, ``se = sqrt(b + c - (b - c)^2 / n) / n``, ``b``/``c`` the two kinds of
  discordant episodes (Agresti, *Categorical Data Analysis*, 10.1);
- each policy's success rate with its 95% Wilson interval, and the base rate beside them.

A difference is called a gain only when the test rejects "no difference" at 5%. Over several
seeds (each its own base policy, training and test episodes), :func:`over_seeds` gives the
interval a headline needs: the seeds resampled, then each seed's paired episodes, so that a gain
carried by one lucky seed shows a wide interval, as the pooled McNemar test would not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import binomtest

from worldsim.evaluation.evaluate import wilson_interval

LEVEL = 0.05


def paired_comparison(before: Sequence[bool], after: Sequence[bool]) -> dict[str, Any]:
    """Compare ``after``'s per-episode outcomes with ``before``'s on the same episodes (equal
    lengths, episode k the same start in both); ``ValueError`` otherwise. Returns the episode
    count, both success rates with Wilson intervals, the discordant counts, the difference with
    its 95% interval, McNemar's exact p-value and ``significant`` (p < 0.05)."""
    a, b = np.asarray(before, bool), np.asarray(after, bool)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(f"paired outcomes must be two non-empty lists of equal length; got {len(a)} and {len(b)}")
    n = len(a)
    gained, lost = int((b & ~a).sum()), int((a & ~b).sum())
    difference = (gained - lost) / n
    spread = math.sqrt(max(gained + lost - (gained - lost) ** 2 / n, 0.0)) / n
    p_value = binomtest(gained, gained + lost, 0.5).pvalue if gained + lost else 1.0
    return {"episodes": n,
            "before": {"success_rate": float(a.mean()), "ci95": list(wilson_interval(int(a.sum()), n))},
            "after": {"success_rate": float(b.mean()), "ci95": list(wilson_interval(int(b.sum()), n))},
            "only_after_succeeded": gained, "only_before_succeeded": lost,
            "difference": difference, "difference_ci95": [difference - 1.96 * spread, difference + 1.96 * spread],
            "p_value": float(p_value), "significant": bool(p_value < LEVEL)}


def verdict(comparison: dict[str, Any], before: str = "before", after: str = "after") -> str:
    """One sentence a careful reader can take as it stands."""
    c = comparison
    d, (low, high) = 100 * c["difference"], (100 * x for x in c["difference_ci95"])
    sign = "+" if d >= 0 else ""
    head = (f"{after} {100 * c['after']['success_rate']:.1f}% vs {before} {100 * c['before']['success_rate']:.1f}% "
            f"on the same {c['episodes']} episodes: {sign}{d:.1f} points (95% CI {low:+.1f} to {high:+.1f}), "
            f"McNemar p = {c['p_value']:.3g}")
    if not c["significant"]:
        return head + ": not a significant difference."
    return head + (f": a significant gain for {after}." if d > 0 else f": a significant loss for {after}.")


def over_seeds(pairs: Sequence[tuple[Sequence[bool], Sequence[bool]]], draws: int = 10_000,
               seed: int = 0) -> dict[str, Any]:
    """The mean over seeds of ``after``'s gain over ``before`` (each pair: one seed's outcomes on its
    paired episodes) with its 95% bootstrap interval: resample the seeds with replacement, then
    each drawn seed's episodes (pairs kept together). Also each seed's own difference."""
    if not pairs:
        raise ValueError("over_seeds needs at least one seed's paired outcomes")
    seeds = []
    for before, after in pairs:
        a, b = np.asarray(before, bool), np.asarray(after, bool)
        if a.shape != b.shape or a.ndim != 1 or not len(a):
            raise ValueError(f"paired outcomes must be two non-empty lists of equal length; got {len(a)} and {len(b)}")
        seeds.append(b.astype(float) - a.astype(float))
    rng = np.random.default_rng(seed)
    means = np.empty(draws)
    for k in range(draws):
        drawn = rng.integers(len(seeds), size=len(seeds))
        means[k] = np.mean([seeds[s][rng.integers(len(seeds[s]), size=len(seeds[s]))].mean() for s in drawn])
    per_seed = [float(d.mean()) for d in seeds]
    return {"difference": float(np.mean(per_seed)), "ci95": [float(x) for x in np.percentile(means, [2.5, 97.5])],
            "per_seed": per_seed, "seeds": len(seeds)}


READINGS: dict[str, bool] = {"mean": True, "sampled": False}
"""How a stochastic policy is read (the value: ``deterministic``): its mean action, or sampled actions."""


def better_reading(mean_successes: float, sampled_successes: float) -> str:
    """The reading ("mean" or "sampled") with more successes on the same episodes; the mean action
    on a tie. Choose it on episodes other than those that report the gain."""
    return "sampled" if sampled_successes > mean_successes else "mean"
