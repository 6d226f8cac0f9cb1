"""LeRobot v3.0 and v2.1 datasets: exact round trips, the layout and metadata lerobot reads, datasets that
lerobot itself recorded, atomic writes and clear errors for bad input."""

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from worldsim.data import lerobot_format
from worldsim.data.collect import collect_episodes
from worldsim.data.episode import Episode
from worldsim.data.lerobot import export_lerobot, import_lerobot
from worldsim.data.reader import EpisodeReader
from worldsim.data.writer import EpisodeWriter
from worldsim.policies.expert import ScriptedExpert, ScriptedExpertConfig
from worldsim.runtime.atomic import atomic_dir

FIXTURES = Path(__file__).parent / "fixtures" / "lerobot_v21"


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> Path:
    """Three short scripted-expert episodes of two tasks: 32x32 front and wrist images, proprio, state."""
    path = tmp_path_factory.mktemp("lerobot") / "demo.h5"
    collect_episodes(["ReachCube-v0", "PushCube-v0"],
                     lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.3)), 1, path, num_envs=1,
                     image_size=32, wrist_camera=True, progress=False)
    three = path.with_name("three.h5")
    with EpisodeReader(path) as reader, EpisodeWriter(three, reader.env_kwargs) as writer:
        for episode in (*reader, reader[0]):
            writer.add_episode(episode)
    return three


def assert_same_files(a: Path, b: Path) -> None:
    with EpisodeReader(a) as left, EpisodeReader(b) as right:
        assert left.env_kwargs == right.env_kwargs and left.tasks == right.tasks
        assert left.obs_shapes == right.obs_shapes and left.policy_shapes == right.policy_shapes
        assert len(left) == len(right)
        for x, y in zip(left, right, strict=True):
            assert x.obs.keys() == y.obs.keys() and x.policy_outputs.keys() == y.policy_outputs.keys()
            for key in x.obs:
                assert x.obs[key].dtype == y.obs[key].dtype and np.array_equal(x.obs[key], y.obs[key]), key
            for key in x.policy_outputs:
                assert np.array_equal(x.policy_outputs[key], y.policy_outputs[key]), key
            for name in ("actions", "rewards", "terminated", "truncated", "success"):
                assert getattr(x, name).dtype == getattr(y, name).dtype
                assert np.array_equal(getattr(x, name), getattr(y, name)), name
            for name in ("instruction", "task", "env_id", "seed", "env_index", "policy"):
                assert getattr(x, name) == getattr(y, name), name


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_round_trip_is_exact(collected, tmp_path, version):
    exported = export_lerobot(collected, tmp_path / "lerobot", version=version)
    back = import_lerobot(tmp_path / "lerobot", tmp_path / "back.h5")
    with EpisodeReader(collected) as reader:
        steps = [info.num_samples for info in reader.episode_info()]
    assert exported.episodes == back.episodes == 3
    assert exported.frames == back.frames == sum(steps) + 3
    assert exported.tasks == back.tasks == ("ReachCube-v0", "PushCube-v0")
    assert_same_files(collected, tmp_path / "back.h5")


