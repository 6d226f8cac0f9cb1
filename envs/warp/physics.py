"""MuJoCo Warp physics of the tabletop scene: ``num_envs`` worlds of one model on a Warp device.

The scene is the MuJoCo backend's (``assets/tabletop.xml``); MuJoCo Warp steps every world in
one set of kernel launches. What differs from MuJoCo on the CPU, and why:

- float32 throughout (MuJoCo computes in float64);
- solver caps: MuJoCo's CPU solver stops each env as soon as it converges; Warp's Newton loop
  runs until the slowest world of the batch converges, so :data:`SOLVER_ITERATIONS` and
  :data:`LS_ITERATIONS` bound the cost of a step (MJX's values: with the scene's own 100/50 the
  expert's trajectories of every family came out identical);
- fixed per-world buffers: at most :data:`CONTACTS_PER_ENV` contacts and
  :data:`CONSTRAINTS_PER_ENV` constraint rows per world (measured with the scripted experts of
  every family under MuJoCo: at most 32 contacts and 192 rows; the slack is for MuJoCo Warp's
  own contact generation). MuJoCo's ``implicitfast`` forcerange rule (an actuator's velocity
  gain is left out of the implicit damping while its force is clamped) is MuJoCo Warp's too,
  so no integrator patch is needed, unlike MJX. The rule is a step at the limit: a command
  that asks a servo for exactly its limit (``kp`` x step = ``forcerange``) is clamped or not
  by rounding, differently in float32 and float64, and the two give a smooth start or a
  jolt of three times the speed. Commands keep off it (the experts' carry speed does).

Contacts, cones (pyramidal), ``impratio``, friction, margins and the solver (Newton) are the
scene's on both backends: the contacts a grasp makes, their depths and normals, agree.

Warp arrays share their memory with torch tensors: :attr:`WarpPhysics.qpos` and friends are
torch views of the worlds' state, read and written in place. On a CUDA device the
``frame_skip`` physics steps of a control step are captured once into a CUDA graph and
replayed, and Warp's stream waits for torch's (and torch's for Warp's) around every launch.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import mujoco
import mujoco_warp as mjw
import torch
import warp as wp

SOLVER_ITERATIONS = 10
LS_ITERATIONS = 20
CONTACTS_PER_ENV = 48
CONSTRAINTS_PER_ENV = 256


def warp_device(device: str | torch.device) -> wp.Device:
    """The Warp device of a torch device name (``"cpu"``, ``"cuda"``, ``"cuda:1"``)."""
    return wp.get_device(str(torch.device(device)))


class WarpPhysics:
    """The physics state of ``num_envs`` copies of ``model`` on ``device``, advanced together.

    Args:
        model: the compiled scene (its solver caps are set to the values above, on a copy).
        num_envs: number of worlds.
        frame_skip: physics steps per control step; controls are held over them.
        device: a torch device name; the Warp device is the same one.
    """

    def __init__(self, model: mujoco.MjModel, num_envs: int, frame_skip: int, device: str | torch.device) -> None:
        self.mj_model = _capped(model)
        self.device = torch.device(device)
        self.wp_device = warp_device(device)
        self.frame_skip = frame_skip
        with wp.ScopedDevice(self.wp_device):
            self.model = mjw.put_model(self.mj_model)
            self.data = mjw.put_data(self.mj_model, mujoco.MjData(self.mj_model), nworld=num_envs,
                                     nconmax=CONTACTS_PER_ENV, njmax=CONSTRAINTS_PER_ENV)
        # The overflow warnings print from inside kernels on every step; an overflow shows in the
        # equivalence tests instead.
        self.model.opt.warn_overflow = 0
        self.qpos = wp.to_torch(self.data.qpos)
        self.qvel = wp.to_torch(self.data.qvel)
        self.warmstart = wp.to_torch(self.data.qacc_warmstart)
        self.ctrl = wp.to_torch(self.data.ctrl)
        self._graph = None

    def step(self, ctrl: torch.Tensor, active: torch.Tensor) -> None:
        """Advance the worlds of ``active`` (N,) bool by one control step under ``ctrl`` (N, nu);
        the others keep their state."""
        before = self.qpos.clone(), self.qvel.clone(), self.warmstart.clone()
        self.ctrl.copy_(ctrl)
        with self.launching():
            if self._graph is not None:
                wp.capture_launch(self._graph)
            elif self.wp_device.is_cuda:
                with wp.ScopedCapture(self.wp_device) as capture:
                    self._substeps()
                self._graph = graph = capture.graph
                wp.capture_launch(graph)
            else:
                self._substeps()
        keep = ~active[:, None]
        for now, then in zip((self.qpos, self.qvel, self.warmstart), before, strict=True):
            now.copy_(torch.where(keep, then, now))

    def set_rows(self, rows: torch.Tensor, qpos: torch.Tensor) -> None:
        """Put the worlds of ``rows`` (N,) bool at rest in configuration ``qpos`` (N, nq)."""
        mask = rows[:, None]
        self.qpos.copy_(torch.where(mask, qpos, self.qpos))
        self.qvel.masked_fill_(mask, 0.0)
        self.warmstart.masked_fill_(mask, 0.0)

    def forward_kinematics(self) -> None:
        """Body, geom and camera poses of the current ``qpos`` (what a renderer reads)."""
        with self.launching():
            mjw.kinematics(self.model, self.data)
            mjw.camlight(self.model, self.data)

    @contextlib.contextmanager
    def launching(self) -> Iterator[None]:
        """Run Warp launches on this device, ordered after torch's pending work and before
        torch's next (on a CPU launches run in order already)."""
        with wp.ScopedDevice(self.wp_device):
            if not self.wp_device.is_cuda:
                yield
                return
            warp_stream = wp.get_stream(self.wp_device)
            torch_stream = wp.stream_from_torch(torch.cuda.current_stream(self.device))
            warp_stream.wait_stream(torch_stream)
            yield
            torch_stream.wait_stream(warp_stream)

    def _substeps(self) -> None:
        for _ in range(self.frame_skip):
            mjw.step(self.model, self.data)


def _capped(model: mujoco.MjModel) -> mujoco.MjModel:
    """A copy of ``model`` with the solver caps of this backend."""
    capped = copy.copy(model)
    capped.opt.iterations = SOLVER_ITERATIONS
    capped.opt.ls_iterations = LS_ITERATIONS
    return capped
