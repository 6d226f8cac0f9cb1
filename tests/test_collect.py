"""Rollout collection: counts, episode boundaries, obs/action consistency, determinism, recorded
policy outputs, the CLI."""

import h5py
import numpy as np
import pytest
import torch
from conftest import write_toml

from worldsim.commands.cli import main
from worldsim.data.collect import collect_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.envs.tasks import get_task
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig, TinyVLA, TinyVLAConfig


def expert(noise: float = 0.0):
    return lambda task: ScriptedExpert(ScriptedExpertConfig(task, noise=noise, seed=3))


def tiny_vla() -> TinyVLA:
    """An untrained TinyVLA small enough to roll out quickly: 32-pixel images, features (24,), K=3."""
    torch.manual_seed(0)
    config = TinyVLAConfig.for_tasks(["ReachCube-v0"], language="learned", channels=(4, 8, 8), hidden_dim=32,
                                     feature_dim=24, language_dim=8, chunk_size=3, image_size=32)
    return TinyVLA(config).eval()


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    path = tmp_path_factory.mktemp("collect") / "two.h5"
    stats = collect_episodes(["ReachCube-v0", "PushCube-v0"], expert(0.3), episodes=5, out=path, num_envs=3,
                             seed=7, image_size=32, progress=False)
    return path, stats


def test_collects_exactly_the_episodes_asked_for_with_consistent_flags(collected):
    path, stats = collected
    with EpisodeReader(path) as reader:
        infos = reader.episode_info()
        assert [i.task for i in infos].count("ReachCube-v0") == 5 and len(infos) == 10
        assert reader.tasks == ["ReachCube-v0", "PushCube-v0"]
        assert reader.obs_shapes == {"image": (32, 32, 3), "proprio": (4,), "state": (56,)}
        assert reader.env_kwargs == {"obs_mode": "pixels+state", "image_size": 32, "wrist_camera": False}
        for info in infos:
            episode = reader[info.index]
            spec = get_task(info.task)
            steps = episode.num_samples
            assert info.instruction == spec.instruction and info.env_id == f"worldsim/{info.task}"
            assert info.seed == (7 if info.task == "ReachCube-v0" else 8) and 0 <= info.env_index < 3
            assert '"noise":0.3' in info.policy and info.policy.startswith("scripted_expert")
            assert 1 <= steps <= spec.max_episode_steps
            assert not episode.dones[:-1].any() and episode.dones[-1]  # every episode is complete
            assert episode.truncated[-1] == (steps == spec.max_episode_steps and not episode.succeeded)
            assert episode.terminated[-1] or episode.truncated[-1]
            assert episode.success[-1] == info.success and not episode.success[:-1].any()
            assert np.abs(episode.actions).max() <= 1.0
            # the last reward of a success is 1 (dense reward is 1 on success)
            if info.success:
                assert episode.rewards[-1] == pytest.approx(1.0)
            # proprio is the TCP of the state, observation for observation
            np.testing.assert_allclose(episode.obs["proprio"][:, :3], episode.obs["state"][:, :3], atol=1e-6)
    reach, push = stats.tasks["ReachCube-v0"], stats.tasks["PushCube-v0"]
    assert reach.episodes == push.episodes == 5 and stats.episodes == 10
    assert reach.success_rate >= 0.8 and reach.mean_length < push.mean_length
    assert push.env_steps >= push.steps and push.steps_per_second > 0
    assert stats.file_bytes == path.stat().st_size


def test_observation_t_plus_1_follows_action_t(collected):
    path, _ = collected
    with EpisodeReader(path) as reader:
        moves, commands = [], []
        for i in range(len(reader)):
            proprio, actions = reader.load(i, "proprio"), reader.load(i, "actions")
            moves.append(np.diff(proprio[:, :3], axis=0))
            commands.append(actions[:, :3])
    moves, commands = np.concatenate(moves), np.concatenate(commands)
    strong = np.abs(commands) > 0.5
    agree = np.sign(moves[strong]) == np.sign(commands[strong])
    assert strong.sum() > 50 and agree.mean() > 0.9
    # one step moves the TCP at most ~3 cm per axis: the final observation is not a reset's
    assert np.abs(moves).max() < 0.035
    # the first observation of an episode is a fresh reset, not the previous episode's last
    with EpisodeReader(path) as reader:
        a, b = reader[0], reader[1]
        assert not np.array_equal(a.obs["state"][-1], b.obs["state"][0])


def file_contents(path) -> dict:
    contents = {}
    with h5py.File(path, "r") as f:
        contents["/"] = dict(f.attrs)

        def visit(name, item):
            contents[name] = (item[()] if isinstance(item, h5py.Dataset) else None, dict(item.attrs))

        f.visititems(visit)
    return contents


