"""Failure detectors, conformal calibration and the SAFE protocol on synthetic rollouts."""

import json
import math

import numpy as np
import pytest

from worldsim.failure import (
    DETECTORS,
    ProtocolConfig,
    Rollout,
    constant_threshold,
    evaluate_detector,
    functional_threshold,
    load_detector,
    make_detector,
)
from worldsim.failure.conformal import calibrate_components
from worldsim.failure.detectors.base import Detector, DetectorStream
from worldsim.failure.detectors.fiper import chunk_entropy

FAST = {
    "safe-mlp": {"epochs": 15},
    "safe-lstm": {"epochs": 15, "hidden_dim": 32},
    "fiper": {"epochs": 20},
    "rnd": {"epochs": 20},
}


def synthetic_rollouts(tasks=("a", "b", "c"), per_task=40, seed=0, dim=8, successes=None):
    """Successes end early with features around one point, tight action samples and a steady
    foresight; failures run to the time limit while their features drift away, their samples
    spread out and their imagined success fades. One in
    three rollouts fails, or all but ``successes`` per task."""
    rng = np.random.default_rng(seed)
    center, away = np.full(dim, 2.0), np.where(np.arange(dim) % 2 == 0, 1.0, -1.0)
    rollouts = []
    for task in tasks:
        for i in range(per_task):
            failed = i % 3 == 0 if successes is None else i >= successes
            length = 60 if failed else int(rng.integers(30, 50))
            drift = np.linspace(0, 2.5, length)[:, None] * away if failed else 0.0
            features = (center + 0.5 * rng.normal(size=(length, dim)) + drift).astype(np.float32)
            # chunk step k of the chunk predicted at t plans the action of time t + k: a smooth plan
            # for successes; failures re-plan erratically and sample more widely
            plan = 0.5 * np.sin((np.arange(length)[:, None] + np.arange(4)) / 8.0 + rng.uniform(0, 6))
            growth = np.linspace(0.0, 1.0, length)[:, None, None, None] if failed else 0.0
            jump = growth * 0.4 * rng.normal(size=(length, 1, 1, 4))
            noise = (0.05 + 0.5 * growth) * rng.normal(size=(length, 6, 4, 4))
            samples = np.clip(plan[:, None, :, None] + jump + noise, -1, 1).astype(np.float32)
            # the world model's foresight: imagined success stays likely for successes, fades for failures
            level = np.linspace(0.7, 0.2 if failed else 0.8, length)[:, None]
            foresight = np.clip(level + 0.1 * rng.normal(size=(length, 4)), 0, 1).astype(np.float32)
            rollouts.append(Rollout(task, not failed, features, samples, len(rollouts), foresight))
    return rollouts


