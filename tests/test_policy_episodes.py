"""World-model data from other policies (worldsim.data.policy_episodes): each policy's own
episodes of every task, one part file per policy, merged; a finished part is not collected again."""

from pathlib import Path

import numpy as np
import torch

from worldsim.data.policy_episodes import policy_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig

INSTRUCTIONS = ("push the red cube onto the blue square", "move the gripper above the red cube")


def test_other_policies_episodes_are_collected_per_policy_and_merged(tmp_path: Path) -> None:
    policies = []
    for k in range(2):
        torch.manual_seed(k)
        TinyVLA(TinyVLAConfig(instructions=INSTRUCTIONS, image_size=64, language="learned", channels=(8, 8),
                              hidden_dim=32, feature_dim=32)).save_pretrained(tmp_path / f"p{k}")
        policies.append(tmp_path / f"p{k}")
    out = tmp_path / "rollouts.h5"
    policy_episodes(["PushCube-v0", "ReachCube-v0"], policies, 2, out, seed=5)
    parts = [tmp_path / "rollouts_0.h5", tmp_path / "rollouts_1.h5"]
    with EpisodeReader(out) as merged:
        infos = merged.episode_info()
        assert len(infos) == 8 and [i.task for i in infos].count("ReachCube-v0") == 4
        with EpisodeReader(parts[0]) as first:
            assert len(first.episode_info()) == 4
            # the merged file holds each part's episodes in order, observations unchanged
            np.testing.assert_array_equal(merged[0].actions, first[0].actions)
        with EpisodeReader(parts[1]) as second:  # another policy and seed: other episodes
            np.testing.assert_array_equal(merged[4].actions, second[0].actions)
    out.unlink()
    finished = parts[0].stat().st_mtime_ns
    policy_episodes(["PushCube-v0", "ReachCube-v0"], policies, 2, out, seed=5)  # resumes: merges again
    assert parts[0].stat().st_mtime_ns == finished and out.exists()
    # the files given first (the expert data) lead the merged file, in one write
    mixed = tmp_path / "mixed.h5"
    policy_episodes(["PushCube-v0", "ReachCube-v0"], policies[1:], 2, mixed, seed=5, first=(parts[0],))
    with EpisodeReader(mixed) as merged, EpisodeReader(parts[0]) as first:
        assert len(merged.episode_info()) == 8
        np.testing.assert_array_equal(merged[0].actions, first[0].actions)