@pytest.mark.slow
def test_same_seed_gives_identical_files_and_another_seed_does_not(tmp_path):
    files = []
    for name, seed in (("a.h5", 1), ("b.h5", 1), ("c.h5", 2)):
        collect_episodes(["PushCube-v0"], expert(0.3), episodes=3, out=tmp_path / name, num_envs=2, seed=seed,
                         image_size=16, progress=False)
        files.append(file_contents(tmp_path / name))
    assert files[0].keys() == files[1].keys()
    for key, (data, attrs) in ((k, v) for k, v in files[0].items() if k != "/"):
        assert attrs == files[1][key][1]
        if data is not None:
            np.testing.assert_array_equal(data, files[1][key][0], err_msg=key)
    assert files[0]["/"] == files[1]["/"]
    assert not np.array_equal(files[0]["data/demo_0/actions"][0], files[2]["data/demo_0/actions"][0])


def test_more_envs_than_episodes_and_the_quota_counts_episodes_started_first(tmp_path):
    # 8 envs asked, 2 episodes: only 2 envs run; 5 episodes on 4 envs: every env finishes what it started
    stats = collect_episodes(["ReachCube-v0"], expert(), episodes=2, out=tmp_path / "a.h5", num_envs=8,
                             obs_mode="state", progress=False)
    assert stats.tasks["ReachCube-v0"].env_steps == 2 * max(
        i.num_samples for i in EpisodeReader(tmp_path / "a.h5").episode_info())
    collect_episodes(["ReachCube-v0"], expert(), episodes=5, out=tmp_path / "b.h5", num_envs=4,
                     obs_mode="state", progress=False)
    with EpisodeReader(tmp_path / "b.h5") as reader:
        assert reader.obs_keys == ("state",)
        with pytest.raises(ValueError, match="holds no image observations"):
            _ = reader.image_shape
        assert sorted({i.env_index for i in reader.episode_info()}) == [0, 1, 2, 3]


def test_bad_requests_fail_before_anything_is_written(tmp_path):
    out = tmp_path / "x.h5"
    with pytest.raises(ValueError, match="solves PushCube-v0"):
        collect_episodes(["ReachCube-v0"], lambda task: ScriptedExpert(ScriptedExpertConfig("PushCube-v0")),
                         episodes=1, out=out, progress=False)
    with pytest.raises(ValueError, match="reads the 'state' observation; obs_mode='pixels' has none"):
        collect_episodes(["ReachCube-v0"], expert(), episodes=1, out=out, obs_mode="pixels", progress=False)
    with pytest.raises(ValueError, match=r"tasks \['ReachCube-v0'\] are named more than once"):
        collect_episodes(["ReachCube-v0", "worldsim/ReachCube-v0"], expert(), episodes=1, out=out)
    with pytest.raises(ValueError, match="episodes=0 must be an int >= 1"):
        collect_episodes(["ReachCube-v0"], expert(), episodes=0, out=out)
    with pytest.raises(KeyError, match="Did you mean 'ReachCube-v0'"):
        collect_episodes(["ReachCub-v0"], expert(), episodes=1, out=out)
    assert list(tmp_path.iterdir()) == []


