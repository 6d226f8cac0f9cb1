"""The tabletop suite on MuJoCo XLA as a native Gymnasium ``VectorEnv``.

Made by ``gym.make_vec("worldsim/<Task>", num_envs=N, backend="mjx", ...)``. The contract
(spaces, info keys, autoreset, chunks, schedules) is the shared core's
(:mod:`worldsim.envs.core`); the physics, rewards and layouts run in JAX
(:mod:`worldsim.envs.mjx.core`) on the default JAX device.

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

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from worldsim.envs.arrays import DeviceArrays
from worldsim.envs.core import Outcome, PhysicsEnv
from worldsim.envs.mjx import core
from worldsim.envs.mjx.layout import default_qpos
from worldsim.envs.mjx.physics import mj_model, mjx_model
from worldsim.envs.mjx.state import EnvState, task_params
from worldsim.envs.mjx.tasks import family
from worldsim.envs.tasks import TaskSpec

if TYPE_CHECKING:
    import mujoco


class JaxArrays(DeviceArrays):
    """JAX arrays, committed to the default JAX device (jitted calls then compile once)."""

    def zeros(self, num_envs: int, dtype: type) -> jax.Array:
        return core.commit(jnp.zeros(num_envs, {bool: jnp.bool_, int: jnp.int32, float: jnp.float32}[dtype]))

    def from_numpy(self, array: np.ndarray) -> jax.Array:
        array = np.asarray(array)
        return core.commit(jnp.asarray(array, jnp.int32 if np.issubdtype(array.dtype, np.integer) else None))

    def to_numpy(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def where(self, mask: Any, new: Any, old: Any) -> jax.Array:
        return jnp.where(mask, new, old)

    def import_array(self, array: Any) -> jax.Array:
        if isinstance(array, jax.Array):
            return array
        if type(array).__module__.split(".")[0] == "torch":
            array = array.detach().contiguous()
        return jax.dlpack.from_dlpack(array)

    def is_numeric(self, array: jax.Array) -> bool:
        return bool(jnp.issubdtype(array.dtype, jnp.floating) or jnp.issubdtype(array.dtype, jnp.integer))

    def all_finite(self, array: jax.Array) -> bool:
        return bool(jnp.isfinite(array).all())

    def clip_float32(self, array: jax.Array) -> jax.Array:
        return core.commit(jnp.clip(array.astype(jnp.float32), -1.0, 1.0))


class MjxVectorEnv(PhysicsEnv):
    """``num_envs`` copies of one tabletop task on MuJoCo XLA (JAX), stepped in jitted calls.

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
      (on numpy, as on the MuJoCo backend).

    The first step for a batch size compiles (tens of seconds on a CPU, a few on a GPU); every
    task and chunk length then shares that compiled physics step.
    """

    metadata = {**PhysicsEnv.metadata, "render_modes": []}
    description = "worldsim envs with backend='mjx'"
    arrays = JaxArrays()
    obs_modes = ("state",)
    obs_mode_refusal = "with backend='mjx' (no renderer runs inside JAX); use backend='mujoco' for pixels"

    def __init__(self, task: str | TaskSpec = "PushCube-v0", num_envs: int = 1, **options: Any) -> None:
        super().__init__(task, num_envs, **options)
        self.mjx_model = core.commit(mjx_model())
        self.params = core.commit(task_params(self.task, reward_type=self.reward_type,
                                              terminate_on_success=self.terminate_on_success))
        self._family = family(self.task)  # its expert runs on the host, on numpy (warm-up, expert_action)
        self._qpos0 = core.commit(default_qpos())
        self._zeros = self.arrays.zeros(self.num_envs, int)
        seed = int(np.random.SeedSequence().generate_state(1)[0])
        self._state = core.initial_state(core.commit(jax.random.PRNGKey(seed)), self.num_envs, self._qpos0)

    @property
    def model(self) -> mujoco.MjModel:
        """The MjModel MJX runs (the scene with the MJX solver caps)."""
        return mj_model()

    @property
    def state(self) -> EnvState:
        """The batch's current physics :class:`~worldsim.envs.mjx.state.EnvState` (device arrays)."""
        return self._state

    def expert_action(self) -> np.ndarray:
        """The scripted expert's actions for the current states, (num_envs, 4) float32 (numpy,
        computed on the host by the MuJoCo backend's expert)."""
        return self._family.expert(np.asarray(self._state.qpos, np.float64)).astype(np.float32)

    def render(self) -> None:
        gym.logger.warn("render() is not supported with backend='mjx'; use backend='mujoco' to render")

    # ------------------------------------------------------------------ backend hooks
    def _seed_backend(self, seed: int) -> None:
        self._state = self._state._replace(key=core.commit(jax.random.PRNGKey(seed)))

    def _reset_rows(self, mask: jax.Array, group_size: int) -> jax.Array:
        self._state = core.reset_envs(self.params, self._state, mask, self._qpos0,
                                      core.commit(jnp.int32(group_size)))
        return self._zeros

    def _advance(self, actions: jax.Array, active: jax.Array) -> Outcome:
        self._state = core.step_envs(self.mjx_model, self._state, actions, active)
        return self._outcome()

    def _outcome(self) -> Outcome:
        return Outcome(*core.evaluate_envs(self.task, self.params, self._state))

    def _observe(self, rows: Any = None, previous: Any = None) -> jax.Array:
        return core.observe(self.task, self._state)

    def _backend_state(self) -> dict[str, Any]:
        return {k: np.asarray(v).copy() for k, v in self._state._asdict().items()}

    def _set_backend_state(self, state: dict[str, Any]) -> None:
        """``qpos``/``qvel`` may come from the MuJoCo backend (its ``physics.qpos``/``physics.qvel``)."""
        qpos = np.asarray(state["qpos"])
        if qpos.shape != self._state.qpos.shape:
            raise ValueError(f"the snapshot holds qpos of shape {qpos.shape}; this env has "
                             f"{self._state.qpos.shape} (num_envs={self.num_envs})")
        self._state = core.commit(EnvState(**{k: jnp.asarray(state[k], getattr(self._state, k).dtype)
                                              for k in EnvState._fields}))
