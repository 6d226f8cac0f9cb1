"""Batched MuJoCo physics: N environments over one MjModel, stepped in C across threads.

The batch lives in one array of MuJoCo "full physics" state vectors (time, qpos, qvel), so a
reset is a row write and a step is one :func:`mujoco.rollout` call that advances every
selected row by ``frame_skip`` physics steps on a persistent thread pool, with no Python
loop over environments.
"""

from __future__ import annotations

import os

import mujoco
import numpy as np
from mujoco import rollout

_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS


def default_threads(num_envs: int) -> int:
    """One worker per core; none (run on the calling thread) for tiny batches."""
    return 0 if num_envs < 8 else (os.cpu_count() or 1)


class BatchedPhysics:
    """Holds and advances the physics state of ``num_envs`` copies of ``model``.

    Args:
        model: the compiled scene; exposed as :attr:`model`.
        num_envs: batch size.
        frame_skip: physics steps per control step; controls are held over them.
        num_threads: rollout worker threads (0 runs on the calling thread).
    """

    def __init__(self, model: mujoco.MjModel, num_envs: int, frame_skip: int, num_threads: int) -> None:
        self.model = model
        self.num_envs = num_envs
        self.frame_skip = frame_skip
        nstate = mujoco.mj_stateSize(model, _FULL)
        self.state = np.zeros((num_envs, nstate))
        # FULLPHYSICS is laid out as [time, qpos, qvel, act, ...]
        self.qpos = self.state[:, 1 : 1 + model.nq]
        self.qvel = self.state[:, 1 + model.nq : 1 + model.nq + model.nv]
        self._pool = rollout.Rollout(nthread=num_threads)
        self._datas = [mujoco.MjData(model) for _ in range(max(num_threads, 1))]
        # Buffers for rollout's unchecked fast path, which takes fully shaped, contiguous arrays.
        self._models = [model] * num_envs
        self._trajectory = np.empty((num_envs, frame_skip, nstate))
        self._no_sensors = np.empty((num_envs, frame_skip, 0))

    def set_state(self, index: np.ndarray, qpos: np.ndarray, qvel: np.ndarray | None = None) -> None:
        """Put the envs in ``index`` in configuration ``qpos`` with time 0, at rest or moving
        with velocities ``qvel``."""
        self.state[index] = 0.0
        self.qpos[index] = qpos
        if qvel is not None:
            self.qvel[index] = qvel

    def step(self, ctrl: np.ndarray, index: np.ndarray | None = None) -> None:
        """Advance the envs in ``index`` (all when None) by one control step under ``ctrl``."""
        n = self.num_envs if index is None else len(index)
        states = self.state if index is None else self.state[index]
        held = np.repeat(np.ascontiguousarray(ctrl, dtype=np.float64)[:, None, :], self.frame_skip, axis=1)
        out = self._trajectory[:n]
        self._pool.rollout(
            self._models[:n], self._datas, states, held, nstep=self.frame_skip,
            state=out, sensordata=self._no_sensors[:n], skip_checks=True,
        )
        if index is None:
            self.state[:] = out[:, -1]
        else:
            self.state[index] = out[:, -1]

    def close(self) -> None:
        self._pool.close()
