"""Imagined episodes beside the recorded ones, as one video (``worldsim imagine``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from worldsim.envs.imagination import DEFAULT_IMAGINATION, ImaginationConfig
from worldsim.runtime.device import resolve_device
from worldsim.runtime.validation import check_int
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
                     policy: Literal["expert"] | str | Path = "expert", episodes: int = 8, steps: int | None = None,
                     imagination: ImaginationConfig = DEFAULT_IMAGINATION, seed: int = 0) -> Imagined:
    """Imagine the first ``episodes`` episodes of ``data`` (those of the model's tasks) from their
    first frames and write them one after another to the video ``out``, each real | imagined.

    ``policy="expert"`` replays each episode's recorded actions (the scripted expert reads the
    ``state`` observation, which imagination does not produce, so its recorded actions are the
    exact counterpart of the real frames). A pixel policy checkpoint instead acts on the
    imagined frames; the left column then shows the recorded episode from the same start.
    ``steps``: imagined steps per episode (default: the longest selected episode); ``imagination``:
    the rung, judge, success threshold, sampling steps and device
    (:func:`~worldsim.world_models.replay.open_loop`; a rendered rung draws the imagined state with
    the scene's renderer, an upper bound rather than the model's frames)."""
    from worldsim.data.reader import EpisodeReader
    from worldsim.policies import load_policy
    from worldsim.world_models import EpisodeBank, WorldModel
    from worldsim.world_models.replay import open_loop, side_by_side

    check_video_path(out)
    check_int("episodes", episodes)
    check_int("steps", steps, optional=True)
    model = WorldModel.from_pretrained(world_model, resolve_device(imagination.device))
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
    run = open_loop(model, bank, np.arange(len(bank)), np.zeros(len(bank), np.int64), steps or int(bank.lengths.max()),
                    imagination=imagination, policy=acting, generator=torch.Generator(model.device).manual_seed(seed))
    clips = [side_by_side(run, i) for i in range(len(bank))]
    path = write_video(out, upscale(np.concatenate(clips)), fps=10)
    threshold = model.config.judge.success_threshold if imagination.success_threshold is None \
        else imagination.success_threshold
    imagined = [(run.success_prob[i][run.valid[i]] >= threshold).any() for i in range(len(bank))]
    recorded = float(np.mean([info.success for info in bank.infos]))
    return Imagined(path, len(bank), float(np.mean(imagined)), recorded)
