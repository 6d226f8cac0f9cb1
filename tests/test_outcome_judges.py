"""The judges of benchmarks/outcome_judges.py: the zone geometry it widens is the push rule's own,
and a window is judged on its steps after the start."""

import sys
from pathlib import Path

import numpy as np
import torch

from worldsim.data.collect import collect_episodes
from worldsim.envs.families.base import RESTING_TOLERANCE
from worldsim.envs.observations import ENTITIES
from worldsim.envs.scene import CUBE_HALF
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.world_models import EpisodeBank
from worldsim.world_models.data import image_camera
from worldsim.world_models.metrics import window_max
from worldsim.world_models.outcome import TaskRules

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from outcome_judges import best_cut, zone_excess  # noqa: E402


def test_the_zone_band_and_the_resting_check_are_the_push_rule_on_recorded_frames(tmp_path: Path) -> None:
    path = tmp_path / "push.h5"
    collect_episodes(["PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.3, seed=5)), 4, path,
                     num_envs=4, image_size=32, progress=False)
    bank = EpisodeBank(path)
    where = TaskRules(("PushCube-v0",), image_camera(32, 32)).positions(
        torch.from_numpy(bank.entity_pixels).double(), torch.from_numpy(bank.entity_heights).double()).numpy()
    cube, zone = ENTITIES.index("red_cube"), ENTITIES.index("blue_zone")
    on_zone = zone_excess(where[:, cube, :2], where[:, zone, :2]) <= 0
    resting = where[:, cube, 2] < CUBE_HALF + RESTING_TOLERANCE
    assert bank.success.sum() >= 2
    np.testing.assert_array_equal(on_zone & resting, bank.success)


def test_a_window_is_judged_on_its_valid_steps_after_the_start() -> None:
    per_step = np.array([[9.0, 0.2, 0.4, 7.0], [9.0, 0.1, -1.0, 0.3]])
    valid = np.array([[True, True, True, False], [True, True, True, True]])  # the first ends after 2 steps
    np.testing.assert_array_equal(window_max(per_step, valid), [0.4, 0.3])


def test_the_best_cut_is_the_most_accurate_one() -> None:
    scores = np.array([0.1, 0.2, 0.32, 0.5, 0.9])
    real = np.array([False, False, False, True, True])
    best = best_cut(scores, real)
    assert 0.32 < best["cut"] <= 0.5 and best["accuracy"] == 1.0 and best["episodes"] == 5
