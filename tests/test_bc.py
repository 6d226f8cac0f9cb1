"""Behaviour cloning: outputs of a run, exact resume, bad input, and two-process training."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import write_toml
from safetensors.torch import load_file

from worldsim.commands.cli import main
from worldsim.data.collect import collect_episodes
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig, load_policy
from worldsim.policies.tinyvla import TinyVLA
from worldsim.training.bc import BCConfig, random_shift, train_bc


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    path = tmp_path_factory.mktemp("bc") / "demos.h5"
    collect_episodes(["ReachCube-v0", "PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.2)),
                     4, path, num_envs=4, image_size=32, progress=False)
    return path


def tiny(demos, out, **kwargs):
    base = dict(data=demos, out=out, steps=12, batch_size=16, language="learned", val_every=6,
                checkpoint_every=6, torch_threads=1, device="cpu")
    return BCConfig(**{**base, **kwargs})


@pytest.mark.slow
def test_a_run_leaves_config_metrics_curves_and_a_loadable_policy(demos, tmp_path):
    summary = train_bc(tiny(demos, tmp_path / "run", keep_checkpoints=True))
    run = tmp_path / "run"
    kept = {p.name: load_file(p / "model.safetensors") for p in sorted(run.glob("policy_step*"))}
    assert list(kept) == ["policy_step12", "policy_step6"]  # every checkpoint's policy, beside policy/
    latest = load_file(run / "policy" / "model.safetensors")
    assert all(torch.equal(latest[k], kept["policy_step12"][k]) for k in latest)
    assert not all(torch.equal(kept["policy_step6"][k], kept["policy_step12"][k]) for k in latest)
    assert summary["steps"] == 12 and summary["train_episodes"] == 7 and summary["val_episodes"] == 1
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "val/loss" in r] == [6, 12]
    assert all(torch.isfinite(torch.tensor(r["train/loss"])) for r in rows if "train/loss" in r)
    assert json.loads((run / "config.json").read_text())["steps"] == 12
    assert (run / "curves.png").stat().st_size > 1000 and any((run / "tb").iterdir())
    policy = load_policy(run)
    assert isinstance(policy, TinyVLA) and policy.chunk_size == 4 and policy.config.image_size == 32
    assert set(policy.config.instructions) == {"move the gripper above the red cube",
                                               "push the red cube onto the blue square"}


@pytest.mark.slow
def test_resume_continues_exactly(demos, tmp_path):
    train_bc(tiny(demos, tmp_path / "straight"))
    stopped = train_bc(tiny(demos, tmp_path / "resumed", time_budget=1e-6))  # stops after one step
    assert stopped["steps"] == 1 and stopped["stopped_by"] == "time_budget"
    train_bc(tiny(demos, tmp_path / "resumed", resume=True))
    a = load_file(tmp_path / "straight" / "policy" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "policy" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    steps = [json.loads(line)["step"] for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps)  # one history, no duplicated steps after the resume


@pytest.mark.slow
def test_an_earlier_run_in_out_is_refused_unless_overwrite_or_resume(demos, tmp_path, capsys):
    run = tmp_path / "run"
    train_bc(tiny(demos, run, steps=2, checkpoint_every=2, val_every=2))
    events = sorted(p.name for p in (run / "tb").iterdir())
    argv = ["train-bc", "--data", str(demos), "--out", str(run), "--steps", "2", "--batch-size", "8",
            "--language", "learned", "--device", "cpu", "--torch-threads", "1"]
    assert main(argv) == 2
    assert "already holds files" in capsys.readouterr().err
    assert sorted(p.name for p in (run / "tb").iterdir()) == events  # untouched
    with pytest.raises(ValueError, match="pass one"):
        tiny(demos, run, resume=True, overwrite=True)
    (run / "stale.txt").write_text("from another run")
    assert main([*argv, "--overwrite"]) == 0
    assert not (run / "stale.txt").exists()
    new_events = sorted(p.name for p in (run / "tb").iterdir())
    assert len(new_events) == 1 and new_events != events  # one run's TensorBoard file, the new one
    assert main([*argv, "--steps", "3", "--resume"]) == 0
    assert json.loads((run / "summary.json").read_text())["steps"] == 3


def test_random_shift_moves_whole_images_by_at_most_the_pad():
    images = torch.zeros(8, 16, 16, 3, dtype=torch.uint8)
    images[:, 8, 8] = 255
    shifted = random_shift(images, 2, torch.Generator().manual_seed(0))
    assert shifted.dtype == torch.uint8 and shifted.shape == images.shape
    for img in shifted:
        (y, x), = (img[..., 0] == 255).nonzero().tolist()
        assert abs(y - 8) <= 2 and abs(x - 8) <= 2
    assert len({tuple((img[..., 0] == 255).nonzero().tolist()[0]) for img in shifted}) > 1


def test_bad_input_gets_clear_errors(demos, tmp_path, capsys):
    bad = tmp_path / "bad.h5"
    bad.write_bytes(demos.read_bytes()[: demos.stat().st_size // 2])
    assert main(["train-bc", "--data", str(bad), "--out", str(tmp_path / "r"), "--steps", "2"]) == 2
    assert "bad.h5" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no such file"):
        BCConfig(data=tmp_path / "missing.h5")
    with pytest.raises(ValueError, match="steps=0"):
        tiny(demos, tmp_path / "r", steps=0)
    with pytest.raises(ValueError, match="StackCube-v0"):
        train_bc(tiny(demos, tmp_path / "r", task=("StackCube-v0",)))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train_bc(tiny(demos, tmp_path / "fresh", resume=True))


@pytest.mark.slow
def test_two_processes_under_torchrun_stay_in_sync(demos, tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    every = write_toml(tmp_path / "every.toml", "val_every = 3\ncheckpoint_every = 3\n")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29517",
           "-m", "worldsim", "train-bc", "--data", str(demos), "--out", str(out), "--steps", "6",
           "--batch-size", "8", "--language", "learned", "--torch-threads", "1", "--device", "cpu",
           "--config-file", str(every)]
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=240)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["ranks_in_sync"] and summary["steps"] == 6
    assert load_policy(out).chunk_size == 4
