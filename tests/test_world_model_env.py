"""The imagined env beyond the shared contract (test_conformance.py): the same spaces as the physics
env, keyframe starts, the transition reward, its own bad input, and the trainers running on it."""

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

import worldsim.training.grpo
import worldsim.training.ppo
import worldsim.training.rl
from worldsim.data.collect import collect_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.envs.families import make_family
from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.observations import qpos_from_state
from worldsim.envs.scene import Scene
from worldsim.envs.tasks import get_task
from worldsim.evaluation.evaluate import evaluate_policy
from worldsim.failure import load_rollouts
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig
from worldsim.world_models import EpisodeBank, KeyframeRule, WorldModel, WorldModelConfig, build_config
from worldsim.world_models.config import merged
from worldsim.world_models.imagined_step import Rollout

INSTRUCTION = "push the red cube onto the blue square"


# The frame generators (WorldModelConfig.frames) the imagined env serves alike, each small for 32x32 frames,
# with MLPs as wide as their conditioning's.
BACKBONES = {"unet": {"frames": {"channels": (16, 32), "norm_groups": 8, "cond_hidden": 32},
                      "proprio": {"hidden": 32}, "judge": {"hidden": 32}},
             "wan": {"frames": {"backbone": "wan", "heads": 2, "head_dim": 12, "layers": 1, "ffn_dim": 32,
                                "token_patch": 2, "cond_hidden": 16},
                     "proprio": {"hidden": 16}, "judge": {"hidden": 16}}}
NO_PATHWAY = {"objects": None, "judge": {"outcome": "head"}}
PATHWAY = {"objects": {"hidden": 32, "carry": False}, "judge": {"outcome": "rule"}}


def small(backbone: str, parts: dict) -> WorldModelConfig:
    """A small world model of the ``backbone`` frame generator for 32x32 frames, with ``parts``."""
    tables = merged(merged(BACKBONES[backbone], {"judge": {"detector_channels": 8}}), parts)
    return build_config(None, image_size=32, context=2, **tables)


@pytest.fixture(scope="module", params=list(BACKBONES))
def backbone(request):
    return request.param


@pytest.fixture(scope="module")
def files(backbone, untrained_world_model, push_episodes, tmp_path_factory):
    """A small untrained frames-only world model of each frame network (the contract does not
    depend on the weights) and keyframes."""
    if backbone == "unet":
        return untrained_world_model, push_episodes
    folder = tmp_path_factory.mktemp("untrained_wan") / "wm"
    torch.manual_seed(0)
    WorldModel(small(backbone, NO_PATHWAY)).save_pretrained(folder)
    return folder, push_episodes


@pytest.fixture
def make(files):
    made = []

    def build(num_envs=4, **kwargs):
        kwargs = {"world_model": files[0], "keyframes": files[1], "device": "cpu", **kwargs}
        env = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=num_envs, **kwargs)
        made.append(env)
        return env

    yield build
    for env in made:
        env.close()


def test_spaces_and_info_keys_match_the_physics_env(make, make_vec):
    dream = make(autoreset_mode="SameStep")
    real = make_vec("PushCube-v0", num_envs=4, obs_mode="pixels", image_size=32, autoreset_mode="SameStep")
    assert dream.single_observation_space == real.single_observation_space
    assert dream.observation_space == real.observation_space and dream.action_space == real.action_space
    assert dream.metadata["autoreset_mode"] == real.metadata["autoreset_mode"]
    obs, info = dream.reset(seed=0)
    real_obs, real_info = real.reset(seed=0)
    assert dream.observation_space.contains(obs) and obs["instruction"] == (INSTRUCTION,) * 4
    assert set(info) == set(real_info)
    obs, reward, terminated, truncated, info = dream.step(dream.action_space.sample())
    _, _, _, _, real_info = real.step(real.action_space.sample())
    assert dream.observation_space.contains(obs) and set(info) == set(real_info)
    assert reward.shape == terminated.shape == truncated.shape == (4,)
    assert info["success"].dtype == bool and info["episode_step"].dtype == np.int64


