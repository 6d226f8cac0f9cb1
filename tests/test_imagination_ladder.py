"""The imagination ladder (``ImaginationConfig.rung``): what each rung takes from the simulator,
what it refuses, and that the ``pixels`` and ``video`` rungs read no recorded state."""

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
from conftest import NO_PATHWAY, SMALL, small_config

from worldsim.envs.imagination import ORACLE, PIXELS, RUNGS, SIM_SEEDED, VIDEO, ImaginationConfig, Rung
from worldsim.world_models import EpisodeBank, WorldModel
from worldsim.world_models.config import merged
from worldsim.world_models.scene_frames import SceneFrames
from worldsim.world_models.train import TrainWMConfig, build_model, train_world_model


@pytest.fixture(scope="module")
def files(tmp_path_factory, push_episodes):
    """A small untrained world model with the object pathway (judged by the rule), one trained
    without state supervision, and the pushes without their ``state``."""
    root = tmp_path_factory.mktemp("ladder")
    torch.manual_seed(0)
    WorldModel(small_config(objects={"hidden": 32, "carry": False}, judge={"outcome": "rule"})
               ).save_pretrained(root / "pathway")
    WorldModel(small_config(NO_PATHWAY, state_supervision=False)).save_pretrained(root / "video")
    shutil.copy(push_episodes, root / "pixels.h5")
    with h5py.File(root / "pixels.h5", "a") as f:  # as if recorded with obs_mode="pixels"
        for episode in f["data"].values():
            del episode["obs/state"]
    return root


def make(world_model, keyframes, num_envs=2, **kwargs):
    return gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=num_envs, world_model=world_model,
                        keyframes=keyframes, device="cpu", reset_schedule="synchronous", **kwargs)


def refusal(match, **kwargs):
    with pytest.raises(ValueError, match=match) as caught:
        make(**kwargs).close()
    assert "\n" not in str(caught.value)  # one line


def test_the_config_names_the_rungs_and_judges():
    assert ImaginationConfig().rung is PIXELS and ImaginationConfig().judge is None
    assert list(RUNGS) == ["oracle", "sim-seeded", "pixels", "video"]  # from the most simulator help to none
    assert [RUNGS[name] for name in RUNGS] == [ORACLE, SIM_SEEDED, PIXELS, VIDEO]
    assert [r.name for r in RUNGS.values() if r.seeded] == ["oracle", "sim-seeded"]
    assert [r.name for r in RUNGS.values() if r.rendered] == ["oracle"]
    assert [r.name for r in RUNGS.values() if not r.trained_on_state] == ["video"]
    config = ImaginationConfig(rung="sim-seeded")  # a name is stored as its rung
    assert config.rung is SIM_SEEDED and config.rung != "sim-seeded" and config.rung.name == "sim-seeded"
    assert Rung.from_json("pixels") is PIXELS and Rung.from_json(VIDEO) is VIDEO and str(ORACLE) == "oracle"
    assert Rung.from_json(VIDEO.to_json()) is VIDEO
    assert PIXELS.aids == ("the simulator's state as training supervision",)  # nothing while imagining
    assert VIDEO.aids == () and len(ORACLE.aids) == 3
    with pytest.raises(ValueError, match="^rung='rendered'; allowed: oracle, sim-seeded, pixels, video$"):
        ImaginationConfig(rung="rendered")
    with pytest.raises(ValueError, match="^judge='both'; allowed: rule, head"):
        ImaginationConfig(judge="both")
    imagination = ImaginationConfig("wm", "k.h5", rung="video", judge="head")
    kwargs = imagination.env_kwargs()
    assert kwargs["imagination"] is imagination and (imagination.rung, imagination.judge) == (VIDEO, "head")
    assert "frames" not in kwargs and "rung" not in kwargs