def test_export_without_state_keeps_camera_and_proprio_only(collected, tmp_path):
    export_lerobot(collected, tmp_path / "lerobot", state=False)
    info = json.loads((tmp_path / "lerobot" / "meta" / "info.json").read_text())
    assert "observation.environment_state" not in info["features"]
    assert {"observation.images.front", "observation.images.wrist", "observation.state"} <= set(info["features"])
    assert info["worldsim"]["env_kwargs"]["obs_mode"] == "pixels"
    import_lerobot(tmp_path / "lerobot", tmp_path / "back.h5")
    with EpisodeReader(collected) as full, EpisodeReader(tmp_path / "back.h5") as back:
        assert "state" in full.obs_keys and "state" not in back.obs_keys
        for x, y in zip(full, back, strict=True):
            assert np.array_equal(x.obs["image"], y.obs["image"]) and np.array_equal(x.obs["proprio"], y.obs["proprio"])
            assert np.array_equal(x.actions, y.actions)


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_round_trip_keeps_policy_outputs_and_state_only_files(tmp_path, version):
    rng = np.random.default_rng(0)
    with EpisodeWriter(tmp_path / "outputs.h5", env_kwargs={"obs_mode": "state"}) as writer:
        for steps, success in ((3, False), (5, True)):
            terminated = np.arange(steps) == steps - 1 if success else np.zeros(steps, bool)
            writer.add_episode(Episode(
                obs={"state": rng.normal(size=(steps + 1, 7)).astype(np.float32)},
                actions=rng.uniform(-1, 1, (steps, 4)), rewards=rng.normal(size=steps),
                terminated=terminated, truncated=~terminated & (np.arange(steps) == steps - 1),
                success=np.r_[True, np.zeros(steps - 1, bool), success],  # success at the start: kept too
                instruction="lift the cube", task="LiftCube-v0", seed=7, policy="mlp run",
                policy_outputs={"features": rng.normal(size=(steps, 6)),
                                "action_samples": rng.normal(size=(steps, 2, 3, 4))}))
    export_lerobot(tmp_path / "outputs.h5", tmp_path / "lerobot", version=version)
    info = json.loads((tmp_path / "lerobot/meta/info.json").read_text())
    assert info["features"]["worldsim.action_samples"]["shape"] == [2, 3, 4]
    assert "observation.images.front" not in info["features"] and "observation.state" not in info["features"]
    import_lerobot(tmp_path / "lerobot", tmp_path / "back.h5")
    assert_same_files(tmp_path / "outputs.h5", tmp_path / "back.h5")


def test_v21_export_has_the_lerobot_layout_and_metadata(collected, tmp_path):
    root = tmp_path / "lerobot"
    export_lerobot(collected, root, fps=10, version="v2.1")
    with EpisodeReader(collected) as reader:
        episodes = list(reader)
    lengths = [e.num_samples + 1 for e in episodes]
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [f"data/chunk-000/episode_00000{i}.parquet" for i in range(3)] + [
        "meta/episodes.jsonl", "meta/episodes_stats.jsonl", "meta/info.json", "meta/tasks.jsonl"]
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["fps"] == 10 and info["video_path"] is None
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, sum(lengths), 2)
    assert info["splits"] == {"train": "0:3"} and info["chunks_size"] == 1000 and info["total_chunks"] == 1
    assert info["data_path"] == "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    features = info["features"]
    assert features["observation.images.front"] == {"dtype": "image", "shape": [32, 32, 3],
                                                    "names": ["height", "width", "channels"]}
    assert features["observation.images.wrist"]["shape"] == [32, 32, 3]
    assert features["observation.state"] == {"dtype": "float32", "shape": [4],
                                             "names": ["tcp_x", "tcp_y", "tcp_z", "gripper_opening"]}
    state = features["observation.environment_state"]
    assert state["shape"] == [56] and len(state["names"]) == 56 and state["names"][0] == "tcp_pos.0"
    assert features["action"] == {"dtype": "float32", "shape": [4], "names": ["dx", "dy", "dz", "gripper"]}
    assert features["next.reward"]["dtype"] == "float32" and features["next.done"]["dtype"] == "bool"
    assert all(features[k]["shape"] == [1] for k in ("timestamp", "frame_index", "episode_index", "index"))
    assert info["worldsim"] == {"format": "worldsim-episodes", "version": 1, "env_kwargs": reader.env_kwargs,
                                "tasks": ["ReachCube-v0", "PushCube-v0"]}
    tasks = [json.loads(line) for line in (root / "meta/tasks.jsonl").read_text().splitlines()]
    assert tasks == [{"task_index": 0, "task": episodes[0].instruction},
                     {"task_index": 1, "task": episodes[1].instruction}]
    rows = [json.loads(line) for line in (root / "meta/episodes.jsonl").read_text().splitlines()]
    assert [(r["episode_index"], r["length"], r["tasks"]) for r in rows] == [
        (i, n, [e.instruction]) for i, (n, e) in enumerate(zip(lengths, episodes, strict=True))]
    assert rows[1]["worldsim"]["task"] == "PushCube-v0"
    assert rows[1]["worldsim"]["success"] == episodes[1].succeeded

    table = pq.read_table(root / "data/chunk-000/episode_000001.parquet")
    assert set(table.column_names) == set(features)
    described = json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]
    assert described["observation.images.front"] == {"_type": "Image"}
    assert described["action"]["_type"] == "Sequence" and described["action"]["length"] == 4
    frames, episode = table.to_pydict(), episodes[1]
    steps = episode.num_samples
    png = Image.open(io.BytesIO(frames["observation.images.front"][5]["bytes"]))
    assert png.format == "PNG" and np.array_equal(np.asarray(png), episode.obs["image"][5])
    assert frames["frame_index"] == list(range(steps + 1)) and frames["episode_index"] == [1] * (steps + 1)
    assert frames["index"] == list(range(lengths[0], lengths[0] + steps + 1))
    assert np.allclose(frames["timestamp"], np.arange(steps + 1) / 10)
    assert frames["task_index"] == [1] * (steps + 1)
    # the final frame (final observation): repeats the last action, no reward, done
    assert np.array_equal(np.array(frames["action"][-2:], np.float32), episode.actions[[-1, -1]])
    assert frames["next.reward"][-1] == 0.0 and frames["next.done"][-1] is True
    assert frames["next.success"][:-1] == episode.success[1:].tolist()

    stats = [json.loads(line) for line in (root / "meta/episodes_stats.jsonl").read_text().splitlines()]
    assert [s["episode_index"] for s in stats] == [0, 1, 2] and set(stats[1]["stats"]) == set(features)
    image = stats[1]["stats"]["observation.images.front"]
    assert np.array(image["mean"]).shape == (3, 1, 1) and image["count"] == [steps + 1]
    assert np.allclose(np.array(image["mean"])[:, 0, 0], episode.obs["image"].reshape(-1, 3).mean(0) / 255)
    assert np.allclose(stats[1]["stats"]["observation.state"]["max"], episode.obs["proprio"].max(0))


