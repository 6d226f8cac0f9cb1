"""The anchor's scene: the empty table and the arm's footprint learned from frames, and the
starting arm cleared from the first frame (world_models/anchor.py)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import small_config

from worldsim.envs.observations import ENTITIES
from worldsim.world_models import WorldModel
from worldsim.world_models.anchor import arm_appearance, arm_radius, background_image, clear_arm
from worldsim.world_models.data import image_camera
from worldsim.world_models.latents import latents_to_frames

TABLE = np.array((90, 80, 70), np.uint8)


def frames_with_an_arm(n: int, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` frames of an empty table with a dark 3 x 7 bar (an arm: from 5 rows above its TCP's
    pixel to 1 below, a column either side) at a random TCP on the table, and a red 2 x 2 cube
    somewhere at random; with the TCPs ``(n, 3)`` (metres)."""
    rng = np.random.default_rng(seed)
    camera = image_camera(size, size)
    frames = np.tile(TABLE, (n, size, size, 1))
    tcp = np.zeros((n, 3))
    k = 0
    while k < n:
        point = np.array([rng.uniform(-0.15, 0.15), rng.uniform(-0.15, 0.15), 0.05])
        col, row = np.floor(camera.project(point)).astype(int)
        if not (8 <= row < size - 4 and 4 <= col < size - 4):
            continue
        frames[k, row - 5:row + 2, col - 1:col + 2] = (30, 30, 35)
        r, c = rng.integers(0, size - 2, 2)
        frames[k, r:r + 2, c:c + 2] = (200, 10, 10)
        tcp[k] = point
        k += 1
    return frames, tcp


def colour(rgb) -> torch.Tensor:
    return torch.tensor(rgb, dtype=torch.float32).div(127.5).sub(1.0)


def test_the_arm_s_footprint_is_what_stands_around_the_tcp_in_most_frames_grown_by_a_pixel():
    frames, tcp = frames_with_an_arm(200)
    background = background_image(frames, 4)
    assert torch.equal(background, colour(TABLE)[:, None, None].expand(3, 32, 32))
    radius = arm_radius(32)
    footprint, arm = arm_appearance(frames, tcp, image_camera(32, 32), background, radius)
    assert footprint.shape == (2 * radius + 1, 2 * radius + 1) and radius == 12 and arm.shape == (3, 25, 25)
    bar = torch.zeros_like(footprint)
    bar[radius - 5:radius + 2, radius - 1:radius + 2] = 1.0  # the cubes, here and there, do not count
    torch.testing.assert_close(footprint, F.max_pool2d(bar[None, None], 3, stride=1, padding=1)[0, 0])
    # its colour where it stands: the bar's (the cubes it sometimes stands beside are outvoted)
    torch.testing.assert_close(arm[:, bar > 0], colour((30, 30, 35))[:, None].expand(3, int(bar.sum())))
    with pytest.raises(ValueError, match="200 frames but 3 TCP positions"):
        arm_appearance(frames, tcp[:3], image_camera(32, 32), background, radius)


def test_clearing_the_arm_shows_the_table_where_it_stood_and_keeps_a_cube_under_its_footprint():
    frames = torch.zeros(1, 3, 16, 16)
    frames[0, :, 4:7, 5:7] = 1.0  # the arm: rows 4-6, columns 5-6; its TCP in pixel (column 5, row 5)
    frames[0, :, 12:14, 1:3] = 0.5  # something else, far from it
    footprint = torch.zeros(5, 5)
    footprint[1:4, 2:4] = 1.0  # a row above to a row below the TCP's pixel, its column and the next
    arm = torch.full((3, 5, 5), 0.9)  # its colour, near what it shows
    table = torch.full((3, 16, 16), -0.2)
    out = clear_arm(frames, torch.tensor([[5.7, 5.2]]), footprint, arm, table)[0]  # anywhere in pixel (5, 5)
    torch.testing.assert_close(out[:, 4:7, 5:7], torch.full((3, 3, 2), -0.2))  # where it stood: the table
    assert (out[:, 12:14, 1:3] == 0.5).all() and out.eq(0.0).sum() == 3 * (16 * 16 - 6 - 4)  # the rest as it was
    frames[0, 1:, 5, 5:7] = -1.0  # a red cube in the arm's middle row: far from the arm's colour
    out = clear_arm(frames, torch.tensor([[5.7, 5.2]]), footprint, arm, table)[0]
    torch.testing.assert_close(out[:, 5, 5:7], torch.tensor([[1.0, 1.0], [-1.0, -1.0], [-1.0, -1.0]]))  # kept
    torch.testing.assert_close(out[:, 4, 5:7], torch.full((3, 2), -0.2))  # the arm above and below it cleared
    torch.testing.assert_close(out[:, 6, 5:7], torch.full((3, 2), -0.2))


