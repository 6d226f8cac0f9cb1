"""The tabletop suite on MuJoCo XLA as a native Gymnasium ``VectorEnv``.

Made by ``gym.make_vec("worldsim/<Task>", num_envs=N, backend="mjx", ...)``. The spaces, the
info keys and the autoreset semantics are those of
:class:`~worldsim.envs.vector_env.TabletopVectorEnv`; the physics, rewards and resets run in
JAX (:mod:`worldsim.envs.mjx.core`) on the default JAX device.

Arrays stay on the device: observations, rewards, flags and info values are ``jax.Array`` s
(on a GPU, in GPU memory). ``np.asarray(x)`` copies one to the host; ``torch.from_dlpack(x)``
hands it to torch without a copy. Actions may be numpy arrays, JAX arrays or torch tensors
(taken through DLPack, so a CUDA tensor is not copied through the host).

Example::

    >>> import gymnasium as gym, numpy as np, worldsim
    >>> envs = gym.make_vec("worldsim/ReachCube-v0", num_envs=2, backend="mjx")
    >>> obs, info = envs.reset(seed=0)
    >>> obs.shape, type(obs).__module__.startswith("jax")
    ((2, 56), True)
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from worldsim.envs.families import make_family
from worldsim.envs.mjx import core
from worldsim.envs.mjx.layout import default_qpos
from worldsim.envs.mjx.physics import mj_model, mjx_model
from worldsim.envs.mjx.state import FAMILY_TERMS, EnvState, task_params
from worldsim.envs.observations import OBS_MODES, observation_space
from worldsim.envs.reset_schedule import ResetSchedule
from worldsim.envs.scene import Scene
from worldsim.envs.tasks import TaskSpec, get_task
from worldsim.envs.vector_env import (
    ACTION_DIM,
    CONTROL_DT,
    MAX_CHUNK,
    REWARD_TYPES,
    check_actions,
    check_env_arguments,
    parse_autoreset_mode,
    parse_reset_options,
)

SUPPORTED_OBS_MODES: tuple[str, ...] = ("state",)
_MODES = {AutoresetMode.NEXT_STEP: core.NEXT_STEP, AutoresetMode.SAME_STEP: core.SAME_STEP,
          AutoresetMode.DISABLED: core.DISABLED}


def to_jax(actions: Any) -> jax.Array:
    """``actions`` as a JAX array: torch tensors through DLPack (no copy, on any device), JAX
    arrays as they are, anything else through numpy."""
    if isinstance(actions, jax.Array):
        return actions
    if type(actions).__module__.split(".")[0] == "torch":
        return jax.dlpack.from_dlpack(actions.detach().contiguous())
    return jnp.asarray(np.asarray(actions))


def check_device_actions(actions: Any, num_envs: int) -> jax.Array:
    """:func:`~worldsim.envs.vector_env.check_actions` for actions that may live on a device:
    shape and dtype are checked from metadata, finiteness on the device (one scalar comes back);
    bad actions raise the MuJoCo backend's errors. Returns float32 ``(N, K, 4)``."""
    if isinstance(actions, np.ndarray) or not hasattr(actions, "__dlpack__"):
        arr = jnp.asarray(check_actions(actions, num_envs), jnp.float32)
    else:
        arr = to_jax(actions)
        numeric = jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.integer)
        shape_ok = arr.shape == (num_envs, ACTION_DIM) or (
            arr.ndim == 3 and arr.shape[0] == num_envs and arr.shape[2] == ACTION_DIM and 1 <= arr.shape[1] <= MAX_CHUNK)
        if not (numeric and shape_ok and bool(jnp.isfinite(arr).all())):
            check_actions(np.asarray(arr), num_envs)  # raises the error naming what is wrong
        arr = arr.astype(jnp.float32)
    return core.commit(arr if arr.ndim == 3 else arr[:, None])


