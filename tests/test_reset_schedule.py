"""Staggered resets spread episode phases over the horizon, and the spread persists."""

import numpy as np
import pytest
from conftest import zero_actions

from worldsim.envs import ResetSchedule
from worldsim.envs.observations import STATE_LAYOUT

N, H = 256, 40


def coverage(phases: np.ndarray, bins: int = 8) -> np.ndarray:
    """Fraction of envs in each of ``bins`` equal slices of the horizon."""
    return np.bincount(phases * bins // H, minlength=bins) / len(phases)


def uniform(phases: np.ndarray, tol: float = 0.05) -> bool:
    return bool(np.abs(coverage(phases) - 1 / 8).max() < tol)


@pytest.mark.parametrize("schedule", ["staggered", "staggered-random", "staggered-warmup"])
@pytest.mark.slow
def test_staggered_phases_cover_the_horizon_and_persist(make_vec, schedule):
    envs = make_vec("PushCube-v0", N, max_episode_steps=H, reset_schedule=schedule,
                    autoreset_mode="SameStep", terminate_on_success=False)
    _, info = envs.reset(seed=0)
    assert uniform(info["episode_step"], tol=0.05 if schedule != "staggered-random" else 0.06)
    for _ in range(3 * H):  # several horizons: per-env autoreset keeps the spread
        _, _, terminated, truncated, info = envs.step(zero_actions(N))
        assert truncated.sum() < N // 4
    assert uniform(info["episode_step"], tol=0.06)


@pytest.mark.slow
def test_synchronous_batch_stays_in_phase(make_vec):
    envs = make_vec("PushCube-v0", N, max_episode_steps=H, autoreset_mode="SameStep",
                    terminate_on_success=False)
    _, info = envs.reset(seed=0)
    assert (info["episode_step"] == 0).all() and not uniform(info["episode_step"])
    for step in range(1, 2 * H + 1):
        _, _, _, truncated, info = envs.step(zero_actions(N))
        assert truncated.all() == (step % H == 0) and truncated.any() == (step % H == 0)
    assert len(np.unique(info["episode_step"])) == 1


def test_warmup_spreads_the_physical_state_too(make_vec):
    moved = {}
    for schedule in ("staggered", "staggered-warmup"):
        envs = make_vec("PushCube-v0", 64, reset_schedule=ResetSchedule("staggered-warmup", warmup_policy="expert")
                        if schedule == "staggered-warmup" else schedule)
        obs, info = envs.reset(seed=3)
        cube = obs[:, STATE_LAYOUT["object_pos"]]
        goal = obs[:, STATE_LAYOUT["goal_pos"]]
        moved[schedule] = np.linalg.norm(cube[:, :2] - goal[:, :2], axis=1)
        phases = info["episode_step"]
        assert phases.max() > 0
    # expert warm-up has pushed later-phase cubes closer to their zones than fresh starts
    assert moved["staggered-warmup"].mean() < moved["staggered"].mean() - 0.02


def test_groups_schedule_uses_evenly_spaced_offsets():
    offsets = ResetSchedule("staggered-groups", groups=4).offsets(100, 100, np.random.default_rng(0))
    assert sorted(np.unique(offsets)) == [0, 25, 50, 75]
    assert (np.bincount(offsets // 25) == 25).all()


def test_masked_reset_starts_at_zero_not_at_an_offset(make_vec):
    envs = make_vec("PushCube-v0", 8, reset_schedule="staggered")
    envs.reset(seed=0)
    mask = np.zeros(8, bool)
    mask[:3] = True
    _, info = envs.reset(options={"reset_mask": mask})
    assert (info["episode_step"][:3] == 0).all()


def test_unknown_schedule_is_rejected_with_the_choices(make_vec):
    with pytest.raises(ValueError, match="allowed: synchronous, staggered"):
        make_vec("PushCube-v0", 2, reset_schedule="stagger")
