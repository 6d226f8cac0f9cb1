"""The options of ``reset(options=...)`` every worldsim env takes, checked in one place.

- ``reset_mask``: a bool array of ``num_envs``; only those envs start over (the first reset must
  reset every env);
- ``group_size``: each run of G consecutive reset envs gets the same start (GRPO's groups);
- ``start_state`` and ``episode_step``: one recorded ``state`` observation and elapsed step per
  reset env, to start from that recorded state (backends that can, see
  :attr:`~worldsim.envs.core.BatchedEnv.starts_from_state`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from worldsim.envs.observations import STATE_DIM


class ResetOptions(NamedTuple):
    """Checked ``reset(options=...)``: the rows to reset (None: every env), the size of the groups
    that share a start, and recorded starts (one ``state`` row and elapsed step per reset env)."""

    mask: np.ndarray | None
    group_size: int
    start_state: np.ndarray | None
    episode_step: np.ndarray | None


RESET_OPTIONS = ("reset_mask", "group_size", "start_state", "episode_step")


def parse_reset_options(options: dict[str, Any] | None, num_envs: int, needs_reset: bool,
                        max_episode_steps: int) -> ResetOptions:
    """The checked options of ``reset(options=...)``; ``ValueError`` for unknown options and bad
    values (a group size that does not divide the envs being reset, recorded starts of the wrong
    shape or not finite, an elapsed step outside the time limit), ``RuntimeError`` for a partial
    first reset (``needs_reset``)."""
    options = options or {}
    unknown = set(options) - set(RESET_OPTIONS)
    if unknown:
        raise ValueError(f"unknown reset option(s) {sorted(unknown)}; allowed: {', '.join(map(repr, RESET_OPTIONS))}")
    group_size = options.get("group_size", 1)
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise ValueError(f"group_size={group_size!r} must be an int >= 1")
    mask = None
    if "reset_mask" in options:
        mask = np.asarray(options["reset_mask"])
        if mask.dtype != np.bool_ or mask.shape != (num_envs,):
            raise ValueError(f"reset_mask must be a bool array of shape ({num_envs},); "
                             f"got dtype {mask.dtype} and shape {mask.shape}")
        if needs_reset and not mask.all():
            raise RuntimeError("the first reset() must reset every env; call reset() without reset_mask")
    count = num_envs if mask is None else int(mask.sum())
    if count % group_size:
        raise ValueError(f"group_size={group_size} does not divide the {count} envs being reset")
    start_state = episode_step = None
    if "start_state" in options:
        start_state = np.asarray(options["start_state"], np.float64)
        if start_state.shape != (count, STATE_DIM) or not np.isfinite(start_state).all():
            raise ValueError(f"start_state must hold one finite state row per env being reset, shape "
                             f"({count}, {STATE_DIM}); got shape {start_state.shape}")
        if group_size != 1:
            raise ValueError("start_state gives every reset env its own start; it takes no group_size")
        episode_step = np.asarray(options.get("episode_step", np.zeros(count, np.int64)))
        if episode_step.shape != (count,) or not np.issubdtype(episode_step.dtype, np.integer) \
                or ((episode_step < 0) | (episode_step >= max_episode_steps)).any():
            raise ValueError(f"episode_step must hold one int in [0, {max_episode_steps}) per env being reset; "
                             f"got {episode_step!r}")
    elif "episode_step" in options:
        raise ValueError("episode_step is the elapsed step of a recorded start: give start_state with it")
    return ResetOptions(mask, int(group_size), start_state, episode_step)
