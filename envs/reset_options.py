"""The options of ``reset(options=...)`` every worldsim env takes, checked in one place.

- ``reset_mask``: a bool array of ``num_envs``; only those envs start over (the first reset must
  reset every env);
- ``group_size``: each run of G consecutive reset envs gets the same start (GRPO's groups);
- ``start_state`` and ``episode_step``: one recorded ``state`` observation and elapsed step per
  reset env, to start from that recorded state (backends that can, see
  :attr:`~worldsim.envs.core.BatchedEnv.starts_from_state`);
- ``replay_actions`` and ``replay_steps``: recorded actions ``(count, L, 4)`` that each reset env
  then executes from its ``start_state``, the first ``replay_steps[i]`` of them (default all L),
  counted as elapsed. The ``state`` observation holds no angular or finger velocities, so a
  mid-push state cannot be restarted exactly from it; an episode's first state (at rest) can,
  and replaying the episode's actions from there reaches its later states as recorded.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from worldsim.envs.arrays import ACTION_DIM
from worldsim.envs.observations import STATE_DIM
from worldsim.runtime.validation import check_int


class ResetOptions(NamedTuple):
    """Checked ``reset(options=...)``: the rows to reset (None: every env), the size of the groups
    that share a start, and recorded starts (one ``state`` row and elapsed step per reset env)."""

    mask: np.ndarray | None
    group_size: int
    start_state: np.ndarray | None
    episode_step: np.ndarray | None
    replay_actions: np.ndarray | None
    replay_steps: np.ndarray | None


RESET_OPTIONS = ("reset_mask", "group_size", "start_state", "episode_step", "replay_actions", "replay_steps")


def parse_reset_options(options: dict[str, Any] | None, num_envs: int, needs_reset: bool,
                        max_episode_steps: int) -> ResetOptions:
    """The checked options of ``reset(options=...)``; ``ValueError`` for unknown options and bad
    values (a group size that does not divide the envs being reset, recorded starts of the wrong
    shape or not finite, an elapsed step outside the time limit, a replay that would run past it),
    ``RuntimeError`` for a partial first reset (``needs_reset``)."""
    options = options or {}
    unknown = set(options) - set(RESET_OPTIONS)
    if unknown:
        raise ValueError(f"unknown reset option(s) {sorted(unknown)}; allowed: {', '.join(map(repr, RESET_OPTIONS))}")
    group_size = options.get("group_size", 1)
    check_int("group_size", group_size)
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
    else:
        for name in ("episode_step", "replay_actions", "replay_steps"):
            if name in options:
                raise ValueError(f"{name} belongs to a recorded start: give start_state with it")
    replay_actions, replay_steps = _replay(options, count, episode_step, max_episode_steps)
    return ResetOptions(mask, int(group_size), start_state, episode_step, replay_actions, replay_steps)


def _replay(options: dict[str, Any], count: int, episode_step: np.ndarray | None,
            max_episode_steps: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The checked ``replay_actions`` and ``replay_steps`` (None, None without a replay)."""
    if "replay_actions" not in options:
        if "replay_steps" in options:
            raise ValueError("replay_steps counts steps of replay_actions: give replay_actions with it")
        return None, None
    actions = np.asarray(options["replay_actions"], np.float64)
    if actions.ndim != 3 or actions.shape[0] != count or actions.shape[2] != ACTION_DIM:
        raise ValueError(f"replay_actions must have shape ({count}, L, {ACTION_DIM}), one row of recorded "
                         f"actions per env being reset; got shape {actions.shape}")
    steps = np.asarray(options.get("replay_steps", np.full(count, actions.shape[1], np.int64)))
    if steps.shape != (count,) or not np.issubdtype(steps.dtype, np.integer) \
            or ((steps < 0) | (steps > actions.shape[1])).any():
        raise ValueError(f"replay_steps must hold one int in [0, {actions.shape[1]}] per env being reset; "
                         f"got {steps!r}")
    replayed = np.arange(actions.shape[1]) < steps[:, None]
    if not np.isfinite(actions[replayed]).all():
        raise ValueError("replay_actions must be finite where replayed")
    assert episode_step is not None
    if (episode_step + steps >= max_episode_steps).any():
        raise ValueError(f"episode_step + replay_steps must stay below the time limit, {max_episode_steps}")
    return np.where(replayed[..., None], actions, 0.0), steps
