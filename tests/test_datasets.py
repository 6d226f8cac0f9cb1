"""Episode files: exact round trips, atomic writes, clear errors for bad files, the episode index,
training windows."""

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from worldsim.data.episode import Episode
from worldsim.data.index import EpisodeIndex, split_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.data.statistics import dataset_statistics
from worldsim.data.windows import WindowDataset
from worldsim.data.writer import EpisodeWriter
from worldsim.world_models.data import EpisodeBank


def make_episode(steps: int, code: int = 0, task: str = "PushCube-v0", success: bool = True,
                 wrist: bool = False) -> Episode:
    """An episode whose arrays encode (code, t): image frame t is filled with code * 10 + t,
    proprio[t] = actions[t] = (t, code, 0.5, -0.5), rewards[t] = t / 10."""
    t = np.arange(steps + 1)
    values = (code * 10 + t).astype(np.uint8)[:, None, None, None]
    image = np.broadcast_to(values, (steps + 1, 8, 8, 3)).copy()
    image[:, 0, 0, 1] = 200  # not constant within a frame
    vectors = np.stack([t, np.full_like(t, code), np.full(steps + 1, 0.5), np.full(steps + 1, -0.5)], 1)
    obs = {"image": image, "proprio": vectors.astype(np.float32),
           "state": np.random.default_rng(code).normal(size=(steps + 1, 56)).astype(np.float32)}
    if wrist:
        obs["wrist_image"] = 255 - image
    flags = np.zeros(steps + 1, bool)
    flags[-1] = success
    terminated = np.zeros(steps, bool)
    terminated[-1] = success
    return Episode(obs=obs, actions=vectors[:-1].astype(np.float32), rewards=(t[:-1] / 10).astype(np.float32),
                   terminated=terminated, truncated=~terminated & (np.arange(steps) == steps - 1),
                   success=flags,
                   instruction=f"do {task}", task=task, seed=100 + code, policy="test", env_index=code % 3)


def write(path, episodes, **kwargs):
    with EpisodeWriter(path, env_kwargs={"obs_mode": "pixels+state", "image_size": 8}, **kwargs) as writer:
        for episode in episodes:
            writer.add_episode(episode)
    return path


@pytest.fixture
def two_task_file(tmp_path):
    episodes = [make_episode(5, 0), make_episode(3, 1, "ReachCube-v0", success=False), make_episode(2, 2)]
    return write(tmp_path / "d.h5", episodes), episodes