def test_a_model_that_clears_the_arm_learns_it_from_the_first_frames_and_saves_it(tmp_path):
    model = WorldModel(small_config(objects={"hidden": 32, "carry": True, "clear_arm": True},
                                    judge={"outcome": "head"}, frames={"anchor": "first"}))
    frames, tcp = frames_with_an_arm(60)
    proprio = np.concatenate([tcp, np.zeros((60, 1))], axis=1).astype(np.float32)
    empty = np.tile(TABLE, (60, 32, 32, 1))  # later frames: the arm gone from view
    model.learn_scene(np.concatenate([frames, empty]), np.concatenate([proprio, proprio]), np.arange(60))
    footprint = model.frames.arm_footprint
    assert footprint is not None and footprint.sum() == 5 * 9  # the 3 x 7 bar grown by a pixel
    arm = model.frames.arm_colour
    assert arm is not None and torch.equal(arm[:, 12, 12], colour((30, 30, 35)))  # at the TCP: the bar
    loaded = WorldModel.from_pretrained(model.save_pretrained(tmp_path / "wm"))
    torch.testing.assert_close(loaded.frames.arm_footprint, footprint)
    torch.testing.assert_close(loaded.frames.arm_colour, arm)
    assert WorldModel(small_config(objects={"hidden": 32, "carry": True}, judge={"outcome": "head"})
                      ).frames.arm_footprint is None  # the default: nothing learned, nothing cleared
    last = WorldModel(small_config(objects={"hidden": 32, "carry": True, "clear_arm": True}, judge={"outcome": "head"}))
    assert last.frames.arm_footprint is None  # drawn from the last frame: no starting arm to clear


def test_an_imagined_frame_drawn_from_the_first_does_not_keep_the_starting_arm():
    """A denoiser that changes nothing shows the anchor as carried: the first frame without the
    arm that stood at its TCP's pixel, with the cube in front of it. A start that does not give the
    first frame's proprio leaves the arm where it stood."""
    model = WorldModel(small_config(objects={"hidden": 32, "carry": True, "clear_arm": True},
                                    judge={"outcome": "head"}, frames={"anchor": "first"})).eval()
    camera = image_camera(32, 32)
    first_tcp = np.array([-0.1, -0.05, 0.05])
    a_col, a_row = np.floor(camera.project(first_tcp)).astype(int)
    frame = np.tile(TABLE, (32, 32, 1))
    frame[a_row - 5:a_row + 2, a_col - 1:a_col + 2] = (30, 30, 35)
    frame[a_row - 3:a_row - 1, a_col - 1:a_col + 1] = (200, 10, 10)  # a cube in front of the arm's middle
    radius = arm_radius(32)
    with torch.no_grad():
        for p in model.frames.unet.parameters():
            p.zero_()
        model.frames.background.copy_(background_image(np.tile(TABLE, (2, 32, 32, 1)), 4))
        model.frames.arm_footprint.zero_()
        model.frames.arm_footprint[radius - 5:radius + 2, radius - 1:radius + 2] = 1.0
        model.frames.arm_colour.copy_(colour((30, 30, 35))[:, None, None].expand(3, 2 * radius + 1, 2 * radius + 1))
    frames = torch.from_numpy(np.tile(frame, (1, 2, 1, 1, 1)))
    proprio = torch.from_numpy(np.tile(np.array([0.1, 0.05, 0.05, 0.04]), (1, 2, 1))).float()
    points = torch.tensor([28.0, 2.0]).repeat(1, 2, len(ENTITIES), 1)  # the objects far from the arm

    def not_table(first_proprio):
        rollout = model.start(frames, frames[:, 0], proprio, (points, torch.full(points.shape[:-1], 0.02)),
                              first_proprio=first_proprio)
        pred = model.predict(rollout, torch.zeros(1, 4), torch.zeros(1, dtype=torch.long))
        image = latents_to_frames(pred.latent, 4)[0].numpy().astype(int)
        return {tuple(p) for p in np.argwhere(np.abs(image - TABLE).max(-1) > 30)}

    cube = {(r, c) for r in range(a_row - 3, a_row - 1) for c in range(a_col - 1, a_col + 1)}
    assert not_table(torch.from_numpy(np.append(first_tcp, 0.04)).float()[None]) == cube  # no ghost; the cube kept
    bar = {(r, c) for r in range(a_row - 5, a_row + 2) for c in range(a_col - 1, a_col + 2)}
    assert not_table(None) == bar  # no first proprio given: the arm stays where it stood
