"""The judges of the outcome_judges study (benchmarks/studies/outcome_judges.py): the zone geometry it
widens is the push rule's own, a window is judged on its steps after the start, and the dynamics rolled
without frames imagine what a replay imagines."""

import sys
from pathlib import Path

import numpy as np
import torch

from worldsim.data.collect import collect_episodes
from worldsim.envs.families.base import RESTING_TOLERANCE
from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.observations import ENTITIES
from worldsim.envs.scene import CUBE_HALF
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.world_models import EpisodeBank, WorldModel, build_config
from worldsim.world_models.data import image_camera
from worldsim.world_models.metrics import window_max
from worldsim.world_models.outcome import TaskRules
from worldsim.world_models.replay import open_loop

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))  # the study scripts
from outcome_judges import best_cut, imagined_states, judge_features, zone_excess  # noqa: E402


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


def test_the_dynamics_alone_imagine_the_positions_and_judgements_of_a_replay(tmp_path: Path) -> None:
    path = tmp_path / "push.h5"
    collect_episodes(["PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.3, seed=3)), 3, path,
                     num_envs=3, image_size=32, progress=False)
    bank = EpisodeBank(path)
    torch.manual_seed(0)
    model = WorldModel(build_config(None, image_size=32, context=2, tasks=("PushCube-v0",),
                                    frames={"channels": (16, 32), "norm_groups": 8, "cond_hidden": 32},
                                    proprio={"hidden": 32}, objects={"hidden": 32, "carry": False},
                                    judge={"detector_channels": 8, "hidden": 32, "outcome": "head"}))
    model.objects.contact_gate = lambda points, heights, tcp: torch.ones_like(points[:, -1, :, 0])  # every cube moves
    model.set_normalization(bank.proprio.mean(axis=0), bank.proprio.std(axis=0))
    with torch.no_grad():  # an untrained pathway moves nothing; this one moves every cube
        model.objects.net[-1].weight.normal_(0.0, 0.05)
    model.eval()
    episodes, starts, horizon = np.arange(3), np.array([0, 4, int(bank.lengths[2]) - 2]), 4
    # from the recorded objects, as imagined_states starts
    run = open_loop(model, bank, episodes, starts, horizon, generator=torch.Generator().manual_seed(0),
                    imagination=ImaginationConfig(rung="sim-seeded"))
    features, head, success, valid = imagined_states(model, bank, episodes, starts, horizon)
    assert features.shape[:2] == (3, horizon) and run.points is not None
    points = (features[..., :2 * len(ENTITIES)].reshape(3, horizon, len(ENTITIES), 2) + 1) / 2 * 32
    np.testing.assert_allclose(points.numpy(), run.points[:, 1:], atol=1e-4)
    # what judge_windows reads from a replay is what imagined_states rolls without frames
    assert run.heights is not None
    from_replay = judge_features(model, torch.from_numpy(run.points[:, 1:]).float().flatten(0, 1),
                                 torch.from_numpy(run.heights[:, 1:]).float().flatten(0, 1),
                                 model.scale.normalize(torch.from_numpy(run.imagined_proprio[:, 1:]).flatten(0, 1)),
                                 torch.zeros(3 * horizon, dtype=torch.long))
    np.testing.assert_allclose(from_replay.reshape(3, horizon, -1).numpy(), features.numpy(), atol=1e-4)
    assert np.abs(run.points[:, -1, :3] - run.points[:, 0, :3]).max() > 0.1  # the cubes did move
    np.testing.assert_allclose(head.numpy(), run.success_prob[:, 1:], atol=1e-5)
    np.testing.assert_array_equal(valid.numpy(), run.valid[:, 1:])
    assert not valid[2, -1] and valid[2, 1]  # the last window runs past its episode's end
    np.testing.assert_array_equal(success.numpy(), run.success[:, 1:] & run.valid[:, 1:])