def test_cli_collect_and_dataset_info(tmp_path, capsys):
    out = tmp_path / "push.h5"
    args = ["collect", "--task", "ReachCube-v0", "--task", "PushCube-v0", "--episodes", "2", "--noise", "0.1",
            "--num-envs", "2", "--image-size", "16", "--wrist", "--out", str(out)]
    assert main(args) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "ReachCube-v0" in printed and "PushCube-v0" in printed and "steps/s" in printed
    with EpisodeReader(out) as reader:
        assert len(reader) == 4 and reader.obs_shapes["wrist_image"] == (16, 16, 3)
        assert '"noise":0.1' in reader.episode_info()[0].policy
    assert main(["dataset-info", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "ReachCube-v0 │ 2" in printed and "all │ 4" in printed and "wrist_image (16, 16, 3)" in printed
    assert "policy outputs (per step): none" in printed

    assert main(args) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert main(["collect", "--task", "ReachCube-v0", "--episodes", "1", "--obs-mode", "state", "--overwrite",
                 "--out", str(out)]) == 0
    with EpisodeReader(out) as reader:
        assert reader.tasks == ["ReachCube-v0"]
    assert main(["collect", "--out", str(tmp_path / "y.h5")]) == 2
    assert "--task (repeatable) or --suite" in capsys.readouterr().err
    assert main(["collect", "--task", "PushCube-v0", "--policy", str(tmp_path / "nope"), "--out",
                 str(tmp_path / "y.h5")]) == 2
    assert "neither 'expert' nor a checkpoint folder" in capsys.readouterr().err
    (tmp_path / "bad.h5").write_bytes(b"not hdf5 at all")
    assert main(["dataset-info", str(tmp_path / "bad.h5")]) == 2
    assert "not a readable HDF5 file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.h5", "push.h5"]


# ---------------------------------------------------------------------------- recorded policy outputs
@pytest.mark.slow
def test_recording_stores_features_and_action_samples_of_every_step(tmp_path):
    policy = tiny_vla()
    common = {"episodes": 2, "num_envs": 2, "seed": 5, "image_size": 32, "obs_mode": "pixels",
              "progress": False}
    for name, record in (("a.h5", True), ("b.h5", True), ("plain.h5", False)):
        collect_episodes(["ReachCube-v0"], lambda task: policy, out=tmp_path / name, record_features=record,
                         num_samples=3, **common)
    with EpisodeReader(tmp_path / "a.h5") as reader, EpisodeReader(tmp_path / "plain.h5") as plain:
        assert reader.policy_keys == ("features", "action_samples")
        assert reader.policy_shapes == {"features": (24,), "action_samples": (3, 3, 4)}
        assert plain.policy_keys == ()
        for i in range(len(reader)):
            episode, steps = reader[i], reader.episode_info()[i].num_samples
            features, samples = episode.policy_outputs["features"], episode.policy_outputs["action_samples"]
            assert features.shape == (steps, 24) and features.dtype == np.float32
            assert samples.shape == (steps, 3, 3, 4) and samples.dtype == np.float32
            # the features of every observation acted on, as the policy computes them from the stored obs
            obs = {"image": episode.obs["image"][:-1], "proprio": episode.obs["proprio"][:-1],
                   "instruction": (episode.instruction,) * steps}
            with torch.no_grad():
                batch = policy.preprocess(obs)
                expected, mean = policy.features(batch), policy.act(batch, deterministic=True).actions
            np.testing.assert_allclose(features, expected.numpy(), atol=1e-5)
            # samples spread around the policy's mean chunk with its std (e^-1): within 6 std
            assert (samples.std(axis=1) > 0).all()
            assert np.abs(samples - mean.numpy()[:, None]).max() < 6 * np.exp(-1)
            # the samples come from their own stream: recording leaves the actions taken unchanged
            np.testing.assert_array_equal(episode.actions, plain.load(i, "actions"))
            assert not np.isclose(samples[:, :, 0], episode.actions[:, None]).all(-1).any()
        first = reader[0]
        obs0 = {"image": first.obs["image"][0], "proprio": first.obs["proprio"][0],
                "instruction": first.instruction}
        with torch.no_grad():
            expected = policy.features(policy.preprocess(obs0))[0].numpy()
        np.testing.assert_allclose(first.policy_outputs["features"][0], expected, atol=1e-5)
    # same seed, same file (the sampling stream is seeded too)
    a, b = file_contents(tmp_path / "a.h5"), file_contents(tmp_path / "b.h5")
    assert a.keys() == b.keys() and "data/demo_1/policy/action_samples" in a
    for key, (data, attrs) in ((k, v) for k, v in a.items() if k != "/"):
        assert attrs == b[key][1]
        if data is not None:
            np.testing.assert_array_equal(data, b[key][0], err_msg=key)


def test_recording_needs_a_learned_policy_and_at_least_one_sample(tmp_path):
    out = tmp_path / "x.h5"
    with pytest.raises(ValueError, match="needs a learned policy that exposes features .*the scripted "
                                         "expert has none"):
        collect_episodes(["ReachCube-v0"], expert(), episodes=1, out=out, record_features=True,
                         progress=False)
    with pytest.raises(ValueError, match="num_samples=0 must be an int >= 1"):
        collect_episodes(["ReachCube-v0"], lambda task: tiny_vla(), episodes=1, out=out, image_size=32,
                         record_features=True, num_samples=0, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_cli_records_features_of_a_checkpoint_and_refuses_the_expert(tmp_path, capsys):
    tiny_vla().save_pretrained(tmp_path / "policy")
    out = tmp_path / "vla.h5"
    samples = write_toml(tmp_path / "samples.toml", "num_samples = 2\n")  # a config file's setting
    assert main(["collect", "--task", "ReachCube-v0", "--policy", str(tmp_path / "policy"), "--episodes", "1",
                 "--num-envs", "1", "--image-size", "32", "--record-features", "--config-file", str(samples),
                 "--out", str(out)]) == 0
    with EpisodeReader(out) as reader:
        assert reader.policy_shapes == {"features": (24,), "action_samples": (2, 3, 4)}
    capsys.readouterr()
    assert main(["dataset-info", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "policy outputs (per step): features (24,), action_samples (2, 3, 4)" in printed
    assert main(["collect", "--task", "ReachCube-v0", "--record-features",
                 "--out", str(tmp_path / "x.h5")]) == 2
    assert "the scripted expert has none" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy", "samples.toml", "vla.h5"]


def test_continue_after_success_records_success_frames_to_the_time_limit(tmp_path):
    path = tmp_path / "past.h5"
    collect_episodes(["ReachCube-v0"], expert(), episodes=3, out=path, num_envs=3, seed=0, obs_mode="state",
                     continue_after_success=True, progress=False)
    limit = get_task("ReachCube-v0").max_episode_steps
    with EpisodeReader(path) as reader:
        assert reader.env_kwargs == {"obs_mode": "state", "terminate_on_success": False}
        for info in reader.episode_info():
            episode = reader[info.index]
            # the expert reaches and holds: the episode runs on past its first success
            assert episode.num_samples == limit and episode.truncated[-1] and not episode.terminated.any()
            assert episode.success.sum() > 10 and info.success == episode.success[-1]
