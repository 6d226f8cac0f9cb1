"""The scripted expert through the policy protocol, the chunk queue, and evaluation."""

import json

import numpy as np
import pytest
import torch

from worldsim.commands.cli import main
from worldsim.envs.observations import qpos_from_state
from worldsim.evaluation.evaluate import evaluate_policy, wilson_interval
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig, load_policy
from worldsim.policies.runner import ChunkQueue


def test_state_observation_holds_the_whole_configuration(make_vec):
    env = make_vec("StackCube-v0", 5)
    obs, _ = env.reset(seed=2)
    for _ in range(8):
        obs, *_ = env.step(env.unwrapped.expert_action())
    qpos = qpos_from_state(env.unwrapped.scene, obs)
    np.testing.assert_allclose(qpos, env.unwrapped.physics.qpos, atol=1e-6)


def test_expert_policy_matches_the_env_expert_and_reports_its_noise(make_vec):
    env = make_vec("PushCube-v0", 4)
    obs, _ = env.reset(seed=0)
    expert = ScriptedExpert(ScriptedExpertConfig("PushCube-v0"))
    out = expert.act(expert.preprocess(obs))
    assert out.actions.shape == (4, 1, 4)
    np.testing.assert_allclose(out.actions[:, 0].numpy(), env.unwrapped.expert_action(), atol=1e-5)
    noisy = ScriptedExpert(ScriptedExpertConfig("PushCube-v0", noise=0.2, seed=1))
    batch = noisy.preprocess(obs)
    out = noisy.act(batch)
    log_prob, entropy, _ = noisy.evaluate(batch, out.actions)
    torch.testing.assert_close(log_prob, out.log_prob)
    assert torch.allclose(entropy, torch.full((4,), 3 * (0.5 + 0.5 * np.log(2 * np.pi * 0.04))))
    assert noisy.sample(batch, 6).shape == (4, 6, 1, 4)


def test_expert_policy_errors(make_vec, tmp_path):
    expert = ScriptedExpert(ScriptedExpertConfig("PushCube-v0"))
    with pytest.raises(ValueError, match="reads the 'state' observation"):
        expert.preprocess({"image": np.zeros((1, 64, 64, 3), np.uint8)})
    with pytest.raises(ValueError, match="solves PushCube-v0"):
        expert.check_task("stack the red cube on the green cube")
    with pytest.raises(ValueError, match="noise=-1"):
        ScriptedExpertConfig("PushCube-v0", noise=-1)
    with pytest.raises(KeyError, match="Did you mean .PushCube-v0."):
        ScriptedExpertConfig("PushCub-v0")
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        load_policy(tmp_path)
    expert.save_pretrained(tmp_path / "p")
    (tmp_path / "p" / "config.json").write_text('{"policy_type": "nope", "config": {}}')
    with pytest.raises(ValueError, match="unknown policy_type 'nope'"):
        load_policy(tmp_path / "p")


def test_chunk_queue_replans_every_execute_steps(make_vec):
    class Counting(ScriptedExpert):
        chunk_size = 4
        calls = 0

        def act(self, batch, deterministic=False):
            Counting.calls += 1
            out = super().act(batch, deterministic)
            out.actions = out.actions.repeat(1, 4, 1)
            return out

    env = make_vec("ReachCube-v0", 3, obs_mode="state")
    obs, _ = env.reset(seed=0)
    queue = ChunkQueue(Counting(ScriptedExpertConfig("ReachCube-v0")), 3, execute_steps=2)
    for _ in range(3):  # plans at steps 0 and 2; one action left queued per env
        obs, *_ = env.step(queue(obs))
    assert Counting.calls == 2
    queue.restart(np.array([True, False, False]))
    queue(obs)
    assert Counting.calls == 3 and queue.last_planned.tolist() == [0]
    with pytest.raises(ValueError, match="execute_steps=5"):
        ChunkQueue(Counting(ScriptedExpertConfig("ReachCube-v0")), 3, execute_steps=5)


def test_evaluation_counts_exactly_the_episodes_asked_for():
    expert = ScriptedExpert(ScriptedExpertConfig("ReachCube-v0"))
    results = evaluate_policy(expert, ["ReachCube-v0"], 7, num_envs=3, progress=False)
    r = results.tasks["ReachCube-v0"]
    assert r.episodes == 7 and r.successes == 7 and r.success_rate == 1.0
    assert 0 < r.mean_length < 50 and r.ci95[0] > 0.6
    weak = ScriptedExpert(ScriptedExpertConfig("PushCube-v0", epsilon=1.0))  # uniformly random actions
    rate = evaluate_policy(weak, ["PushCube-v0"], 6, num_envs=6, deterministic=False, progress=False).success_rate
    assert rate < 0.5


def test_wilson_interval():
    low, high = wilson_interval(0, 20)
    assert low == 0.0 and 0.1 < high < 0.2
    low, high = wilson_interval(10, 20)
    assert low < 0.5 < high and abs((low + high) / 2 - 0.5) < 1e-9


@pytest.mark.slow
def test_evaluate_cli_writes_json_and_videos(tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["evaluate", "--policy", "expert", "--task", "ReachCube-v0", "--task", "PushCube-v0",
                 "--episodes", "4", "--num-envs", "4", "--out", str(out), "--video"]) == 0
    result = json.loads(out.read_text())
    assert result["episodes"] == 8 and set(result["per_task"]) == {"ReachCube-v0", "PushCube-v0"}
    assert result["per_task"]["ReachCube-v0"]["success_rate"] == 1.0
    assert len(result["per_task"]["PushCube-v0"]["videos"]) == 3
    assert all((tmp_path / "videos" / f"PushCube-v0_{k}.mp4").stat().st_size > 1000 for k in range(3))
    assert "ReachCube-v0" in capsys.readouterr().out
    assert main(["evaluate", "--policy", "expert", "--episodes", "2"]) == 2
    assert "needs --task or --suite" in capsys.readouterr().err


def test_evaluate_without_tasks_runs_the_tasks_the_policy_was_trained_on(tmp_path):
    from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig

    # PushCube-Row-v0 shares PushCube-v0's instruction: the policy serves it, but was not trained on it
    torch.manual_seed(0)
    config = TinyVLAConfig.for_tasks(["PushCube-v0"], language="learned", channels=(4, 8), hidden_dim=16,
                                     feature_dim=16, language_dim=8, image_size=32)
    TinyVLA(config).save_pretrained(tmp_path / "p")
    out = tmp_path / "eval.json"
    assert main(["evaluate", "--policy", str(tmp_path / "p"), "--episodes", "1", "--num-envs", "1",
                 "--out", str(out)]) == 0
    assert list(json.loads(out.read_text())["per_task"]) == ["PushCube-v0"]
