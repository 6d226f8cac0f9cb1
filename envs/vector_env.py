"""The batched tabletop environment on MuJoCo: a native Gymnasium ``VectorEnv`` on the CPU.

Example::

    >>> import gymnasium as gym, worldsim
    >>> envs = gym.make_vec("worldsim/PushCube-v0", num_envs=8, obs_mode="state",
    ...                     reset_schedule="staggered", autoreset_mode="SameStep")
    >>> obs, info = envs.reset(seed=0)
    >>> obs.shape
    (8, 56)
    >>> obs, reward, terminated, truncated, info = envs.step(envs.unwrapped.expert_action())
    >>> sorted(k for k in info if not k.startswith("_"))
    ['episode_step', 'failure', 'is_success', 'reward_terms', 'success']
    >>> envs.close()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np

from worldsim.envs.core import Outcome, PhysicsEnv
from worldsim.envs.families import make_family
from worldsim.envs.layout import sample_layouts
from worldsim.envs.observations import proprio_vector, qpos_from_state, qvel_from_state, state_vector
from worldsim.envs.physics import BatchedPhysics, default_threads
from worldsim.envs.rendering import BatchRenderer
from worldsim.envs.scene import CONTROL_DT, Scene
from worldsim.envs.tasks import TaskSpec

if TYPE_CHECKING:
    import mujoco


class TabletopVectorEnv(PhysicsEnv):
    """``num_envs`` copies of one tabletop task, stepped together in C.

    Takes :class:`~worldsim.envs.core.PhysicsEnv`'s arguments (task, number of envs, observation
    mode and image size, reward type, reset schedule, autoreset mode, time limit, success
    termination, render mode), plus:

    Args:
        render_size: side of :meth:`render` frames.
        num_threads: physics threads; default one per core (none below 8 envs).

    Actions are ``float32`` arrays of shape ``(num_envs, 4)``: the end-effector displacement
    (x, y, z) as a fraction of :data:`~worldsim.envs.scene.ACTION_SCALE` per step, and the
    gripper command (-1 open, +1 closed). Chunks, episodes, autoreset, ``info`` and snapshots
    follow the contract of :mod:`worldsim.envs.core`; ``failure`` is a cube leaving the table or
    the physics diverging.
    """

    starts_from_state = True

    def __init__(self, task: str | TaskSpec = "PushCube-v0", num_envs: int = 1, *, render_size: int = 256,
                 num_threads: int | None = None, **options: Any) -> None:
        super().__init__(task, num_envs, **options)
        self.scene = Scene.load()
        self.family = make_family(self.task, self.scene)
        frame_skip = round(CONTROL_DT / self.scene.model.opt.timestep)
        threads = default_threads(self.num_envs) if num_threads is None else num_threads
        self.physics = BatchedPhysics(self.scene.model, self.num_envs, frame_skip, threads)
        self._camera = BatchRenderer(self.scene.model, *self.image_shape) if self.obs_mode != "state" else None
        self._frame_renderer: BatchRenderer | None = None
        self.render_size = render_size

    @property
    def model(self) -> mujoco.MjModel:
        """The MjModel shared by every env of the batch."""
        return self.scene.model

    def expert_action(self) -> np.ndarray:
        """The scripted expert's actions for the current states, shape (num_envs, 4), float32."""
        return self.family.expert(self.physics.qpos).astype(np.float32)

    def close_extras(self, **kwargs: Any) -> None:
        self.physics.close()
        for renderer in (self._camera, self._frame_renderer):
            if renderer is not None:
                renderer.close()

    # ------------------------------------------------------------------ backend hooks
    def _reset_rows(self, mask: np.ndarray, group_size: int) -> np.ndarray:
        index = np.flatnonzero(mask)
        if len(index):
            layouts = sample_layouts(self.scene, self.task, self.np_random, len(index) // group_size)
            self.physics.set_state(index, np.repeat(layouts, group_size, axis=0))
        return np.zeros(self.num_envs, np.int64)

    def _restore_rows(self, index: np.ndarray, state: np.ndarray) -> None:
        self.physics.set_state(index, qpos_from_state(self.scene, state), qvel_from_state(self.scene, state))

    def _advance(self, actions: np.ndarray, active: np.ndarray) -> Outcome:
        index = np.flatnonzero(active)
        if len(index) == self.num_envs:
            self.physics.step(self._controls(actions))
        else:
            self.physics.step(self._controls(actions[index], index), index)
        return self._outcome()

    def _outcome(self) -> Outcome:
        evaluation = self.family.evaluate(self.physics.qpos)
        reward = evaluation.dense_reward() if self.reward_type == "dense" else evaluation.success.astype(float)
        return Outcome(evaluation.success, self._failed(), reward, evaluation.terms)

    def _observe(self, rows: np.ndarray | None = None, previous: Any = None) -> Any:
        index = slice(None) if rows is None else np.flatnonzero(rows)
        qpos, qvel = self.physics.qpos[index], self.physics.qvel[index]
        if self.obs_mode == "state":
            state = state_vector(self.scene, self.family, qpos, qvel)
            if previous is None:
                return state
            previous[index] = state
            return previous
        obs = previous if previous is not None else {
            key: np.empty(space.shape, space.dtype)  # type: ignore[type-var, arg-type]  # Box: both are set
            for key, space in cast(gym.spaces.Dict, self.observation_space).spaces.items()  # pixel modes: a Dict
            if key != "instruction"
        }
        assert self._camera is not None
        obs["image"][index] = self._camera.render(qpos, "front")
        if self.wrist_camera:
            obs["wrist_image"][index] = self._camera.render(qpos, "wrist")
        obs["proprio"][index] = proprio_vector(self.scene, qpos)
        if "state" in obs:
            obs["state"][index] = state_vector(self.scene, self.family, qpos, qvel)
        obs["instruction"] = (self.task.instruction,) * self.num_envs
        return obs

    def _backend_state(self) -> dict[str, Any]:
        return {"physics": self.physics.state.copy()}

    def _set_backend_state(self, state: dict[str, Any]) -> None:
        physics = np.asarray(state["physics"])
        if physics.shape != self.physics.state.shape:
            raise ValueError(f"the snapshot holds physics of shape {physics.shape}; this env has "
                             f"{self.physics.state.shape} (num_envs={self.num_envs})")
        self.physics.state[:] = physics

    def _render(self) -> np.ndarray:
        if self._frame_renderer is None:
            self._frame_renderer = BatchRenderer(self.model, self.render_size, self.render_size)
        return self._frame_renderer.render(self.physics.qpos, "front")

    # ------------------------------------------------------------------ internals
    def _controls(self, actions: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        """Position-servo targets of ``actions`` for the envs in ``index`` (all when None)."""
        return self.scene.servo_targets(self.physics.qpos if index is None else self.physics.qpos[index], actions)

    def _failed(self) -> np.ndarray:
        return self.scene.failed(self.physics.qpos, self.physics.qvel)
