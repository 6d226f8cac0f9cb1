"""The one rollout loop under collection and evaluation: episode counting, chunk queues, both
autoreset modes; and the one factory of physics and imagined envs."""

import numpy as np
import pytest
import torch

from worldsim.data.collect import collect_episodes
from worldsim.data.reader import EpisodeReader
from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.registration import make_task_envs, task_env_id
from worldsim.evaluation.evaluate import evaluate_policy
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.rollout import RolloutHooks, run_episodes


class Log(RolloutHooks):
    """What the loop reports: the (slot, env) of each episode begun, and per slot its actions and
    its end (env, length, success, last observation)."""

    def __init__(self):
        self.begun, self.actions, self.ends = [], {}, {}

    def started(self, slot, env, obs, info):
        self.begun.append((slot, env))
        self.actions[slot] = []

    def stepped(self, step):
        for i in np.flatnonzero(step.active):
            self.actions[int(step.slots[i])].append(step.actions[i].copy())

    def finished(self, slot, env, step):
        self.ends[slot] = (env, int(step.next_info(env, "episode_step")), bool(step.next_info(env, "success")),
                           step.next_obs(env))


class Planner(ScriptedExpert):
    """Plans chunks of 4 identical actions and numbers its plans: every action of plan n is n / 100."""

    chunk_size = 4

    def __init__(self, config):
        super().__init__(config)
        self.plans = 0

    def act(self, batch, deterministic=False):
        out = super().act(batch, deterministic)
        count = out.actions.shape[0]
        numbers = (self.plans + torch.arange(1, count + 1)).float() / 100
        self.plans += count
        out.actions = numbers[:, None, None].expand(count, 4, 4).clone()
        return out


def rollout(mode, policy, episodes, num_envs, paired=True, **env_kwargs):
    env = make_task_envs("ReachCube-v0", num_envs, obs_mode="state", autoreset_mode=mode, **env_kwargs)
    log = Log()
    try:
        steps = run_episodes(env, policy, episodes, log, seed=4, execute_steps=3 if policy.chunk_size > 1 else None,
                             paired=paired)
    finally:
        env.close()
    return log, steps


def test_both_autoreset_modes_count_the_first_episodes_started_and_see_their_last_observation():
    expert = ScriptedExpert(ScriptedExpertConfig("ReachCube-v0"))
    same, same_steps = rollout("SameStep", expert, 5, 3)
    disabled, disabled_steps = rollout("Disabled", expert, 5, 3, paired=False)  # the env's own stream, as SameStep
    assert [slot for slot, _ in same.begun] == list(range(5)) and same.begun[:3] == [(0, 0), (1, 1), (2, 2)]
    assert sorted(same.ends) == list(range(5))
    for slot, (env, length, success, last) in same.ends.items():
        assert len(same.actions[slot]) == length and success  # the expert always reaches
        assert (slot, env) in same.begun
        other = disabled.ends[slot]
        assert other[:3] == (env, length, success)
        # SameStep's last observation comes from final_obs: the same as Disabled's before its reset
        np.testing.assert_array_equal(last, other[3])
    assert same.begun == disabled.begun
    assert same_steps % 3 == 0 and same_steps >= 3 * max(end[1] for end in same.ends.values())
    assert disabled_steps % 3 == 0


@pytest.mark.parametrize("mode", ["SameStep", "Disabled"])
def test_each_episode_starts_with_a_fresh_chunk(mode):
    log, _ = rollout(mode, Planner(ScriptedExpertConfig("ReachCube-v0")), 5, 2, max_episode_steps=5)
    plans = []
    for slot in range(5):
        x = np.array([action[0] for action in log.actions[slot]])
        # plan boundaries fall every 3 actions from the episode's first step: the queue restarted
        assert all(x[t] == x[t - t % 3] for t in range(len(x))), (slot, x)
        plans.append(set(x.tolist()))
        assert len(plans[-1]) == -(-len(x) // 3)
    assert sum(len(p) for p in plans) == len(set().union(*plans))  # no plan shared by two episodes


def test_collection_and_evaluation_count_the_same_episodes(tmp_path):
    expert = ScriptedExpert(ScriptedExpertConfig("ReachCube-v0"))
    collected = collect_episodes(["ReachCube-v0"], lambda task: expert, 5, tmp_path / "reach.h5", num_envs=3, seed=4,
                                 obs_mode="state", progress=False).tasks["ReachCube-v0"]
    evaluated = evaluate_policy(expert, ["ReachCube-v0"], 5, num_envs=3, seed=4, progress=False).tasks["ReachCube-v0"]
    assert evaluated.episodes == collected.episodes == 5 and evaluated.successes == collected.successes
    assert evaluated.mean_length == collected.mean_length
    with EpisodeReader(tmp_path / "reach.h5") as reader:
        returns = [float(reader.load(i, "rewards").sum()) for i in range(len(reader))]
    assert evaluated.mean_return == pytest.approx(np.mean(returns), rel=1e-5)


def test_the_loop_refuses_next_step_envs_and_no_episodes():
    expert = ScriptedExpert(ScriptedExpertConfig("ReachCube-v0"))
    env = make_task_envs("ReachCube-v0", 2, obs_mode="state")  # NextStep, gymnasium's default
    try:
        with pytest.raises(ValueError, match="autoreset_mode is .*NextStep.*'SameStep' or 'Disabled'"):
            run_episodes(env, expert, 2, RolloutHooks())
        with pytest.raises(ValueError, match="episodes=0 must be an int >= 1"):
            run_episodes(env, expert, 0, RolloutHooks())
    finally:
        env.close()


def test_one_factory_makes_physics_and_imagined_envs():
    assert task_env_id("PushCube-v0") == "worldsim/PushCube-v0"
    assert task_env_id("PushCube-v0", imagined=True) == "worldsim/Imagined-PushCube-v0"
    env = make_task_envs("ReachCube-v0", 2, obs_mode="state", autoreset_mode="Disabled")
    assert env.spec.id == "worldsim/ReachCube-v0" and env.num_envs == 2
    env.close()
    with pytest.raises(ValueError, match=r"both set \['device'\]"):
        make_task_envs("PushCube-v0", 1, imagination=ImaginationConfig("wm", "k.h5", device="cpu"), device="cpu")
    with pytest.raises(ValueError, match="no world model to imagine with"):
        make_task_envs("PushCube-v0", 1, imagination=ImaginationConfig())
    with pytest.raises(TypeError, match="imagination must be an ImaginationConfig, not dict"):
        make_task_envs("PushCube-v0", 1, imagination={"world_model": "wm"})  # type: ignore[arg-type]
