"""Reset schedules: where in the task horizon each env of a batch starts.

With thousands of envs and short PPO rollouts, envs that all start together fill every batch
with the same phase of the episode. A staggered schedule spreads them over the horizon at the
first full reset; with a fixed time limit and per-env autoreset the spread then persists.

Schedules (``reset_schedule=`` on the vector env):

``"synchronous"``
    every env starts at step 0.
``"staggered"`` (time offset, evenly spaced)
    env i's elapsed-step counter starts at ``floor(i * H / N)`` over a random permutation of
    the envs: the first episode is truncated early, the physical state is a fresh start. The
    phases cover ``[0, H)`` exactly uniformly.
``"staggered-random"``
    the counter starts uniform at random in ``[0, H)`` (rsl_rl's ``init_at_random_ep_len``).
``"staggered-warmup"``
    env i is physically advanced ``floor(i * H / N)`` steps (random permutation) by a warm-up
    policy, counting as elapsed steps, so the state and not only the counter is spread. The
    warm-up policy is ``"random"`` (uniform actions) or ``"expert"`` (the scripted expert with
    Gaussian action noise, so warm-up states look like task progress). An env that ends its
    episode during warm-up restarts and keeps counting from 0.
``"staggered-groups"``
    envs are split into ``groups`` equal groups; group g starts at ``floor(g * H / G)``.

Offsets apply only to a full reset (no ``reset_mask``); later per-env resets start at 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from worldsim.runtime.validation import check_int

Kind = Literal["synchronous", "staggered", "staggered-random", "staggered-warmup", "staggered-groups"]
KINDS: tuple[str, ...] = (
    "synchronous", "staggered", "staggered-random", "staggered-warmup", "staggered-groups",
)
WARMUP_POLICIES: tuple[str, ...] = ("random", "expert")


@dataclass(frozen=True)
class ResetSchedule:
    """A reset schedule; build one from its name with :meth:`parse`.

    Attributes:
        kind: one of :data:`KINDS`.
        groups: number of groups for ``staggered-groups``.
        warmup_policy: ``random`` or ``expert``, for ``staggered-warmup``.
        warmup_noise: std of the Gaussian noise added to expert warm-up actions.
    """

    kind: Kind = "synchronous"
    groups: int = 4
    warmup_policy: Literal["random", "expert"] = "random"
    warmup_noise: float = 0.3

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"reset_schedule={self.kind!r} is not a schedule; allowed: {', '.join(KINDS)}")
        check_int("groups", self.groups)
        if self.warmup_policy not in WARMUP_POLICIES:
            raise ValueError(f"warmup_policy={self.warmup_policy!r}; allowed: {', '.join(WARMUP_POLICIES)}")

    @classmethod
    def parse(cls, value: str | ResetSchedule) -> ResetSchedule:
        return value if isinstance(value, ResetSchedule) else cls(kind=value)  # type: ignore[arg-type]

    def offsets(self, num_envs: int, horizon: int, rng: np.random.Generator) -> np.ndarray:
        """Starting elapsed-step counter of each env (int64, in ``[0, horizon)``)."""
        if self.kind == "synchronous":
            return np.zeros(num_envs, dtype=np.int64)
        if self.kind == "staggered-random":
            return rng.integers(0, horizon, num_envs)
        if self.kind == "staggered-groups":
            group = rng.permutation(num_envs) % self.groups
            return (group * horizon) // self.groups
        # evenly spaced phases, assigned to envs in random order
        return (rng.permutation(num_envs) * horizon) // num_envs

    @property
    def physical(self) -> bool:
        """Whether the offsets are reached by stepping the physics (warm-up)."""
        return self.kind == "staggered-warmup"