def assert_same(a: Episode, b: Episode):
    assert a.obs.keys() == b.obs.keys()
    for key in a.obs:
        assert a.obs[key].dtype == b.obs[key].dtype
        np.testing.assert_array_equal(a.obs[key], b.obs[key])
    for name in ("actions", "rewards", "terminated", "truncated", "success", "dones"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    for name in ("instruction", "task", "env_id", "seed", "env_index", "policy", "succeeded", "num_samples"):
        assert getattr(a, name) == getattr(b, name)


# ---------------------------------------------------------------------------- round trip and layout
def test_round_trip_is_exact_and_metadata_is_readable_without_arrays(two_task_file):
    path, episodes = two_task_file
    with EpisodeReader(path) as reader:
        assert len(reader) == 3
        for i, episode in enumerate(episodes):
            assert_same(reader[i], episode)
        assert_same(reader[-1], episodes[-1])
        assert reader.tasks == ["PushCube-v0", "ReachCube-v0"]
        assert reader.instructions == ["do PushCube-v0", "do ReachCube-v0"]
        assert reader.obs_keys == ("image", "proprio", "state")
        assert reader.obs_shapes["image"] == reader.image_shape == (8, 8, 3)
        assert reader.env_kwargs == {"obs_mode": "pixels+state", "image_size": 8}
        infos = reader.episode_info()
        assert [(i.task, i.num_samples, i.success, i.seed) for i in infos] == [
            ("PushCube-v0", 5, True, 100), ("ReachCube-v0", 3, False, 101), ("PushCube-v0", 2, True, 102)]
        assert infos[0].env_id == "worldsim/PushCube-v0"
        summary = reader.summary()
        assert summary["episodes"] == 3 and summary["steps"] == 10
        assert summary["success_rate"] == pytest.approx(2 / 3)
        assert summary["tasks"]["PushCube-v0"] == {"episodes": 2, "steps": 7, "mean_length": 3.5,
                                                   "success_rate": 1.0}
        assert summary["tasks"]["ReachCube-v0"]["success_rate"] == 0.0
        with pytest.raises(IndexError, match="holds 3 episodes"):
            reader[3]
        with pytest.raises(KeyError, match="unknown array 'depth'"):
            reader.load(0, "depth")


def test_file_follows_the_documented_layout(two_task_file):
    path, _ = two_task_file
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == "worldsim-episodes" and f.attrs["version"] == 1 and f.attrs["total"] == 3
        assert f.attrs["tasks"] == '["PushCube-v0", "ReachCube-v0"]'
        demo = f["data/demo_0"]
        assert demo["obs/image"].shape == (6, 8, 8, 3) and demo["obs/image"].dtype == np.uint8
        assert demo["obs/image"].chunks == (1, 8, 8, 3) and demo["obs/image"].compression == "lzf"
        assert demo["actions"].shape == (5, 4) and demo["actions"].dtype == np.float32
        assert demo["success"].shape == (6,) and demo["dones"].shape == (5,)
        assert demo["dones"][-1] and not demo["dones"][:-1].any()
        assert dict(demo.attrs) == {
            "instruction": "do PushCube-v0", "task": "PushCube-v0", "env_id": "worldsim/PushCube-v0",
            "seed": 100, "env_index": 0, "num_samples": 5, "success": True, "policy": "test"}


# ---------------------------------------------------------------------------- atomic writes
def test_an_exception_inside_the_writer_leaves_no_file(tmp_path):
    path = tmp_path / "d.h5"
    with pytest.raises(RuntimeError, match="boom"), EpisodeWriter(path) as writer:
        writer.add_episode(make_episode(3))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_overwrite_leaves_the_existing_file_intact(tmp_path):
    path = write(tmp_path / "d.h5", [make_episode(4, 7)])
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="boom"), EpisodeWriter(path, overwrite=True) as writer:
        writer.add_episode(make_episode(2))
        raise RuntimeError("boom")
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["d.h5"]


def test_existing_files_are_refused_unless_overwrite(tmp_path):
    path = write(tmp_path / "d.h5", [make_episode(4, 7)])
    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True"):
        EpisodeWriter(path)
    write(path, [make_episode(2, 1), make_episode(3, 2)], overwrite=True)
    with EpisodeReader(path) as reader:
        assert [i.num_samples for i in reader.episode_info()] == [2, 3]


def test_writer_rejects_misuse_and_mixed_layouts(tmp_path):
    writer = EpisodeWriter(tmp_path / "d.h5")
    with pytest.raises(RuntimeError, match="not open"):
        writer.add_episode(make_episode(2))
    with pytest.raises(ValueError, match="same keys and shapes"), writer:
        writer.add_episode(make_episode(2))
        writer.add_episode(make_episode(2, wrist=True))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="JSON-serialisable"):
        EpisodeWriter(tmp_path / "e.h5", env_kwargs={"bad": object()})


# ---------------------------------------------------------------------------- bad episodes
@pytest.mark.parametrize("change, message", [
    (lambda e: e.obs.update(proprio=e.obs["proprio"][:-1]),
     r"obs\['proprio'\] must hold T\+1=6 observations"),
    (lambda e: e.obs.update(image=e.obs["image"].astype(np.float32)), "must be uint8"),
    (lambda e: e.obs.update(depth=e.obs["image"]), r"unknown observation key\(s\) \['depth'\]"),
    (lambda e: setattr(e, "actions", e.actions[:, :3]), r"actions must have shape \(T, 4\)"),
    (lambda e: e.actions.__setitem__((1, 1), np.nan), "actions contain NaN"),
    (lambda e: setattr(e, "success", e.success[:-1]), r"success must have shape \(6,\)"),
    (lambda e: setattr(e, "rewards", e.rewards[:-1]), r"rewards must have shape \(5,\)"),
    (lambda e: e.truncated.__setitem__(1, True), "ends at step 1"),
    (lambda e: setattr(e, "terminated", e.terminated * 0.5), "must be booleans"),
])
def test_bad_episodes_are_rejected_naming_the_field(change, message):
    episode = make_episode(5)
    change(episode)
    with pytest.raises(ValueError, match=message):
        Episode(**{k: getattr(episode, k) for k in episode.__dataclass_fields__})