def test_v30_export_has_the_lerobot_layout_and_metadata(collected, tmp_path):
    root = tmp_path / "lerobot"
    export_lerobot(collected, root, fps=10)
    with EpisodeReader(collected) as reader:
        episodes = list(reader)
    lengths = [e.num_samples + 1 for e in episodes]
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet",
                     "meta/info.json", "meta/stats.json", "meta/tasks.parquet"]
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10 and info["video_path"] is None
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, sum(lengths), 2)
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert (info["chunks_size"], info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (1000, 100, 200)
    assert "total_chunks" not in info and info["worldsim"]["tasks"] == ["ReachCube-v0", "PushCube-v0"]
    # tasks: pandas reads the task strings back as the index (how lerobot looks them up)
    tasks = pq.read_table(root / "meta/tasks.parquet")
    assert tasks.column("task_index").to_pylist() == [0, 1]
    assert tasks.column("__index_level_0__").to_pylist() == [episodes[0].instruction, episodes[1].instruction]
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["__index_level_0__"]
    # one row per episode, pointing into the one data file
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    starts = np.cumsum([0, *lengths[:-1]]).tolist()
    assert [(r["episode_index"], r["length"], r["tasks"], r["dataset_from_index"], r["dataset_to_index"])
            for r in rows] == [(i, n, [e.instruction], a, a + n)
                               for i, (n, e, a) in enumerate(zip(lengths, episodes, starts, strict=True))]
    assert all(r["data/chunk_index"] == r["data/file_index"] == r["meta/episodes/file_index"] == 0 for r in rows)
    assert json.loads(rows[1]["worldsim"])["task"] == "PushCube-v0"
    image_mean = np.array(rows[1]["stats/observation.images.front/mean"])
    assert image_mean.shape == (3, 1, 1) and rows[1]["stats/observation.images.front/count"] == [lengths[1]]
    assert np.allclose(image_mean[:, 0, 0], episodes[1].obs["image"].reshape(-1, 3).mean(0) / 255)
    # the frames of every episode in order, in one table that describes its images to `datasets`
    table = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert table.num_rows == sum(lengths) and table.column("index").to_pylist() == list(range(sum(lengths)))
    assert table.column("episode_index").to_pylist() == [i for i, n in enumerate(lengths) for _ in range(n)]
    assert json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]["observation.images.front"] == {
        "_type": "Image"}
    # the whole dataset's statistics: every frame of every episode
    stats = json.loads((root / "meta/stats.json").read_text())
    assert set(stats) == set(info["features"]) and stats["observation.state"]["count"] == [sum(lengths)]
    proprio = np.concatenate([e.obs["proprio"] for e in episodes])
    assert np.allclose(stats["observation.state"]["mean"], proprio.mean(0), atol=1e-6)
    assert np.allclose(stats["observation.state"]["std"], proprio.std(0), atol=1e-6)
    assert np.allclose(stats["observation.state"]["min"], proprio.min(0))
    # quantiles per episode exactly, combined weighted by frames (lerobot's rule)
    assert np.allclose(rows[1]["stats/observation.state/q50"], np.median(episodes[1].obs["proprio"], axis=0))
    assert np.array(rows[1]["stats/observation.images.front/q99"]).shape == (3, 1, 1)
    q10 = sum(n * np.quantile(e.obs["proprio"], 0.1, axis=0) for n, e in zip(lengths, episodes, strict=True))
    assert np.allclose(stats["observation.state"]["q10"], q10 / sum(lengths))


