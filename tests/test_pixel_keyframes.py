"""Keyframes from pixels: without ``state``, the motion-onset and failure keyframes read where the
world model's keypoint detector finds the task object and its goal in the real frames."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from worldsim.envs.observations import ENTITIES, STATE_LAYOUT, entity_positions, task_entities
from worldsim.envs.tasks import get_task
from worldsim.world_models import EpisodeBank, WorldModel
from worldsim.world_models.env import ImaginedVectorEnv
from worldsim.world_models.keyframes import (
    DETECTED_PERSISTENCE,
    KeyframeRule,
    detected_positions,
    select_keyframes,
    table_pixel,
)


class ReplayDetector:
    """A perfect detector: the recorded entities' pixel positions of ``bank``'s rows, handed out
    in row order, batch after batch (as :func:`detected_positions` reads the frames)."""

    def __init__(self, bank: EpisodeBank) -> None:
        self.pixels, self.next, self.batches = torch.from_numpy(bank.entity_pixels), 0, 0

    def __call__(self, latent: torch.Tensor) -> torch.Tensor:
        out = self.pixels[self.next:self.next + len(latent)]
        self.next += len(latent)
        self.batches += 1
        return out


def task_positions(bank: EpisodeBank) -> np.ndarray:
    """The task object's and goal's world positions ``(rows, 2, 3)`` from the bank's state."""
    return entity_positions(bank.state)[:, list(task_entities(get_task("PushCube-v0")))]


@pytest.mark.parametrize("task", ["PushCube-ToOrange-v0", "PickPlaceCube-v0", "StackCube-YellowOnRed-v0",
                                  "ReachZone-v0"])
def test_task_entities_are_the_states_object_and_goal(task):
    env = gym.make_vec(f"worldsim/{task}", num_envs=3, obs_mode="state")
    state, _ = env.reset(seed=4)
    env.close()
    obj, goal = task_entities(get_task(task))
    where = entity_positions(state)
    np.testing.assert_allclose(where[:, obj, :2], state[:, STATE_LAYOUT["object_pos"]][:, :2], atol=1e-6)
    np.testing.assert_allclose(where[:, goal, :2], state[:, STATE_LAYOUT["goal_pos"]][:, :2], atol=1e-6)
    assert [ENTITIES[i] for i in task_entities(get_task("PushCube-Green-v0"))] == ["green_cube", "blue_zone"]
    assert [ENTITIES[i] for i in task_entities(get_task("PickPlaceCube-ToBlue-v0"))] == ["red_cube", "blue_zone"]


def test_positions_from_state_give_the_state_paths_keyframes(push_episodes):
    bank = EpisodeBank(push_episodes)
    rule = KeyframeRule(lead=2)
    by_state = select_keyframes(bank, rule)
    by_positions = select_keyframes(bank.without_state(), rule, task_positions(bank), detected=False)
    assert by_state.counts()["motion_onset"] > 0
    for name in ("episode", "step", "weight", "kind"):
        np.testing.assert_array_equal(getattr(by_positions, name), getattr(by_state, name))
    # without state or positions, PushCube (whose gripper never toggles) has no keyframe at all
    assert len(select_keyframes(bank.without_state(), rule)) == 0
    with pytest.raises(ValueError, match=r"positions has shape \(3, 2, 3\); expected \(\d+, 2, 3\)"):
        select_keyframes(bank, rule, np.zeros((3, 2, 3)))


def test_detected_positions_put_the_detectors_pixels_back_on_the_table(push_episodes):
    bank = EpisodeBank(push_episodes)
    detector = ReplayDetector(bank)
    found = detected_positions(bank.without_state(), detector, patch=4, batch_size=64)
    assert detector.batches == -(-len(bank.images) // 64) and found.shape == (len(bank.images), 2, 3)
    # the zone, and the cube where it rests (a pushed cube tips up), come back where they were
    truth = task_positions(bank)
    resting = np.abs(truth[:, 0, 2] - found[:, 0, 2]) < 1e-3
    assert resting.mean() > 0.5
    np.testing.assert_allclose(found[resting], truth[resting], atol=2e-3)
    np.testing.assert_allclose(found[:, 1], truth[:, 1], atol=1e-5)
    # the detected rule: 1.5 pixels' worth of table (a pixel spans about 1.7 cm at 32x32), held for 2 steps
    assert 0.015 < table_pixel(bank) < 0.018 and DETECTED_PERSISTENCE == 2
    rule = KeyframeRule(lead=2)
    detected = select_keyframes(bank.without_state(), rule, found)
    by_state = select_keyframes(bank, rule)
    onsets = {e: t for e, t, k in zip(detected.episode, detected.step, detected.kind, strict=True) if k == 1}
    truth = {e: t for e, t, k in zip(by_state.episode, by_state.step, by_state.kind, strict=True) if k == 1}
    assert len(onsets) > 0 and set(onsets) <= set(truth)
    assert all(0 <= onsets[e] - truth[e] <= 6 for e in onsets)  # a larger threshold: a little later
    # one frame where the detector jumps (the gripper hides the cube) is no motion onset
    jumpy = task_positions(bank)
    for j in range(len(bank)):
        rows = bank.index.episode_rows(j, "image")
        jumpy[rows] = jumpy[rows.start]
    jumpy[bank.obs_start[0] + 2, 0, 0] += 0.1
    assert select_keyframes(bank.without_state(), rule, jumpy).counts()["motion_onset"] == 0
    assert select_keyframes(bank.without_state(), rule, jumpy, detected=False).counts()["motion_onset"] == 1
    with pytest.raises(ValueError, match=r"detector gave positions of shape \(2, 2\)"):
        detected_positions(bank, lambda latent: torch.zeros(len(latent), 2, 2), patch=4)


def test_the_pixels_rung_finds_keyframes_with_the_models_detector(push_episodes, untrained_world_model):
    model = WorldModel.from_pretrained(untrained_world_model)
    assert model.config.state_supervision
    model.judge.success_head.locate = ReplayDetector(EpisodeBank(push_episodes, tasks=["PushCube-v0"]))
    env = ImaginedVectorEnv("PushCube-v0", 2, world_model=model, keyframes=push_episodes, rung="pixels",
                            device="cpu")
    assert env.bank.state is None and env.keyframe_source == "detector" and env.starts.source == "detector"
    counts = env.keyframes.counts()
    assert counts["motion_onset"] > 0 and counts["gripper"] == 0
    env.close()


def test_the_video_rung_keeps_gripper_events_only(push_episodes, untrained_world_model):
    """A model trained without state has a detector nobody supervised: it is not asked."""
    model = WorldModel(WorldModel.from_pretrained(untrained_world_model).config.without_state())
    assert not model.config.state_supervision
    calls = []
    model.judge.success_head.locate = lambda latent: calls.append(len(latent))
    env = ImaginedVectorEnv("PushCube-v0", 2, world_model=model, keyframes=push_episodes, rung="video",
                            device="cpu")
    assert env.keyframe_source == "gripper" and calls == []
    assert env.keyframes.counts() == {"gripper": 0, "motion_onset": 0, "failure": 0}
    env.close()