# ---------------------------------------------------------------------------- bad files
def test_truncated_and_garbage_files_get_a_clear_error(two_task_file, tmp_path):
    path, _ = two_task_file
    cut = tmp_path / "cut.h5"
    data = path.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cut.h5"):
        EpisodeReader(cut)
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ValueError, match="garbage.h5 is not a readable HDF5 file"):
        EpisodeReader(garbage)
    with pytest.raises(FileNotFoundError, match="no dataset file"):
        EpisodeReader(tmp_path / "missing.h5")


def edit(path, action):
    with h5py.File(path, "a") as f:
        action(f)


@pytest.mark.parametrize("action, message", [
    (lambda f: f.attrs.__setitem__("format", "robomimic"), "'format' attribute is 'robomimic'"),
    (lambda f: f.attrs.__setitem__("version", 9), "version 9 is not supported"),
    (lambda f: f.__delitem__("data/demo_1/actions"), "data/demo_1 lacks actions"),
    (lambda f: f["data/demo_0"].attrs.__delitem__("instruction"), "lacks attribute instruction"),
    (lambda f: f.__delitem__("data/demo_2"), "'total' says 3 episodes"),
    (lambda f: f["data/demo_0"].attrs.__setitem__("num_samples", 4), r"actions has shape \(5, 4\)"),
    (lambda f: (f.__delitem__("data/demo_1/obs/proprio"),
                f.create_dataset("data/demo_1/obs/proprio", data=np.zeros((3, 4), np.float32))),
     "holds 3 observations; with num_samples=3 it must hold 4"),
])
def test_files_not_in_the_layout_are_rejected_naming_the_file(two_task_file, action, message):
    path, _ = two_task_file
    edit(path, action)
    with pytest.raises(ValueError, match=message) as err:
        EpisodeReader(path)
    assert str(path) in str(err.value)


# ---------------------------------------------------------------------------- windows
@pytest.mark.parametrize("in_memory", [True, False])
def test_windows_clamp_context_pad_chunks_and_mask_the_future(two_task_file, in_memory):
    path, _ = two_task_file
    data = WindowDataset(path, context=3, chunk=4, future=2, in_memory=in_memory)
    assert len(data) == 5 + 3 + 2
    first = data[0]  # episode 0, t = 0: context repeats frame 0
    assert first["image"].shape == (3, 8, 8, 3) and first["image"].dtype == torch.uint8
    assert first["image"][:, 1, 1, 0].tolist() == [0, 0, 0]
    assert first["proprio"][:, 0].tolist() == [0, 0, 0] and first["proprio"].dtype == torch.float32
    assert first["actions"][:, 0].tolist() == [0, 1, 2, 3] and first["action_mask"].all()
    assert first["next_image"][:, 1, 1, 0].tolist() == [1, 2] and first["next_mask"].all()
    assert (first["episode"], first["step"], first["task"], first["success"]) == (0, 0, "PushCube-v0", True)
    last = data[4]  # episode 0, t = 4 = T - 1: chunk padded with the last action, future clamped at T
    assert last["image"][:, 1, 1, 0].tolist() == [2, 3, 4]
    assert last["actions"][:, 0].tolist() == [4, 4, 4, 4]
    assert last["action_mask"].tolist() == [True, False, False, False]
    assert last["rewards"].tolist() == pytest.approx([0.4, 0, 0, 0])
    assert last["next_image"][:, 1, 1, 0].tolist() == [5, 5] and last["next_mask"].tolist() == [True, False]
    reach = data[6]  # episode 1 (code 1), t = 1
    assert reach["image"][:, 1, 1, 0].tolist() == [10, 10, 11]
    assert reach["proprio"][:, 1].tolist() == [1, 1, 1]
    assert (reach["episode"], reach["step"], reach["instruction"], reach["success"]) == (
        1, 1, "do ReachCube-v0", False)
    assert data[-1]["step"] == 1 and data[-1]["episode"] == 2
    with pytest.raises(IndexError):
        data[len(data)]