def test_the_video_rung_refuses_what_needs_the_objects_when_configured():
    """A model on the video rung carries no objects: the rule's judge and the dense reward are
    refused by the config itself, before any model is loaded."""
    for setting, kwargs in (("judge='rule'", {"judge": "rule"}), ("reward_type='dense'", {"reward_type": "dense"})):
        with pytest.raises(ValueError, match=f"^{setting} reads the objects' imagined positions, which a model on "
                                             "rung 'video' .* use judge 'head'"):
            ImaginationConfig(rung="video", **kwargs)
    for rung in ("pixels", "sim-seeded"):  # the others leave it to the model
        ImaginationConfig(rung=rung, judge="rule", reward_type="dense")
    with pytest.raises(ValueError, match="^judge='rule' reads"):
        ImaginationConfig(rung="pixels", judge="rule").replace(rung="video")


def test_rung_check_refuses_the_models_it_cannot_imagine_with(files, untrained_world_model):
    pathway, video = WorldModel.from_pretrained(files / "pathway"), WorldModel.from_pretrained(files / "video")
    frames_only = WorldModel.from_pretrained(untrained_world_model)
    for rung in (ORACLE, SIM_SEEDED):
        with pytest.raises(ValueError, match=f"^rung='{rung.name}' seeds the object pathway .* has no object pathway"):
            rung.check(frames_only)
        rung.check(pathway)
        with pytest.raises(ValueError, match="has no object pathway"):
            rung.check(video)
    for model in (pathway, frames_only):
        with pytest.raises(ValueError, match="^rung='video' needs a world model trained without the simulator's state"):
            VIDEO.check(model)
    VIDEO.check(video)
    for model in (pathway, frames_only, video):  # the pixels rung takes any model
        PIXELS.check(model)


def test_each_rung_refuses_what_it_cannot_do(files, push_episodes, untrained_world_model):
    pathway, frames_only, video = files / "pathway", untrained_world_model, files / "video"
    for rung in ("oracle", "sim-seeded"):
        refusal(f"^rung='{rung}' seeds .* no object pathway .* use rung 'pixels'", world_model=frames_only,
                keyframes=push_episodes, rung=rung)
        refusal(f"^rung='{rung}' .*pixels.h5' holds no 'state' observations: use rung 'pixels'", world_model=pathway,
                keyframes=files / "pixels.h5", rung=rung)
    for model in (pathway, frames_only):  # trained with the data's state (the default)
        refusal("^rung='video' needs a world model trained without .* use rung 'pixels'$", world_model=model,
                keyframes=push_episodes, rung="video")
    refusal("^judge='rule' .* object pathway .* use judge='head'", world_model=frames_only, keyframes=push_episodes,
            judge="rule")
    refusal("^rung='painted'; allowed: oracle, sim-seeded, pixels, video$", world_model=pathway,
            keyframes=push_episodes, rung="painted")
    # what each may do: pixels takes any model and any keyframes, video a model trained without state
    for model, keyframes, rung in ((frames_only, files / "pixels.h5", "pixels"), (pathway, push_episodes, "pixels"),
                                   (video, push_episodes, "video"), (video, files / "pixels.h5", "video"),
                                   (pathway, push_episodes, "sim-seeded"), (pathway, push_episodes, "oracle")):
        env = make(model, keyframes, rung=rung)
        obs, _ = env.reset(seed=0)
        obs, *_ = env.step(np.zeros((2, 4), np.float32))
        assert obs["image"].shape == (2, 32, 32, 3), (model, rung)
        assert (env.unwrapped.scene_frames is not None) == (rung == "oracle")
        assert (env.unwrapped.bank.state is not None) == (rung in ("oracle", "sim-seeded")), rung
        env.close()


