"""Foresight: the world model looking ahead under the policy, offline and online, and the
detectors fitted on other rollouts than the protocol's training split."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from conftest import small_config

from worldsim.data.reader import EpisodeReader
from worldsim.failure import DetectorWrapper, ProtocolConfig, evaluate_detector, make_detector
from worldsim.failure.foresight import Foresight, ForesightConfig, record_foresight
from worldsim.failure.rollouts import Rollout, load_rollouts
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig
from worldsim.world_models import WorldModel

PUSH = "push the red cube onto the blue square"


@pytest.fixture(scope="module")
def looking():
    torch.manual_seed(0)
    model = WorldModel(small_config()).eval()  # the object pathway: the pixels rung
    policy = TinyVLA(TinyVLAConfig.for_tasks(["PushCube-v0"], language="learned", channels=(4, 8), hidden_dim=16,
                                             feature_dim=16, language_dim=8, image_size=32)).eval()
    return model, policy


def test_recorded_foresight_holds_between_look_aheads_and_equals_the_online_one(looking, push_episodes, tmp_path):
    model, policy = looking
    data = shutil.copyfile(push_episodes, tmp_path / "rollouts.h5")
    look = Foresight(model, policy, ForesightConfig(look_ahead=3, every=2, batch_size=1, judge="head"))
    assert look.rung.name == "pixels" and look.outcome == "head"
    assert Foresight(model, policy).outcome == "rule"  # the model's own judge: with the pathway, the rule
    state = torch.get_rng_state()
    record_foresight(data, look, progress=False)
    assert torch.equal(torch.get_rng_state(), state)  # the look-aheads draw from their own generator
    with EpisodeReader(data) as reader:
        assert reader.policy_keys == ("foresight",)
        episodes = [(reader.load(i, "image"), reader.load(i, "proprio"), reader.load(i, "foresight"))
                    for i in range(len(reader))]
    images, proprio, recorded = episodes[0]
    steps = len(images) - 1
    assert recorded.shape == (steps, 3) and recorded.dtype == np.float32
    assert ((recorded >= 0) & (recorded <= 1)).all()
    np.testing.assert_array_equal(recorded[1], recorded[0])  # held until the next look-ahead
    assert not np.array_equal(recorded[2], recorded[0])  # a new look-ahead from new frames
    # online, one env fed the same frames: the same look-aheads from the same seed
    online = Foresight(model, policy, ForesightConfig(look_ahead=3, every=2, judge="head"))
    seen = [online.observe({"image": images[t:t + 1], "proprio": proprio[t:t + 1], "instruction": (PUSH,)},
                           np.array([t]))[0] for t in range(steps)]
    np.testing.assert_allclose(np.stack(seen), recorded, atol=1e-5)
    # the rollouts load with it, and the foresight detector can read them
    assert load_rollouts(data)[0].foresight.shape == (steps, 3)


def test_foresight_refuses_tasks_the_world_model_does_not_know(looking, tmp_path):
    model, policy = looking
    look = Foresight(model, policy)
    with pytest.raises(ValueError, match="trained on PushCube-v0; it cannot look ahead on ReachCube-v0"):
        look.task_indices(["PushCube-v0", "ReachCube-v0"])
    with pytest.raises(ValueError, match="no task of the world model has the instruction 'fly'"):
        look.observe({"image": np.zeros((1, 32, 32, 3), np.uint8), "proprio": np.zeros((1, 4), np.float32),
                      "instruction": ("fly",)}, np.array([0]))
    with pytest.raises(ValueError, match="judge='sight'"):
        ForesightConfig(judge="sight")  # type: ignore[arg-type]


def _foresight_rollouts(per_task: int, tasks=("a", "b", "c"), seed: int = 0) -> list[Rollout]:
    """Rollouts whose foresight foretells their outcome: failures' imagined success fades."""
    rng = np.random.default_rng(seed)
    out = []
    for task in tasks:
        for i in range(per_task):
            success = i % 3 != 0
            length = int(rng.integers(12, 20))
            level = np.linspace(0.6, 0.9 if success else 0.1, length)[:, None]
            foresight = np.clip(level + rng.normal(0, 0.1, (length, 4)), 0, 1).astype(np.float32)
            out.append(Rollout(task, success, None, None, len(out), foresight))
    return out