def test_lazy_and_in_memory_windows_agree_also_through_dataloader_workers(two_task_file):
    path, _ = two_task_file
    eager = WindowDataset(path, context=2, chunk=3, future=1)
    lazy = WindowDataset(path, context=2, chunk=3, future=1, in_memory=False)
    loader = DataLoader(lazy, batch_size=4, num_workers=2)
    batches = list(loader)
    for key in ("image", "proprio", "state", "actions", "action_mask", "rewards", "next_image", "next_mask"):
        expected = torch.stack([eager[i][key] for i in range(len(eager))])
        assert torch.equal(torch.cat([b[key] for b in batches]), expected), key
    instructions = [text for b in batches for text in b["instruction"]]
    assert instructions == [eager[i]["instruction"] for i in range(len(eager))]


def test_task_filter_and_key_selection(two_task_file):
    path, _ = two_task_file
    push = WindowDataset(path, tasks=["PushCube-v0"], keys=["proprio"])
    assert len(push) == 7 and {push[i]["task"] for i in range(7)} == {"PushCube-v0"}
    assert set(push[0]) == {"proprio", "actions", "action_mask", "rewards", "instruction", "task", "episode",
                            "step", "success"}
    assert [push[i]["episode"] for i in (0, 5)] == [0, 2] and push.instructions == ["do PushCube-v0"]
    assert push.episode_index.tolist() == [0] * 5 + [2] * 2
    with pytest.raises(ValueError, match=r"\['StackCube-v0'\] not in .*holds PushCube-v0, ReachCube-v0"):
        WindowDataset(path, tasks=["StackCube-v0"])
    with pytest.raises(ValueError, match=r"unknown obs key\(s\) \['wrist_image'\]"):
        WindowDataset(path, keys=["wrist_image"])
    with pytest.raises(ValueError, match="context=0 must be an int >= 1"):
        WindowDataset(path, context=0)


def test_dataset_statistics_match_numpy(two_task_file):
    path, episodes = two_task_file
    stats = dataset_statistics(path)
    assert set(stats) == {"proprio", "state", "actions"}
    actions = np.concatenate([e.actions for e in episodes])
    mean, std = stats["actions"]
    assert mean.dtype == np.float32 and mean.shape == (4,)
    np.testing.assert_allclose(mean, actions.mean(0), rtol=1e-6)
    np.testing.assert_allclose(std, np.maximum(actions.std(0), 1e-6), rtol=1e-5)
    assert std[2] == pytest.approx(1e-6)  # a constant dimension: floored, safe to divide by
    state = np.concatenate([e.obs["state"] for e in episodes])
    np.testing.assert_allclose(stats["state"][0], state.mean(0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="no statistics for 'image'"):
        dataset_statistics(path, keys=["image"])


# ---------------------------------------------------------------------------- the episode index
def test_index_lays_out_flat_rows_and_items_episode_by_episode(two_task_file):
    path, episodes = two_task_file
    with EpisodeReader(path) as reader:
        index = EpisodeIndex(reader, keys=["proprio", "actions", "success"])
    assert len(index) == 3 and index.num_items == 10 and index.lengths.tolist() == [5, 3, 2]
    assert index.obs_start.tolist() == [0, 6, 10] and index.step_start.tolist() == [0, 5, 8]
    assert index.item_episode.tolist() == [0] * 5 + [1] * 3 + [2] * 2
    assert index.item_step.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 0, 1]
    assert index.arrays["proprio"].shape == (13, 4) and index.arrays["actions"].shape == (10, 4)
    for j, episode in enumerate(episodes):
        for key, expected in (("proprio", episode.obs["proprio"]), ("actions", episode.actions),
                              ("success", episode.success)):
            np.testing.assert_array_equal(index.arrays[key][index.episode_rows(j, key)], expected)


