"""The tabletop suite on MuJoCo Warp as a native Gymnasium ``VectorEnv``: physics, pixels and
task logic on one device.

Made by ``gym.make_vec("worldsim/<Task>", num_envs=N, backend="warp", device="cuda", ...)``.
The contract (spaces, info keys, autoreset, chunks, schedules, snapshots) is the shared core's
(:mod:`worldsim.envs.core`); this module holds the hooks.

Where the work runs: the physics is MuJoCo Warp (:mod:`worldsim.envs.warp.physics`), the
images are MuJoCo Warp's batch renderer (:mod:`worldsim.envs.warp.rendering`), and the task
logic — success, reward terms, failure, the ``state`` and ``proprio`` vectors, layout
sampling, even the scripted expert — is the numpy backend's own code run on torch tensors:
the families, scene accessors, observations and layout sampler are written once against the
array API (:mod:`worldsim.envs.xp`) and Warp's arrays are torch tensors through DLPack. That
choice over Warp kernels or the JAX task logic of MJX keeps one copy of every task rule and
puts no second array framework (and its GPU memory pool) beside torch.

Arrays stay on the device: observations, rewards, flags and info values are torch tensors
(``image`` uint8 ``(N, H, W, 3)``, ``state``/``proprio`` float32, counters int64); a policy
reads them where they are. For numpy outputs wrap the env in Gymnasium's
``ArrayConversion(env, env_xp=torch, target_xp=numpy)``. Actions may be torch tensors, numpy
arrays, or JAX/CuPy/Warp arrays (through DLPack, without a copy on the same device).

Example (on Warp's CPU device; ``device="cuda"`` on a GPU)::

    >>> import gymnasium as gym, torch, worldsim
    >>> envs = gym.make_vec("worldsim/ReachCube-v0", num_envs=2, backend="warp", device="cpu")
    >>> obs, info = envs.reset(seed=0)
    >>> obs.shape, obs.dtype, info["success"].dtype
    (torch.Size([2, 56]), torch.float32, torch.bool)
    >>> obs, reward, terminated, truncated, info = envs.step(envs.unwrapped.expert_action())
    >>> reward.device.type
    'cpu'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from worldsim.envs.core import Outcome, PhysicsEnv
from worldsim.envs.families import make_family
from worldsim.envs.layout import sample_layouts
from worldsim.envs.observations import proprio_vector, state_vector
from worldsim.envs.scene import CONTROL_DT, Scene
from worldsim.envs.tasks import TaskSpec
from worldsim.envs.warp.arrays import TorchArrays
from worldsim.envs.warp.physics import WarpPhysics
from worldsim.envs.warp.rendering import WarpRenderer

if TYPE_CHECKING:
    import mujoco


class WarpVectorEnv(PhysicsEnv):
    """``num_envs`` copies of one tabletop task on MuJoCo Warp, on ``device``.

    Takes :class:`~worldsim.envs.vector_env.TabletopVectorEnv`'s arguments (``task``,
    ``num_envs``, ``obs_mode``, ``image_size``, ``wrist_camera``, ``reward_type``,
    ``reset_schedule``, ``autoreset_mode``, ``max_episode_steps``, ``terminate_on_success``,
    ``render_mode``, ``render_size``) with the same meaning, plus ``device``: ``"cuda"``
    (default), ``"cuda:<i>"`` or ``"cpu"`` (Warp's CPU device: correct, and slow). Differences
    from the MuJoCo backend:

    - every returned array is a torch tensor on ``device``; ``info["final_obs"]`` and
      ``info["final_info"]`` (SameStep) are dense, as on MJX: row i is env i's observation/info
      before this step's autoreset, marked by ``info["_final_obs"]``;
    - the physics is float32 with capped solver iterations (see
      :mod:`worldsim.envs.warp.physics`): trajectories agree with the MuJoCo backend closely,
      not bit for bit;
    - images come from MuJoCo Warp's ray tracer, not OpenGL: the same scene, camera and lights,
      pixel values within a few levels;
    - layouts come from a torch generator on ``device``: the same seed gives other layouts than
      the MuJoCo backend, drawn from the same distribution;
    - resets and autoresets read how many envs restart (one small host read per step that
      restarts any); the action check reads one finiteness flag.

    The first env of a process compiles MuJoCo Warp's kernels (about a minute on a CPU) into
    Warp's kernel cache; later processes load them.
    """

    description = "worldsim envs with backend='warp'"

    def __init__(self, task: str | TaskSpec = "PushCube-v0", num_envs: int = 1, *, render_size: int = 256,
                 device: str | torch.device = "cuda", **options: Any) -> None:
        self.arrays = TorchArrays(_checked_device(device))
        super().__init__(task, num_envs, **options)
        self.device = self.arrays.device
        self.scene = Scene.load()
        self.family = make_family(self.task, self.scene)
        frame_skip = round(CONTROL_DT / self.scene.model.opt.timestep)
        self.physics = WarpPhysics(self.scene.model, self.num_envs, frame_skip, self.device)
        cameras = ("front", "wrist") if self.wrist_camera else ("front",)
        self._camera = WarpRenderer(self.physics, cameras, *self.image_shape) if self.obs_mode != "state" else None
        self._frame_renderer: WarpRenderer | None = None
        self.render_size = render_size
        self._generator = torch.Generator(self.device)
        self._generator.manual_seed(int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> 1))
        self._zeros = self.arrays.zeros(self.num_envs, int)

    @property
    def model(self) -> mujoco.MjModel:
        """The MjModel MuJoCo Warp runs (the scene with this backend's solver caps)."""
        return self.physics.mj_model

    def expert_action(self) -> torch.Tensor:
        """The scripted expert's actions for the current states, (num_envs, 4) float32 on the device."""
        return self.family.expert(self.physics.qpos).to(torch.float32)

    # ------------------------------------------------------------------ backend hooks
    def _seed_backend(self, seed: int) -> None:
        self._generator.manual_seed(seed)

    def _reset_rows(self, mask: torch.Tensor, group_size: int) -> torch.Tensor:
        count = int(mask.sum())
        if count:
            layouts = sample_layouts(self.scene, self.task, self._generator, count // group_size)
            rows = torch.zeros_like(self.physics.qpos)
            rows[mask] = layouts.repeat_interleave(group_size, dim=0)
            self.physics.set_rows(mask, rows)
        return self._zeros

    def _advance(self, actions: torch.Tensor, active: torch.Tensor) -> Outcome:
        self.physics.step(self.scene.servo_targets(self.physics.qpos, actions), active)
        return self._outcome()

    def _outcome(self) -> Outcome:
        qpos = self.physics.qpos
        evaluation = self.family.evaluate(qpos)
        success = evaluation.success
        reward = evaluation.dense_reward() if self.reward_type == "dense" else success.to(torch.float32)
        return Outcome(success, self.scene.failed(qpos, self.physics.qvel), reward.to(torch.float32),
                       {name: term.to(torch.float32) for name, term in evaluation.terms.items()})

    def _observe(self, rows: torch.Tensor | None = None, previous: Any = None) -> Any:
        """A fresh observation of every env (SameStep's dense ``final_obs`` keeps the previous one)."""
        qpos, qvel = self.physics.qpos, self.physics.qvel
        if self.obs_mode == "state":
            return state_vector(self.scene, self.family, qpos, qvel)
        assert self._camera is not None
        frames = self._camera.render()
        obs: dict[str, Any] = {"image": frames["front"]}
        if self.wrist_camera:
            obs["wrist_image"] = frames["wrist"]
        obs["proprio"] = proprio_vector(self.scene, qpos)
        if self.obs_mode == "pixels+state":
            obs["state"] = state_vector(self.scene, self.family, qpos, qvel)
        obs["instruction"] = (self.task.instruction,) * self.num_envs
        return obs

    def _backend_state(self) -> dict[str, Any]:
        physics = self.physics
        return {"qpos": physics.qpos.cpu().numpy().copy(), "qvel": physics.qvel.cpu().numpy().copy(),
                "warmstart": physics.warmstart.cpu().numpy().copy(), "torch_rng": self._generator.get_state()}

    def _set_backend_state(self, state: dict[str, Any]) -> None:
        """``qpos``/``qvel`` may come from the MuJoCo backend (its ``physics.qpos``/``physics.qvel``)."""
        qpos = np.asarray(state["qpos"])
        if qpos.shape != tuple(self.physics.qpos.shape):
            raise ValueError(f"the snapshot holds qpos of shape {qpos.shape}; this env has "
                             f"{tuple(self.physics.qpos.shape)} (num_envs={self.num_envs})")
        for name in ("qpos", "qvel", "warmstart"):
            getattr(self.physics, name).copy_(torch.as_tensor(np.asarray(state[name]), dtype=torch.float32))
        self._generator.set_state(state["torch_rng"])

    def _render(self) -> torch.Tensor:
        if self._frame_renderer is None:
            self._frame_renderer = WarpRenderer(self.physics, ("front",), self.render_size, self.render_size)
        return self._frame_renderer.render()["front"]


def _checked_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch device; ``ValueError`` naming what is allowed."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device={device!r} is not a device; allowed: 'cuda', 'cuda:<index>' or 'cpu'") from err
    if parsed.type not in ("cuda", "cpu"):
        raise ValueError(f"device={device!r}: MuJoCo Warp runs on CUDA GPUs and the CPU; allowed: 'cuda', "
                         "'cuda:<index>' or 'cpu'")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r}: torch sees no CUDA GPU here; allowed: 'cpu' (Warp's CPU device, "
                         "slow) or a machine with a GPU and a CUDA build of torch")
    return parsed
