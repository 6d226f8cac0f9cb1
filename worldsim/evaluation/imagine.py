"""Imagined episodes beside the recorded ones, as one video (``worldsim imagine``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from worldsim.runtime.video import check_video_path, upscale, write_video


@dataclass
class Imagined:
    """What :func:`imagine_episodes` wrote and how the imagined outcomes compare with the recorded."""

    path: Path
    episodes: int
    imagined_success: float
    """Share of episodes imagined successful at some step (the task's rule on the imagined objects, or the
    success head without the object pathway)."""
    recorded_success: float


def imagine_episodes(world_model: str | Path, data: str | Path, out: str | Path, *,
                     policy: Literal["expert"] | str | Path = "expert", episodes: int = 8,
                     horizon: int | None = None, sampling_steps: int | None = None,
                     rung: str = "pixels", seed: int = 0) -> Imagined:
    """Imagine the first ``episodes`` episodes of ``data`` (those of the model's tasks) from their
    first frames and write them one after another to the video ``out``, each real | imagined.

    ``policy="expert"`` replays each episode's recorded actions (the scripted expert reads the
    ``state`` observation, which imagination does not produce, so its recorded actions are the
    exact counterpart of the real frames). A pixel policy checkpoint instead acts on the
    imagined frames; the left column then shows the recorded episode from the same start.
    ``horizon``: imagined steps per episode (default: the longest selected episode); ``rung``:
    the imagination rung (:func:`~worldsim.world_models.replay.open_loop`; ``"oracle"`` draws
    the imagined state with the scene's renderer, an upper bound rather than the model's frames)."""
    from worldsim.data.reader import EpisodeReader
    from worldsim.policies import load_policy
    from worldsim.world_models import EpisodeBank, WorldModel
    from worldsim.world_models.replay import open_loop, side_by_side

    check_video_path(out)
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be >= 1")
    model = WorldModel.from_pretrained(world_model)
    acting = None if policy == "expert" else load_policy(policy)
    with EpisodeReader(data) as reader:
        chosen = [i.index for i in reader.episode_info() if i.task in model.config.tasks][:episodes]
        if not chosen:
            raise ValueError(f"data={str(data)!r} holds episodes of {', '.join(reader.tasks)}; the world "
                             f"model knows only {', '.join(model.config.tasks)}")
        bank = EpisodeBank(reader, episodes=chosen)
    if acting is not None:
        for task in bank.tasks:
            acting.check_task(bank.instructions[task])
    steps = horizon or int(bank.lengths.max())
    run = open_loop(model, bank, np.arange(len(bank)), np.zeros(len(bank), np.int64), steps,
                    sampling_steps=sampling_steps, policy=acting, rung=rung,
                    generator=torch.Generator().manual_seed(seed))
    clips = [side_by_side(run, i) for i in range(len(bank))]
    path = write_video(out, upscale(np.concatenate(clips)), fps=10)
    threshold = model.config.success_threshold
    imagined = [(run.success_prob[i][run.valid[i]] >= threshold).any() for i in range(len(bank))]
    recorded = float(np.mean([info.success for info in bank.infos]))
    return Imagined(path, len(bank), float(np.mean(imagined)), recorded)
