"""What a user knows about a policy without rolling it out: its fit to held-out demonstrations.

These are the cheap rankers an evaluator in imagination has to beat (``benchmarks/policy_ranking.py``,
``worldsim rank-policies --held-out``): a ranking of checkpoints by validation loss or by how far
their actions are from the demonstrator's costs no rollout at all.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from worldsim.policies.base import Policy

SIGNALS = {"val_loss": -1, "action_error": -1, "action_entropy": -1}
"""Each signal and the direction a user would rank by (-1: lower ranks higher)."""


@torch.no_grad()
def offline_signals(policy: Policy, episodes: str | Path, batch_size: int = 256,
                    max_samples: int = 4096, seed: int = 0) -> dict[str, float]:
    """A BC policy's fit to the demonstrations in the episode file ``episodes`` (held out from
    its training), over at most ``max_samples`` windows (a seeded draw):

    - ``val_loss``: its imitation loss (TinyVLA's: the mean's squared error plus the std's NLL);
    - ``action_error``: the squared error of the first action of its mean chunk against the
      demonstrated action;
    - ``action_entropy``: the mean entropy (nats per action dimension) of its Gaussian action
      distribution, the policy's own uncertainty.

    Only the file's episodes of tasks the policy knows are read (the tasks its checkpoint
    records; without them, the tasks whose instructions it knows)."""
    from worldsim.data.reader import EpisodeReader
    from worldsim.data.windows import WindowDataset, window_obs
    from worldsim.envs.tasks import get_task
    from worldsim.policies.tinyvla import TinyVLA

    if not isinstance(policy, TinyVLA):
        raise TypeError(f"offline signals read a TinyVLA's imitation loss and action distribution; got "
                        f"{type(policy).__name__}")
    reader = EpisodeReader(episodes)
    if policy.config.tasks:
        known = sorted(policy.config.tasks)
        tasks = [t for t in reader.tasks if t in known]
    else:
        known = sorted(policy.config.instructions)
        tasks = [t for t in reader.tasks if get_task(t).instruction in known]
    if not tasks:
        raise ValueError(f"{episodes} holds none of the policy's tasks ({', '.join(known)})")
    keys = tuple(k for k in ("image", "wrist_image", "proprio") if k in reader.obs_keys)
    dataset = WindowDataset(reader, context=1, chunk=policy.chunk_size, tasks=tasks, keys=keys)
    rng = np.random.default_rng(seed)
    index = np.sort(rng.choice(len(dataset), size=min(max_samples, len(dataset)), replace=False))
    was_training = policy.training
    policy.eval()
    totals = {"val_loss": 0.0, "action_error": 0.0, "action_entropy": 0.0}
    for start in range(0, len(index), batch_size):
        items = torch.utils.data.default_collate([dataset[int(i)] for i in index[start:start + batch_size]])
        batch = policy.preprocess(window_obs(items, keys))
        actions, mask = items["actions"], items["action_mask"]
        loss, _ = policy.imitation_loss(batch, actions, mask)
        features = policy.features(batch)
        first = policy.action_mean(features)[:, 0]
        log_std = policy.action_dist.std(features).log()
        n = len(actions)
        totals["val_loss"] += loss.item() * n
        totals["action_error"] += ((first - actions[:, 0]) ** 2).mean(dim=-1).sum().item()
        totals["action_entropy"] += (0.5 * math.log(2 * math.pi * math.e) + log_std).mean().item() * n
    policy.train(was_training)
    return {k: v / len(index) for k, v in totals.items()}
