"""MuJoCo XLA physics of the tabletop scene: the model MJX runs, and one control step.

The scene is the MuJoCo backend's (``assets/tabletop.xml``, every primitive and option of it
is supported by MJX). The MJX model differs in the constraint solver's iteration caps only:
MuJoCo's CPU solver stops as soon as it converges, but under ``vmap`` MJX's solver loop runs
until the slowest env of the batch converges, so the caps bound the cost of a step.
:data:`SOLVER_ITERATIONS` Newton iterations with :data:`LS_ITERATIONS` line-search steps are
enough for this scene's contacts (the equivalence tests in ``tests/test_mjx.py`` measure what
remains of the difference). MJX also computes in float32 and generates box-box contacts with
its own routine, so trajectories agree with the MuJoCo backend closely but not bit for bit.

One integrator detail is MuJoCo's, not MJX's: MuJoCo's ``implicitfast`` leaves an actuator's
velocity gain out of the implicit damping while its force is clamped at ``forcerange`` (the
gripper's servos are, whenever they move at full speed); ``mjx.step`` keeps it, which slows the
gripper by millimetres per step. :func:`physics_step` is ``mjx.step`` with MuJoCo's rule.
"""

from __future__ import annotations

from functools import lru_cache

import jax
import jax.numpy as jnp
import mujoco
from mujoco import mjx
from mujoco.mjx._src.forward import _advance  # mjx.step's own integration of qacc into the state

from worldsim.envs.mjx.tasks import scene
from worldsim.envs.scene import CONTROL_DT, Scene

SOLVER_ITERATIONS = 10
LS_ITERATIONS = 20


@lru_cache(maxsize=1)
def mj_model() -> mujoco.MjModel:
    """The scene's MjModel with the MJX solver caps (a copy: the MuJoCo backend's is untouched)."""
    model = Scene.load().model
    model.opt.iterations = SOLVER_ITERATIONS
    model.opt.ls_iterations = LS_ITERATIONS
    return model


def physics_step(model: mjx.Model, data: mjx.Data) -> mjx.Data:
    """One ``implicitfast`` physics step as MuJoCo takes it (see the module docstring)."""
    data = mjx.forward(model, data)
    force = data.actuator_force
    low, high = model.actuator_forcerange[:, 0], model.actuator_forcerange[:, 1]
    clamped = model.actuator_forcelimited & ((force <= low) | (force >= high))
    affine_bias = model.actuator_biastype == mujoco.mjtBias.mjBIAS_AFFINE
    affine_gain = model.actuator_gaintype == mujoco.mjtGain.mjGAIN_AFFINE
    velocity_gain = model.actuator_biasprm[:, 2] * affine_bias + model.actuator_gainprm[:, 2] * affine_gain * data.ctrl
    moment = data._impl.actuator_moment
    qderiv = moment.T @ (moment * jnp.where(clamped, 0.0, velocity_gain)[:, None]) - jnp.diag(model.dof_damping)
    qm = mjx.full_m(model, data) - model.opt.timestep * qderiv
    qacc = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(qm), data.qfrc_smooth + data.qfrc_constraint)
    return _advance(model, data, data.act_dot, qacc)


def frame_skip() -> int:
    """Physics steps per control step (:data:`~worldsim.envs.vector_env.CONTROL_DT`)."""
    return round(CONTROL_DT / mj_model().opt.timestep)


def mjx_model() -> mjx.Model:
    """The scene on the default JAX device, as an ``mjx.Model`` (a pytree: pass it to jitted
    functions as an argument, so every env of the same size shares one compiled step)."""
    return mjx.put_model(mj_model())


def controls(qpos: jax.Array, action: jax.Array) -> jax.Array:
    """Position-servo targets for one env: :meth:`worldsim.envs.scene.Scene.servo_targets` (TCP +
    action x the scene's action scale, clipped to the workspace, and both fingers' opening)."""
    return scene().servo_targets(qpos[None], action[None])[0]


def control_step(model: mjx.Model, qpos: jax.Array, qvel: jax.Array, warmstart: jax.Array,
                 action: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Advance one env by one control step under ``action`` (4,), held for :func:`frame_skip`
    physics steps; returns the new ``(qpos, qvel, warmstart)``."""
    data = mjx.make_data(model).replace(qpos=qpos, qvel=qvel, qacc_warmstart=warmstart,
                                        ctrl=controls(qpos, action))
    data = jax.lax.fori_loop(0, frame_skip(), lambda _, d: physics_step(model, d), data)
    return data.qpos, data.qvel, data.qacc_warmstart
