"""Conformal calibration of failure-score thresholds on successful rollouts.

Both calibrators take the score curves ``s_t`` of successful calibration rollouts and return a
threshold curve ``delta_t`` such that, for a new successful rollout exchangeable with them,
``P(s_t > delta_t for some t) <= alpha``: the false-alarm rate on successes is at most
``alpha`` (split conformal prediction on the running maximum).

- :func:`constant_threshold`: one threshold for every step, the conformal quantile of the
  rollouts' maximum scores.
- :func:`functional_threshold`: a time-varying one-sided band (functional CP, as in SAFE):
  the successes are split in two; the first part gives the mean curve ``mu_t`` and the
  modulation ``m_t`` (the standard deviation curve, floored); on the second part each
  rollout's nonconformity is ``max_t (s_t - mu_t) / m_t`` and ``h`` is their conformal
  quantile; ``delta_t = mu_t + h m_t``. Early steps, where successes and failures look alike,
  get a tight band and later ones a wider band, so alarms come earlier than with one constant.

Rollouts have different lengths: curve statistics at step ``t`` use the fitting rollouts still
running at ``t``, computed only while at least a quarter of them run and extended with their
last value beyond (and past the longest calibration rollout); the modulation is floored at a
tenth of its median. Neither changes the guarantee, which only needs the band to be fixed
before the held-out part is looked at.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CP_METHODS: tuple[str, ...] = ("functional", "constant")
MIN_MODULATION = 1e-6
MIN_ALIVE_FRACTION = 0.25
"""The band's shape comes from the steps where at least this share of the fitting rollouts run."""
SPREAD_FLOOR = 0.1
"""The modulation is at least this fraction of its median: a step where the fitting rollouts
happen to agree must not make every other rollout's residual there enormous."""


@dataclass(frozen=True)
class Threshold:
    """A calibrated threshold curve ``values[t]`` (constant past its end)."""

    values: np.ndarray
    alpha: float
    method: str

    def at(self, steps: np.ndarray | int) -> np.ndarray:
        """The threshold at episode step(s) ``steps`` (0-based)."""
        return self.values[np.minimum(np.asarray(steps), len(self.values) - 1)]

    def to_json(self) -> dict:
        return {"values": self.values.tolist(), "alpha": self.alpha, "method": self.method}

    @classmethod
    def from_json(cls, data: dict) -> Threshold:
        return cls(np.asarray(data["values"], dtype=np.float64), float(data["alpha"]), str(data["method"]))


def check_alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha < 1.0:
        raise ValueError(
            f"alpha={alpha!r} must be a number in (0, 1): the allowed false-alarm rate on successes"
        )
    return float(alpha)


def conformal_quantile(values: np.ndarray, alpha: float) -> float:
    """The ``ceil((n + 1)(1 - alpha))``-th smallest of ``n`` values (split-CP quantile);
    ``ValueError`` when ``n`` is too small for that rank to exist."""
    n = len(values)
    rank = math.ceil((n + 1) * (1.0 - alpha))
    if rank > n:
        raise ValueError(
            f"alpha={alpha} needs at least {math.ceil(1.0 / alpha) - 1} successful calibration "
            f"rollouts (here {n}); collect more rollouts or raise alpha"
        )
    return float(np.sort(values)[rank - 1])


def enough_successes(count: int, alpha: float, split: bool, fit_fraction: float = 0.5) -> bool:
    """Whether ``count`` successful rollouts calibrate at ``alpha``: the conformal quantile's rank
    exists among them or, with ``split`` (functional CP, joint bands), among those left after a
    ``fit_fraction`` share shaped the band."""
    held = count - max(1, int(round(fit_fraction * count))) if split else count
    return held >= 1 and math.ceil((held + 1) * (1.0 - alpha)) <= held


def needed_successes(alpha: float, split: bool, fit_fraction: float = 0.5) -> int:
    """The fewest successful calibration rollouts that calibrate at ``alpha``."""
    count = 1
    while not enough_successes(count, alpha, split, fit_fraction):
        count += 1
    return count


def smallest_alpha(count: int, split: bool, fit_fraction: float = 0.5) -> float | None:
    """The smallest alpha, in hundredths up to 0.5, at which ``count`` successes calibrate (None:
    not even 0.5)."""
    return next((a / 100 for a in range(1, 51) if enough_successes(count, a / 100, split, fit_fraction)), None)


def check_calibration_count(count: int, alpha: float, split: bool, fit_fraction: float = 0.5) -> None:
    """Raise the ``ValueError`` that calibrating on ``count`` successful rollouts at ``alpha`` would
    raise, before any rollout is scored: the conformal quantile needs enough of them, and with
    ``split`` (functional CP, joint bands) only those left after a ``fit_fraction`` share shaped
    the band count."""
    if count == 0:
        raise ValueError("the calibration set holds no successful rollouts; conformal calibration needs "
                         "successes (check the seen tasks and the split)")
    if not split:
        conformal_quantile(np.zeros(count), alpha)
        return
    if not enough_successes(count, alpha, split, fit_fraction):
        n_fit = max(1, int(round(fit_fraction * count)))
        raise ValueError(
            f"functional CP at alpha={alpha} needs at least {needed_successes(alpha, split, fit_fraction)} "
            f"successful calibration rollouts (here {count}: {n_fit} shape the band, {count - n_fit} "
            f"calibrate it); collect more rollouts, raise alpha or use constant CP"
        )


def _padded(curves: Sequence[np.ndarray]) -> np.ndarray:
    """Curves of different lengths as a ``(n, T_max)`` array with NaN past each end."""
    out = np.full((len(curves), max(len(c) for c in curves)), np.nan)
    for i, curve in enumerate(curves):
        out[i, : len(curve)] = curve
    return out


