"""The physics replays behind the open-loop ceilings (benchmarks/studies/physics_replay.py, a helper of
the studies): a replay of the record is the record, and a perturbed one is not."""

import sys
from pathlib import Path

import numpy as np
import pytest

from worldsim.envs.families import make_family
from worldsim.envs.scene import ACTION_SCALE, Scene
from worldsim.envs.tasks import get_task

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))  # the studies' helpers
from physics_replay import PERTURBATIONS, WINDOWS, majority_ceiling, record_pushes, replay  # noqa: E402


@pytest.fixture(scope="module")
def recording():
    return record_pushes(0.03, 24, 0.3, 0.2, np.random.default_rng(0))


def test_recording_ends_where_the_env_would(recording):
    steps = len(recording.actions)
    assert recording.states.shape[:2] == (steps + 1, 24)
    assert recording.success.any() and (~recording.success).any()
    assert (recording.length[recording.success] < steps).all()
    for i in np.flatnonzero(recording.success):  # the state at an episode's end is a success
        qpos = recording.states[recording.length[i], i:i + 1, 1:1 + recording.scene.model.nq]
        assert bool(recording.family.evaluate(qpos).success[0])


@pytest.mark.parametrize("closed_loop", [False, True])
def test_exact_replay_reproduces_the_record(recording, closed_loop):
    rows = np.arange(24)
    start = np.zeros(24, np.int64)
    qpos, success = replay(recording, rows, start, recording.length, closed_loop=closed_loop)
    np.testing.assert_array_equal(success, recording.success)
    ends = recording.states[recording.length.max(), rows, 1:1 + recording.scene.model.nq]
    longest = recording.length == recording.length.max()
    np.testing.assert_allclose(qpos[longest], ends[longest])


def test_a_shifted_cube_ends_elsewhere(recording):
    rows = np.arange(24)
    cube = recording.scene.cube("red")
    exact = replay(recording, rows, np.zeros(24, np.int64), 30)[0]
    shifted = replay(recording, rows, np.zeros(24, np.int64), 30, "shift", 3e-3, np.random.default_rng(1))[0]
    moved = np.linalg.norm(shifted[:, cube.start:cube.start + 2] - exact[:, cube.start:cube.start + 2], axis=1)
    assert (moved > 1e-3).all()  # at least the shift itself survives 30 steps


def test_unknown_perturbation_is_refused(recording):
    with pytest.raises(ValueError, match="perturb='wobble'"):
        replay(recording, np.arange(2), np.zeros(2, np.int64), 1, "wobble")


def test_a_one_vote_majority_is_the_replay_itself(recording):
    out = majority_ceiling(recording, np.arange(24), np.random.default_rng(0), votes=1)
    shifts = {name for name, perturb, _ in PERTURBATIONS if perturb == "shift"}
    assert set(out) == set(WINDOWS) and all(set(out[w]) == shifts for w in WINDOWS)
    for window in WINDOWS:
        for figures in out[window].values():
            assert figures["majority"] == figures["single_replay"]
            low, high = figures["majority_ci"]
            assert low <= figures["majority"] <= high
    assert out["last_8"]["shift_0.01mm"]["majority"] >= 0.9  # a hundredth of a millimetre seldom flips 8 steps


def test_a_finer_control_step_is_the_recordings_own():
    """The action scale lives on the recording's scene: its expert moves by it, the episode limit
    scales with it, and scenes made afterwards keep the library's default."""
    fine = record_pushes(ACTION_SCALE / 2, 2, 0.0, 0.0, np.random.default_rng(0))
    assert fine.scene.action_scale == ACTION_SCALE / 2 and len(fine.actions) == 200
    assert Scene.load().action_scale == ACTION_SCALE
    qpos = fine.states[:, :, 1:1 + fine.scene.model.nq].reshape(-1, fine.scene.model.nq)
    coarse = make_family(get_task("PushCube-v0"), Scene.load()).expert(qpos)
    small = np.abs(coarse[:, :3]) < 0.5  # unclipped at either scale: a half-size step asks twice the action
    assert small.any()
    np.testing.assert_allclose(fine.family.expert(qpos)[:, :3][small], 2 * coarse[:, :3][small])