def test_v30_export_starts_a_new_data_file_past_the_size_limit(collected, tmp_path, monkeypatch):
    monkeypatch.setattr(lerobot_format, "DATA_FILE_SIZE_MB", 1e-6)  # every episode past the limit
    export_lerobot(collected, tmp_path / "lerobot")
    data = sorted(str(p.relative_to(tmp_path / "lerobot")) for p in (tmp_path / "lerobot" / "data").rglob("*"))
    assert data == ["data/chunk-000", *[f"data/chunk-000/file-00{i}.parquet" for i in range(3)]]
    rows = pq.read_table(tmp_path / "lerobot/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [r["data/file_index"] for r in rows] == [0, 1, 2]
    import_lerobot(tmp_path / "lerobot", tmp_path / "back.h5")
    assert_same_files(collected, tmp_path / "back.h5")


def test_bad_v30_files_are_one_clear_error(collected, tmp_path):
    export_lerobot(collected, tmp_path / "good")

    def broken(name):
        root = tmp_path / name
        shutil.copytree(tmp_path / "good", root)
        return root

    root = broken("no_tasks")
    (root / "meta/tasks.parquet").unlink()
    with pytest.raises(ValueError, match=r"no_tasks/meta/tasks.parquet: missing"):
        import_lerobot(root, tmp_path / "x.h5")
    root = broken("bad_episodes")
    (root / "meta/episodes/chunk-000/file-000.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"file-000.parquet: is not a readable parquet file"):
        import_lerobot(root, tmp_path / "x.h5")
    root = broken("no_pointer")
    episodes = root / "meta/episodes/chunk-000/file-000.parquet"
    pq.write_table(pq.read_table(episodes).drop_columns(["data/file_index"]), episodes)
    with pytest.raises(ValueError, match=r"meta/episodes: episode rows lack data/file_index"):
        import_lerobot(root, tmp_path / "x.h5")
    root = broken("short_data")
    data = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    pq.write_table(table.slice(1), data)  # episode 0 loses its first frame
    with pytest.raises(ValueError, match=r"file-000.parquet: holds \d+ frames of episode 0; its metadata "
                                         r"\(meta/episodes\) says \d+"):
        import_lerobot(root, tmp_path / "x.h5")
    assert not (tmp_path / "x.h5").exists()


def test_an_unknown_version_is_refused(collected, tmp_path):
    with pytest.raises(ValueError, match=r"version='v4.0': worldsim writes LeRobot v3.0 or v2.1"):
        export_lerobot(collected, tmp_path / "x", version="v4.0")
    assert not (tmp_path / "x").exists()


def test_export_is_atomic_and_refuses_an_existing_folder(collected, tmp_path, monkeypatch):
    out = tmp_path / "lerobot"
    export_lerobot(collected, out)
    before = (out / "meta/info.json").read_text()
    with pytest.raises(FileExistsError, match="overwrite"):
        export_lerobot(collected, out, fps=5)
    assert (out / "meta/info.json").read_text() == before

    calls = []

    def fail_on_second(*args):
        calls.append(args)
        if len(calls) == 2:
            raise OSError("disk full")
        return frame_table(*args)

    frame_table = lerobot_format.frame_table
    monkeypatch.setattr("worldsim.data.lerobot.frame_table", fail_on_second)
    with pytest.raises(OSError, match="disk full"):
        export_lerobot(collected, out, fps=5, overwrite=True)
    assert (out / "meta/info.json").read_text() == before  # the previous export is untouched
    calls.clear()
    with pytest.raises(OSError, match="disk full"):
        export_lerobot(collected, tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lerobot"]  # no folder, no temporary left
    monkeypatch.undo()
    export_lerobot(collected, out, fps=5, overwrite=True)
    assert json.loads((out / "meta/info.json").read_text())["fps"] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lerobot"]


def test_atomic_dir_refuses_a_file_and_creates_parents(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError), atomic_dir(tmp_path / "file", overwrite=True):
        pass
    with atomic_dir(tmp_path / "a" / "b") as tmp:
        (tmp / "x.txt").write_text("1")
    assert (tmp_path / "a/b/x.txt").read_text() == "1"


def native_frame(episode: int, t: int) -> dict[str, np.ndarray]:
    """The values lerobot 0.3.3 recorded the fixtures with (benchmarks/studies/lerobot_roundtrip.py)."""
    y, x, c = np.indices((24, 32, 3))
    return {"image": (2 * x + 2 * y + 20 * c + 30 * episode + 15 * t).astype(np.uint8),
            "state": np.array([t, episode, 0.25 * t, -1.0], np.float32),
            "action": np.array([0.1 * t, -0.1 * t, episode, 0.5], np.float32),
            "reward": np.float32(t / 10), "success": t == 5}


@pytest.mark.parametrize("camera", ["image", "video"])
def test_import_datasets_that_lerobot_recorded(camera, tmp_path):
    result = import_lerobot(FIXTURES / camera, tmp_path / "native.h5")
    assert (result.episodes, result.frames, result.tasks) == (2, 12, ("native task 0", "native task 1"))
    with EpisodeReader(tmp_path / "native.h5") as reader:
        assert reader.obs_shapes == {"image": (24, 32, 3), "proprio": (4,)} and reader.env_kwargs == {}
        for e, episode in enumerate(reader):
            want = [native_frame(e, t) for t in range(6)]
            assert episode.instruction == episode.task == f"native task {e}"
            assert episode.env_id == f"lerobot/{camera}" and episode.num_samples == 5
            assert np.array_equal(episode.obs["proprio"], np.stack([w["state"] for w in want]))
            assert np.array_equal(episode.actions, np.stack([w["action"] for w in want[:-1]]))
            assert np.array_equal(episode.rewards, [w["reward"] for w in want[:-1]])
            assert episode.success.tolist() == [False] + [w["success"] for w in want[:-1]]
            assert not episode.terminated.any() and episode.truncated.tolist() == [False] * 4 + [True]
            error = np.abs(episode.obs["image"].astype(int) - np.stack([w["image"] for w in want]))
            assert error.max() == 0 if camera == "image" else error.mean() < 2.0  # AV1 video is lossy
    import_lerobot(FIXTURES / camera, tmp_path / "named.h5", task="PushCube-v0")
    with EpisodeReader(tmp_path / "named.h5") as reader:
        assert reader.tasks == ["PushCube-v0"] and reader.instructions == ["native task 0", "native task 1"]


def copy_fixture(tmp_path, camera: str = "image") -> Path:
    root = tmp_path / "dataset"
    shutil.copytree(FIXTURES / camera, root)
    return root


def edit_info(root: Path, edit) -> None:
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info))


def rename_feature(old: str, new: str, spec: dict | None = None):
    def edit(info):
        info["features"][new] = spec or info["features"].pop(old)
    return edit


@pytest.mark.parametrize("edit, match", [
    (lambda info: info.update(codebase_version="v9.0"), "codebase_version 'v9.0' is not supported"),
    (lambda info: info.pop("fps"), "lacks fps"),
    (lambda info: info["features"].pop("frame_index"), "features lack frame_index"),
    (lambda info: info["features"].pop("action"), "no 'action' feature"),
    (lambda info: info["features"]["action"].update(shape=[7]), r"'action' is float32 \[7\]"),
    (lambda info: info["features"]["observation.state"].update(shape=[6]),
     r"'observation.state' has shape \[6\]; worldsim's proprio is \[4\]"),
    (lambda info: info["features"].pop("observation.state"), "no proprio"),
    (lambda info: info["features"].pop("observation.images.top"), "no image"),
    (rename_feature("", "observation.images.side", {"dtype": "image", "shape": [24, 32, 3], "names": None}),
     "cameras observation.images.top, observation.images.side .*image_key"),
])
def test_bad_metadata_is_one_clear_error(tmp_path, edit, match):
    root = copy_fixture(tmp_path)
    edit_info(root, edit)
    with pytest.raises(ValueError, match=match) as error:
        import_lerobot(root, tmp_path / "out.h5")
    assert str(root) in str(error.value)
    assert not (tmp_path / "out.h5").exists()


def test_bad_files_are_one_clear_error(tmp_path, collected):
    with pytest.raises(FileNotFoundError, match="no LeRobot dataset folder"):
        import_lerobot(tmp_path / "missing", tmp_path / "out.h5")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty/meta/info.json: missing: this folder is not a LeRobot"):
        import_lerobot(tmp_path / "empty", tmp_path / "out.h5")

    root = copy_fixture(tmp_path)
    (root / "meta/tasks.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl: line 1 is not JSON"):
        import_lerobot(root, tmp_path / "out.h5")
    shutil.rmtree(root)

    root = copy_fixture(tmp_path)
    data = root / "data/chunk-000/episode_000001.parquet"
    data.write_bytes(data.read_bytes()[:200])
    with pytest.raises(ValueError, match=r"episode_000001.parquet: is not a readable parquet file"):
        import_lerobot(root, tmp_path / "out.h5")
    data.unlink()
    with pytest.raises(ValueError, match=r"episode_000001.parquet: missing \(the data file of episode 1\)"):
        import_lerobot(root, tmp_path / "out.h5")
    shutil.rmtree(root)

    root = copy_fixture(tmp_path)
    lines = (root / "meta/episodes.jsonl").read_text().replace('"length": 6', '"length": 7', 1)
    (root / "meta/episodes.jsonl").write_text(lines)
    with pytest.raises(ValueError, match=r"episode_000000.parquet: holds 6 frames of episode 0; "
                                         r"its metadata \(meta/episodes.jsonl\) says 7"):
        import_lerobot(root, tmp_path / "out.h5")
    shutil.rmtree(root)

    root = copy_fixture(tmp_path, "video")
    (root / "videos/chunk-000/observation.images.top/episode_000000.mp4").write_bytes(b"not a video")
    with pytest.raises(ValueError, match=r"episode_000000.mp4: cannot be decoded"):
        import_lerobot(root, tmp_path / "out.h5")
    assert not (tmp_path / "out.h5").exists()

    with pytest.raises(ValueError, match="info.json is not a readable HDF5 file"):
        export_lerobot(root / "meta/info.json", tmp_path / "export")
    with pytest.raises(ValueError, match="fps=0"):
        export_lerobot(collected, tmp_path / "export", fps=0)
    with pytest.raises(ValueError, match="image_key='observation.images.nope' is not one of its features"):
        import_lerobot(FIXTURES / "image", tmp_path / "out.h5", image_key="observation.images.nope")
    (tmp_path / "taken.h5").write_text("")
    with pytest.raises(FileExistsError):
        import_lerobot(FIXTURES / "image", tmp_path / "taken.h5")


def test_import_a_v30_dataset_that_lerobot_recorded(tmp_path):
    """tests/fixtures/lerobot_v30/record.py wrote it with lerobot 0.4.4's own LeRobotDataset."""
    result = import_lerobot(FIXTURES.parent / "lerobot_v30" / "image", tmp_path / "native.h5")
    assert (result.episodes, result.frames, result.tasks) == (2, 7, ("push the red cube", "reach the cube"))
    rng = np.random.default_rng(0)
    with EpisodeReader(tmp_path / "native.h5") as reader:
        assert reader.obs_shapes == {"image": (8, 8, 3), "proprio": (4,)}
        for e, (episode, frames) in enumerate(zip(reader, (3, 4), strict=True)):
            images = np.stack([rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8) for _ in range(frames)])
            assert np.array_equal(episode.obs["image"], images)
            assert np.array_equal(episode.obs["proprio"], np.arange(4, dtype=np.float32) + 10 * e
                                  + np.arange(frames, dtype=np.float32)[:, None])
            assert np.allclose(episode.actions, 0.1 * np.arange(1, frames)[:, None] * (-1) ** e * np.ones(4))
            # reward and success fall on each episode's last frame, whose action worldsim drops
            assert episode.rewards.tolist() == [0.0] * (frames - 1) and not episode.success.any()
            assert episode.truncated.tolist() == [False] * (frames - 2) + [True]


