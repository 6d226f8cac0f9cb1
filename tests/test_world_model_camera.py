"""A world model's camera: the scene's, or fitted to the cubes seen in its training frames."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import noisy_push_episodes, small_config

from worldsim.envs.camera import PinholeCamera
from worldsim.envs.observations import entity_positions
from worldsim.world_models import WorldModel
from worldsim.world_models.camera import cube_colours, cube_sightings, fitted_camera
from worldsim.world_models.data import EpisodeBank, image_camera


def table_points(n: int, seed: int = 0, height: float = 0.02) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.c_[rng.uniform(-0.25, 0.25, (n, 2)), np.full(n, height)]


def test_a_camera_is_recovered_from_points_on_one_plane():
    scene = image_camera(64, 64)
    points = table_points(40)
    exact = PinholeCamera.fit(points, scene.project(points), 64, 64)
    np.testing.assert_allclose(exact.position, scene.position, atol=1e-6)
    np.testing.assert_allclose(exact.rotation, scene.rotation, atol=1e-6)
    assert exact.fovy == pytest.approx(scene.fovy, abs=1e-6)
    # with a quarter-pixel of noise and a few sightings spoiled by 5 px, the fit still places
    # points 20 cm above the table within half a pixel
    pixels = scene.project(table_points(400, 1)) + np.random.default_rng(2).normal(0, 0.25, (400, 2))
    pixels[:20] += 5.0
    noisy = PinholeCamera.fit(table_points(400, 1), pixels, 64, 64)
    high = table_points(50, 3, height=0.2)
    assert np.abs(noisy.project(high) - scene.project(high)).max() < 0.5


def test_a_camera_fit_refuses_what_it_cannot_fit():
    points = table_points(5)
    with pytest.raises(ValueError, match="at least 6 finite correspondences; got 5"):
        PinholeCamera.fit(points, image_camera(64, 64).project(points), 64, 64)
    with pytest.raises(ValueError, match=r"must be \(N, 3\) and \(N, 2\)"):
        PinholeCamera.fit(table_points(8), np.zeros((7, 2)), 64, 64)
    bad = image_camera(64, 64).project(table_points(8))
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        PinholeCamera.fit(table_points(8), bad, 64, 64)


def test_the_cubes_colours_are_learned_and_the_cubes_found_where_the_scene_camera_sees_them(tmp_path):
    from worldsim.envs.scene import Scene

    bank = EpisodeBank(noisy_push_episodes(tmp_path / "push.h5", 16))  # 48 cube placements at 32x32
    colours = cube_colours(bank.images, bank.state, bank.proprio)
    scene = Scene.load().model
    for name, colour in colours.items():  # of the five colours the frames show, each cube's own
        material = scene.geom_rgba[scene.geom(name).id][:3]
        assert np.abs(colour - material / material.sum()).sum() < 0.01, name
    assert sorted(colours) == ["green_cube", "red_cube", "yellow_cube"]
    world, pixels = cube_sightings(bank.images, bank.state, bank.proprio, colours)
    assert len(world) > 200 and np.allclose(world[:, 2], 0.02, atol=0.015)  # cubes on the table
    scene = image_camera(32, 32)
    assert np.median(np.linalg.norm(pixels - scene.project(world), axis=1)) < 0.3  # a 2.5 px cube's centroid
    fitted, fit = fitted_camera(bank.images, bank.state, bank.proprio)
    assert fit.startswith(f"camera fitted to {len(world)} sightings of the cubes in {len(bank.images)} frames (found "
                          "by their colours, learned from the frames: red, green, yellow)")
    cubes, tcp = entity_positions(bank.state)[:, :3].reshape(-1, 3), bank.proprio[:, :3].astype(np.float64)
    error = np.abs(fitted.project(cubes) - scene.project(cubes))
    assert np.median(error) < 0.15 and error.max() < 0.75
    assert np.abs(fitted.project(tcp) - scene.project(tcp)).max() < 1.25  # up to 15 cm above the cubes' plane
    with pytest.raises(ValueError, match=r"no such colours for the 3 cubes among the 0 the frames show, at 6 places or "
                                         r"more \(train on more episodes"):
        fitted_camera(np.zeros_like(bank.images), bank.state, bank.proprio)
    first = bank.index.episode_rows(0, "image")  # one episode: its cubes told apart, too few sightings to fit
    with pytest.raises(ValueError, match=r"needs at least 50 sightings .* found \d+ at \d+ \(train on more episodes"):
        fitted_camera(bank.images[first], bank.state[first], bank.proprio[first])
    few = np.r_[tuple(bank.index.episode_rows(e, "image") for e in range(4))]  # one camera tells all three apart
    assert sorted(cube_colours(bank.images[few], bank.state[few], bank.proprio[few])) == sorted(colours)


def test_a_fitted_camera_is_learned_with_the_scene_saved_and_named(push_episodes, tmp_path):
    from worldsim.envs.imagination import ImaginationConfig, imagination_aids

    bank = EpisodeBank(push_episodes)
    model = WorldModel(small_config(camera="fitted", judge={"outcome": "rule"}))
    np.testing.assert_allclose(model.camera.rotation, image_camera(32, 32).rotation)  # the scene's until fitted
    assert "sightings of the cubes" in model.learn_scene(bank.images, bank.proprio, bank.obs_start, bank.state)
    fitted = model.camera
    assert fitted.fovy != image_camera(32, 32).fovy
    assert model.objects.camera is model.rules.camera is model.frames.image_camera  # every part places alike
    bank.use_camera(fitted)  # the pathway's targets are placed through the model's camera
    np.testing.assert_allclose(bank.entity_pixels, fitted.project(entity_positions(bank.state)).astype(np.float32))
    loaded = WorldModel.from_pretrained(model.save_pretrained(tmp_path / "wm"))
    np.testing.assert_allclose(loaded.objects.camera.position, fitted.position)
    assert loaded.rules.camera.fovy == fitted.fovy
    named = imagination_aids(ImaginationConfig(), loaded)
    assert not any("camera" in aid or "colour" in aid for aid in named)  # frames and state alone
    with pytest.raises(ValueError, match="recorded state; this data has none"):
        model.learn_scene(bank.images, bank.proprio, bank.obs_start)
    with torch.no_grad():  # a model of the scene's camera keeps no pose to load
        assert "camera_pose" not in WorldModel(small_config()).state_dict()


def test_a_model_of_frames_alone_names_the_exact_camera_its_gripper_planes_use():
    from worldsim.envs.imagination import ImaginationConfig, imagination_aids

    planes = WorldModel(small_config(objects=None, judge={"outcome": "head"}, state_supervision=False,
                                     frames={"gripper_planes": True}))
    assert "hand-written: the exact camera" in imagination_aids(ImaginationConfig(rung="video"), planes)
    none = WorldModel(small_config(objects=None, judge={"outcome": "head"}, state_supervision=False))
    assert "hand-written: the exact camera" not in imagination_aids(ImaginationConfig(rung="video"), none)
    with pytest.raises(ValueError, match="camera='fitted' .* needs state_supervision"):
        small_config(objects=None, judge={"outcome": "head"}, state_supervision=False, camera="fitted")
    with pytest.raises(ValueError, match="camera='lens'"):
        small_config(camera="lens")


def test_train_wm_fits_the_camera_and_its_targets_follow_it(push_episodes, tmp_path, monkeypatch):
    from conftest import SMALL

    from worldsim.world_models.config import merged
    from worldsim.world_models.train import TrainWMConfig, train_world_model

    windows: list[tuple[EpisodeBank, dict]] = []
    method = EpisodeBank.state_windows
    monkeypatch.setattr(EpisodeBank, "state_windows", lambda self, *a, **k: (
        lambda batch: windows.append((self, batch)) or batch)(method(self, *a, **k)))
    model = merged({k: v for k, v in SMALL.items() if k != "image_size"},
                   {"dynamics": {"batch": 8, "horizon": 2}, "camera": "fitted"})
    summary = train_world_model(TrainWMConfig(data=push_episodes, out=tmp_path / "wm", preset="tiny", model=model,
                                              steps=2, batch_size=4, val_fraction=0.0, video_every=0, device="cpu"))
    monkeypatch.undo()
    trained = WorldModel.from_pretrained(summary["out"])
    assert trained.config.camera == "fitted" and trained.camera.fovy != image_camera(32, 32).fovy
    bank = windows[0][0]  # the pathway learned positions placed through the fitted camera, not the scene's
    assert bank.camera.fovy == trained.camera.fovy
    np.testing.assert_allclose(bank.entity_pixels, trained.camera.project(entity_positions(bank.state)), atol=1e-4)
