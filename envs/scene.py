"""The tabletop scene: the MjModel every task shares, and named views into its state.

Every movable thing in ``assets/tabletop.xml`` has joints, so a batch of layouts is a batch of
``qpos`` rows. :class:`Scene` turns joint names into array slices once, so the rest of the
code reads ``scene.cube_pos(qpos, "red")`` rather than raw indices. The batched accessors take
numpy arrays, torch tensors and JAX arrays alike (:mod:`worldsim.envs.xp`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from importlib import resources

import mujoco
import numpy as np

from worldsim.envs.xp import Array, columns, constant, namespace

CUBES: tuple[str, ...] = ("red", "green", "yellow")
ZONES: tuple[str, ...] = ("blue", "orange")

CUBE_HALF = 0.02
ZONE_HALF = 0.05
BIN_INNER_HALF = 0.055
BIN_FLOOR_TOP = 0.006
FINGER_OPEN = 0.045
TABLE_LIMIT = 0.4  # an object further than this from the centre has left the table
EE_LOW = np.array([-0.3, -0.3, 0.012])
EE_HIGH = np.array([0.3, 0.3, 0.32])
# Control: one env step holds its action for CONTROL_DT seconds (the physics' frame skip is
# derived from the scene's timestep); an action of 1 asks the end effector to move ACTION_SCALE
# (the default of Scene.action_scale).
CONTROL_DT = 0.05  # seconds per env step (20 Hz)
ACTION_SCALE = 0.03  # metres per env step at full action


def commanded_gripper(tcp: Array, actions: Array, action_scale: float = ACTION_SCALE) -> tuple[Array, Array]:
    """Where ``actions`` (N, 4) send the gripper from TCP positions ``tcp`` (N, 3): the TCP
    target (``tcp + action * action_scale`` within the workspace) and the finger gap (N,)."""
    xp = namespace(tcp, actions)
    target = xp.clip(tcp + actions[:, :3] * action_scale, constant(EE_LOW, tcp), constant(EE_HIGH, tcp))
    return target, FINGER_OPEN * (1.0 - actions[:, 3])


def scene_xml_path() -> str:
    """Path of the shipped MJCF scene."""
    return str(resources.files("worldsim.assets").joinpath("tabletop.xml"))


@dataclass(frozen=True)
class Scene:
    """The compiled scene and the qpos/qvel addresses of its parts.

    Attributes:
        model: the compiled MJCF scene.
        action_scale: metres the end effector is asked to move in one env step at full action:
            :meth:`servo_targets` and the families' scripted experts read it.
    """

    model: mujoco.MjModel
    action_scale: float = ACTION_SCALE

    def __post_init__(self) -> None:
        if not self.action_scale > 0:
            raise ValueError(f"action_scale={self.action_scale!r} must be > 0 (metres per env step at full action)")

    @classmethod
    def load(cls, action_scale: float = ACTION_SCALE) -> Scene:
        """The shipped scene, with end-effector steps of ``action_scale`` metres at full action."""
        return cls(mujoco.MjModel.from_xml_path(scene_xml_path()), action_scale)

    def _qpos_adr(self, joint: str) -> int:
        return int(self.model.jnt_qposadr[self.model.joint(joint).id])

    def _dof_adr(self, joint: str) -> int:
        return int(self.model.jnt_dofadr[self.model.joint(joint).id])

    @cached_property
    def ee(self) -> slice:
        a = self._qpos_adr("ee_x")
        return slice(a, a + 3)

    @cached_property
    def ee_dof(self) -> slice:
        a = self._dof_adr("ee_x")
        return slice(a, a + 3)

    @cached_property
    def fingers(self) -> slice:
        a = self._qpos_adr("finger_left")
        assert self._qpos_adr("finger_right") == a + 1
        return slice(a, a + 2)

    def cube(self, colour: str) -> slice:
        """qpos slice of a cube's free joint: position (3) then quaternion (4)."""
        a = self._qpos_adr(f"{colour}_cube")
        return slice(a, a + 7)

    def cube_dof(self, colour: str) -> slice:
        a = self._dof_adr(f"{colour}_cube")
        return slice(a, a + 6)

    def zone(self, colour: str) -> slice:
        a = self._qpos_adr(f"{colour}_zone_x")
        return slice(a, a + 2)

    @cached_property
    def bin(self) -> slice:
        a = self._qpos_adr("bin_x")
        return slice(a, a + 2)

    # Batched accessors: qpos has shape (N, nq), qvel (N, nv), numpy or torch.
    def tcp(self, qpos: Array) -> Array:
        return qpos[:, self.ee]

    def gripper_width(self, qpos: Array) -> Array:
        return namespace(qpos).sum(qpos[:, self.fingers], axis=1)

    def cube_pos(self, qpos: Array, colour: str) -> Array:
        return qpos[:, self.cube(colour)][:, :3]

    def zone_pos(self, qpos: Array, colour: str) -> Array:
        """Centre of a goal zone on the table surface, shape (N, 3)."""
        return columns(qpos[:, self.zone(colour)], 0.0, like=qpos)

    def bin_pos(self, qpos: Array) -> Array:
        """Centre of the bin's floor surface, shape (N, 3)."""
        return columns(qpos[:, self.bin], BIN_FLOOR_TOP, like=qpos)

    def is_grasped(self, qpos: Array, colour: str) -> Array:
        """A cube is held when the closed fingers pinch it: their gap is about a cube's width
        and the cube sits between them."""
        xp = namespace(qpos)
        width = self.gripper_width(qpos)
        offset = self.cube_pos(qpos, colour) - self.tcp(qpos)
        between = (xp.abs(offset[:, 0]) < 0.02) & (xp.abs(offset[:, 1]) < 0.012)
        return between & (xp.abs(offset[:, 2]) < 0.03) & (width > 0.028) & (width < 0.0395)

    def servo_targets(self, qpos: Array, actions: Array) -> Array:
        """The position servos' controls for ``actions`` (N, 4): TCP + action * :attr:`action_scale`
        within the workspace, and both fingers' opening (:func:`commanded_gripper`)."""
        target, gap = commanded_gripper(self.tcp(qpos), actions, self.action_scale)
        return columns(target, gap / 2.0, gap / 2.0, like=qpos)

    def failed(self, qpos: Array, qvel: Array) -> Array:
        """Rows whose episode cannot go on: a cube left the table (or fell through it), or the
        physics diverged."""
        xp = namespace(qpos, qvel)
        bad = ~(xp.all(xp.isfinite(qpos), axis=1) & xp.all(xp.isfinite(qvel), axis=1))
        for cube in CUBES:
            pos = self.cube_pos(qpos, cube)
            bad |= (xp.max(xp.abs(pos[:, :2]), axis=1) > TABLE_LIMIT) | (pos[:, 2] < -0.05)
        return bad
