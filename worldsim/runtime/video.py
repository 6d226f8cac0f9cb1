"""Writing videos: mp4 through imageio's ffmpeg plugin, GIF when ffmpeg is unavailable.

Writes are atomic: frames go to a temporary file next to the target, renamed into place when
complete, so an interrupted write never leaves a truncated video under the final name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from worldsim.runtime.atomic import atomic_path

VIDEO_SUFFIXES = (".mp4", ".gif")
VIDEO_HEIGHT = 256  # videos people look at are upscaled to at least this many pixels


def check_video_path(path: str | os.PathLike) -> Path:
    """The path as a :class:`Path`, if it names a video format we write; else ValueError."""
    path = Path(path)
    if path.suffix not in VIDEO_SUFFIXES:
        raise ValueError(f"video path {str(path)!r} must end in one of {', '.join(VIDEO_SUFFIXES)}")
    return path


def ffmpeg_available() -> bool:
    """Whether imageio can find an ffmpeg binary (imageio-ffmpeg's own, or ``IMAGEIO_FFMPEG_EXE``)."""
    try:
        import imageio_ffmpeg

        imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError):
        return False
    return True


def write_video(path: str | os.PathLike, frames: Sequence[np.ndarray] | np.ndarray, fps: int) -> Path:
    """Write uint8 RGB ``frames`` (T, H, W, 3) to ``path`` and return the path written.

    An ``.mp4`` path falls back to a ``.gif`` beside it if ffmpeg cannot be loaded.
    """
    path = check_video_path(path)
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) == 0:
        raise ValueError(f"frames must be a non-empty uint8 array (T, H, W, 3); got {frames.dtype} "
                         f"{frames.shape}")
    if path.suffix == ".mp4" and ffmpeg_available():
        try:
            _write_mp4(path, frames, fps)
            return path
        except (RuntimeError, OSError):  # an ffmpeg that is found but cannot run
            pass
    path = path.with_suffix(".gif")
    _write_gif(path, frames, fps)
    return path


def _write_mp4(path: Path, frames: np.ndarray, fps: int) -> None:
    import imageio.v2 as imageio

    # The plugin is named: left to choose by extension, imageio hands an .mp4 to tifffile when
    # the ffmpeg plugin cannot load, which then fails on the fps argument.
    with atomic_path(path) as tmp:
        with imageio.get_writer(tmp, format="FFMPEG", mode="I", fps=fps, codec="libx264", quality=8,
                                macro_block_size=1) as writer:
            for frame in frames:
                writer.append_data(frame)  # type: ignore[attr-defined]  # imageio's stubs: v2 writers append


def _write_gif(path: Path, frames: np.ndarray, fps: int) -> None:
    import imageio.v3 as iio

    with atomic_path(path) as tmp:
        iio.imwrite(tmp, frames, plugin="pillow", extension=".gif", duration=1000 / fps, loop=0)


def upscale(frames: np.ndarray, height: int = VIDEO_HEIGHT) -> np.ndarray:
    """Frames ``(T, H, W, 3)`` repeated pixel by pixel (nearest neighbour, no blur) to at least
    ``height`` rows: 64-pixel frames are too small to look at."""
    factor = max(1, -(-height // frames.shape[1]))
    return frames.repeat(factor, axis=1).repeat(factor, axis=2)