def test_pixels_reads_no_state_and_finds_the_objects_itself(files, push_episodes):
    model = WorldModel.from_pretrained(files / "pathway")
    poisoned = EpisodeBank(push_episodes, tasks=["PushCube-v0"])
    recorded = EpisodeBank(push_episodes, tasks=["PushCube-v0"])
    for name in ("state", "entity_pixels", "entity_heights"):  # any read of the state would spread NaN
        getattr(poisoned, name)[:] = np.nan
    starts = {}
    for rung, bank in (("pixels", poisoned), ("sim-seeded", recorded)):
        env = make(model, bank, num_envs=4, rung=rung)
        world = env.unwrapped
        env.reset(seed=0)
        assert (world.bank.state is None) == (rung == "pixels")
        rows = world.bank.context_rows(world.start_episode, np.zeros(4, np.int64), model.config.context)
        starts[rung] = world._rollout.points.clone(), rows
        obs, *_ = env.step(np.zeros((4, 4), np.float32))
        assert np.isfinite(world._rollout.points.numpy()).all() and np.isfinite(obs["proprio"]).all()
        env.close()
    points, rows = starts["pixels"]
    found = model.start(torch.from_numpy(recorded.images[rows]), torch.from_numpy(recorded.images[rows[:, 0]]),
                        torch.from_numpy(recorded.proprio[rows])).points  # the detector on the real frames
    assert torch.equal(points, found)
    seeded, rows = starts["sim-seeded"]
    assert torch.equal(seeded, recorded.recorded_objects(rows)[0])
    assert not torch.allclose(points, seeded)  # an untrained detector is not the recorded state
    # a keyframes file read on the pixels rung is loaded without its state at all
    env = make(model, push_episodes, rung="pixels")
    assert not env.unwrapped.bank.has_state and env.unwrapped.bank.entity_pixels is None
    env.close()


def test_the_static_placebo_switches_the_object_dynamics_off_and_nothing_else(files, push_episodes, monkeypatch):
    """placebo='static': the objects stay where the model found them, the object pathway is never
    run, and the gripper moves exactly as in the model's own world (same seed, same actions)."""
    actions = np.random.default_rng(0).uniform(-1, 1, (6, 4, 4)).astype(np.float32)
    runs = {}
    for placebo in (None, "static"):
        env = make(files / "pathway", push_episodes, num_envs=4, placebo=placebo, terminate_on_success=False)
        world = env.unwrapped
        calls = []
        pathway = world.model.objects.forward
        monkeypatch.setattr(world.model.objects, "forward", lambda *a, calls=calls, f=pathway: calls.append(1) or f(*a))
        env.reset(seed=0)
        start = world._rollout.points[:, -1].clone(), world._rollout.heights[:, -1].clone()
        proprio = []
        for action in actions:
            obs, *_ = env.step(action)
            proprio.append(obs["proprio"])
            if placebo == "static":
                assert torch.equal(world._rollout.points[:, -1], start[0])
                assert torch.equal(world._rollout.heights[:, -1], start[1])
        runs[placebo] = np.stack(proprio), len(calls)
        env.close()
    assert runs[None][1] == len(actions) and runs["static"][1] == 0
    np.testing.assert_array_equal(runs[None][0], runs["static"][0])  # the gripper's motion is untouched
    with pytest.raises(ValueError, match="^placebo='shuffled'; allowed: static"):
        ImaginationConfig(placebo="shuffled")
    refusal("^placebo='static' holds the object pathway's objects still, and this world model has no object pathway",
            world_model=files / "video", keyframes=files / "pixels.h5", rung="video", placebo="static")