def test_index_context_rows_repeat_the_first_frame_before_the_start(two_task_file):
    path, _ = two_task_file
    with EpisodeReader(path) as reader:
        index = EpisodeIndex(reader, keys=["proprio"])
    assert index.context_steps(0, 3).tolist() == [0, 0, 0]
    assert index.context_steps(np.array([1, 4]), 3).tolist() == [[0, 0, 1], [2, 3, 4]]
    rows = index.context_rows(np.array([0, 1, 2]), np.array([4, 1, 0]), 3)
    assert rows.tolist() == [[2, 3, 4], [6, 6, 7], [10, 10, 10]]
    proprio = index.arrays["proprio"][rows]  # proprio[t] = (t, code, 0.5, -0.5)
    assert proprio[..., 0].tolist() == [[2, 3, 4], [0, 0, 1], [0, 0, 0]]
    assert proprio[..., 1].tolist() == [[0] * 3, [1] * 3, [2] * 3]


def test_index_chunk_and_future_rows_stop_at_the_episode_end(two_task_file):
    path, _ = two_task_file
    with EpisodeReader(path) as reader:
        index = EpisodeIndex(reader)
    assert index.arrays == {}  # nothing loaded without keys: lazy readers read the file
    rows, mask = index.chunk_steps(1, 1, 4)  # T = 3, t = 1: actions 1, 2, then the last one repeated
    assert rows.tolist() == [1, 2, 2, 2] and mask.tolist() == [True, True, False, False]
    rows, mask = index.chunk_steps(np.array([0, 2]), np.array([0, 1]), 2)
    assert rows.tolist() == [[0, 1], [1, 1]] and mask.tolist() == [[True, True], [True, False]]
    ahead, real = index.future_steps(1, 1, 3)  # observations 2 and 3 = T, then T repeated
    assert ahead.tolist() == [2, 3, 3] and real.tolist() == [True, True, False]


def test_index_selects_episodes_by_task_and_file_index_with_clear_errors(two_task_file):
    path, _ = two_task_file
    with EpisodeReader(path) as reader:
        push = EpisodeIndex(reader, tasks=["PushCube-v0"])
        assert push.file_index.tolist() == [0, 2] and push.tasks == ["PushCube-v0"]
        assert push.lengths.tolist() == [5, 2] and push.num_items == 7
        assert EpisodeIndex(reader, tasks="ReachCube-v0").file_index.tolist() == [1]
        assert EpisodeIndex(reader, tasks=["PushCube-v0"], episodes=[1, 2]).file_index.tolist() == [2]
        assert EpisodeIndex(reader, episodes=np.array([2, 0])).file_index.tolist() == [0, 2]  # file order
        with pytest.raises(ValueError, match=r"tasks=\['PushCube-v0', 'StackCube-v0'\]: \['StackCube-v0'\] not in "
                                             r"keyframes=.*d\.h5'.*it holds PushCube-v0, ReachCube-v0"):
            EpisodeIndex(reader, tasks=["PushCube-v0", "StackCube-v0"], argument="keyframes")
        with pytest.raises(ValueError, match=r"tasks=\[\] selects nothing"):
            EpisodeIndex(reader, tasks=[])
        with pytest.raises(ValueError, match=r"data=.*holds no episodes of task\(s\) ReachCube-v0 to use "
                                             r"\(it has 3 episodes of PushCube-v0, ReachCube-v0\)"):
            EpisodeIndex(reader, tasks=["ReachCube-v0"], episodes=[0])
        with pytest.raises(KeyError, match="unknown array 'depth'"):
            EpisodeIndex(reader, keys=["depth"])


