"""Check worldsim's LeRobot v2.1 export and import against the real ``lerobot`` package.

lerobot pins an older torch (0.3.x: torch<2.8, gymnasium<1.0) than worldsim, so the check runs
in two environments over one work folder; each step prints one JSON line last:

    # worldsim's venv: collect a small file with the scripted expert and export it
    python benchmarks/studies/lerobot_roundtrip.py prepare --work /tmp/lerobot-check
    # a separate venv with lerobot: python3.11 -m venv /tmp/lerobot-venv &&
    #   /tmp/lerobot-venv/bin/pip install "lerobot==0.3.3" "numpy<2.3" h5py
    /tmp/lerobot-venv/bin/python benchmarks/studies/lerobot_roundtrip.py lerobot --work /tmp/lerobot-check
    # worldsim's venv again: import the datasets lerobot created
    python benchmarks/studies/lerobot_roundtrip.py import --work /tmp/lerobot-check

``lerobot`` loads the export with ``LeRobotDataset(repo_id, root=...)`` offline, compares every
frame with the worldsim file (read with h5py), trains off-the-shelf ACT and Diffusion Policy a
few steps on it (lerobot's ``make_policy`` from the dataset's metadata), and records two small
datasets with lerobot's own ``LeRobotDataset.create`` / ``add_frame`` / ``save_episode``: one
with an ``image`` camera (PNG in parquet, lossless) and one with a ``video`` camera (AV1 mp4).
``import`` reads both with :func:`worldsim.data.lerobot.import_lerobot` and compares them with
the values they were made from (exactly; video frames within the codec's error) and with the
frames lerobot itself decodes (saved by the ``lerobot`` step).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

REPO_ID = "worldsim/roundtrip"
NATIVE_EPISODES, NATIVE_FRAMES, NATIVE_SHAPE = 2, 6, (24, 32, 3)


def native_frame(episode: int, t: int) -> dict[str, np.ndarray]:
    """The values of frame ``t`` of ``episode`` of the datasets lerobot records here."""
    y, x, c = np.indices(NATIVE_SHAPE)
    image = (2 * x + 2 * y + 20 * c + 30 * episode + 15 * t).astype(np.uint8)  # smooth: video codecs keep it
    state = np.array([t, episode, 0.25 * t, -1.0], np.float32)
    action = np.array([0.1 * t, -0.1 * t, episode, 0.5], np.float32)
    return {"image": image, "state": state, "action": action, "reward": np.array([t / 10], np.float32),
            "success": np.array([t == NATIVE_FRAMES - 1])}


# ---------------------------------------------------------------------------- worldsim venv
def prepare(work: Path) -> dict:
    from worldsim.data.collect import collect_episodes
    from worldsim.data.lerobot import export_lerobot
    from worldsim.policies.expert import ScriptedExpert, ScriptedExpertConfig

    stats = collect_episodes(["ReachCube-v0", "PushCube-v0"],
                             lambda task: ScriptedExpert(ScriptedExpertConfig(task, noise=0.3)), 2,
                             work / "demo.h5", num_envs=2, image_size=32, wrist_camera=True, overwrite=True,
                             progress=False)
    exported = export_lerobot(work / "demo.h5", work / "exported", fps=20, overwrite=True)
    return {"step": "prepare", "episodes": stats.episodes, "frames": exported.frames,
            "tasks": list(exported.tasks)}


def check_import(work: Path) -> dict:
    from worldsim.data.lerobot import import_lerobot
    from worldsim.data.reader import EpisodeReader

    result: dict = {"step": "import"}
    for name in ("native_image", "native_video"):
        out = work / f"{name}.h5"
        import_lerobot(work / name, out, overwrite=True)
        with EpisodeReader(out) as reader:
            errors, decoded = [], np.load(work / f"{name}_decoded.npy")
            ours = np.concatenate([episode.obs["image"] for episode in reader])
            for e, episode in enumerate(reader):
                want = [native_frame(e, t) for t in range(NATIVE_FRAMES)]
                assert episode.num_samples == NATIVE_FRAMES - 1 and episode.instruction == f"native task {e}"
                assert np.array_equal(episode.obs["proprio"], np.stack([w["state"] for w in want]))
                assert np.array_equal(episode.actions, np.stack([w["action"] for w in want[:-1]]))
                assert np.array_equal(episode.rewards, np.concatenate([w["reward"] for w in want[:-1]]))
                assert np.array_equal(episode.success[1:], np.concatenate([w["success"] for w in want[:-1]]))
                images = np.stack([w["image"] for w in want])
                errors.append(np.abs(episode.obs["image"].astype(int) - images).mean())
            result[name] = {"episodes": len(reader),
                            "obs": {k: list(s) for k, s in reader.obs_shapes.items()},
                            "image_mean_abs_error": round(float(np.mean(errors)), 3),
                            "mean_abs_difference_to_lerobot_decoding": round(float(
                                np.abs(ours.astype(int) - decoded).mean()), 3),
                            "vectors_exact": True}
    assert result["native_image"]["image_mean_abs_error"] == 0.0
    assert result["native_image"]["mean_abs_difference_to_lerobot_decoding"] == 0.0
    assert result["native_video"]["image_mean_abs_error"] < 2.0
    assert result["native_video"]["mean_abs_difference_to_lerobot_decoding"] < 1.0
    return result


# ---------------------------------------------------------------------------- lerobot venv
def check_export(work: Path) -> dict:
    import h5py
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.datasets.utils import dataset_to_policy_features

    dataset = LeRobotDataset(REPO_ID, root=work / "exported")
    pairs = {"observation.images.front": "obs/image", "observation.images.wrist": "obs/wrist_image",
             "observation.state": "obs/proprio", "observation.environment_state": "obs/state"}
    frame, checked = 0, 0
    with h5py.File(work / "demo.h5", "r") as file:
        for e in range(int(file.attrs["total"])):
            group = file[f"data/demo_{e}"]
            steps = int(group.attrs["num_samples"])
            for t in range(steps + 1):
                item = dataset[frame]
                assert item["episode_index"].item() == e and item["frame_index"].item() == t
                assert item["task"] == group.attrs["instruction"]
                for column, path in pairs.items():
                    value = item[column].numpy()
                    if column.startswith("observation.images"):
                        value = np.rint(value.transpose(1, 2, 0) * 255).astype(np.uint8)
                    assert np.array_equal(value, group[path][t]), (column, e, t)
                assert np.array_equal(item["action"].numpy(), group["actions"][min(t, steps - 1)])
                assert item["next.reward"].item() == (group["rewards"][t] if t < steps else 0.0)
                assert item["next.success"].item() == group["success"][min(t + 1, steps)]
                frame, checked = frame + 1, checked + 1
    assert frame == len(dataset) == dataset.meta.total_frames
    features = dataset_to_policy_features(dataset.meta.features)
    return {"lerobot_frames": len(dataset), "episodes": dataset.meta.total_episodes,
            "frames_compared": checked, "stats_keys": sorted(dataset.meta.stats),
            "policy_features": {k: [f.type.name, list(f.shape)] for k, f in features.items()}}


def train(work: Path, kind: str, steps: int) -> dict:
    import torch
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.policies.factory import make_policy

    torch.manual_seed(0)
    if kind == "act":
        from lerobot.policies.act.configuration_act import ACTConfig
        config = ACTConfig(device="cpu", pretrained_backbone_weights=None, chunk_size=8, n_action_steps=8,
                           dim_model=64, dim_feedforward=128, n_encoder_layers=1, n_vae_encoder_layers=1,
                           push_to_hub=False)
    else:
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
        config = DiffusionConfig(device="cpu", crop_shape=None, down_dims=(32, 64), n_obs_steps=2, horizon=8,
                                 n_action_steps=4, drop_n_last_frames=3, push_to_hub=False)
    meta = LeRobotDatasetMetadata(REPO_ID, root=work / "exported")
    policy = make_policy(config, ds_meta=meta)
    dataset = LeRobotDataset(REPO_ID, root=work / "exported",
                             delta_timestamps=resolve_delta_timestamps(config, meta))
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True, drop_last=True)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    losses, start = [], time.perf_counter()
    policy.train()
    while len(losses) < steps:
        for batch in loader:
            loss, _ = policy.forward(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    policy.eval()
    policy.reset()
    # select_action takes one observation (no history: the policy keeps its own), batched
    item = LeRobotDataset(REPO_ID, root=work / "exported")[0]
    observation = {k: v.unsqueeze(0) for k, v in item.items() if k.startswith("observation.")}
    with torch.no_grad():
        action = policy.select_action(observation)
    assert action.shape == (1, 4) and torch.isfinite(action).all()
    return {"policy": kind, "steps": steps, "first_loss": round(losses[0], 4),
            "last_loss": round(float(np.mean(losses[-3:])), 4), "action_shape": list(action.shape),
            "seconds": round(time.perf_counter() - start, 1)}


def record_native(work: Path, camera: str) -> dict:
    import shutil

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = work / f"native_{camera}"
    shutil.rmtree(root, ignore_errors=True)
    features = {
        "observation.images.top": {"dtype": camera, "shape": NATIVE_SHAPE,
                                   "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": (4,), "names": ["x", "y", "z", "grip"]},
        "action": {"dtype": "float32", "shape": (4,), "names": None},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.success": {"dtype": "bool", "shape": (1,), "names": None},
    }
    dataset = LeRobotDataset.create(f"native/{camera}", fps=10, features=features, root=root,
                                    use_videos=camera == "video")
    for e in range(NATIVE_EPISODES):
        for t in range(NATIVE_FRAMES):
            values = native_frame(e, t)
            dataset.add_frame({"observation.images.top": values["image"],
                               "observation.state": values["state"], "action": values["action"],
                               "next.reward": values["reward"], "next.success": values["success"]},
                              task=f"native task {e}")
        dataset.save_episode()
    shutil.rmtree(root / "images", ignore_errors=True)  # lerobot's frame staging area, not the dataset
    # the frames as lerobot itself decodes them, for `import` to compare worldsim's decoding with
    # pyav: lerobot's default decoder, torchcodec, needs a system FFmpeg this machine may lack
    loaded = LeRobotDataset(f"native/{camera}", root=root, video_backend="pyav")
    frames = np.stack([np.rint(loaded[i]["observation.images.top"].numpy().transpose(1, 2, 0) * 255)
                       for i in range(len(loaded))]).astype(np.uint8)
    np.save(work / f"native_{camera}_decoded.npy", frames)
    files = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
    return {"root": str(root), "files": files}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("prepare", "lerobot", "import"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/lerobot-check"))
    parser.add_argument("--train-steps", type=int, default=30, help="per policy; 0 skips training")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.step == "prepare":
        result = prepare(args.work)
    elif args.step == "import":
        result = check_import(args.work)
    else:
        import lerobot

        result = {"step": "lerobot", "lerobot": lerobot.__version__, **check_export(args.work),
                  "training": [train(args.work, kind, args.train_steps) for kind in ("act", "diffusion")
                               if args.train_steps > 0],
                  "recorded": [record_native(args.work, camera) for camera in ("image", "video")]}
    report("lerobot_roundtrip", result, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
