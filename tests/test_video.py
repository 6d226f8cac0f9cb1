"""Videos: mp4 through ffmpeg, a real GIF when ffmpeg is unavailable, atomic either way."""

import sys

import imageio.v3 as iio
import imageio_ffmpeg
import numpy as np
import pytest

from worldsim.runtime.video import write_video


def frames(count: int = 6, size: int = 16) -> np.ndarray:
    # flat colours survive the GIF palette exactly
    colours = np.linspace(0, 250, count).astype(np.uint8)
    return np.broadcast_to(colours[:, None, None, None], (count, size, size, 3)).copy()


def no_ffmpeg_binary() -> str:
    raise RuntimeError("No ffmpeg exe could be found. Install ffmpeg on your system.")


def test_mp4_is_written_with_ffmpeg(tmp_path):
    path = write_video(tmp_path / "clip.mp4", frames(), fps=10)
    assert path == tmp_path / "clip.mp4"
    assert iio.imread(path).shape == (6, 16, 16, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]


@pytest.mark.parametrize("how", ["no binary", "no imageio-ffmpeg"])
def test_without_ffmpeg_an_mp4_becomes_a_readable_gif(tmp_path, monkeypatch, how):
    if how == "no binary":
        monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", no_ffmpeg_binary)
    else:
        monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import fails
    clip = frames()
    path = write_video(tmp_path / "clip.mp4", clip, fps=10)
    assert path == tmp_path / "clip.gif"
    assert [p.name for p in tmp_path.iterdir()] == ["clip.gif"]  # no temp file, no empty mp4
    read = iio.imread(path, plugin="pillow", index=None)
    assert read.shape == clip.shape and read.dtype == np.uint8
    np.testing.assert_array_equal(read, clip)
    meta = iio.immeta(path, plugin="pillow")
    assert meta["duration"] == 100 and meta["loop"] == 0


def test_a_gif_path_is_written_as_gif(tmp_path):
    path = write_video(tmp_path / "clip.gif", frames(3), fps=20)
    assert iio.imread(path, plugin="pillow", index=None).shape == (3, 16, 16, 3)


def test_bad_frames_write_nothing(tmp_path):
    with pytest.raises(ValueError, match="non-empty uint8 array"):
        write_video(tmp_path / "clip.mp4", np.zeros((3, 16, 16, 3), np.float32), fps=10)
    with pytest.raises(ValueError, match="must end in one of .mp4, .gif"):
        write_video(tmp_path / "clip.avi", frames(), fps=10)
    assert list(tmp_path.iterdir()) == []