def _check_curves(curves: Sequence[np.ndarray]) -> list[np.ndarray]:
    if len(curves) == 0:
        raise ValueError(
            "the calibration set holds no successful rollouts; conformal calibration needs "
            "successes (check the seen tasks and the split)"
        )
    curves = [np.asarray(c, dtype=np.float64) for c in curves]
    for i, curve in enumerate(curves):
        if curve.ndim != 1 or len(curve) == 0 or not np.isfinite(curve).all():
            raise ValueError(f"calibration score curve {i} must be a non-empty 1-D array of finite numbers")
    return curves


def constant_threshold(curves: Sequence[np.ndarray], alpha: float) -> Threshold:
    """One threshold: the conformal quantile of each successful rollout's maximum score."""
    alpha = check_alpha(alpha)
    curves = _check_curves(curves)
    value = conformal_quantile(np.array([c.max() for c in curves]), alpha)
    return Threshold(np.array([value]), alpha, "constant")


def functional_threshold(
    curves: Sequence[np.ndarray],
    alpha: float,
    rng: np.random.Generator | None = None,
    fit_fraction: float = 0.5,
) -> Threshold:
    """A time-varying one-sided band ``mu_t + h m_t`` (see the module docstring); ``rng``
    shuffles the split of the successes into the curve-fitting and the calibration part."""
    return joint_functional_thresholds([curves], alpha, rng, fit_fraction)[0]


def joint_functional_thresholds(
    components: Sequence[Sequence[np.ndarray]],
    alpha: float,
    rng: np.random.Generator | None = None,
    fit_fraction: float = 0.5,
    time_varying: bool = True,
) -> list[Threshold]:
    """Functional bands ``mu_t^c + h m_t^c`` for several score components of the same
    successful rollouts (``components[c][i]``: component ``c`` of rollout ``i``) with ONE shared
    ``h``, calibrated on ``max_t min_c (s_t^c - mu_t^c) / m_t^c``: the false-alarm rate of the
    rule "every component over its band" is then at most ``alpha`` itself. Calibrating each
    component at ``alpha`` separately also bounds it by ``alpha``, but far more loosely, so the
    conjunction alarms much less often than it may. ``time_varying=False``: constant bands
    (each component's mean and spread over all steps of the fitting rollouts)."""
    alpha = check_alpha(alpha)
    components = [_check_curves(curves) for curves in components]
    count = len(components[0])
    check_calibration_count(count, alpha, split=True, fit_fraction=fit_fraction)
    order = (rng or np.random.default_rng(0)).permutation(count)
    n_fit = max(1, int(round(fit_fraction * count)))
    fit_ids, held_ids = order[:n_fit], order[n_fit:]
    bands = []
    length = max(len(components[0][i]) for i in range(count))
    for curves in components:
        fit = _padded([curves[i] for i in fit_ids])
        # Curve statistics only where enough fitting rollouts are still running: a mean and
        # spread from one or two long rollouts would make the band (and h) arbitrary.
        alive = np.isfinite(fit).sum(axis=0)
        reliable = max(1, int(np.searchsorted(-alive, -max(2, MIN_ALIVE_FRACTION * n_fit), side="right")))
        mu = np.nanmean(fit[:, :reliable], axis=0)
        spread = np.nanstd(fit[:, :reliable], axis=0)
        if not time_varying:
            mu, spread = np.full(1, np.nanmean(fit)), np.full(1, np.nanstd(fit))
        modulation = np.maximum(spread, max(MIN_MODULATION, SPREAD_FLOOR * float(np.median(spread))))
        bands.append((_stretch(mu, length), _stretch(modulation, length)))
    residuals = np.array([
        np.max(np.min([(curves[i] - mu[: len(curves[i])]) / m[: len(curves[i])]
                       for curves, (mu, m) in zip(components, bands, strict=True)], axis=0))
        for i in held_ids])
    h = conformal_quantile(residuals, alpha)
    method = "functional" if time_varying else "constant"
    return [Threshold(mu + h * m, alpha, method) for mu, m in bands]


def _stretch(curve: np.ndarray, length: int) -> np.ndarray:
    return np.concatenate([curve, np.full(max(0, length - len(curve)), curve[-1])])


def calibrate(
    curves: Sequence[np.ndarray],
    alpha: float,
    method: str = "functional",
    rng: np.random.Generator | None = None,
) -> Threshold:
    """Calibrate with ``method`` (``functional`` or ``constant``)."""
    check_method(method)
    if method == "functional":
        return functional_threshold(curves, alpha, rng)
    return constant_threshold(curves, alpha)


def check_method(method: str) -> None:
    if method not in CP_METHODS:
        raise ValueError(f"cp method {method!r} is unknown; allowed: {', '.join(CP_METHODS)}")


def calibrate_components(
    components: Sequence[Sequence[np.ndarray]],
    alpha: float,
    method: str = "functional",
    rng: np.random.Generator | None = None,
    joint: bool = False,
) -> list[Threshold]:
    """One threshold per score component (``components[c][i]``: component ``c`` of successful
    rollout ``i``): each calibrated at ``alpha`` on its own, or, with ``joint``, bands sharing one
    ``h`` (:func:`joint_functional_thresholds`; constant bands for ``method="constant"``). Joint
    bands split the successes (half shape the bands); constant CP never needs that split, so with
    too few successes for it each component is calibrated at ``alpha`` on all of them instead
    (the AND rule's false-alarm rate stays <= alpha, it just alarms less)."""
    check_method(method)
    functional = method == "functional"
    if joint and len(components) > 1 and (functional or enough_successes(len(components[0]), alpha, split=True)):
        return joint_functional_thresholds(components, alpha, rng, time_varying=functional)
    return [calibrate(curves, alpha, method, rng) for curves in components]