def test_windows_and_the_world_model_bank_read_one_index(two_task_file):
    path, _ = two_task_file
    windows = WindowDataset(path, context=3, tasks=["PushCube-v0"], keys=["proprio"])
    bank = EpisodeBank(path, tasks=["PushCube-v0"])
    assert len(windows) == bank.num_transitions == 7
    j, t = bank.index.item_episode, bank.index.item_step
    served = np.stack([windows[i]["proprio"].numpy() for i in range(len(windows))])
    np.testing.assert_array_equal(served, bank.proprio[bank.context_rows(j, t, 3)])
    assert windows.episode_index.tolist() == bank.index.file_index[j].tolist() == [0] * 5 + [2] * 2
    with pytest.raises(ValueError, match=r"\['StackCube-v0'\] not in keyframes="):
        EpisodeBank(path, tasks=["StackCube-v0"], argument="keyframes")


def test_split_episodes_is_seeded_disjoint_and_keeps_one_of_each_when_it_can():
    train, val = split_episodes(10, 0.2, seed=3)
    assert len(val) == 2 and sorted([*train, *val]) == list(range(10))
    assert [a.tolist() for a in split_episodes(10, 0.2, seed=3)] == [train.tolist(), val.tolist()]
    assert [len(a) for a in split_episodes(2, 0.9, seed=0)] == [1, 1]
    assert [len(a) for a in split_episodes(5, 0.0, seed=0)] == [5, 0]


# ---------------------------------------------------------------------------- policy outputs
def policy_outputs(steps: int, code: int = 0, dim: int = 6, samples: int = 3, chunk: int = 2) -> dict:
    """Features whose row t is (code, t, ...) and action samples drawn from a seeded generator."""
    rng = np.random.default_rng(code)
    features = rng.normal(size=(steps, dim))
    features[:, 0], features[:, 1] = code, np.arange(steps)
    return {"features": features, "action_samples": rng.uniform(-1, 1, (steps, samples, chunk, 4))}


def with_outputs(episode: Episode, outputs: dict) -> Episode:
    fields = {k: getattr(episode, k) for k in episode.__dataclass_fields__}
    return Episode(**{**fields, "policy_outputs": outputs})


def test_policy_outputs_round_trip_and_load_by_key(tmp_path):
    episodes = [with_outputs(make_episode(5, 0), policy_outputs(5, 0)),
                with_outputs(make_episode(3, 1, "ReachCube-v0"), policy_outputs(3, 1))]
    assert episodes[0].policy_outputs["features"].dtype == np.float32  # converted from float64
    path = write(tmp_path / "d.h5", episodes)
    with EpisodeReader(path) as reader:
        assert reader.policy_keys == ("features", "action_samples")
        assert reader.policy_shapes == {"features": (6,), "action_samples": (3, 2, 4)}
        assert reader.summary()["policy_outputs"] == reader.policy_shapes
        for i, episode in enumerate(episodes):
            loaded = reader[i]
            assert_same(loaded, episode)
            assert loaded.policy_outputs.keys() == episode.policy_outputs.keys()
            for key, expected in episode.policy_outputs.items():
                array = reader.load(i, key)
                assert array.dtype == np.float32 and array.shape == expected.shape
                np.testing.assert_array_equal(array, expected)
                np.testing.assert_array_equal(loaded.policy_outputs[key], expected)
        assert reader.load(1, "features")[:, :2].tolist() == [[1, 0], [1, 1], [1, 2]]
        with pytest.raises(KeyError, match="unknown array 'value'.*success, features, action_samples"):
            reader.load(0, "value")
    with h5py.File(path, "r") as f:
        assert f["data/demo_0/policy/features"].shape == (5, 6)
        assert f["data/demo_0/policy/action_samples"].dtype == np.float32