def test_lerobot_loads_the_export(collected, tmp_path):
    lerobot_dataset = pytest.importorskip(
        "lerobot.datasets.lerobot_dataset",
        reason="lerobot is not installed: it pins an older torch than worldsim's CI, so it lives in its own "
               "environment (pip install -e '.[test,lerobot]'; README, 'Datasets in LeRobot format')")
    root = tmp_path / "worldsim" / "test"
    version = getattr(lerobot_dataset, "CODEBASE_VERSION", None)
    if version not in ("v2.1", "v3.0"):
        pytest.skip(f"this lerobot reads LeRobot datasets of codebase version {version}, not v2.1 or v3.0")
    export_lerobot(collected, root, version=version)  # the version this lerobot reads (0.4: v3.0)
    dataset = lerobot_dataset.LeRobotDataset("worldsim/test", root=root)
    with EpisodeReader(collected) as reader:
        episodes = list(reader)
    assert len(dataset) == sum(e.num_samples + 1 for e in episodes)
    frame = 0
    for episode in episodes:
        for t in range(episode.num_samples + 1):
            item = dataset[frame]
            image = item["observation.images.front"].numpy().transpose(1, 2, 0)
            assert np.array_equal(np.rint(image * 255).astype(np.uint8), episode.obs["image"][t])
            assert np.array_equal(item["observation.state"].numpy(), episode.obs["proprio"][t])
            assert np.array_equal(item["observation.environment_state"].numpy(), episode.obs["state"][t])
            assert np.array_equal(item["action"].numpy(), episode.actions[min(t, episode.num_samples - 1)])
            assert item["task"] == episode.instruction and item["frame_index"].item() == t
            frame += 1


def test_export_and_import_commands_round_trip_and_fail_in_one_line(collected, tmp_path, capsys):
    from worldsim.commands.cli import main

    assert main(["export", "--format", "lerobot", "--data", str(collected), "--out", str(tmp_path / "lr")]) == 0
    assert json.loads((tmp_path / "lr" / "meta" / "info.json").read_text())["codebase_version"] == "v3.0"
    assert main(["export", "--data", str(collected), "--out", str(tmp_path / "lr21"), "--codebase-version",
                 "v2.1"]) == 0
    assert json.loads((tmp_path / "lr21" / "meta" / "info.json").read_text())["codebase_version"] == "v2.1"
    back = str(tmp_path / "back.h5")
    assert main(["import", "--format", "lerobot", "--data", str(tmp_path / "lr"), "--out", back]) == 0
    with EpisodeReader(collected) as a, EpisodeReader(tmp_path / "back.h5") as b:
        assert len(a) == len(b) and np.array_equal(a[0].obs["image"], b[0].obs["image"])
    capsys.readouterr()
    assert main(["export", "--data", str(collected), "--out", str(tmp_path / "lr")]) == 2  # exists
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
    assert main(["import", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "x.h5")]) == 2
    assert not (tmp_path / "x.h5").exists()