def test_a_static_world_pays_a_rule_judged_success_only_reward_alike_whatever_the_policy_does(files, push_episodes):
    """Why the ladder does not train such a placebo: with the objects held still the rule's verdicts
    depend on the start alone, so every rollout from one start is paid the same whatever its actions
    (GRPO's advantages, and so its updates, are all 0). The dense reward's approach term pays the
    gripper's motion, so its placebo is trained."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import imagination_ladder as ladder

    policies = np.random.default_rng(1).uniform(-1, 1, (2, 8, 6, 4)).astype(np.float32)  # two policies' actions
    rewards = {}
    for reward in ("transition", "sparse"):
        env = make(files / "pathway", push_episodes, num_envs=6, placebo="static", reward_type=reward,
                   terminate_on_success=False)
        runs = []
        for actions in policies:
            env.reset(seed=0)  # the same starts
            runs.append(np.stack([env.step(action)[1] for action in actions]))  # (steps, envs)
        rewards[reward] = runs
        env.close()
        np.testing.assert_array_equal(*runs)  # paid by the start alone
    assert rewards["transition"][0].any()  # not vacuous: this untrained model's starts are judged successes
    static = {arm.name: arm for arm in ladder.arms_of(None, argparse.Namespace(rungs=["pixels"],
                                                                              rewards=["transition", "dense"]))}
    assert ladder.pays_alike(static["pixels~static"], files / "pathway")
    assert not ladder.pays_alike(static["pixels+dense~static"], files / "pathway")  # trained: its shaping pays
    assert not ladder.pays_alike(static["pixels"], files / "pathway")  # not a placebo
    head = dataclasses.replace(static["pixels~static"], judge="head")  # the head judges frames the gripper moves
    assert not ladder.pays_alike(head, files / "pathway")


def test_the_oracle_shows_the_renderer_s_frames(files, push_episodes):
    env = make(files / "pathway", push_episodes, num_envs=3, rung="oracle", terminate_on_success=False)
    world = env.unwrapped
    env.reset(seed=0)
    drawn = SceneFrames(world.model.rules, 32, 3)
    drawn.start(np.arange(3), world.bank.state[world.bank.obs_start[world.start_episode]])
    for action in np.random.default_rng(0).uniform(-1, 1, (3, 3, 4)).astype(np.float32):
        obs, *_ = env.step(action)
        rollout = world._rollout
        assert np.array_equal(obs["image"], drawn.draw(np.arange(3), rollout.proprio[:, -1], rollout.points[:, -1],
                                                       rollout.heights[:, -1]))
    drawn.close()
    env.close()


def test_the_judge_override_changes_who_judges(files, push_episodes, monkeypatch):
    probabilities = {}
    for judge in (None, "rule", "head"):
        env = make(files / "pathway", push_episodes, num_envs=4, judge=judge, terminate_on_success=False)
        world = env.unwrapped
        calls = []
        rule = world.model.rules.outcome
        monkeypatch.setattr(world.model.rules, "outcome",
                            lambda *a, calls=calls, rule=rule: calls.append(1) or rule(*a))
        env.reset(seed=0)
        _, _, _, _, info = env.step(np.zeros((4, 4), np.float32))
        probabilities[judge] = info["reward_terms"]["success_prob"]
        assert world.outcome == ("head" if judge == "head" else "rule") and bool(calls) == (judge != "head")
        env.close()
    assert set(probabilities["rule"].tolist()) <= {0.0, 1.0}  # the rule's verdict
    assert np.array_equal(probabilities[None], probabilities["rule"])  # the model's own outcome is the rule
    head = probabilities["head"]
    assert ((head > 0) & (head < 1)).all() and not set(head.tolist()) <= {0.0, 1.0}  # the head's probability


def test_video_takes_a_model_trained_without_state(files, push_episodes, tmp_path, monkeypatch):
    # train-wm --no-state-supervision: no pathway, judged by the head, and nothing in training reads state
    seen: list[set[str]] = []
    for name in ("sample", "state_windows"):  # every batch training draws, frames and state windows
        method = getattr(EpisodeBank, name)
        monkeypatch.setattr(EpisodeBank, name, lambda self, *a, method=method, **k: (
            lambda batch: seen.append(set(batch)) or batch)(method(self, *a, **k)))
    # the tiny preset at the small size (the image size comes from the data)
    model = merged({k: v for k, v in SMALL.items() if k != "image_size"}, {"dynamics": {"batch": 8, "horizon": 2}})
    summary = train_world_model(TrainWMConfig(data=push_episodes, out=tmp_path / "wm", preset="tiny", model=model,
                                              state_supervision=False, steps=2, batch_size=4, val_fraction=0.0,
                                              video_every=0, device="cpu"))
    monkeypatch.undo()
    assert {"target", "actions"} <= set().union(*seen)  # both kinds of batch were drawn
    state_keys = {"goal_offset", "entity_pixels", "context_entity_pixels", "first_entity_pixels", "points", "heights",
                  "target_heights"}
    assert not any(keys & state_keys for keys in seen)
    trained = WorldModel.from_pretrained(summary["out"])
    config = trained.config
    assert (config.state_supervision, config.objects, config.judge.outcome) == (False, None, "head")
    assert config.frames.anchor == "last"  # the tiny preset draws from the first frame with the pathway alone
    env = make(trained, push_episodes, rung="video")
    env.reset(seed=0)
    env.step(np.zeros((2, 4), np.float32))
    assert env.unwrapped.bank.state is None
    env.close()
    # data without state sets it False itself; models saved before the field load as trained with state
    built = build_model(TrainWMConfig(data=files / "pixels.h5", out=tmp_path / "b"), EpisodeBank(files / "pixels.h5"))
    assert not built.config.state_supervision and built.objects is None
    saved = tmp_path / "old"
    shutil.copytree(files / "pathway", saved)
    document = json.loads((saved / "config.json").read_text())
    del document["config"]["state_supervision"]
    (saved / "config.json").write_text(json.dumps(document))
    assert WorldModel.from_pretrained(saved).config.state_supervision


def test_open_loop_replays_judge_as_the_env_does(files, push_episodes, untrained_world_model):
    """eval-wm's replays take the judge: the rule's verdicts are 0 or 1, the head's probabilities;
    a model without the pathway has no rule to apply; and they refuse what the rung refuses."""
    from worldsim.world_models.replay import open_loop

    model, bank = WorldModel.from_pretrained(files / "pathway"), EpisodeBank(push_episodes)
    episodes, starts = np.arange(2), np.zeros(2, np.int64)
    by_rule = open_loop(model, bank, episodes, starts, 3, imagination=ImaginationConfig(judge="rule"))
    by_head = open_loop(model, bank, episodes, starts, 3, imagination=ImaginationConfig(judge="head"))
    assert set(np.unique(by_rule.success_prob[:, 1:])) <= {0.0, 1.0}
    assert ((by_head.success_prob[:, 1:] > 0) & (by_head.success_prob[:, 1:] < 1)).all()
    with pytest.raises(ValueError, match="^judge='rule' applies the task's rule"):
        open_loop(WorldModel.from_pretrained(untrained_world_model), bank, episodes, starts, 3,
                  imagination=ImaginationConfig(judge="rule"))
    with pytest.raises(ValueError, match="^rung='video' needs a world model trained without"):
        open_loop(model, bank, episodes, starts, 3, imagination=ImaginationConfig(rung="video"))
    video = open_loop(WorldModel.from_pretrained(files / "video"), bank, episodes, starts, 3,
                      imagination=ImaginationConfig(rung="video"))
    assert video.imagined.shape == by_rule.imagined.shape


def test_open_loop_replays_take_the_static_placebo(files, push_episodes):
    """eval-wm's replays in the placebo's static world: every imagined position is the start's."""
    from worldsim.world_models.replay import open_loop

    model, bank = WorldModel.from_pretrained(files / "pathway"), EpisodeBank(push_episodes)
    episodes, starts = np.arange(2), np.zeros(2, np.int64)
    still = open_loop(model, bank, episodes, starts, 4, imagination=ImaginationConfig(placebo="static"))
    assert still.points is not None and still.heights is not None
    assert (still.points == still.points[:, :1]).all() and (still.heights == still.heights[:, :1]).all()
    with pytest.raises(ValueError, match="^placebo='static' holds the object pathway's objects still"):
        open_loop(WorldModel.from_pretrained(files / "video"), bank, episodes, starts, 3,
                  imagination=ImaginationConfig(rung="video", placebo="static"))
