"""Pure, batched reset and step of the tabletop envs on MuJoCo XLA.

Every function here is a pure function of arrays (jit-compiled, ``vmap`` over the envs
inside), so the Gymnasium edge (:class:`~worldsim.envs.mjx.vector_env.MjxVectorEnv`) and JAX
users call the same code. The semantics are those of
:class:`~worldsim.envs.vector_env.TabletopVectorEnv`, split into three calls so that one
compiled physics step serves every chunk length, autoreset mode and task:

1. :func:`begin` starts a (possibly chunked) step: envs waiting for a NextStep reset do not move.
2. :func:`advance` executes one action of the chunk for the active envs (the only call with
   physics in it; compiled once per batch size).
3. :func:`finish` applies the time limit, success and failure, and the autoreset mode, and
   returns observations, rewards, flags and info.

Partial resets (a ``mask`` of envs) never recompile: new layouts are sampled for the batch
and written with ``jnp.where`` where the mask is set.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from mujoco import mjx
from worldsim.envs.mjx.layout import sample_qpos
from worldsim.envs.mjx.physics import control_step, mj_model
from worldsim.envs.mjx.state import EnvState, TaskParams
from worldsim.envs.mjx.tasks import evaluate, failed, state_vector
from worldsim.envs.reset_schedule import ResetSchedule

NEXT_STEP, SAME_STEP, DISABLED = 0, 1, 2  # autoreset modes, as the ``mode`` argument


class Progress(NamedTuple):
    """What a step has done so far: who still moves, reward and steps per env."""

    active: jax.Array  # (N,) bool
    reward: jax.Array  # (N,) float32
    steps: jax.Array  # (N,) int32


_in_task = partial(jax.vmap, in_axes=(None, 0))  # vmap over envs, the task shared
# On the CPU, XLA (jaxlib 0.9-0.10, 2 cores) deadlocks running the vmapped MJX step or layout
# sampler over more than about 32 envs at once: the batch is processed in blocks of this many
# envs one after another (no slower on a CPU). Accelerators take the whole batch in one go.
CPU_BLOCK = 32
# XLA's expensive LLVM passes take about a third of the CPU compile time of the physics step
# (37 s against 25 s on 2 cores) and do not make it faster on a CPU; accelerators keep XLA's
# defaults.
_COMPILER_OPTIONS = {"xla_llvm_disable_expensive_passes": True} if jax.default_backend() == "cpu" else None


def _blockwise(fn, *batched: jax.Array):
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
    return commit(EnvState(
        qpos=jnp.tile(qpos0, (num_envs, 1)), qvel=jnp.zeros((num_envs, nv), jnp.float32),
        warmstart=jnp.zeros((num_envs, nv), jnp.float32), elapsed=jnp.zeros(num_envs, jnp.int32),
        pending_reset=jnp.zeros(num_envs, bool), finished=jnp.zeros(num_envs, bool), key=key,
    ))


@jax.jit
def reset_envs(task: TaskParams, state: EnvState, mask: jax.Array, qpos0: jax.Array,
               group_size: jax.Array) -> EnvState:
    """Start the envs in ``mask`` over: new layouts at rest, step 0, autoreset flags cleared.

    With ``group_size = G`` each run of G consecutive reset envs shares the first one's layout
    (the caller checks that the number of reset envs is a multiple of G)."""
    key, sub = jax.random.split(state.key)

    def fresh(_):
        layouts = _blockwise(lambda key: sample_qpos(task, key, qpos0), jax.random.split(sub, len(mask)))
        rank = jnp.cumsum(mask) - 1  # (group_size 1 maps every reset env to itself)
        order = jnp.nonzero(mask, size=len(mask))[0]
        return layouts[order[(rank // group_size) * group_size]]

    layouts = jax.lax.cond(mask.any(), fresh, lambda _: state.qpos, None)
    return EnvState(
        qpos=_where(mask, layouts, state.qpos), qvel=_where(mask, jnp.zeros_like(state.qvel), state.qvel),
        warmstart=_where(mask, jnp.zeros_like(state.warmstart), state.warmstart),
        elapsed=jnp.where(mask, 0, state.elapsed), pending_reset=state.pending_reset & ~mask,
        finished=state.finished & ~mask, key=key,
    )


@partial(jax.jit, static_argnames=("schedule", "num_envs"))
def schedule_offsets(schedule: ResetSchedule, key: jax.Array, num_envs: int, horizon: jax.Array) -> jax.Array:
    """Starting elapsed-step counters (:meth:`ResetSchedule.offsets`, drawn with JAX)."""
    if schedule.kind == "synchronous":
        return jnp.zeros(num_envs, jnp.int32)
    if schedule.kind == "staggered-random":
        return jax.random.randint(key, (num_envs,), 0, horizon, jnp.int32)
    permutation = jax.random.permutation(key, num_envs).astype(jnp.int32)
    if schedule.kind == "staggered-groups":
        return ((permutation % schedule.groups) * horizon) // schedule.groups
    return (permutation * horizon) // num_envs  # staggered, staggered-warmup: evenly spaced


@jax.jit
def observe_reset(task: TaskParams, state: EnvState) -> tuple[jax.Array, dict[str, Any]]:
    """Observation and info after a reset (``failure`` is False after a reset)."""
    evaluation = _in_task(evaluate)(task, state.qpos)
    info = {"success": evaluation.success, "episode_step": state.elapsed,
            "failure": jnp.zeros_like(evaluation.success), "reward_terms": evaluation.terms}
    return _observe(task, state), info


def _observe(task: TaskParams, state: EnvState) -> jax.Array:
    return jax.vmap(state_vector, in_axes=(None, 0, 0))(task, state.qpos, state.qvel)


# ---------------------------------------------------------------------------- steps
@jax.jit
def begin(state: EnvState, allowed: jax.Array) -> Progress:
    """Start a step: envs in ``allowed`` move unless a NextStep reset is pending for them."""
    n = len(allowed)
    return Progress(allowed & ~state.pending_reset, jnp.zeros(n, jnp.float32), jnp.zeros(n, jnp.int32))


@partial(jax.jit, compiler_options=_COMPILER_OPTIONS)
def advance(model: mjx.Model, task: TaskParams, state: EnvState, progress: Progress,
            action: jax.Array) -> tuple[EnvState, Progress]:
    """Execute ``action`` (N, 4), finite, for the active envs; an env whose episode ends here
    stops moving for the rest of the step (the rest of a chunk)."""
    action = jnp.clip(action.astype(jnp.float32), -1.0, 1.0)
    qpos, qvel, warm = _blockwise(partial(control_step, model), state.qpos, state.qvel, state.warmstart, action)
    active = progress.active
    state = state._replace(qpos=_where(active, qpos, state.qpos), qvel=_where(active, qvel, state.qvel),
                           warmstart=_where(active, warm, state.warmstart), elapsed=state.elapsed + active)
    evaluation = _in_task(evaluate)(task, state.qpos)
    terminated, truncated = _ends(task, state, evaluation.success)
    reward = jnp.where(task.sparse, evaluation.success.astype(jnp.float32), evaluation.dense_reward())
    return state, Progress(active & ~(terminated | truncated), progress.reward + jnp.where(active, reward, 0.0),
                           progress.steps + active)


def _ends(task: TaskParams, state: EnvState, success: jax.Array) -> tuple[jax.Array, jax.Array]:
    failure = jax.vmap(failed)(state.qpos, state.qvel)
    terminated = failure | (success & task.terminate_on_success)
    truncated = (state.elapsed >= task.max_episode_steps) & ~terminated
    return terminated, truncated


@jax.jit
def finish(task: TaskParams, state: EnvState, progress: Progress, restarting: jax.Array, mode: jax.Array,
           qpos0: jax.Array) -> tuple[EnvState, dict[str, Any]]:
    """End a step: flags, info and autoreset (``mode``: :data:`NEXT_STEP`, :data:`SAME_STEP` or
    :data:`DISABLED`); ``restarting`` are the envs :func:`begin` held back for a NextStep reset.

    Returns the new state and a dict with ``obs``, ``reward``, ``terminated``, ``truncated``,
    ``info`` (success, episode_step, failure, reward_terms), ``chunk_steps``, and
    ``final_obs``/``final_info``/``done``: every env's observation and info before any
    same-step reset, and which envs ended."""
    evaluation = _in_task(evaluate)(task, state.qpos)
    failure = jax.vmap(failed)(state.qpos, state.qvel)
    terminated, truncated = _ends(task, state, evaluation.success)
    terminated, truncated = terminated & ~restarting, truncated & ~restarting
    done = terminated | truncated
    info = {"success": evaluation.success, "episode_step": state.elapsed, "failure": failure,
            "reward_terms": evaluation.terms}
    final_obs, final_info = _observe(task, state), info

    reset = restarting | ((mode == SAME_STEP) & done)
    state = reset_envs(task, state, reset, qpos0, jnp.int32(1))
    fresh = _in_task(evaluate)(task, state.qpos)
    info = {"success": jnp.where(reset, fresh.success, info["success"]), "episode_step": state.elapsed,
            "failure": info["failure"] & ~reset,
            "reward_terms": {k: jnp.where(reset, fresh.terms[k], v) for k, v in info["reward_terms"].items()}}
    state = state._replace(pending_reset=(mode == NEXT_STEP) & done,
                           finished=state.finished | ((mode == DISABLED) & done))
    return state, {
        "obs": _observe(task, state), "reward": jnp.where(restarting, 0.0, progress.reward),
        "terminated": terminated, "truncated": truncated, "info": info, "chunk_steps": progress.steps,
        "final_obs": final_obs, "final_info": final_info, "done": done,
    }
