"""Failure detection end to end: recorded rollouts -> `worldsim detect`, and the online wrapper."""

import json

import numpy as np
import pytest
import torch

from worldsim.commands.cli import main
from worldsim.data.collect import collect_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.data.writer import EpisodeWriter
from worldsim.failure import DetectorWrapper, Rollout, load_detector, load_rollouts, make_detector
from worldsim.policies.mlp import MLPPolicy, MLPPolicyConfig


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Rollouts of a random 2-step-chunk MLP policy on ReachCube, with features and samples."""
    torch.manual_seed(0)
    policy = MLPPolicy(MLPPolicyConfig(chunk_size=2, hidden=(32, 32)))
    path = tmp_path_factory.mktemp("rollouts") / "reach.h5"
    collect_episodes(
        ["ReachCube-v0", "ReachZone-v0"],
        lambda task: policy,
        16,
        path,
        num_envs=8,
        obs_mode="pixels+state",
        image_size=32,
        record_features=True,
        num_samples=4,
        progress=False,
    )
    return policy, path


def labelled(rollouts):
    """A random policy rarely succeeds: label rollouts by a feature statistic instead, so the
    detectors have both classes to fit and calibrate on (the plumbing is what is tested)."""
    median = np.median([r.features.mean() for r in rollouts])
    return [
        Rollout(r.task, bool(r.features.mean() < median), r.features, r.action_samples, r.index)
        for r in rollouts
    ]


@pytest.fixture(scope="module")
def labelled_file(recorded, tmp_path_factory):
    """The recorded file with the outcomes of :func:`labelled`, for the CLI."""
    _, path = recorded
    outcome = {r.index: r.success for r in labelled(load_rollouts(path))}
    out = tmp_path_factory.mktemp("labelled") / "reach.h5"
    with EpisodeReader(path) as reader, EpisodeWriter(out, env_kwargs=reader.env_kwargs) as writer:
        for i in range(len(reader)):
            episode = reader[i]
            episode.success = np.zeros_like(episode.success)
            episode.success[-1] = outcome[i]
            writer.add_episode(episode)
    return out


@pytest.mark.slow
def test_recorded_rollouts_load_with_features_and_samples(recorded):
    policy, path = recorded
    rollouts = load_rollouts(path)
    assert len(rollouts) == 32
    assert {r.task for r in rollouts} == {"ReachCube-v0", "ReachZone-v0"}
    assert rollouts[0].features.shape == (rollouts[0].length, 32)  # the MLP's last hidden layer
    assert rollouts[0].action_samples.shape == (rollouts[0].length, 4, 2, 4)
    assert len(load_rollouts(path, tasks=["ReachZone-v0"])) == 16
    with pytest.raises(ValueError, match="none of the tasks"):
        load_rollouts(path, tasks=["StackCube-v0"])


@pytest.mark.slow
def test_wrapper_scores_match_offline_scores_and_alarms_latch(recorded, make_vec):
    policy, path = recorded
    rollouts = labelled(load_rollouts(path))
    detector = make_detector("knn").fit(rollouts)
    detector.calibrate([r for r in rollouts if r.success], alpha=0.3, method="constant")
    env = DetectorWrapper(
        make_vec("ReachCube-v0", 2, obs_mode="state", max_episode_steps=12), policy, detector, num_samples=4
    )
    obs, info = env.reset(seed=3)
    features, scores, alarms, steps = [], [], [], []
    torch.manual_seed(0)
    for _ in range(20):
        with torch.no_grad():
            batch = policy.preprocess(obs)
            features.append(policy.features(batch).numpy()[0])
            action = policy.act(batch).actions[:, 0].numpy()
        assert info["failure_score"].shape == (2,) and info["failure_alarm"].dtype == bool
        scores.append(info["failure_score"][0])
        alarms.append(info["failure_alarm"][0])
        steps.append(info["episode_step"][0])
        obs, _, _, _, info = env.step(np.clip(action, -1, 1))
    first = steps.index(0, 1)
    assert first == 13  # 12 steps to the limit, the final observation, then (NextStep) the reset one
    offline = detector.score_rollouts([Rollout("ReachCube-v0", False, np.stack(features[:first]), None)])[0]
    np.testing.assert_allclose(scores[:first], offline[:, 0], rtol=1e-5)
    np.testing.assert_allclose(
        scores[first],
        detector.score_rollouts(
            [Rollout("ReachCube-v0", False, np.stack(features[first : first + 1]), None)]
        )[0][0, 0],
        rtol=1e-5,
    )
    # the alarm latches within an episode and matches the threshold crossing
    expected = np.maximum.accumulate(offline[:, 0] > detector.thresholds[0].values[0])
    np.testing.assert_array_equal(alarms[:first], expected)
    assert env.overhead_ms["detector"] > 0 and env.overhead_ms["policy"] > 0


def test_wrapper_refuses_an_uncalibrated_detector(recorded, make_vec):
    policy, path = recorded
    detector = make_detector("knn").fit(labelled(load_rollouts(path)))
    with pytest.raises(ValueError, match="fitted and calibrated"):
        DetectorWrapper(make_vec("ReachCube-v0", 2, obs_mode="state"), policy, detector)


@pytest.mark.slow
def test_detect_cli_writes_the_report_and_usable_detectors(labelled_file, tmp_path, capsys):
    path = labelled_file
    out = tmp_path / "detect"
    code = main(
        [
            "detect",
            "--data",
            str(path),
            "--detectors",
            "knn,ace,stac",
            "--seen-tasks",
            "ReachCube-v0",
            "--unseen-tasks",
            "ReachZone-v0",
            "--alpha",
            "0.4",
            "--cp",
            "constant",
            "--seeds",
            "0",
            "1",
            "--videos",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert set(results["detectors"]) == {"knn", "ace", "stac"}
    assert results["protocol"]["seen_tasks"] == ["ReachCube-v0"]
    assert len(results["detectors"]["knn"]["seeds"]) == 2
    for name in ("table.md", "roc.png", "sweep.png"):
        assert (out / name).stat().st_size > 0
    assert "| knn | seen |" in (out / "table.md").read_text()
    # the trivial detector beside them: one seen task, so one failure rate scores every rollout
    assert set(results["failure_rates"]) == {"ReachCube-v0", "ReachZone-v0"}
    assert all(0.0 <= rate <= 1.0 for rate in results["failure_rates"].values())
    prior = results["task_prior"]["summary"]
    assert prior["seen"]["roc_auc"]["mean"] == prior["unseen"]["roc_auc"]["mean"] == 0.5
    assert "| task-prior (trivial) | unseen |" in (out / "table.md").read_text()
    assert list((out / "videos").glob("*.mp4")) or list((out / "videos").glob("*.gif"))
    loaded = load_detector(out / "detectors" / "knn")
    assert loaded.thresholds is not None and loaded.thresholds[0].alpha == 0.4


def test_detect_fits_on_other_rollouts_beside_the_real_split(labelled_file, tmp_path, capsys):
    fit = tmp_path / "fit.h5"
    with EpisodeReader(labelled_file) as reader, EpisodeWriter(fit, env_kwargs=reader.env_kwargs) as writer:
        for info in reader.episode_info():
            if info.task == "ReachCube-v0":
                writer.add_episode(reader[info.index])
    argv = ["detect", "--data", str(labelled_file), "--detectors", "knn,ace", "--seen-tasks", "ReachCube-v0",
            "--unseen-tasks", "ReachZone-v0", "--alpha", "0.4", "--cp", "constant", "--seeds", "0", "--videos", "0"]
    out = tmp_path / "detect"
    assert main([*argv, "--fit-data", str(fit), "--out", str(out)]) == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    # recorded in physics: not "@imagined"; ACE learns nothing from rollouts, so it has no second row
    assert set(results["detectors"]) == {"knn", "knn@fit-data", "ace"}
    assert results["fit_rollouts"]["episodes"] == 16
    assert "| knn@fit-data | unseen |" in (out / "table.md").read_text()
    assert (out / "detectors" / "knn@fit-data" / "detector.json").is_file()
    # fitting on an unseen task's rollouts would leak the test: refused before anything is fitted
    assert main([*argv, "--fit-data", str(labelled_file), "--out", str(tmp_path / "leak")]) == 2
    assert "holds ReachZone-v0, not a seen task (ReachCube-v0)" in capsys.readouterr().err
    assert not (tmp_path / "leak").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--detectors", "knn,safe-mpl"], "unknown detector 'safe-mpl'"),
        (["--alpha", "1.5"], "alpha"),
        (["--seen-tasks", "ReachCube-v0", "--unseen-tasks", "ReachCube-v0"], "both seen and unseen"),
        (["--suite", "tabletop-4", "--seen-tasks", "ReachCube-v0"], "either --suite"),
    ],
)
def test_detect_cli_bad_values_exit_2(labelled_file, tmp_path, capsys, argv, message):
    path = labelled_file
    assert main(["detect", "--data", str(path), "--out", str(tmp_path / "d"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "d" / "results.json").exists()


def test_detect_refuses_a_set_without_successes_before_fitting(labelled_file, tmp_path, capsys, monkeypatch):
    import worldsim.failure.detect
    from worldsim.failure.rollouts import load_rollouts

    def fitted(*args, **kwargs):
        raise AssertionError("a detector was fitted before the calibration set was checked")

    failures = [r for r in load_rollouts(labelled_file) if not r.success]
    monkeypatch.setattr(worldsim.failure.detect, "load_rollouts", lambda path: failures)
    monkeypatch.setattr(worldsim.failure.detect, "evaluate_detector", fitted)
    argv = ["detect", "--data", str(labelled_file), "--seen-tasks", "ReachCube-v0", "--detectors", "knn",
            "--videos", "0", "--out", str(tmp_path / "d")]
    assert main(argv) == 2
    assert "the calibration set holds no successful rollouts" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_detect_cli_on_a_file_without_features_says_how_to_record(tmp_path, capsys):
    out = tmp_path / "plain.h5"
    assert (
        main(
            [
                "collect",
                "--task",
                "ReachCube-v0",
                "--episodes",
                "2",
                "--num-envs",
                "2",
                "--obs-mode",
                "state",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert main(["detect", "--data", str(out), "--out", str(tmp_path / "d")]) == 2
    assert "--record-features" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