def test_the_foresight_detector_learns_which_imagined_futures_precede_failures():
    rollouts = _foresight_rollouts(24)
    config = ProtocolConfig(seen_tasks=("a", "b"), unseen_tasks=("c",), seeds=(0,), alpha=0.2, cp="constant")
    result = evaluate_detector("foresight", rollouts, config, {"epochs": 10})
    summary = result.summary()
    assert summary["seen"]["roc_auc"]["mean"] > 0.9 and summary["unseen"]["roc_auc"]["mean"] > 0.9
    with pytest.raises(ValueError, match="no recorded 'foresight'; add it with `worldsim foresight"):
        make_detector("foresight").fit([Rollout("a", True, np.zeros((3, 2), np.float32), None)])


def test_detectors_fitted_on_other_rollouts_are_calibrated_and_tested_on_the_real_split():
    real = _foresight_rollouts(24)
    imagined = _foresight_rollouts(10, tasks=("a", "b"), seed=5)
    config = ProtocolConfig(seen_tasks=("a", "b"), unseen_tasks=("c",), seeds=(0, 1), alpha=0.2, cp="constant")
    on_imagined = evaluate_detector("foresight", real, config, {"epochs": 10}, fit=imagined)
    assert on_imagined.summary()["unseen"]["roc_auc"]["mean"] > 0.9
    # the fit set replaces the training split: all successes cannot fit a supervised detector
    with pytest.raises(ValueError, match="all successes"):
        evaluate_detector("foresight", real, config, fit=[r for r in imagined if r.success])
    with pytest.raises(ValueError, match=r"must be of seen tasks \(a, b\); they hold c"):
        evaluate_detector("foresight", real, config, fit=_foresight_rollouts(3, tasks=("c",)))


def test_the_wrapper_takes_foresight_exactly_when_the_detector_reads_it(looking, make_vec):
    model, policy = looking
    detector = make_detector("foresight", epochs=1).fit(_foresight_rollouts(6, tasks=("a",)))
    detector.calibrate([r for r in _foresight_rollouts(6, tasks=("a",)) if r.success], 0.5, "constant")
    env = make_vec("PushCube-v0", num_envs=2, obs_mode="pixels", image_size=32)
    with pytest.raises(ValueError, match="pass foresight=Foresight"):
        DetectorWrapper(env, policy, detector)
    narrow = DetectorWrapper(env, policy, detector, foresight=Foresight(model, policy, ForesightConfig(look_ahead=2)))
    with pytest.raises(ValueError, match="fitted on 'foresight' of width 4; got 2"):
        narrow.reset(seed=0)
    look = Foresight(model, policy, ForesightConfig(look_ahead=4, every=3))
    wrapped = DetectorWrapper(env, policy, detector, foresight=look)
    _, info = wrapped.reset(seed=0)
    for _ in range(4):
        _, _, _, _, info = wrapped.step(np.zeros((2, 4), np.float32))
    assert info["failure_score"].shape == (2,) and np.isfinite(info["failure_score"]).all()
    assert wrapped.overhead_ms["detector"] > 0


def test_record_features_gives_the_policy_outputs_on_episodes_it_did_not_act_in(looking, push_episodes, tmp_path):
    from worldsim.failure.rollouts import record_policy_outputs

    _, policy = looking
    out = tmp_path / "demos_features.h5"
    assert record_policy_outputs(push_episodes, policy, out, ["PushCube-v0"], num_samples=3, progress=False) == 4
    rollouts = load_rollouts(out)
    with EpisodeReader(push_episodes) as reader:
        images, proprio = reader.load(0, "image"), reader.load(0, "proprio")
    first = rollouts[0]
    assert first.features.shape == (len(images) - 1, 16) and first.action_samples.shape[:2] == (len(images) - 1, 3)
    with torch.no_grad():  # the features of the recorded frames, step by step
        expected = policy.features(policy.preprocess({"image": images[:2], "proprio": proprio[:2],
                                                      "instruction": (PUSH, PUSH)})).numpy()
    np.testing.assert_allclose(first.features[:2], expected, atol=1e-5)
    with pytest.raises(ValueError, match="already exists; pass --overwrite"):
        record_policy_outputs(push_episodes, policy, out, progress=False)
    with pytest.raises(ValueError, match="holds no episodes of StackCube-v0"):
        record_policy_outputs(push_episodes, policy, tmp_path / "x.h5", ["StackCube-v0"], progress=False)