def test_same_seed_same_imagination_and_snapshots_continue_exactly(make):
    actions = np.random.default_rng(0).uniform(-1, 1, (5, 3, 4)).astype(np.float32)

    def rollout(env, seed):
        frames = [env.reset(seed=seed)[0]["image"]]
        frames += [env.step(a)[0]["image"] for a in actions]
        return np.stack(frames)

    a, b = make(3), make(3)
    assert np.array_equal(rollout(a, 7), rollout(b, 7))
    a.reset(seed=1)
    a.step(actions[0])
    snapshot = a.unwrapped.get_state()
    after = [a.step(x)[0]["image"] for x in actions[1:]]
    b.unwrapped.set_state(snapshot)
    assert np.array_equal(b.unwrapped.start_episode, a.unwrapped.start_episode)
    assert all(np.array_equal(x, b.step(act)[0]["image"]) for x, act in zip(after, actions[1:], strict=True))
    # a rollout takes back only a snapshot of its own shapes
    model, cfg = a.unwrapped.model, a.unwrapped.model.config
    empty = Rollout.empty(cfg, 2, model.device, first_points=model.frames.reads_first_positions)
    assert empty.context.shape == (2, cfg.context, cfg.latent_channels, cfg.latent_size, cfg.latent_size)
    assert not empty.context.any() and (empty.points is None) == (model.objects is None)
    with pytest.raises(ValueError, match=r"the snapshot holds context of shape \(3, 2, 48, 8, 8\); this rollout has "
                                         r"\(2, 2, 48, 8, 8\) \(num_envs=2\)"):
        empty.restore(a.unwrapped._rollout.snapshot())


def test_resets_start_from_real_frames_and_keyframes_follow_the_ratio(make, files, backbone, tmp_path):
    bank = EpisodeBank(files[1])
    real_firsts = bank.images[bank.obs_start]
    plain = make(8, reset_schedule="synchronous")
    obs, info = plain.reset(seed=0)
    assert (info["episode_step"] == 0).all()
    assert all(any(np.array_equal(img, f) for f in real_firsts) for img in obs["image"])
    # the pushes' keyframes are placed by the recorded state (the gripper never toggles), which the
    # default pixels rung never reads: there every start is an episode start
    assert len(plain.unwrapped.keyframes) == 0
    torch.manual_seed(0)
    WorldModel(small(backbone, PATHWAY)).save_pretrained(tmp_path / "wm")
    seeded = functools.partial(make, world_model=tmp_path / "wm", rung="sim-seeded")
    keyed = seeded(16, keyframe_rule=KeyframeRule(ratio=1.0))
    obs, info = keyed.reset(seed=0)
    assert (info["episode_step"] > 0).all() and not info["success"].any()
    starts = bank.obs_start[keyed.unwrapped.start_episode] + info["episode_step"]  # which recorded state
    assert np.array_equal(obs["image"], bank.images[starts])
    mixed = seeded(64, keyframe_rule={"ratio": 0.5})
    _, info = mixed.reset(seed=0)
    assert 10 < (info["episode_step"] > 0).sum() < 54
    staggered = make(8, reset_schedule="staggered")
    _, info = staggered.reset(seed=0)
    assert len(set(info["episode_step"].tolist())) == 8  # counters spread over the horizon, as in physics
    _, info = make(6, reset_schedule="synchronous").reset(seed=0, options={"group_size": 3})


def test_success_terminates_and_rewards_the_transition(make):
    eager = make(2, success_threshold=1e-9, reset_schedule="synchronous")  # every imagined frame is a success
    eager.reset(seed=0)
    _, reward, terminated, truncated, info = eager.step(np.zeros((2, 4), np.float32))
    assert terminated.all() and not truncated.any() and info["success"].all() and (reward == 1).all()
    kept = make(2, success_threshold=1e-9, terminate_on_success=False, reset_schedule="synchronous")
    kept.reset(seed=0)
    rewards = [kept.step(np.zeros((2, 4), np.float32))[1] for _ in range(3)]
    assert [r.tolist() for r in rewards] == [[1, 1], [0, 0], [0, 0]]  # only the 0 -> 1 transition
    sparse = make(2, success_threshold=1e-9, terminate_on_success=False, reward_type="sparse",
                  reset_schedule="synchronous")
    sparse.reset(seed=0)
    assert [sparse.step(np.zeros((2, 4), np.float32))[1].tolist() for _ in range(2)] == [[1, 1], [1, 1]]