class MjxVectorEnv(VectorEnv):
    """``num_envs`` copies of one tabletop task on MuJoCo XLA (JAX), stepped in one jitted call.

    Takes :class:`~worldsim.envs.vector_env.TabletopVectorEnv`'s arguments (``task``,
    ``num_envs``, ``obs_mode``, ``reward_type``, ``reset_schedule``, ``autoreset_mode``,
    ``max_episode_steps``, ``terminate_on_success``) with the same meaning, except:

    - ``obs_mode`` must be ``"state"``: no renderer runs inside JAX here, so pixel modes are
      refused (use the MuJoCo backend for pixels); ``render_mode`` must be None.
      ``image_size`` and ``wrist_camera`` are accepted and, as in state mode on the MuJoCo
      backend, unused.
    - every returned array is a ``jax.Array`` on the JAX device (``np.asarray`` copies to host).
    - ``info["final_obs"]``/``info["final_info"]`` (SameStep) are always present and dense:
      row i is env i's observation/info before this step's autoreset, for every env, so the
      rows of envs that did not end equal ``obs``/``info``; ``info["_final_obs"]`` marks the
      envs that ended, exactly as on the MuJoCo backend.
    - layouts come from JAX's random numbers: the same seed gives other layouts than the MuJoCo
      backend, drawn from the same distribution.
    - ``staggered-warmup`` with the expert warm-up policy computes the expert on the host
      (the scripted experts are numpy); the random warm-up policy stays on the device.

    The first step for a batch size compiles (tens of seconds on a CPU, a few on a GPU); every
    task, chunk length and autoreset mode then shares that compiled physics step.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": [], "render_fps": int(1 / CONTROL_DT),
                                          "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        task: str | TaskSpec = "PushCube-v0",
        num_envs: int = 1,
        *,
        obs_mode: str = "state",
        image_size: int | tuple[int, int] = 64,
        wrist_camera: bool = False,
        reward_type: str = "dense",
        reset_schedule: str | ResetSchedule = "synchronous",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_episode_steps: int | None = None,
        terminate_on_success: bool = True,
        render_mode: str | None = None,
        **unknown: Any,
    ):
        check_env_arguments(MjxVectorEnv, unknown, num_envs, "worldsim envs with backend='mjx'")
        self.task = task if isinstance(task, TaskSpec) else get_task(task)
        if obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode={obs_mode!r} is not a mode; allowed: {', '.join(OBS_MODES)}")
        if obs_mode not in SUPPORTED_OBS_MODES:
            raise ValueError(f"obs_mode={obs_mode!r} is not supported with backend='mjx' (no renderer runs "
                             f"inside JAX); allowed: {', '.join(map(repr, SUPPORTED_OBS_MODES))}. Use "
                             "backend='mujoco' for pixel observations")
        if reward_type not in REWARD_TYPES:
            raise ValueError(f"reward_type={reward_type!r}; allowed: {', '.join(REWARD_TYPES)}")
        if render_mode is not None:
            raise ValueError(f"render_mode={render_mode!r} is not supported with backend='mjx'; allowed: None "
                             "(use backend='mujoco' to render)")
        self.max_episode_steps = int(max_episode_steps or self.task.max_episode_steps)
        if self.max_episode_steps < 1:
            raise ValueError(f"max_episode_steps={max_episode_steps!r} must be >= 1")

        self.num_envs = int(num_envs)
        self.obs_mode = obs_mode
        self.reward_type = reward_type
        self.terminate_on_success = terminate_on_success
        self.render_mode = None
        self.reset_schedule = ResetSchedule.parse(reset_schedule)
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}

        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.single_observation_space = observation_space(obs_mode, (64, 64), False)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

        self.mjx_model = core.commit(mjx_model())
        self.params = core.commit(task_params(self.task, max_episode_steps=self.max_episode_steps,
                                              reward_type=reward_type, terminate_on_success=terminate_on_success))
        self._terms = FAMILY_TERMS[self.task.family]
        self._family = make_family(self.task, Scene.load())  # the numpy expert (warm-up, expert_action)
        self._qpos0 = core.commit(default_qpos())
        self._mode = core.commit(jnp.int32(_MODES[self.autoreset_mode]))
        self._all = core.commit(jnp.ones(self.num_envs, bool))
        seed = int(np.random.SeedSequence().entropy % 2**32)
        self._state = core.initial_state(core.commit(jax.random.PRNGKey(seed)), self.num_envs, self._qpos0)
        self._needs_reset = True

    # ------------------------------------------------------------------ public API
    @property
    def model(self):
        """The MjModel MJX runs (the scene with the MJX solver caps)."""
        return mj_model()

    @property
    def instruction(self) -> str:
        return self.task.instruction

    @property
    def state(self) -> EnvState:
        """The batch's current :class:`~worldsim.envs.mjx.state.EnvState` (device arrays)."""
        return self._state

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset all envs, or those in ``options["reset_mask"]``; ``options["group_size"]``
        as on the MuJoCo backend. A full reset applies the reset schedule."""
        if seed is not None:
            self._state = self._state._replace(key=core.commit(jax.random.PRNGKey(seed)))
        mask, group_size = parse_reset_options(options, self.num_envs, self._needs_reset)
        partial = mask is not None
        mask = mask if partial else np.ones(self.num_envs, bool)
        if mask.sum() % group_size:
            raise ValueError(f"group_size={group_size} does not divide the {int(mask.sum())} envs being reset")
        groups = core.commit(jnp.int32(group_size))
        if partial:
            self._state = core.reset_envs(self.params, self._state, core.commit(jnp.asarray(mask)), self._qpos0,
                                          groups)
        else:
            key, offsets_key = jax.random.split(self._state.key)
            state = core.initial_state(key, self.num_envs, self._qpos0)
            state = core.reset_envs(self.params, state, self._all, self._qpos0, groups)
            offsets = core.commit(core.schedule_offsets(  # without a key (synchronous) it comes uncommitted
                self.reset_schedule, offsets_key, self.num_envs, core.commit(jnp.int32(self.max_episode_steps))))
            if self.reset_schedule.physical:
                state = self._warm_up(state, offsets)
            else:
                state = state._replace(elapsed=offsets)
            self._state = state
        self._needs_reset = False
        obs, info = core.observe_reset(self.params, self._state)
        return obs, self._named_info(info)

    def step(self, actions: Any):
        if self._needs_reset:
            raise RuntimeError("step() called before reset(); call reset() first")
        chunk = check_device_actions(actions, self.num_envs)
        if self.autoreset_mode == AutoresetMode.DISABLED:
            finished = np.asarray(self._state.finished)
            if finished.any():
                raise RuntimeError(
                    f"envs {np.flatnonzero(finished).tolist()} have finished their episode and autoreset_mode "
                    "is Disabled: call reset(options={'reset_mask': mask}) for them first")
        restarting = self._state.pending_reset
        state, out = self._run(self._state, chunk, self._all, restarting, self._mode)
        self._state = state
        info = self._named_info(out["info"])
        if len(np.shape(actions)) == 3:
            info["chunk_steps"] = out["chunk_steps"]
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            info["final_obs"], info["_final_obs"] = out["final_obs"], out["done"]
            info["final_info"], info["_final_info"] = self._named_info(out["final_info"]), out["done"]
        return out["obs"], out["reward"], out["terminated"], out["truncated"], info

    def expert_action(self) -> np.ndarray:
        """The scripted expert's actions for the current states, (num_envs, 4) float32 (numpy,
        computed on the host by the MuJoCo backend's expert)."""
        return self._family.expert(np.asarray(self._state.qpos, np.float64)).astype(np.float32)

    def get_state(self) -> dict[str, Any]:
        """A host snapshot of the batch (physics, counters, autoreset flags, RNG key) from which
        :meth:`set_state` continues exactly."""
        snapshot: dict[str, Any] = {k: np.asarray(v).copy() for k, v in self._state._asdict().items()}
        snapshot["needs_reset"] = self._needs_reset
        return snapshot

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot of an env of the same size. ``qpos``/``qvel``
        may come from the MuJoCo backend (its ``physics.qpos``/``physics.qvel``)."""
        qpos = np.asarray(state["qpos"])
        if qpos.shape != self._state.qpos.shape:
            raise ValueError(f"the snapshot holds qpos of shape {qpos.shape}; this env has "
                             f"{self._state.qpos.shape} (num_envs={self.num_envs})")
        self._state = core.commit(EnvState(**{k: jnp.asarray(state[k], getattr(self._state, k).dtype)
                                              for k in EnvState._fields}))
        self._needs_reset = bool(state["needs_reset"])

    def render(self) -> None:
        gym.logger.warn("render() is not supported with backend='mjx'; use backend='mujoco' to render")

    # ------------------------------------------------------------------ internals
    def _run(self, state: EnvState, chunk: jax.Array, allowed: jax.Array, restarting: jax.Array,
             mode: jax.Array) -> tuple[EnvState, dict[str, Any]]:
        progress = core.begin(state, allowed)
        for k in range(chunk.shape[1]):
            state, progress = core.advance(self.mjx_model, self.params, state, progress, chunk[:, k])
        return core.finish(self.params, state, progress, restarting, mode, self._qpos0)

    def _warm_up(self, state: EnvState, offsets: jax.Array) -> EnvState:
        """Advance env i by ``offsets[i]`` steps with the warm-up policy, restarting envs whose
        episode ends (:meth:`TabletopVectorEnv._warm_up`); the steps count as elapsed."""
        schedule = self.reset_schedule
        none = core.commit(jnp.zeros(self.num_envs, bool))
        same_step = core.commit(jnp.int32(core.SAME_STEP))
        for t in range(int(offsets.max())):
            key, sub = jax.random.split(state.key)
            state = state._replace(key=key)
            if schedule.warmup_policy == "random":
                actions = jax.random.uniform(sub, (self.num_envs, 1, ACTION_DIM), minval=-1.0, maxval=1.0)
            else:
                expert = self._family.expert(np.asarray(state.qpos, np.float64))
                noise = schedule.warmup_noise * jax.random.normal(sub, expert.shape)
                actions = jnp.clip(jnp.asarray(expert, jnp.float32) + noise, -1.0, 1.0)[:, None]
            state, _ = self._run(state, core.commit(actions), offsets > t, none, same_step)
        return state

    def _named_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """Info with the family's reward terms only (the core always computes three)."""
        return {**info, "reward_terms": {name: info["reward_terms"][name] for name in self._terms}}