def test_a_file_without_policy_outputs_reads_with_none(two_task_file):
    path, _ = two_task_file
    with h5py.File(path, "r") as f:
        assert "policy" not in f["data/demo_0"]  # the layout of files written before the group existed
    with EpisodeReader(path) as reader:
        assert reader.policy_keys == () and reader.policy_shapes == {}
        assert reader[0].policy_outputs == {} and reader.summary()["policy_outputs"] == {}
        with pytest.raises(KeyError, match="unknown array 'features'"):
            reader.load(0, "features")


@pytest.mark.parametrize("outputs, message", [
    ({"value": np.zeros((5, 1))},
     r"unknown policy output key\(s\) \['value'\]; allowed: features, action_samples"),
    ({"features": np.zeros((4, 6))}, r"policy_outputs\['features'\] must have shape \(T, D\) with T=5"),
    ({"features": np.zeros((5, 2, 3))},
     r"policy_outputs\['features'\] must have shape \(T, D\).*\(5, 2, 3\)"),
    ({"features": np.zeros((5, 0))}, "no empty axis"),
    ({"action_samples": np.zeros((5, 3, 4))},
     r"policy_outputs\['action_samples'\] must have shape \(T, S, K, A\)"),
    ({"action_samples": np.full((5, 1, 1, 4), np.inf)},
     r"policy_outputs\['action_samples'\] contain NaN or inf"),
    ({"features": np.full((5, 2), np.nan)}, r"policy_outputs\['features'\] contain NaN"),
])
def test_bad_policy_outputs_are_rejected_naming_the_field(outputs, message):
    with pytest.raises(ValueError, match=message):
        with_outputs(make_episode(5), outputs)
    with pytest.raises(TypeError, match="policy_outputs must be a dict"):
        with_outputs(make_episode(5), [np.zeros((5, 2))])


@pytest.mark.parametrize("first, second, message", [
    (policy_outputs(3), {},
     r"episode 1 \(PushCube-v0\) has policy outputs none; this file holds \{'features'"),
    ({}, policy_outputs(2), r"has policy outputs \{'features': \(6,\), .*\}; this file holds none"),
    (policy_outputs(3), policy_outputs(2, dim=7), r"has policy outputs \{'features': \(7,\)"),
    (policy_outputs(3), {"features": policy_outputs(2)["features"]},
     r"has policy outputs \{'features': \(6,\)\};"),
])
def test_the_writer_refuses_episodes_whose_policy_outputs_differ(tmp_path, first, second, message):
    with pytest.raises(ValueError, match=message), EpisodeWriter(tmp_path / "d.h5") as writer:
        writer.add_episode(with_outputs(make_episode(3), first))  # T=3 outputs, or none
        writer.add_episode(with_outputs(make_episode(2), second))  # T=2 outputs, or none
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("action, message", [
    (lambda f: f.__delitem__("data/demo_1/policy"), "data/demo_1 has policy outputs none, demo_0 has"),
    (lambda f: f.__delitem__("data/demo_0/policy/action_samples"), "data/demo_1 has policy outputs"),
    (lambda f: (f.__delitem__("data/demo_1/policy/features"),
                f.create_dataset("data/demo_1/policy/features", data=np.zeros((2, 6), np.float32))),
     r"policy/features has shape \(2, 6\); with num_samples=3 it must be \(T, D\) with T=3"),
    (lambda f: (f.__delitem__("data/demo_0/policy/features"),
                f.create_dataset("data/demo_0/policy/features", data=np.zeros((5, 6)))),
     "data/demo_0/policy/features must be a float32 dataset"),
    (lambda f: f.create_dataset("data/demo_0/policy/value", data=np.zeros(5, np.float32)),
     "policy/value is not a policy output"),
])
def test_files_with_inconsistent_policy_outputs_are_rejected(tmp_path, action, message):
    path = write(tmp_path / "d.h5", [with_outputs(make_episode(5, 0), policy_outputs(5, 0)),
                                     with_outputs(make_episode(3, 1), policy_outputs(3, 1))])
    edit(path, action)
    with pytest.raises(ValueError, match=message) as err:
        EpisodeReader(path)
    assert str(path) in str(err.value)