def test_the_dense_reward_shapes_on_the_imagined_objects_as_physics_does(files, backbone, tmp_path):
    torch.manual_seed(0)
    WorldModel(small(backbone, PATHWAY)).save_pretrained(tmp_path / "wm")
    env = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=3, world_model=tmp_path / "wm", keyframes=files[1],
                       device="cpu", reward_type="dense", reset_schedule="synchronous", terminate_on_success=False,
                       rung="sim-seeded")  # the objects start at the recorded state
    _, info = env.reset(seed=0)
    bank, scene = EpisodeBank(files[1]), Scene.load()
    physics = make_family(get_task("PushCube-v0"), scene).evaluate(qpos_from_state(scene, bank.state[bank.obs_start]))
    starts = np.stack([physics.terms["reach"], physics.terms["place"]], axis=1)  # the recorded starts' shaping
    imagined = np.stack([info["reward_terms"]["reach"], info["reward_terms"]["place"]], axis=1)
    assert all(np.abs(starts - row).max(axis=1).min() < 1e-4 for row in imagined)
    for _ in range(3):
        _, reward, _, _, info = env.step(env.action_space.sample())
        terms = info["reward_terms"]
        staged = (terms["reach"] + terms["place"]) / 3
        np.testing.assert_allclose(reward, np.where(info["success"], 1.0, staged))
        assert ((0 <= reward) & (reward <= 1)).all()
    with pytest.raises(ValueError, match="reward_type='dense'.*object pathway"):
        gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=1, world_model=files[0], keyframes=files[1],
                     device="cpu", reward_type="dense")


def test_frames_are_drawn_when_looked_at_and_nothing_else_changes(files, backbone, tmp_path):
    """A model that draws each frame from the first frame and the step's state draws one frame per
    action chunk; the gripper, objects, verdicts and rewards are those of drawing every step, and
    stepped one action at a time the frames are too."""
    torch.manual_seed(0)
    WorldModel(small(backbone, merged(PATHWAY, {"frames": {"anchor": "first"}} if backbone == "unet" else {})
                     )).save_pretrained(tmp_path / "wm")
    on_demand = backbone == "unet"  # the video transformer reads the context frames: each is drawn

    def run(draw_every_step: bool, actions: np.ndarray):
        env = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=3, world_model=tmp_path / "wm",
                           keyframes=files[1], device="cpu", reward_type="dense", terminate_on_success=False,
                           autoreset_mode="SameStep", horizon=6)
        assert env.model.frames_on_demand == on_demand
        if draw_every_step:
            env._on_demand = False
        drawn, draw = [], env.model.draw
        env.model.draw = lambda *args, **kwargs: drawn.append(len(args[0].first)) or draw(*args, **kwargs)
        out = [env.reset(seed=3)]
        out += [env.step(a) for a in actions]
        proprio = np.stack([o[0]["proprio"] for o in out])
        rewards = np.stack([o[1] for o in out[1:]])
        ends = np.stack([o[2] | o[3] for o in out[1:]])
        images = np.stack([o[0]["image"] for o in out])
        env.close()
        return proprio, rewards, ends, images, drawn

    chunks = np.random.default_rng(0).uniform(-1, 1, (4, 3, 2, 4)).astype(np.float32)  # chunks of 2 actions
    lazy, eager = run(False, chunks), run(True, chunks)
    for a, b in zip(lazy[:3], eager[:3], strict=True):  # proprio, rewards, episode ends
        np.testing.assert_array_equal(a, b)
    assert sum(eager[4]) == 4 * 2 * 3  # every step of every env drawn
    assert sum(lazy[4]) == (4 * 3 if on_demand else 4 * 2 * 3)  # one frame per chunk: the one returned
    singles = chunks.transpose(0, 2, 1, 3).reshape(8, 3, 1, 4)  # the same actions one at a time: each drawn
    np.testing.assert_array_equal(run(False, singles)[3], run(True, singles)[3])


