"""The batched tabletop environment: a native Gymnasium ``VectorEnv`` over MuJoCo.

Example::

    >>> import gymnasium as gym, worldsim
    >>> envs = gym.make_vec("worldsim/PushCube-v0", num_envs=8, obs_mode="state",
    ...                     reset_schedule="staggered", autoreset_mode="SameStep")
    >>> obs, info = envs.reset(seed=0)
    >>> obs.shape
    (8, 56)
    >>> obs, reward, terminated, truncated, info = envs.step(envs.unwrapped.expert_action())
    >>> sorted(k for k in info if not k.startswith("_"))
    ['episode_step', 'failure', 'reward_terms', 'success']
    >>> envs.close()
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from worldsim.envs.families import ACTION_SCALE, make_family
from worldsim.envs.layout import sample_layouts
from worldsim.envs.observations import OBS_MODES, observation_space, proprio_vector, state_vector
from worldsim.envs.physics import BatchedPhysics, default_threads
from worldsim.envs.rendering import BatchRenderer
from worldsim.envs.reset_schedule import ResetSchedule
from worldsim.envs.scene import CUBES, EE_HIGH, EE_LOW, FINGER_OPEN, TABLE_LIMIT, Scene
from worldsim.envs.tasks import TaskSpec, get_task

CONTROL_DT = 0.05  # seconds per env step (20 Hz)
MAX_NUM_ENVS = 65536
ACTION_DIM = 4
MAX_CHUNK = 64
REWARD_TYPES = ("dense", "sparse")


def parse_autoreset_mode(value: str | AutoresetMode) -> AutoresetMode:
    """Accept an :class:`AutoresetMode` or its value/name (``"SameStep"``, ``"same_step"``)."""
    if isinstance(value, AutoresetMode):
        return value
    for mode in AutoresetMode:
        if str(value).replace("_", "").lower() in (mode.value.lower(), mode.name.replace("_", "").lower()):
            return mode
    allowed = ", ".join(repr(m.value) for m in AutoresetMode)
    raise ValueError(f"autoreset_mode={value!r} is not a mode; allowed: {allowed}")


def _image_shape(image_size: int | tuple[int, int]) -> tuple[int, int]:
    shape = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    if len(shape) != 2 or not all(isinstance(s, (int, np.integer)) and 8 <= s <= 480 for s in shape):
        raise ValueError(f"image_size={image_size!r} must be an int or (height, width) with each in [8, 480]")
    return int(shape[0]), int(shape[1])


def check_env_arguments(env_class: type, unknown: dict[str, Any], num_envs: Any, what: str) -> int:
    """Refuse keyword arguments ``env_class`` does not take (``TypeError`` naming the closest
    allowed one) and a ``num_envs`` outside 1..:data:`MAX_NUM_ENVS`; returns ``num_envs`` as an
    int. ``what`` names the envs in the message. Shared by every worldsim vector env."""
    if unknown:
        allowed = [p for p in inspect.signature(env_class).parameters if p != "unknown"]
        hints = {k: difflib.get_close_matches(k, allowed, n=1) for k in unknown}
        detail = ", ".join(f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in hints.items())
        raise TypeError(f"unknown argument(s) {detail} for {what}; allowed: {', '.join(allowed)}")
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or not 1 <= num_envs <= MAX_NUM_ENVS:
        raise ValueError(f"num_envs={num_envs!r} is out of range; allowed: an int from 1 to {MAX_NUM_ENVS}")
    return int(num_envs)


def parse_reset_options(options: dict[str, Any] | None, num_envs: int,
                        needs_reset: bool) -> tuple[np.ndarray | None, int]:
    """The checked ``reset_mask`` (None: reset every env) and ``group_size`` of a vector env's
    ``reset(options=...)``; ``ValueError`` for unknown options and bad values, ``RuntimeError``
    for a partial first reset (``needs_reset``). Shared by every worldsim vector env."""
    options = options or {}
    unknown = set(options) - {"reset_mask", "group_size"}
    if unknown:
        raise ValueError(f"unknown reset option(s) {sorted(unknown)}; allowed: 'reset_mask', 'group_size'")
    group_size = options.get("group_size", 1)
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise ValueError(f"group_size={group_size!r} must be an int >= 1")
    if "reset_mask" not in options:
        return None, int(group_size)
    mask = np.asarray(options["reset_mask"])
    if mask.dtype != np.bool_ or mask.shape != (num_envs,):
        raise ValueError(f"reset_mask must be a bool array of shape ({num_envs},); "
                         f"got dtype {mask.dtype} and shape {mask.shape}")
    if needs_reset and not mask.all():
        raise RuntimeError("the first reset() must reset every env; call reset() without reset_mask")
    return mask, int(group_size)


def check_actions(actions: Any, num_envs: int) -> np.ndarray:
    """``actions`` for ``num_envs`` envs, ``(N, 4)`` or a chunk ``(N, K, 4)``, as float64 clipped
    to [-1, 1]; ``TypeError``/``ValueError`` naming the expected shape, or the envs whose actions
    are not finite. Shared by every worldsim vector env (physics and imagined)."""
    arr = np.asarray(actions)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"actions must be a float array of shape ({num_envs}, {ACTION_DIM}); "
                        f"got dtype {arr.dtype}")
    if not (arr.shape == (num_envs, ACTION_DIM)
            or (arr.ndim == 3 and arr.shape[0] == num_envs and arr.shape[2] == ACTION_DIM
                and 1 <= arr.shape[1] <= MAX_CHUNK)):
        raise ValueError(f"actions must have shape (num_envs, {ACTION_DIM}) = ({num_envs}, "
                         f"{ACTION_DIM}) [end-effector dx, dy, dz, gripper], or ({num_envs}, K, "
                         f"{ACTION_DIM}) for a chunk of 1 <= K <= {MAX_CHUNK}; got shape {arr.shape}")
    finite = np.isfinite(arr.reshape(num_envs, -1)).all(axis=1)
    if not finite.all():
        raise ValueError(f"actions for envs {np.flatnonzero(~finite).tolist()} contain NaN or inf; "
                         "actions must be finite (values outside [-1, 1] are clipped)")
    return np.clip(arr.astype(np.float64), -1.0, 1.0)


class TabletopVectorEnv(VectorEnv):
    """``num_envs`` copies of one tabletop task, stepped together in C.

    Args:
        task: task name (see ``worldsim list-envs``), with or without ``worldsim/``.
        num_envs: number of envs, 1 to 65536.
        obs_mode: ``"state"``, ``"pixels"`` or ``"pixels+state"`` (see
            :mod:`worldsim.envs.observations`).
        image_size: side (or ``(height, width)``) of the ``image`` observation, default 64.
        wrist_camera: add a ``wrist_image`` from the gripper camera (pixel modes).
        reward_type: ``"dense"`` (staged shaping in [0, 1], 1 on success) or ``"sparse"``
            (1 on success, else 0). Named dense terms are in ``info["reward_terms"]``.
        reset_schedule: a name from :mod:`worldsim.envs.reset_schedule` or a
            :class:`ResetSchedule`.
        autoreset_mode: ``"NextStep"`` (default), ``"SameStep"`` or ``"Disabled"``.
        max_episode_steps: time limit override; the task's default otherwise.
        terminate_on_success: end the episode (``terminated``) when the task succeeds.
        render_mode: ``"rgb_array"`` to allow :meth:`render` (front camera, all envs).
        render_size: side of :meth:`render` frames.
        num_threads: physics threads; default one per core (none below 8 envs).

    Actions are ``float32`` arrays of shape ``(num_envs, 4)``: the end-effector displacement
    (x, y, z) as a fraction of 3 cm per step, and the gripper command (-1 open, +1 closed).
    Finite actions outside [-1, 1] are clipped; NaN or inf actions are rejected with an error
    and change nothing. An action chunk, shape ``(num_envs, K, 4)``, is executed open loop as
    K steps in one call (the :class:`~worldsim.envs.wrappers.ActionChunk` wrapper declares the
    matching action space): an env whose episode ends inside the chunk stays still for the
    rest of it, ``reward`` is the sum over the steps it executed, and
    ``info["chunk_steps"]`` counts them.

    Episodes: ``terminated`` is True on success (if ``terminate_on_success``) and on failure
    (a cube left the table, or the physics diverged; ``info["failure"]``); ``truncated`` is
    True when the elapsed-step counter reaches the time limit. The two are never both True.

    ``info`` always holds ``success`` (bool), ``episode_step`` (elapsed steps, int),
    ``failure`` (bool) and ``reward_terms`` (dict of named dense terms). With
    ``autoreset_mode="SameStep"`` a finished env is reset inside :meth:`step`; its last
    observation is in ``info["final_obs"]`` and its last info in ``info["final_info"]``,
    marked by ``info["_final_obs"]`` / ``info["_final_info"]``. With ``"NextStep"`` the
    next :meth:`step` resets it and ignores its action (reward 0). With ``"Disabled"``
    stepping a finished env is an error until ``reset(options={"reset_mask": mask})``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": int(1 / CONTROL_DT),
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
        render_size: int = 256,
        num_threads: int | None = None,
        **unknown: Any,
    ):
        check_env_arguments(TabletopVectorEnv, unknown, num_envs, "worldsim envs")
        self.task = task if isinstance(task, TaskSpec) else get_task(task)
        if obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode={obs_mode!r} is not a mode; allowed: {', '.join(OBS_MODES)}")
        if reward_type not in REWARD_TYPES:
            raise ValueError(f"reward_type={reward_type!r}; allowed: {', '.join(REWARD_TYPES)}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}; allowed: None, 'rgb_array'")
        self.max_episode_steps = int(max_episode_steps or self.task.max_episode_steps)
        if self.max_episode_steps < 1:
            raise ValueError(f"max_episode_steps={max_episode_steps!r} must be >= 1")

        self.num_envs = int(num_envs)
        self.obs_mode = obs_mode
        self.reward_type = reward_type
        self.reset_schedule = ResetSchedule.parse(reset_schedule)
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.terminate_on_success = terminate_on_success
        self.render_mode = render_mode
        self.wrist_camera = wrist_camera

        self.scene = Scene.load()
        self.family = make_family(self.task, self.scene)
        frame_skip = round(CONTROL_DT / self.scene.model.opt.timestep)
        threads = default_threads(self.num_envs) if num_threads is None else num_threads
        self.physics = BatchedPhysics(self.scene.model, self.num_envs, frame_skip, threads)

        self.image_shape = _image_shape(image_size)
        self._camera = BatchRenderer(self.scene.model, *self.image_shape) if obs_mode != "state" else None
        self._frame_renderer: BatchRenderer | None = None
        self.render_size = render_size

        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.single_observation_space = observation_space(obs_mode, self.image_shape, wrist_camera)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

        self._elapsed = np.zeros(self.num_envs, dtype=np.int64)
        self._pending_reset = np.zeros(self.num_envs, dtype=bool)  # NEXT_STEP: reset on next step
        self._finished = np.zeros(self.num_envs, dtype=bool)  # DISABLED: must be reset by the user
        self._needs_reset = True
        self._np_random, self._np_random_seed = seeding.np_random(None)

    # ------------------------------------------------------------------ public API
    @property
    def model(self):
        """The MjModel shared by every env of the batch."""
        return self.scene.model

    @property
    def instruction(self) -> str:
        return self.task.instruction

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset all envs, or those in ``options["reset_mask"]`` (bool array, num_envs).

        A full reset applies the reset schedule; a masked reset starts the chosen envs at
        step 0 and leaves the others as they are. ``options["group_size"] = G`` gives each run
        of G consecutive reset envs one shared layout (GRPO's groups of rollouts from the same
        start); the number of reset envs must be a multiple of G.
        """
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seed)
        mask, group_size = parse_reset_options(options, self.num_envs, self._needs_reset)
        if mask is not None:
            self._reset_envs(np.flatnonzero(mask), group_size)
        else:
            self._reset_envs(np.arange(self.num_envs), group_size)
            self._elapsed[:] = self.reset_schedule.offsets(self.num_envs, self.max_episode_steps, self._np_random)
            if self.reset_schedule.physical:
                self._warm_up()
        self._needs_reset = False
        evaluation = self.family.evaluate(self.physics.qpos)
        info = self._info(evaluation.success, np.zeros(self.num_envs, bool), evaluation.terms)
        return self._observe(), info

    def step(self, actions):
        if self._needs_reset:
            raise RuntimeError("step() called before reset(); call reset() first")
        actions = self._check_actions(actions)
        if self.autoreset_mode == AutoresetMode.DISABLED and self._finished.any():
            raise RuntimeError(
                f"envs {np.flatnonzero(self._finished).tolist()} have finished their episode and "
                "autoreset_mode is Disabled: call reset(options={'reset_mask': mask}) for them first")

        restarting = np.flatnonzero(self._pending_reset)
        chunk = actions if actions.ndim == 3 else actions[:, None]
        active = ~self._pending_reset
        reward = np.zeros(self.num_envs)
        steps = np.zeros(self.num_envs, np.int64)
        for k in range(chunk.shape[1]):
            index = np.flatnonzero(active)
            if len(index) == 0:
                break
            if len(index) == self.num_envs:
                self.physics.step(self._controls(chunk[:, k]))
            else:
                self.physics.step(self._controls(chunk[index, k], index), index)
            self._elapsed[index] += 1
            steps[index] += 1
            evaluation = self.family.evaluate(self.physics.qpos)
            failure = self._failed()
            terminated = failure | (evaluation.success & self.terminate_on_success)
            truncated = (self._elapsed >= self.max_episode_steps) & ~terminated
            if self.reward_type == "dense":
                reward[index] += evaluation.dense_reward()[index]
            else:
                reward[index] += evaluation.success[index]
            # An env that ends inside a chunk stays still for the rest of it.
            active &= ~(terminated | truncated)
        if len(restarting) == self.num_envs:  # every env restarts: nothing was stepped
            evaluation = self.family.evaluate(self.physics.qpos)
            failure = self._failed()
            terminated = failure | (evaluation.success & self.terminate_on_success)
            truncated = (self._elapsed >= self.max_episode_steps) & ~terminated
        info = self._info(evaluation.success, failure, evaluation.terms)
        if actions.ndim == 3:
            info["chunk_steps"] = steps

        if len(restarting):  # NEXT_STEP: these envs start over now; their action was ignored
            self._restart(restarting, info)
            reward[restarting] = 0.0
            terminated[restarting] = truncated[restarting] = False
        obs = self._observe()

        done = terminated | truncated
        if self.autoreset_mode == AutoresetMode.SAME_STEP and done.any():
            ended = np.flatnonzero(done)
            info["final_obs"] = np.full(self.num_envs, None, dtype=object)
            for i in ended:
                info["final_obs"][i] = self._unbatch(obs, i)
            info["_final_obs"] = done.copy()
            info["final_info"] = self._info(evaluation.success, failure, evaluation.terms)
            info["_final_info"] = done.copy()
            self._restart(ended, info)
            obs = self._observe(out=obs, index=ended)
        elif self.autoreset_mode == AutoresetMode.NEXT_STEP:
            self._pending_reset = done
        elif self.autoreset_mode == AutoresetMode.DISABLED:
            self._finished |= done
        return obs, reward, terminated, truncated, info

    def expert_action(self) -> np.ndarray:
        """The scripted expert's actions for the current states, shape (num_envs, 4), float32."""
        return self.family.expert(self.physics.qpos).astype(np.float32)

    def get_state(self) -> dict[str, Any]:
        """A snapshot of the whole batch (physics, counters, autoreset flags, RNG) from which
        :meth:`set_state` continues bit for bit; training checkpoints store it to resume exactly."""
        return {
            "physics": self.physics.state.copy(), "elapsed": self._elapsed.copy(),
            "pending_reset": self._pending_reset.copy(), "finished": self._finished.copy(),
            "needs_reset": self._needs_reset, "rng": self._np_random.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot taken from an env of the same task and size."""
        physics = np.asarray(state["physics"])
        if physics.shape != self.physics.state.shape:
            raise ValueError(f"the snapshot holds physics of shape {physics.shape}; this env has "
                             f"{self.physics.state.shape} (num_envs={self.num_envs})")
        self.physics.state[:] = physics
        self._elapsed[:] = state["elapsed"]
        self._pending_reset[:] = state["pending_reset"]
        self._finished[:] = state["finished"]
        self._needs_reset = bool(state["needs_reset"])
        self._np_random = np.random.Generator(np.random.PCG64())
        self._np_random.bit_generator.state = state["rng"]

    def render(self) -> np.ndarray | None:
        """Front-camera frames of every env, (num_envs, render_size, render_size, 3) uint8."""
        if self.render_mode is None:
            gym.logger.warn("render() called with render_mode=None; pass render_mode='rgb_array'")
            return None
        if self._frame_renderer is None:
            self._frame_renderer = BatchRenderer(self.model, self.render_size, self.render_size)
        return self._frame_renderer.render(self.physics.qpos, "front")

    def close_extras(self, **kwargs: Any) -> None:
        self.physics.close()
        for renderer in (self._camera, self._frame_renderer):
            if renderer is not None:
                renderer.close()

    # ------------------------------------------------------------------ internals
    def _check_actions(self, actions) -> np.ndarray:
        return check_actions(actions, self.num_envs)

    def _controls(self, actions: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        """Position-servo targets: TCP + action * 3 cm, and both fingers' opening."""
        qpos = self.physics.qpos if index is None else self.physics.qpos[index]
        target = np.clip(self.scene.tcp(qpos) + actions[:, :3] * ACTION_SCALE, EE_LOW, EE_HIGH)
        finger = FINGER_OPEN * (1.0 - actions[:, 3:4]) / 2.0
        return np.concatenate([target, finger, finger], axis=1)

    def _reset_envs(self, index: np.ndarray, group_size: int = 1) -> None:
        if len(index) == 0:
            return
        if len(index) % group_size:
            raise ValueError(f"group_size={group_size} does not divide the {len(index)} envs being reset")
        layouts = sample_layouts(self.scene, self.task, self._np_random, len(index) // group_size)
        self.physics.set_state(index, np.repeat(layouts, group_size, axis=0))
        self._elapsed[index] = 0
        self._pending_reset[index] = False
        self._finished[index] = False

    def _restart(self, index: np.ndarray, info: dict[str, Any]) -> None:
        """Reset the envs in ``index`` and rewrite their rows of ``info`` for the new episode."""
        self._reset_envs(index)
        fresh = self.family.evaluate(self.physics.qpos[index])
        info["success"][index] = fresh.success
        info["failure"][index] = False
        info["episode_step"][index] = 0
        for name, term in info["reward_terms"].items():
            term[index] = fresh.terms[name]

    def _warm_up(self) -> None:
        """Advance env i by its offset in steps (staggered-warmup), restarting envs that end."""
        target = self._elapsed.copy()
        self._elapsed[:] = 0
        schedule = self.reset_schedule
        for t in range(int(target.max(initial=0))):
            index = np.flatnonzero(target > t)
            if schedule.warmup_policy == "random":
                actions = self._np_random.uniform(-1.0, 1.0, (len(index), ACTION_DIM))
            else:
                actions = self.family.expert(self.physics.qpos[index])
                actions = np.clip(actions + schedule.warmup_noise * self._np_random.standard_normal(actions.shape), -1, 1)
            self.physics.step(self._controls(actions, index), index)
            self._elapsed[index] += 1
            qpos = self.physics.qpos[index]
            ended = (self.family.evaluate(qpos).success & self.terminate_on_success) | self._failed(index)
            self._reset_envs(index[ended])

    def _failed(self, index: np.ndarray | None = None) -> np.ndarray:
        state = self.physics.state if index is None else self.physics.state[index]
        qpos = self.physics.qpos if index is None else self.physics.qpos[index]
        bad = ~np.isfinite(state).all(axis=1)
        for cube in CUBES:
            pos = self.scene.cube_pos(qpos, cube)
            bad |= (np.abs(pos[:, :2]).max(axis=1) > TABLE_LIMIT) | (pos[:, 2] < -0.05)
        return bad

    def _info(self, success: np.ndarray, failure: np.ndarray, terms: dict[str, np.ndarray]) -> dict[str, Any]:
        return {
            "success": success.copy(),
            "episode_step": self._elapsed.copy(),
            "failure": failure.copy(),
            "reward_terms": {k: v.copy() for k, v in terms.items()},
        }

    def _observe(self, out: Any = None, index: np.ndarray | None = None):
        """Observations of all envs, or refresh rows ``index`` of ``out`` in place."""
        rows = slice(None) if index is None else index
        qpos, qvel = self.physics.qpos[rows], self.physics.qvel[rows]
        if self.obs_mode == "state":
            state = state_vector(self.scene, self.family, qpos, qvel)
            if out is None:
                return state
            out[rows] = state
            return out
        obs = out if out is not None else {
            key: np.empty(space.shape, space.dtype)
            for key, space in self.observation_space.spaces.items() if key != "instruction"
        }
        assert self._camera is not None
        obs["image"][rows] = self._camera.render(qpos, "front")
        if self.wrist_camera:
            obs["wrist_image"][rows] = self._camera.render(qpos, "wrist")
        obs["proprio"][rows] = proprio_vector(self.scene, qpos)
        if "state" in obs:
            obs["state"][rows] = state_vector(self.scene, self.family, qpos, qvel)
        obs["instruction"] = (self.task.instruction,) * self.num_envs
        return obs

    def _unbatch(self, obs: Any, i: int):
        if isinstance(obs, np.ndarray):
            return obs[i].copy()
        return {k: (v[i] if k == "instruction" else v[i].copy()) for k, v in obs.items()}
