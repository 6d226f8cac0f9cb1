"""Brax's own PPO trainer learns the reach task on the Brax adapter of the MJX backend."""

import functools

import pytest
from brax.training.agents.ppo import networks as ppo_networks
from brax.training.agents.ppo import train as ppo

from worldsim.envs.mjx import TabletopBraxEnv


@pytest.mark.slow
def test_brax_ppo_improves_the_return_on_reach():
    """A small CPU budget: 12.8k env steps in the free-space variant (contacts=False: the
    full contact physics would not fit a unit test's time on a CPU). Brax logs the return of
    the training episodes as they finish; it must more than double from the first logs."""
    env = TabletopBraxEnv("ReachCube-v0", contacts=False)
    assert env.observation_size == 56 and env.action_size == 4
    returns: list[float] = []
    ppo.train(
        env, num_timesteps=12_000, num_evals=2, run_evals=False, log_training_metrics=True,
        training_metrics_steps=1280, episode_length=env.max_episode_steps, num_envs=16, batch_size=16,
        num_minibatches=4, unroll_length=10, num_updates_per_batch=4, learning_rate=3e-3, entropy_cost=1e-3,
        discounting=0.95, normalize_observations=True, seed=0,
        network_factory=functools.partial(ppo_networks.make_ppo_networks, policy_hidden_layer_sizes=(32, 32),
                                          value_hidden_layer_sizes=(32, 32)),
        progress_fn=lambda step, metrics: returns.extend(
            [float(metrics["episode/sum_reward"])] if "episode/sum_reward" in metrics else []),
    )
    logged = returns
    assert len(logged) >= 5
    assert logged[-1] > 2 * min(logged[:3]) and logged[-1] > 4.0, logged
