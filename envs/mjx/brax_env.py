"""A tabletop task as a Brax ``Env``, so Brax's trainers run on it unchanged.

Example (the time limit is Brax's ``episode_length``)::

    from brax.training.agents.ppo import train as ppo
    env = TabletopBraxEnv("ReachCube-v0")
    make_policy, params, metrics = ppo.train(env, num_timesteps=..., episode_length=env.max_episode_steps)

Single-env, pure ``reset(rng)``/``step(state, action)`` over the MJX physics and the task rules
of every backend (:mod:`worldsim.envs.families` on a batch of one env), so rewards, success and
the ``state`` observation are the same. Brax's own wrappers add batching, the time limit and
autoreset; as usual in Brax, an env that ends restarts from the first state it was reset to.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
from brax.envs.base import Env, State
from mujoco import mjx

from worldsim.envs.arrays import ACTION_DIM
from worldsim.envs.core import PHYSICS_REWARD_TYPES as REWARD_TYPES
from worldsim.envs.families import Evaluation
from worldsim.envs.mjx.layout import default_qpos, sample_qpos
from worldsim.envs.mjx.physics import control_step, mj_model
from worldsim.envs.mjx.state import task_params
from worldsim.envs.mjx.tasks import evaluate, failed, state_vector
from worldsim.envs.observations import STATE_DIM
from worldsim.envs.tasks import TaskSpec, get_task

_FREE_SPACE = int(mujoco.mjtDisableBit.mjDSBL_CONTACT) | int(mujoco.mjtDisableBit.mjDSBL_GRAVITY)


class Physics(NamedTuple):
    """Brax's ``pipeline_state``: one env's joint positions, velocities and solver warm start."""

    qpos: jax.Array
    qvel: jax.Array
    warmstart: jax.Array


class TabletopBraxEnv(Env):
    """``task`` as a Brax ``Env`` (observation: the 56-float ``state``; action: 4 floats in [-1, 1]).

    Args:
        task: task name, with or without ``worldsim/``.
        reward_type: ``"dense"`` or ``"sparse"``, as on the Gymnasium envs.
        terminate_on_success: ``done`` on success (always on failure).
        contacts: False switches contacts and gravity off: a free-space variant, far cheaper to
            simulate, in which the gripper passes through the cubes and they stay where they
            were placed. Only the reach tasks mean the same there (unless the gripper would
            have bumped a cube); the default True is the full physics.

    ``state.metrics`` holds ``success`` and the task's named reward terms (Brax logs them).
    """

    def __init__(self, task: str | TaskSpec = "ReachCube-v0", *, reward_type: str = "dense",
                 terminate_on_success: bool = True, contacts: bool = True) -> None:
        if reward_type not in REWARD_TYPES:
            raise ValueError(f"reward_type={reward_type!r}; allowed: {', '.join(REWARD_TYPES)}")
        self.task = task if isinstance(task, TaskSpec) else get_task(task)
        self.max_episode_steps = self.task.max_episode_steps
        self.params = task_params(self.task, reward_type=reward_type, terminate_on_success=terminate_on_success)
        model = mj_model()
        if not contacts:
            model = copy.copy(model)
            model.opt.disableflags |= _FREE_SPACE
        self.model = mjx.put_model(model)
        self._qpos0 = default_qpos()

    def reset(self, rng: jax.Array) -> State:
        qpos = sample_qpos(self.params, rng, self._qpos0)
        zeros = jnp.zeros(self.model.nv, jnp.float32)
        physics = Physics(qpos, zeros, zeros)
        return State(physics, self._observe(qpos, zeros), jnp.float32(0.0), jnp.float32(0.0),
                     self._metrics(self._evaluate(qpos)))

    def step(self, state: State, action: jax.Array) -> State:
        physics = state.pipeline_state
        action = jnp.clip(action, -1.0, 1.0)
        physics = Physics(*control_step(self.model, physics.qpos, physics.qvel, physics.warmstart, action))
        evaluation = self._evaluate(physics.qpos)
        ended = evaluation.success & self.params.terminate_on_success
        done = failed(physics.qpos[None], physics.qvel[None])[0] | ended
        reward = jnp.where(self.params.sparse, evaluation.success.astype(jnp.float32), evaluation.dense_reward())
        return state.replace(pipeline_state=physics, obs=self._observe(physics.qpos, physics.qvel),
                             reward=reward, done=done.astype(jnp.float32),
                             metrics={**state.metrics, **self._metrics(evaluation)})

    # The task rules work on batches: one env is a batch of one.
    def _evaluate(self, qpos: jax.Array) -> Evaluation:
        evaluation = evaluate(self.task, qpos[None])
        return Evaluation(evaluation.success[0], {name: term[0] for name, term in evaluation.terms.items()})

    def _observe(self, qpos: jax.Array, qvel: jax.Array) -> jax.Array:
        return state_vector(self.task, qpos[None], qvel[None])[0]

    @staticmethod
    def _metrics(evaluation: Evaluation) -> dict[str, jax.Array]:
        return {"success": evaluation.success.astype(jnp.float32), **evaluation.terms}

    @property
    def observation_size(self) -> int:
        return STATE_DIM

    @property
    def action_size(self) -> int:
        return ACTION_DIM

    @property
    def backend(self) -> str:
        return "mjx"
