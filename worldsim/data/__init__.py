"""Episode datasets, one capability per module, each with one entry point:

- :mod:`~worldsim.data.episode`: the HDF5 layout (the contract every stage reads and writes) and
  :class:`~worldsim.data.episode.Episode`, one episode in memory;
- :mod:`~worldsim.data.writer`: :class:`~worldsim.data.writer.EpisodeWriter`, atomic writes;
- :mod:`~worldsim.data.reader`: :class:`~worldsim.data.reader.EpisodeReader`, checked lazy reads;
- :mod:`~worldsim.data.merge`: :func:`~worldsim.data.merge.merge_episode_files`;
- :mod:`~worldsim.data.statistics`: :func:`~worldsim.data.statistics.dataset_statistics`;
- :mod:`~worldsim.data.index`: :class:`~worldsim.data.index.EpisodeIndex`, the selected episodes
  as flat rows and ``(episode, t)`` items under every training-window reader (and
  :func:`~worldsim.data.index.split_episodes`);
- :mod:`~worldsim.data.windows`: :class:`~worldsim.data.windows.WindowDataset`, behaviour-cloning
  windows (world-model windows are :class:`worldsim.world_models.data.EpisodeBank`'s);
- :mod:`~worldsim.data.collect`: :func:`~worldsim.data.collect.collect_episodes`, recording a
  policy's episodes through the shared rollout loop (:mod:`worldsim.rollout`);
- :mod:`~worldsim.data.lerobot`: LeRobot v3.0 and v2.1 export and import.

Nothing is imported here, so the command line can import one module without the rest.
"""