def test_a_cube_imagined_off_the_table_ends_the_episode_as_a_failure(make):
    env = make(2, reset_schedule="synchronous", terminate_on_success=False)
    env.reset(seed=0)
    predict = env.model.predict

    def first_cube_falls(*args, **kwargs):  # what the object pathway's rules report for a cube off the table
        pred = predict(*args, **kwargs)
        pred.failed = torch.tensor([True, False])
        return pred

    env.model.predict = first_cube_falls
    _, reward, terminated, truncated, info = env.step(np.zeros((2, 4), np.float32))
    assert terminated.tolist() == [True, False] and info["failure"].tolist() == [True, False]
    assert not truncated.any()


def test_bad_input_gets_clear_errors(make, files, tmp_path):
    with pytest.raises(ValueError, match="cannot produce the 'state'.*'pixels'"):
        make(obs_mode="pixels+state")
    with pytest.raises(ValueError, match="cannot produce the 'state'"):
        make(obs_mode="state")
    with pytest.raises(ValueError, match="wrist_camera"):
        make(wrist_camera=True)
    with pytest.raises(ValueError, match="image_size=64 does not match"):
        make(image_size=64)
    with pytest.raises(ValueError, match="staggered-warmup"):
        make(reset_schedule="staggered-warmup")
    with pytest.raises(ValueError, match="cannot imagine task 'StackCube-v0'"):
        gym.make_vec("worldsim/Imagined-StackCube-v0", num_envs=1, world_model=files[0], keyframes=files[1])
    with pytest.raises(FileNotFoundError, match="no world model"):
        make(world_model=tmp_path)
    reach = tmp_path / "reach.h5"
    collect_episodes(["ReachCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t)), 1, reach,
                     num_envs=1, image_size=32, progress=False)
    with pytest.raises(ValueError, match="keyframes=.*no episodes of task"):
        make(keyframes=reach)
    big = tmp_path / "big.h5"
    collect_episodes(["PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t)), 1, big, num_envs=1,
                     image_size=48, progress=False)
    with pytest.raises(ValueError, match="image_size=32"):
        make(keyframes=big)
    env = make(2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(num_envs, 4\)"):
        env.step(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"envs \[1\] contain NaN"):
        env.step(np.array([[0, 0, 0, 0], [np.nan, 0, 0, 0]], np.float32))
    with pytest.raises(RuntimeError, match="before reset"):
        make(1).step(np.zeros((1, 4), np.float32))
    with pytest.raises(TypeError, match="did you mean 'horizon'"):  # an imagination setting, as a keyword
        make(horizn=5)


def test_single_env_for_gym_make(files):
    env = gym.make("worldsim/Imagined-PushCube-v0", world_model=files[0], keyframes=files[1], device="cpu",
                   reset_schedule="synchronous", max_episode_steps=2)
    obs, info = env.reset(seed=0)
    assert obs["image"].shape == (32, 32, 3) and info["episode_step"] == 0
    env.step(np.zeros(4, np.float32))
    _, _, terminated, truncated, _ = env.step(np.zeros(4, np.float32))
    assert truncated and not terminated
    env.close()


def test_the_rl_config_picks_the_imagined_reward(files, tmp_path):
    TinyVLA(TinyVLAConfig(instructions=(INSTRUCTION,), image_size=32, language="learned",
                          channels=(8, 8), hidden_dim=32, feature_dim=32)).save_pretrained(tmp_path / "vla")
    common = dict(task="PushCube-v0", obs_mode="pixels", policy=str(tmp_path / "vla"), num_envs=4, group_size=2,
                  out=tmp_path / "grpo", device="cpu")

    def imagination(**kwargs: object) -> ImaginationConfig:
        return ImaginationConfig(world_model=files[0], keyframes=files[1], **kwargs)

    policy = worldsim.training.rl.load_policy(tmp_path / "vla", torch.device("cpu"))
    for reward in ("transition", "sparse"):
        config = worldsim.training.grpo.GRPOConfig(imagination=imagination(reward_type=reward), **common)
        env = worldsim.training.rl.make_train_env(config, 4, policy, reset_schedule="keyframe")
        assert env.unwrapped.reward_type == reward and env.unwrapped.horizon == 40
        assert env.unwrapped.device.type == "cpu"  # the world model runs on the run's device
        env.close()
    dense = worldsim.training.grpo.GRPOConfig(imagination=imagination(reward_type="dense"), **common)
    with pytest.raises(ValueError, match="reward_type='dense'.*object pathway"):  # this model has none
        worldsim.training.rl.make_train_env(dense, 4, policy, reset_schedule="keyframe")
    with pytest.raises(ValueError, match="reward_type='shaped'; allowed: transition, sparse, dense"):
        imagination(reward_type="shaped")
    with pytest.raises(ValueError, match="imagination.device='cuda': the world model runs on the run's device"):
        worldsim.training.grpo.GRPOConfig(imagination=imagination(device="cuda"), **common)


@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["unet"], scope="module")  # the trainers see the env alone
def test_ppo_and_grpo_train_in_imagination(files, tmp_path):
    """--world-model points the unchanged trainers at the imagined twin; evaluation stays in physics."""
    TinyVLA(TinyVLAConfig(instructions=(INSTRUCTION,), image_size=32, language="learned",
                          channels=(8, 8), hidden_dim=32, feature_dim=32)).save_pretrained(tmp_path / "vla")
    imagination = ImaginationConfig(world_model=files[0], keyframes=files[1])
    common = dict(task="PushCube-v0", obs_mode="pixels", policy=str(tmp_path / "vla"), imagination=imagination,
                  num_envs=4, num_minibatches=2, update_epochs=1, eval_every=0,
                  eval_episodes=1, checkpoint_every=0, progress=False, device="cpu")
    summary = worldsim.training.ppo.train_ppo(worldsim.training.ppo.PPOConfig(
        num_steps=2, total_env_steps=2 * 4 * 4 * 2, value_warmup_iters=0, out=tmp_path / "ppo", **common))
    assert summary["iterations"] == 2 and summary["global_step"] == 64
    state = torch.load(tmp_path / "ppo" / "checkpoint.pt", weights_only=False)
    assert "context" in state["env"]  # the imagined env's snapshot went into the checkpoint
    assert summary["eval"]["per_task"]["PushCube-v0"]["episodes"] == 1
    config = worldsim.training.ppo.PPOConfig(out=tmp_path / "x", **common)
    assert config.reset_schedule == "keyframe"
    short = {**common, "imagination": imagination.replace(horizon=3, keyframe_ratio=0.0)}
    summary = worldsim.training.grpo.train_grpo(worldsim.training.grpo.GRPOConfig(
        group_size=2, total_env_steps=1, out=tmp_path / "grpo", **short))
    # an iteration imagines each env's one episode up to its horizon, not the task's 100-step limit:
    # one chunk of 4 actions covers the 3 steps, in each of the 4 envs
    assert TinyVLA.from_pretrained(tmp_path / "vla").chunk_size == 4
    assert summary["iterations"] == 1 and summary["global_step"] == 4 * 4 and summary["eval"]["episodes"] == 1
    with pytest.raises(ValueError, match="both world_model and keyframes"):
        imagination.replace(keyframes=None)
    with pytest.raises(ValueError, match="imagined envs observe pixels only"):
        worldsim.training.ppo.PPOConfig(**{**common, "obs_mode": "state"})


@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["unet"], scope="module")  # wan: rank-policies (test_video_world_model_commands)
def test_policies_are_evaluated_in_imagination(files):
    """Evaluation counts exactly the episodes asked for; envs left idle once the quota is reached
    keep ending and are reset, as in physics. It starts at episode starts and runs to the time
    limit, whatever keyframe ratio and horizon the imagination trains with."""
    world_model, keyframes = files
    torch.manual_seed(0)
    policy = TinyVLA(TinyVLAConfig(instructions=(INSTRUCTION,), image_size=32, language="learned",
                                   channels=(8, 8), hidden_dim=32, feature_dim=32))
    result = evaluate_policy(policy, ["PushCube-v0"], 5, num_envs=2, progress=False,
                             imagination=ImaginationConfig(world_model, keyframes, keyframe_ratio=1.0, horizon=2,
                                                           device="cpu"))
    task = result.tasks["PushCube-v0"]
    assert task.episodes == 5 and 2 < task.mean_length <= 100 and task.failures == 0


@pytest.mark.slow
def test_rollouts_with_features_are_recorded_in_imagination(files, tmp_path):
    """Failure detectors read rollouts from imagination the same way as from physics."""
    world_model, keyframes = files
    torch.manual_seed(0)
    policy = TinyVLA(TinyVLAConfig(instructions=(INSTRUCTION,), image_size=32, language="learned",
                                   channels=(8, 8), hidden_dim=32, feature_dim=32, std_head="state"))
    out = tmp_path / "dream.h5"
    collect_episodes(["PushCube-v0"], lambda t: policy, 2, out, num_envs=2, image_size=32, obs_mode="pixels",
                     record_features=True, num_samples=3,
                     imagination=ImaginationConfig(world_model, keyframes, device="cpu"), progress=False)
    rollouts = load_rollouts(out)
    assert len(rollouts) == 2
    assert rollouts[0].features.shape == (rollouts[0].length, 32)
    assert rollouts[0].action_samples.shape == (rollouts[0].length, 3, 4, 4)
    with EpisodeReader(out) as reader:
        assert {info.env_id for info in reader.episode_info()} == {"worldsim/Imagined-PushCube-v0"}
    with pytest.raises(ValueError, match="obs_mode='pixels'"):
        collect_episodes(["PushCube-v0"], lambda t: policy, 2, tmp_path / "x.h5", image_size=32,
                         imagination=ImaginationConfig(world_model, keyframes))


def test_the_imagined_env_takes_its_defaults_from_the_imagination_config(untrained_world_model, push_episodes):
    from pathlib import Path

    from worldsim.envs.imagination import DEFAULT_IMAGINATION, PIXELS
    from worldsim.envs.registration import make_task_envs
    from worldsim.world_models.env import ENV_IMAGINATION

    assert DEFAULT_IMAGINATION.rung is PIXELS  # the model's own frames, nothing from the simulator
    assert ENV_IMAGINATION == DEFAULT_IMAGINATION.replace(horizon=None)  # made on its own: to the time limit
    files = {"world_model": untrained_world_model, "keyframes": push_episodes}
    env = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=1, device="cpu", **files)
    assert env.unwrapped.imagination == ENV_IMAGINATION.replace(device="cpu") and env.unwrapped.horizon is None
    assert env.unwrapped.rung is PIXELS and env.unwrapped.outcome == "head"  # this model's judge
    env.close()
    config = DEFAULT_IMAGINATION.replace(keyframe_ratio=0.0, device="cpu", **files)
    kwargs = config.env_kwargs()
    assert kwargs == {"world_model": untrained_world_model, "keyframes": push_episodes, "imagination": config,
                      "reset_schedule": "synchronous"}
    assert DEFAULT_IMAGINATION.replace(world_model="wm", keyframes="k.h5", keyframe_ratio=0.3).env_kwargs()[
        "reset_schedule"] == "keyframe" and DEFAULT_IMAGINATION.replace(world_model="wm", keyframes="k.h5"
                                                                        ).world_model == Path("wm")
    env = make_task_envs("PushCube-v0", 1, imagination=config)
    assert env.unwrapped.imagination == config and env.unwrapped.horizon == 40
    assert env.unwrapped.keyframe_rule.ratio == 0 and env.unwrapped.device.type == "cpu"
    env.close()
    # a keyword setting replaces the config's
    env = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=1, imagination=config, horizon=7, **files)
    assert env.unwrapped.horizon == 7 and env.unwrapped.imagination == config.replace(horizon=7)
    env.close()
    with pytest.raises(ValueError, match=r"imagination and env_kwargs both set \['horizon'\]"):
        make_task_envs("PushCube-v0", 1, imagination=config, horizon=7)
    assert DEFAULT_IMAGINATION.replace(horizon=7).for_evaluation().horizon is None
