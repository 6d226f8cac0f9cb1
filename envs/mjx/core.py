"""Pure, batched reset and step of the tabletop envs on MuJoCo XLA.

Every function here is a pure, jit-compiled function of arrays (``vmap`` over the envs
inside the physics; the task rules run on the whole batch): the Gymnasium edge
(:class:`~worldsim.envs.mjx.vector_env.MjxVectorEnv`, whose episode bookkeeping is the shared
core's, :mod:`worldsim.envs.core`) and JAX users call the same code. Rows are chosen by masks,
so neither a partial reset nor a partial step recompiles:

- :func:`reset_envs` puts the envs of a mask at new layouts;
- :func:`step_envs` advances the envs of a mask by one control step (the only call with
  physics in it; it takes no task, so it compiles once per batch size and serves every task);
- :func:`evaluate_envs` and :func:`observe` read the task's quantities and the ``state``
  observation of the current states. The task's rules are the array-API families
  (:mod:`worldsim.envs.mjx.tasks`); its :class:`~worldsim.envs.tasks.TaskSpec` is a static
  argument, so these compile once per task, in a fraction of a second.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
from mujoco import mjx

from worldsim.envs.mjx.layout import sample_qpos
from worldsim.envs.mjx.physics import control_step, mj_model
from worldsim.envs.mjx.state import EnvState, TaskParams
from worldsim.envs.mjx.tasks import evaluate, failed, state_vector

if TYPE_CHECKING:
    from collections.abc import Callable

    from worldsim.envs.tasks import TaskSpec


class Evaluated(NamedTuple):
    """The task's verdict on every env: success, failure, reward of the step, named terms."""

    success: jax.Array  # (N,) bool
    failure: jax.Array  # (N,) bool
    reward: jax.Array  # (N,) float32
    terms: dict[str, jax.Array]  # the family's named dense-reward terms, (N,) each


# On the CPU, XLA (jaxlib 0.9-0.10, 2 cores) deadlocks running the vmapped MJX step or layout
# sampler over more than about 32 envs at once: the batch is processed in blocks of this many
# envs one after another (no slower on a CPU). Accelerators take the whole batch in one go.
CPU_BLOCK = 32
# XLA's expensive LLVM passes take about a third of the CPU compile time of the physics step
# and do not make it faster on a CPU; accelerators keep XLA's defaults.
_COMPILER_OPTIONS = {"xla_llvm_disable_expensive_passes": True} if jax.default_backend() == "cpu" else None


def _blockwise(fn: Callable[..., Any], *batched: jax.Array) -> Any:
    """``jax.vmap(fn)(*batched)``, in blocks of :data:`CPU_BLOCK` envs on the CPU."""
    n = batched[0].shape[0]
    if jax.default_backend() != "cpu" or n <= CPU_BLOCK:
        return jax.vmap(fn)(*batched)
    pad = -n % CPU_BLOCK  # padded with copies of the last env: valid states, results dropped
    blocks = [jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1), mode="edge").reshape(
        (-1, CPU_BLOCK) + x.shape[1:]) for x in batched]
    out = jax.lax.map(lambda xs: jax.vmap(fn)(*xs), blocks)
    return jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[2:])[:n], out)


def commit(tree: Any) -> Any:
    """``tree`` placed on the default JAX device, committed: jitted functions compile separately
    for committed and uncommitted arguments, so every argument is committed, as outputs are."""
    return jax.device_put(tree, jax.devices()[0])


def _where(mask: jax.Array, new: jax.Array, old: jax.Array) -> jax.Array:
    return jnp.where(mask.reshape(mask.shape + (1,) * (new.ndim - 1)), new, old)


# ---------------------------------------------------------------------------- resets
def initial_state(key: jax.Array, num_envs: int, qpos0: jax.Array) -> EnvState:
    """A batch of ``num_envs`` envs at the scene's reference pose (reset them before use)."""
    nv = mj_model().nv
    return commit(EnvState(qpos=jnp.tile(qpos0, (num_envs, 1)), qvel=jnp.zeros((num_envs, nv), jnp.float32),
                           warmstart=jnp.zeros((num_envs, nv), jnp.float32), key=key))


@jax.jit
def reset_envs(task: TaskParams, state: EnvState, mask: jax.Array, qpos0: jax.Array,
               group_size: jax.Array) -> EnvState:
    """Put the envs in ``mask`` at new layouts, at rest.

    With ``group_size = G`` each run of G consecutive reset envs shares the first one's layout
    (the caller checks that the number of reset envs is a multiple of G)."""
    key, sub = jax.random.split(state.key)

    def fresh(_: Any) -> tuple[jax.Array, jax.Array]:
        layouts = _blockwise(lambda key: sample_qpos(task, key, qpos0), jax.random.split(sub, len(mask)))
        rank = jnp.cumsum(mask) - 1  # (group_size 1 maps every reset env to itself)
        order = jnp.nonzero(mask, size=len(mask))[0]
        return layouts[order[(rank // group_size) * group_size]]

    layouts = jax.lax.cond(mask.any(), fresh, lambda _: state.qpos, None)
    return EnvState(
        qpos=_where(mask, layouts, state.qpos), qvel=_where(mask, jnp.zeros_like(state.qvel), state.qvel),
        warmstart=_where(mask, jnp.zeros_like(state.warmstart), state.warmstart), key=key)


# ---------------------------------------------------------------------------- steps
@partial(jax.jit, static_argnums=0)
def evaluate_envs(spec: TaskSpec, task: TaskParams, state: EnvState) -> Evaluated:
    """Success, failure, the reward of reaching this state and the named terms, per env, under
    the rules of ``spec`` (static) and the reward settings of ``task``."""
    evaluation = evaluate(spec, state.qpos)
    reward = jnp.where(task.sparse, evaluation.success.astype(jnp.float32), evaluation.dense_reward())
    return Evaluated(evaluation.success, failed(state.qpos, state.qvel), reward, evaluation.terms)


@partial(jax.jit, compiler_options=_COMPILER_OPTIONS)
def step_envs(model: mjx.Model, state: EnvState, action: jax.Array, active: jax.Array) -> EnvState:
    """Execute ``action`` (N, 4), finite, for the envs in ``active``; the others stay as they are
    (then :func:`evaluate_envs` judges the new states)."""
    action = jnp.clip(action.astype(jnp.float32), -1.0, 1.0)
    qpos, qvel, warm = _blockwise(partial(control_step, model), state.qpos, state.qvel, state.warmstart, action)
    return state._replace(qpos=_where(active, qpos, state.qpos), qvel=_where(active, qvel, state.qvel),
                          warmstart=_where(active, warm, state.warmstart))


@partial(jax.jit, static_argnums=0)
def observe(spec: TaskSpec, state: EnvState) -> jax.Array:
    """The ``state`` observation of every env under ``spec`` (static), (N, 56) float32."""
    return state_vector(spec, state.qpos, state.qvel)