# ---------------------------------------------------------------------------- conformal
def success_curves(n, rng, length=40):
    """Exchangeable score curves: random walks with random lengths."""
    return [np.cumsum(rng.normal(size=int(rng.integers(length // 2, length)))) for _ in range(n)]


@pytest.mark.parametrize("method", ["functional", "constant"])
@pytest.mark.parametrize("alpha", [0.1, 0.2])
def test_conformal_false_alarm_rate_is_at_most_alpha(method, alpha):
    rng = np.random.default_rng(1)
    rates = []
    for _ in range(40):
        threshold = (
            functional_threshold(success_curves(60, rng), alpha, rng)
            if method == "functional"
            else constant_threshold(success_curves(60, rng), alpha)
        )
        fresh = success_curves(200, rng)
        rates.append(np.mean([(c > threshold.at(np.arange(len(c)))).any() for c in fresh]))
    # 40 x 200 fresh successes: the mean false-alarm rate is known to about +-0.01
    assert np.mean(rates) <= alpha + 0.02
    assert np.mean(rates) >= alpha - 0.1  # and not vacuously conservative


@pytest.mark.parametrize("method", ["functional", "constant"])
def test_joint_and_rule_false_alarms_are_at_most_alpha_and_not_vacuous(method):
    rng = np.random.default_rng(2)
    alpha = 0.2

    def pairs(n):  # two correlated score components per rollout
        out = []
        for curve in success_curves(n, rng):
            out.append((curve, 0.5 * curve + np.cumsum(rng.normal(size=len(curve)))))
        return out

    joint_rates, separate_rates = [], []
    for _ in range(60):
        calibration, fresh = pairs(60), pairs(200)
        components = [[c[k] for c in calibration] for k in range(2)]
        joint = calibrate_components(components, alpha, method, rng, joint=True)
        separate = calibrate_components(components, alpha, method, rng, joint=False)
        for thresholds, rates in ((joint, joint_rates), (separate, separate_rates)):
            rates.append(np.mean([
                np.logical_and(*[c[k] > thresholds[k].at(np.arange(len(c[k]))) for k in range(2)]).any()
                for c in fresh]))
    # 60 calibrations x 200 fresh successes: the mean rate is known to about +-0.01 (one s.e.)
    assert np.mean(joint_rates) <= alpha + 0.03
    assert np.mean(joint_rates) >= alpha - 0.08  # the joint AND rule uses its budget...
    assert np.mean(separate_rates) < np.mean(joint_rates) - 0.03  # ...separate calibration does not


def test_functional_band_is_time_varying_and_constant_is_flat():
    rng = np.random.default_rng(0)
    curves = success_curves(80, rng)
    band = functional_threshold(curves, 0.1, rng)
    flat = constant_threshold(curves, 0.1)
    assert band.values[5] < band.values[30]  # random walks spread out: the band widens
    assert len(set(flat.at(np.arange(100)).tolist())) == 1
    assert band.at(10_000) == band.values[-1]


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5, True])
def test_alpha_outside_open_unit_interval_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha"):
        constant_threshold([np.zeros(5)] * 30, alpha)


def test_calibration_needs_enough_successes():
    with pytest.raises(ValueError, match="no successful rollouts"):
        constant_threshold([], 0.1)
    with pytest.raises(ValueError, match="at least 9 successful"):
        constant_threshold([np.zeros(5)] * 5, 0.1)


# ---------------------------------------------------------------------------- detectors
@pytest.mark.parametrize("name", list(DETECTORS))
def test_every_detector_separates_synthetic_failures(name):
    rollouts = synthetic_rollouts(per_task=45)
    config = ProtocolConfig(seen_tasks=("a", "b"), unseen_tasks=("c",), seeds=(0,), alpha=0.2)
    result = evaluate_detector(name, rollouts, config, FAST.get(name))
    summary = result.summary()
    for split in ("seen", "unseen"):
        assert summary[split]["roc_auc"]["mean"] > 0.8, (split, summary)
        assert 0.0 <= summary[split]["detection_time"]["mean"] <= 1.0
    assert summary["seen"]["tnr"]["mean"] >= 0.5
    assert result.seeds[0].score_ms_per_step < 5.0


class StepCounter(Detector):
    """Scores the episode step: knows nothing but time."""

    name = "step-counter"
    needs = ("features",)

    def _fit(self, rollouts, rng):
        pass

    def stream(self, num_envs):
        class Count(DetectorStream):
            def __init__(self, n):
                super().__init__(n)
                self.t = np.zeros(n)

            def step(self, inputs, new_episode):
                self.t[new_episode] = 0
                self.t += 1
                return self.t[:, None].copy()

        return Count(num_envs)


def test_protocol_gives_a_length_only_detector_chance_auc(monkeypatch):
    from worldsim.failure import protocol

    monkeypatch.setattr(protocol, "make_detector", lambda name, **kw: StepCounter(None))
    rollouts = synthetic_rollouts(per_task=45)  # failures are all longer than successes
    config = ProtocolConfig(seen_tasks=("a", "b"), unseen_tasks=("c",), seeds=(0, 1), alpha=0.2)
    result = evaluate_detector("step-counter", rollouts, config)
    summary = result.summary()
    assert summary["seen"]["roc_auc"]["mean"] == 0.5
    assert summary["unseen"]["roc_auc"]["mean"] == 0.5
    one_task = evaluate_detector("step-counter", rollouts, ProtocolConfig(seen_tasks=("a",), seeds=(0, 1), alpha=0.2))
    for window, verdict in one_task.verdicts()["seen"].items():  # at the median success too: length leaks nothing
        assert verdict.auc == 0.5 and verdict.interval == (0.5, 0.5) and verdict.call == "chance", window


def test_offline_scores_equal_the_online_stream_with_staggered_episodes():
    rollouts = synthetic_rollouts(per_task=12)
    for name in ("safe-lstm", "fiper", "stac", "knn"):
        detector = make_detector(name, **FAST.get(name, {})).fit(rollouts)
        offline = detector.score_rollouts(rollouts[:3])
        # three envs play the rollouts back to back with different episode boundaries
        stream = detector.stream(3)
        queues = [[rollouts[i], rollouts[3 + i]] for i in range(3)]
        first = [q[0] for q in queues]
        for env, rollout in enumerate(first):
            assert rollout is rollouts[env]
        cursors = [0, 0, 0]
        online = [[] for _ in range(3)]
        for _ in range(max(r.length for r in first)):
            live = [r for r in first]
            feats = np.stack([r.features[min(c, r.length - 1)] for r, c in zip(live, cursors, strict=True)])
            samples = np.stack([r.action_samples[min(c, r.length - 1)] for r, c in zip(live, cursors, strict=True)])
            scores = stream.step({"features": feats, "action_samples": samples}, np.array([c == 0 for c in cursors]))
            for env in range(3):
                if cursors[env] < first[env].length:
                    online[env].append(scores[env])
            cursors = [c + 1 if c + 1 < r.length else 0 for c, r in zip(cursors, first, strict=True)]
        for env in range(3):
            np.testing.assert_allclose(
                np.stack(online[env])[: first[env].length], offline[env], rtol=1e-5, atol=1e-6, err_msg=name
            )


def test_save_and_load_keep_scores_and_thresholds(tmp_path):
    rollouts = synthetic_rollouts(per_task=20)
    successes = [r for r in rollouts if r.success]
    for name in DETECTORS:
        detector = make_detector(name, **FAST.get(name, {})).fit(rollouts)
        detector.calibrate(successes, alpha=0.2)
        loaded = load_detector(detector.save(tmp_path / name))
        a, b = detector.score_rollouts(rollouts[:4]), loaded.score_rollouts(rollouts[:4])
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6)
        np.testing.assert_allclose(detector.thresholds[0].values, loaded.thresholds[0].values)
        assert loaded.name == name


def test_chunk_entropy_is_zero_for_identical_samples_and_grows_with_spread():
    same = np.zeros((1, 8, 4, 4))
    spread = np.random.default_rng(0).uniform(-1, 1, size=(1, 8, 4, 4))
    assert chunk_entropy(same, 10)[0] == 0.0
    assert chunk_entropy(spread, 10)[0] > 16 * 1.0  # 16 dimensions, > 1 nat each for 8 spread samples


# ---------------------------------------------------------------------------- bad input
def test_feature_detector_on_rollouts_without_features_says_how_to_record():
    rollouts = [
        Rollout(r.task, r.success, None, r.action_samples, r.index) for r in synthetic_rollouts(per_task=6)
    ]
    with pytest.raises(ValueError, match="--record-features"):
        make_detector("safe-mlp").fit(rollouts)
    make_detector("ace").fit(rollouts)  # reads samples only: fine


def test_bad_detector_input_errors():
    rollouts = synthetic_rollouts(per_task=12)
    with pytest.raises(KeyError, match="unknown detector 'safe-mpl'.*safe-mlp"):
        make_detector("safe-mpl")
    with pytest.raises(ValueError, match="no setting"):
        make_detector("knn", epochs=3)
    with pytest.raises(ValueError, match="needs failed rollouts"):
        make_detector("safe-mlp").fit([r for r in rollouts if r.success])
    detector = make_detector("knn").fit(rollouts)
    with pytest.raises(ValueError, match="successful rollouts only"):
        detector.calibrate(rollouts, alpha=0.1)
    with pytest.raises(ValueError, match="no successful rollouts"):
        detector.calibrate([], alpha=0.1)
    with pytest.raises(ValueError, match="alpha"):
        detector.calibrate([r for r in rollouts if r.success], alpha=1.2)
    with pytest.raises(RuntimeError, match="not calibrated"):
        detector.alarm_curve(np.zeros((5, 1)))
    with pytest.raises(RuntimeError, match="not fitted"):
        make_detector("knn").score_rollouts(rollouts)
    with pytest.raises(ValueError, match="both seen and unseen"):
        ProtocolConfig(seen_tasks=("a",), unseen_tasks=("a",))


def test_protocol_reports_nan_auc_when_a_split_has_one_class():
    rollouts = [r for r in synthetic_rollouts(per_task=30) if r.success or r.task != "c"]
    config = ProtocolConfig(seen_tasks=("a", "b"), unseen_tasks=("c",), seeds=(0,), alpha=0.2)
    summary = evaluate_detector("knn", rollouts, config).summary()
    assert math.isnan(summary["unseen"]["roc_auc"]["mean"])
    assert math.isnan(summary["unseen"]["tpr"]["mean"])
    assert summary["unseen"]["tnr"]["mean"] >= 0.0


# ---------------------------------------------------------------------------- a small single-task set
@pytest.fixture
def small_set(monkeypatch, tmp_path):
    """`worldsim detect` argv on the rollouts of a small single-task set: 100 rollouts, 32 of them
    successes, so the calibration part holds 8 successes."""
    import worldsim.failure.detect

    rollouts = synthetic_rollouts(tasks=("PushCube-v0",), per_task=100, successes=32)
    monkeypatch.setattr(worldsim.failure.detect, "load_rollouts", lambda path: rollouts)
    return ["detect", "--data", str(tmp_path / "rollouts.h5"), "--seeds", "0", "--videos", "0"]


def test_small_set_runs_at_the_defaults_with_the_setting_its_successes_calibrate(small_set, tmp_path, capsys):
    from worldsim.commands.cli import main

    out = ["--out", str(tmp_path / "d")]
    assert main([*small_set, "--detectors", "knn,fiper", *out]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "functional CP at alpha=0.1 needs at least 17 successful calibration rollouts (here 8" in err
    assert "constant CP at alpha=0.12 was used" in err
    results = json.loads((tmp_path / "d" / "results.json").read_text())
    assert set(results["detectors"]) == {"knn", "fiper"} and results["skipped"] == {}
    calibration = results["calibration"]
    assert calibration["requested"] == {"cp": "functional", "alpha": 0.1}
    assert calibration["used"] == {"cp": "constant", "alpha": 0.12}
    assert results["protocol"]["alpha"] == 0.12 and 0.12 in results["protocol"]["sweep"]
    assert "calibration: functional CP at alpha=0.1 needs" in (tmp_path / "d" / "table.md").read_text()
    # constant CP at an alpha these 8 successes allow is not defeated by FIPER's joint band
    fiper = load_detector(tmp_path / "d" / "detectors" / "fiper")
    assert [t.method for t in fiper.thresholds] == ["constant", "constant"]
    assert [t.alpha for t in fiper.thresholds] == [0.12, 0.12]
    # a setting the successes do calibrate is used as asked, and nothing is said
    assert main([*small_set, "--detectors", "knn", "--alpha", "0.2", *out]) == 0
    assert "calibration:" not in capsys.readouterr().err
    results = json.loads((tmp_path / "d" / "results.json").read_text())
    assert results["calibration"] == {"requested": {"cp": "functional", "alpha": 0.2},
                                      "used": {"cp": "functional", "alpha": 0.2}, "reason": None}


def test_calibrated_protocol_keeps_the_asked_alpha_when_constant_cp_can_and_refuses_without_successes():
    from worldsim.failure.protocol import calibrated_protocol

    config = ProtocolConfig(seen_tasks=("a",), seeds=(0, 1), alpha=0.1)
    ten = synthetic_rollouts(tasks=("a",), per_task=100, successes=40)  # 10 calibration successes per seed
    used, reason = calibrated_protocol(ten, config)
    assert (used.cp, used.alpha, used.sweep) == ("constant", 0.1, config.sweep)
    assert reason is not None
    assert reason.endswith("constant CP at alpha=0.1 was used (10 successes per seed calibrate it)")
    assert calibrated_protocol(ten, ProtocolConfig(seen_tasks=("a",), seeds=(0,), alpha=0.3))[1] is None
    no_successes = [r for r in ten if not r.success]
    with pytest.raises(ValueError, match="the calibration set holds no successful rollouts"):
        calibrated_protocol(no_successes, config)


def test_a_detector_that_cannot_be_fitted_is_skipped_while_the_others_run(small_set, tmp_path, capsys,
                                                                           monkeypatch):
    import worldsim.failure.detect
    from worldsim.commands.cli import main

    only_successes = [r for r in synthetic_rollouts(tasks=("PushCube-v0",), per_task=60) if r.success]
    monkeypatch.setattr(worldsim.failure.detect, "load_rollouts", lambda path: only_successes)
    out = tmp_path / "d"
    assert main([*small_set, "--detectors", "safe-mlp,knn", "--cp", "constant", "--out", str(out)]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("skipped")]
    assert lines == ["skipped safe-mlp: safe-mlp is supervised and needs failed rollouts to fit; the training "
                     "rollouts are all successes"]
    results = json.loads((out / "results.json").read_text())
    assert set(results["detectors"]) == {"knn"} and "needs failed rollouts" in results["skipped"]["safe-mlp"]
    assert "skipped safe-mlp:" in (out / "table.md").read_text()
    assert not (out / "detectors" / "safe-mlp").exists()


def test_constant_joint_bands_with_too_few_successes_for_the_split_calibrate_each_component():
    rng = np.random.default_rng(0)
    curves = success_curves(8, rng)
    components = [curves, [2 * c for c in curves]]
    thresholds = calibrate_components(components, 0.12, "constant", rng, joint=True)
    assert [t.values[0] for t in thresholds] == [constant_threshold(c, 0.12).values[0] for c in components]
    with pytest.raises(ValueError, match="functional CP at alpha=0.12 needs at least"):
        calibrate_components(components, 0.12, "functional", rng, joint=True)


# ---------------------------------------------------------------------------- the report
def fake_results(names=("safe-mlp", "safe-lstm", "mahalanobis", "action-variance", "fiper")):
    from worldsim.failure.protocol import DetectorResult, SeedResult

    rng = np.random.default_rng(0)
    out = {}
    for name in names:
        metrics = {split: {"roc_auc": rng.uniform(0.5, 1), "tpr": 0.5, "tnr": 0.9, "balanced_accuracy": 0.7,
                           "detection_time": 0.4} for split in ("seen", "unseen")}
        fpr = np.sort(rng.uniform(size=20)).tolist()
        roc = {split: ([0.0, *fpr, 1.0], [0.0, *np.sqrt(fpr).tolist(), 1.0]) for split in ("seen", "unseen")}
        out[name] = DetectorResult(name, [SeedResult(metrics, roc, {}, 1.0, 0.01)])
    return out


def test_piped_results_table_keeps_detector_names_whole():
    import io

    from rich.console import Console

    from worldsim.failure.report import print_table, results_table

    results = fake_results()
    piped = io.StringIO()
    print_table(results_table(results, 0.1), Console(file=piped))  # not a terminal: 80 columns assumed
    text = piped.getvalue()
    assert all(name in text for name in results), text
    assert "…" not in text


def test_roc_legend_covers_no_curve(tmp_path, monkeypatch):
    import worldsim.failure.report as report

    figures = []
    monkeypatch.setattr(report, "_save", lambda fig, path: figures.append(fig) or path)
    report.plot_roc(fake_results(), tmp_path / "roc.png")
    fig = figures[0]
    fig.canvas.draw()
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent()
        assert not legend.overlaps(ax.get_window_extent())  # beside the axes...
        assert fig.bbox.contains(legend.x1 - 1, legend.y0 + 1)  # ...and inside the picture


# ---------------------------------------------------------------------------- verdicts
def _seeds(failure_scores, success_scores, seeds=3, per_seed=24, seed=0):
    """Three seeds' test sets drawn (overlapping, as the protocol's are) from 40 failures and 40
    successes whose scores are ``failure_scores`` and ``success_scores``."""
    from worldsim.failure.verdict import SeedScores

    rng = np.random.default_rng(seed)
    scores = np.concatenate([failure_scores, success_scores])
    failed = np.arange(len(scores)) < len(failure_scores)
    out = []
    for _ in range(seeds):
        picked = np.concatenate([rng.choice(np.flatnonzero(failed), per_seed // 2, replace=False),
                                 rng.choice(np.flatnonzero(~failed), per_seed // 2, replace=False)])
        out.append(SeedScores(picked, failed[picked], scores[picked]))
    return out


def test_verdicts_on_separable_inverted_and_chance_scores():
    from worldsim.failure.verdict import judge

    rng = np.random.default_rng(0)
    high, low = rng.normal(2.0, 1.0, 40), rng.normal(0.0, 1.0, 40)
    same_a, same_b = rng.normal(0.0, 1.0, 40), rng.normal(0.0, 1.0, 40)
    separable, inverted, chance = judge(_seeds(high, low)), judge(_seeds(low, high)), judge(_seeds(same_a, same_b))
    assert separable.call == "separates" and separable.interval[0] > 0.5
    assert separable.verdict == "separates failures from successes"
    assert inverted.call == "below chance" and inverted.interval[1] < 0.5
    assert inverted.verdict == ("below chance: the score is inverted, it ranks successes as riskier (a finding about "
                                "the score, not a detector that works)")
    assert chance.call == "chance" and chance.interval[0] < 0.5 < chance.interval[1]
    assert chance.verdict == "cannot be told apart from chance on 24 rollouts (12 failures) per seed"
    assert judge(_seeds(high, low)) == separable  # seeded: the interval repeats exactly


def test_weighted_auc_is_scikit_learns_and_the_interval_brackets_the_mean():
    from sklearn.metrics import roc_auc_score

    from worldsim.failure.verdict import auc_interval, weighted_auc

    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 5, 7).astype(float), rng.integers(0, 5, 9).astype(float)  # ties included
    wa, wb = rng.integers(0, 3, (4, 7)).astype(float), rng.integers(1, 3, (4, 9)).astype(float)
    wa[:, 0] = 1
    expected = [roc_auc_score(np.r_[np.ones(7), np.zeros(9)], np.r_[a, b], sample_weight=np.r_[wa[i], wb[i]])
                for i in range(4)]
    np.testing.assert_allclose(weighted_auc(a, b, wa, wb), expected)
    auc, (low, high) = auc_interval(_seeds(rng.normal(0.5, 1, 40), rng.normal(0, 1, 40)))
    assert low < auc < high
    with pytest.raises(ValueError, match="level"):
        auc_interval(_seeds(a, b, per_seed=6), level=1.0)


def test_median_success_window_compares_the_rollouts_still_running():
    from worldsim.failure.protocol import roc_scores
    from worldsim.failure.rollouts import median_success_lengths

    rollouts = synthetic_rollouts(tasks=("a",), per_task=9)  # 6 successes of 30-49 steps, 3 failures of 60
    medians = median_success_lengths(rollouts)
    successes = sorted(r.length for r in rollouts if r.success)
    assert medians == {"a": successes[2]}
    curves = [np.arange(1.0, r.length + 1)[:, None] for r in rollouts]  # a step counter's scores
    scores = roc_scores(StepCounter(None), curves, rollouts, medians)
    running = np.isfinite(scores)
    assert running.tolist() == [r.length >= medians["a"] for r in rollouts]
    assert set(scores[running].tolist()) == {float(medians["a"])}  # every rollout read at the same step


# ---------------------------------------------------------------------------- the task prior
def test_task_prior_separates_pooled_tasks_but_not_within_one(monkeypatch):
    from worldsim.failure.protocol import per_task_auc
    from worldsim.failure.task_prior import TaskPrior
    from worldsim.policies import language

    # instruction embeddings by first letter: unseen "b2" is nearest "b"
    monkeypatch.setattr(language, "embed_instructions",
                        lambda texts: np.array([[t.startswith(c) for c in "abc"] for t in texts], float))

    # three tasks failing at different rates; the unseen task's instruction is nearest task "b"
    rollouts = [r for r in synthetic_rollouts(tasks=("a", "b", "c"), per_task=60)
                if not (r.task == "a" and not r.success and r.index % 2)]
    rollouts += [replace_task(r, "b2") for r in synthetic_rollouts(tasks=("b",), per_task=30, seed=1)]
    config = ProtocolConfig(seen_tasks=("a", "b", "c"), unseen_tasks=("b2",), seeds=(0, 1), alpha=0.2)
    result = evaluate_detector("task-prior", rollouts, config, build=TaskPrior)
    summary = result.summary()
    assert summary["seen"]["roc_auc"]["mean"] > 0.55  # task a fails half as often as b and c
    assert summary["seen"]["roc_auc_per_task"]["mean"] == 0.5  # constant within each task
    assert summary["unseen"]["roc_auc"]["mean"] == 0.5  # one unseen task: one rate for all
    prior = result.detector
    assert prior.nearest == {"b2": "b"} and prior.rate("b2") == prior.rates["b"]
    assert prior.rates["a"] < prior.rates["b"]
    with pytest.raises(ValueError, match="scores recorded rollouts only"):
        prior.stream(2)
    # a score perfect within each task and inverted across them: pooled and per-task disagree
    tested = [Rollout(t, s, np.zeros((5, 2), np.float32), None) for t, s in
              [("x", True), ("x", False), ("y", True), ("y", False)]]
    assert per_task_auc(tested, np.array([10.0, 11.0, 0.0, 1.0])) == 1.0
    assert math.isnan(per_task_auc(tested[:1], np.array([1.0])))


def replace_task(rollout, task):
    return Rollout(task, rollout.success, rollout.features, rollout.action_samples, rollout.index)


def test_task_prior_maps_an_unseen_task_to_the_seen_one_with_the_nearest_instruction():
    from worldsim.envs.tasks import get_suite
    from worldsim.failure.task_prior import most_similar_tasks

    suite = get_suite("tabletop-10")
    assert most_similar_tasks(suite.unseen, suite.seen) == {
        "PushCube-Green-v0": "PushCube-v0", "PickPlaceCube-Yellow-v0": "PickPlaceCube-v0",
        "StackCube-YellowOnRed-v0": "StackCube-v0"}
