"""Merging episode files: :func:`merge_episode_files` writes the episodes of several files into
one new file (co-evolution pools each round's real episodes this way)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from worldsim.data.reader import EpisodeReader
from worldsim.data.writer import EpisodeWriter


def merge_episode_files(sources: Sequence[str | Path], out: str | Path, overwrite: bool = False) -> int:
    """Write every episode of ``sources``, in order, into one new episode file ``out``
    (atomically); returns the number of episodes. The sources must have been recorded with the
    same env arguments (``env_kwargs``), so that their observations mean the same thing. Recorded
    policy outputs are kept when every source has the same ones, else dropped (a file holds one
    layout; demonstrations and a learned policy's rollouts differ)."""
    if not sources:
        raise ValueError("merge_episode_files needs at least one source file")
    with ExitStack() as stack:
        readers = [stack.enter_context(EpisodeReader(path)) for path in sources]
        for reader in readers[1:]:
            if reader.env_kwargs != readers[0].env_kwargs:
                raise ValueError(f"{reader.path} was recorded with env arguments {reader.env_kwargs}, "
                                 f"{readers[0].path} with {readers[0].env_kwargs}: they cannot be merged")
        keep_outputs = all(reader.policy_shapes == readers[0].policy_shapes for reader in readers)
        count = 0
        with EpisodeWriter(out, env_kwargs=readers[0].env_kwargs, overwrite=overwrite) as writer:
            for reader in readers:
                for episode in reader:
                    if not keep_outputs:
                        episode.policy_outputs = {}
                    writer.add_episode(episode)
                    count += 1
        return count
