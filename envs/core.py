"""The batched-env core: the vector-env contract every worldsim backend shares.

MuJoCo on the CPU (:class:`~worldsim.envs.vector_env.TabletopVectorEnv`), MJX
(:class:`~worldsim.envs.mjx.vector_env.MjxVectorEnv`) and the learned world model
(:class:`~worldsim.world_models.env.ImaginedVectorEnv`) are each a :class:`BatchedEnv` plus a
few hooks over rows of the batch (a row mask, in the backend's array library):

``_reset_rows(mask, group_size)``
    start new episodes in the masked rows (runs of ``group_size`` share a start); returns the
    elapsed-step counter each new episode starts at (0 in physics; a keyframe's real step in
    imagination).
``_advance(actions, active)``
    one control step, ``actions`` ``(N, 4)``, for the active rows; returns their
    :class:`Outcome` (success, failure, this step's reward, named reward terms) for every row.
``_outcome()``
    the :class:`Outcome` of the current states, without stepping (after resets).
``_observe(rows, previous)``
    the batch's observation; with ``rows``, ``previous`` with those rows refreshed.
``_backend_state()`` / ``_set_backend_state(state)``
    a host snapshot of whatever the backend keeps, and its restore.
``_render()``, ``_seed_backend(seed)``, ``expert_action()``, ``_restore_rows(index, state)``
    optional: frames for :meth:`render`, the backend's own random streams, the scripted
    expert (for the expert warm-up of ``staggered-warmup``), starts from recorded ``state``
    observations (with :attr:`BatchedEnv.starts_from_state`).

Everything else lives here once: spaces, argument and action checks, the autoreset modes,
action chunks, the time limit and the imagined horizon, reset schedules, ``reset_mask`` and
``group_size``, info keys and snapshots. The contract, as every backend keeps it:

- actions: float32 ``(N, 4)`` in [-1, 1] (finite values outside are clipped; NaN, inf, wrong
  shapes or dtypes raise and change nothing), or a chunk ``(N, K, 4)`` executed open loop: an
  env whose episode ends inside the chunk stays still for the rest of it, ``reward`` is the
  sum over the steps it executed and ``info["chunk_steps"]`` counts them;
- ``terminated`` is success (if ``terminate_on_success``) or failure; ``truncated`` is the
  time limit (elapsed steps reach ``max_episode_steps``) or the imagined ``horizon``; never both;
- ``info``: ``success`` (and the same array as ``is_success``, the key Stable-Baselines3's
  evaluation and callbacks read), ``episode_step`` (elapsed steps), ``failure``, ``reward_terms``;
- ``autoreset_mode``: ``NextStep`` (the next step restarts a finished env and ignores its
  action, reward 0), ``SameStep`` (restart inside ``step``; the last observation and info in
  ``info["final_obs"]``/``info["final_info"]``, marked by ``_final_obs``/``_final_info``) or
  ``Disabled`` (stepping a finished env raises until ``reset(options={"reset_mask": m})``);
- ``reset(options=...)``: :mod:`worldsim.envs.reset_options` (``reset_mask``, ``group_size``,
  and recorded starts, ``start_state`` and ``replay_actions``, on backends with
  :attr:`BatchedEnv.starts_from_state`);
- ``reset(seed=s)``: same seed, same episodes.
"""

from __future__ import annotations

import difflib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Literal, NamedTuple, Protocol, cast, get_args

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from worldsim.envs.arrays import ACTION_DIM, Arrays
from worldsim.envs.observations import OBS_MODES, observation_space
from worldsim.envs.reset_options import parse_reset_options
from worldsim.envs.reset_schedule import ResetSchedule
from worldsim.envs.scene import CONTROL_DT
from worldsim.envs.tasks import TaskSpec, get_task
from worldsim.runtime.validation import check_int


class Snapshotting(Protocol):
    """An env whose whole state can be saved and restored (every worldsim vector env)."""

    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> None: ...


def snapshots(env: gym.Env | VectorEnv) -> Snapshotting:
    """``env.unwrapped``, which trainers snapshot into checkpoints; ``TypeError`` if it cannot."""
    inner = env.unwrapped
    if not (callable(getattr(inner, "get_state", None)) and callable(getattr(inner, "set_state", None))):
        raise TypeError(f"{type(inner).__name__} cannot snapshot its state (no get_state/set_state)")
    return cast(Snapshotting, inner)

MAX_NUM_ENVS = 65536
RENDER_MODES = (None, "rgb_array")
PHYSICS_REWARD_TYPES = ("dense", "sparse")
ImaginedReward = Literal["transition", "sparse", "dense"]  # ImaginedVectorEnv's; "dense" with the object pathway
IMAGINED_REWARD_TYPES: tuple[str, ...] = get_args(ImaginedReward)


class Outcome(NamedTuple):
    """What the task says of every row's current state (arrays of the backend's library)."""

    success: Any  # (N,) bool
    failure: Any  # (N,) bool: the episode cannot go on (a cube left the table, the physics diverged)
    reward: Any  # (N,) float: the reward of the step that led here (ignored after a reset)
    terms: dict[str, Any]  # named dense-reward terms, each (N,)


def parse_autoreset_mode(value: str | AutoresetMode) -> AutoresetMode:
    """Accept an :class:`AutoresetMode` or its value/name (``"SameStep"``, ``"same_step"``)."""
    if isinstance(value, AutoresetMode):
        return value
    for mode in AutoresetMode:
        if str(value).replace("_", "").lower() in (mode.value.lower(), mode.name.replace("_", "").lower()):
            return mode
    allowed = ", ".join(repr(m.value) for m in AutoresetMode)
    raise ValueError(f"autoreset_mode={value!r} is not a mode; allowed: {allowed}")


def image_shape(image_size: int | tuple[int, int]) -> tuple[int, int]:
    """``(height, width)`` of an ``image_size`` argument; ``ValueError`` outside [8, 480]."""
    shape = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    if len(shape) != 2 or not all(isinstance(s, (int, np.integer)) and 8 <= s <= 480 for s in shape):
        raise ValueError(f"image_size={image_size!r} must be an int or (height, width) with each in [8, 480]")
    return int(shape[0]), int(shape[1])


def check_env_arguments(env_class: type, unknown: dict[str, Any], num_envs: Any, what: str,
                        also: Iterable[str] = ()) -> int:
    """Refuse keyword arguments ``env_class`` does not take (``TypeError`` naming the closest
    allowed one: the named parameters of its ``__init__`` and of its bases', and ``also``, those it
    takes as ``**kwargs``) and a ``num_envs`` outside 1..:data:`MAX_NUM_ENVS`; returns ``num_envs``
    as an int. ``what`` names the envs in the message."""
    if unknown:
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        allowed = list(dict.fromkeys([
            *(name for cls in env_class.__mro__ if "__init__" in vars(cls) and issubclass(cls, BatchedEnv)
              for name, p in inspect.signature(cls.__init__).parameters.items() if p.kind in named and name != "self"),
            *also]))
        hints = {k: difflib.get_close_matches(k, allowed, n=1) for k in unknown}
        detail = ", ".join(f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in hints.items())
        raise TypeError(f"unknown argument(s) {detail} for {what}; allowed: {', '.join(allowed)}")
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or not 1 <= num_envs <= MAX_NUM_ENVS:
        raise ValueError(f"num_envs={num_envs!r} is out of range; allowed: an int from 1 to {MAX_NUM_ENVS}")
    return int(num_envs)


class BatchedEnv(VectorEnv, ABC):
    """``num_envs`` episodes of one task, stepped together by a backend's hooks (see the module
    docstring for the contract and the hooks).

    Subclasses call :meth:`__init__` with the arguments the contract owns, after checking their
    own, and set :attr:`arrays` when their arrays are not numpy.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": round(1 / CONTROL_DT),
                                "autoreset_mode": AutoresetMode.NEXT_STEP}
    #: The array library of rewards, flags and counters.
    arrays: Arrays = Arrays()
    #: The observation modes this backend can produce, and why others are refused.
    obs_modes: tuple[str, ...] = OBS_MODES
    obs_mode_refusal: str = ""
    #: Whether ``reset(options={"start_state": ...})`` can start envs from recorded states.
    starts_from_state: bool = False
    #: Imagined steps after which an episode is truncated (None: no cap); set by backends that
    #: start mid-episode.
    horizon: int | None = None

    def __init__(self, task: str | TaskSpec, num_envs: int, *, obs_mode: str,
                 image_size: int | tuple[int, int], wrist_camera: bool, reward_type: str,
                 reward_types: tuple[str, ...], reset_schedule: ResetSchedule | None,
                 autoreset_mode: str | AutoresetMode, max_episode_steps: int | None,
                 terminate_on_success: bool, render_mode: str | None) -> None:
        self.task = task if isinstance(task, TaskSpec) else get_task(str(task).removeprefix("Imagined-"))
        if obs_mode not in self.obs_modes:
            if obs_mode in OBS_MODES:
                raise ValueError(f"obs_mode={obs_mode!r} is not supported {self.obs_mode_refusal}; allowed: "
                                 f"{', '.join(map(repr, self.obs_modes))}")
            raise ValueError(f"obs_mode={obs_mode!r} is not a mode; allowed: {', '.join(self.obs_modes)}")
        if reward_type not in reward_types:
            raise ValueError(f"reward_type={reward_type!r}; allowed: {', '.join(reward_types)}")
        if render_mode not in RENDER_MODES or render_mode not in (None, *self.metadata["render_modes"]):
            allowed = ", ".join(map(repr, (None, *self.metadata["render_modes"])))
            raise ValueError(f"render_mode={render_mode!r}; allowed: {allowed}")
        check_int("max_episode_steps", max_episode_steps, optional=True)
        self.max_episode_steps = int(max_episode_steps or self.task.max_episode_steps)

        self.num_envs = int(num_envs)
        self.obs_mode = obs_mode
        self.image_shape = image_shape(image_size)
        self.wrist_camera = wrist_camera
        self.reward_type = reward_type
        self.reset_schedule = reset_schedule
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.terminate_on_success = terminate_on_success
        self.render_mode = render_mode

        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.single_observation_space = observation_space(obs_mode, self.image_shape, wrist_camera)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

        zeros = self.arrays.zeros
        self._elapsed = zeros(self.num_envs, int)  # steps of the episode, the time limit's counter
        self._run = zeros(self.num_envs, int)  # steps since the episode's reset, the horizon's
        self._pending_reset = zeros(self.num_envs, bool)  # NextStep: restart at the next step
        self._finished = zeros(self.num_envs, bool)  # Disabled: the user must reset these
        self._needs_reset = True
        self._np_random, self._np_random_seed = seeding.np_random(None)

    # ------------------------------------------------------------------ backend hooks
    @abstractmethod
    def _reset_rows(self, mask: Any, group_size: int) -> Any:
        """Start new episodes in the rows of ``mask``; return each row's starting step ``(N,)``."""

    @abstractmethod
    def _advance(self, actions: Any, active: Any) -> Outcome:
        """Step the ``active`` rows once under ``actions`` ``(N, 4)``; the outcome of every row."""

    @abstractmethod
    def _outcome(self) -> Outcome:
        """The outcome of every row's current state (its ``reward`` is not read)."""

    @abstractmethod
    def _observe(self, rows: Any = None, previous: Any = None) -> Any:
        """The observation of the batch, or ``previous`` with the ``rows`` refreshed."""

    @abstractmethod
    def _backend_state(self) -> dict[str, Any]:
        """A host snapshot of the backend's state (see :meth:`get_state`)."""

    @abstractmethod
    def _set_backend_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`_backend_state`; ``ValueError`` when it is another batch size's."""

    def _restore_rows(self, index: np.ndarray, state: np.ndarray) -> None:
        """Put rows ``index`` in the recorded ``state`` observations ``(len(index), STATE_DIM)``
        (backends with :attr:`starts_from_state`)."""
        raise TypeError(f"{type(self).__name__} cannot start from recorded states")

    def _render(self) -> Any:
        """Frames of every env for :meth:`render`."""
        raise TypeError(f"{type(self).__name__} cannot render")

    def _seed_backend(self, seed: int) -> None:
        """Seed the backend's own random streams (its RNG is :attr:`_np_random`, seeded already)."""

    def expert_action(self) -> Any:
        """The scripted expert's actions for the current states, (num_envs, 4) float32."""
        raise TypeError(f"{type(self).__name__} has no scripted expert")

    # ------------------------------------------------------------------ public API
    @property
    def instruction(self) -> str:
        return self.task.instruction

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every env, or those of ``options["reset_mask"]`` (a bool array of ``num_envs``).

        A full reset applies the reset schedule; a masked reset starts the chosen envs over and
        leaves the others as they are. ``options["group_size"] = G`` gives each run of G
        consecutive reset envs the same start (GRPO's groups of rollouts); the number of reset
        envs must be a multiple of G. ``options["start_state"]``, one recorded ``state``
        observation per reset env (``(count, STATE_DIM)``), starts each from that state instead
        (positions and the observed linear velocities, see
        :func:`~worldsim.envs.observations.qvel_from_state`) at elapsed step
        ``options["episode_step"]`` (default 0), skipping the reset schedule; with
        ``options["replay_actions"]`` each then executes its recorded actions (the first
        ``options["replay_steps"][i]``), which reaches a recorded mid-episode state exactly where
        the state alone cannot. Backends that cannot (:attr:`starts_from_state` False) raise
        ``TypeError``. Bad options raise before anything changes.
        """
        options_ = parse_reset_options(options, self.num_envs, self._needs_reset, self.max_episode_steps)
        if options_.start_state is not None and not self.starts_from_state:
            raise TypeError(f"{type(self).__name__} cannot start from recorded states (reset option start_state)")
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seed)
            self._seed_backend(seed)
        mask = options_.mask
        full = mask is None
        rows = self.arrays.from_numpy(np.ones(self.num_envs, bool) if mask is None else mask)
        self._start_rows(rows, options_.group_size)
        if options_.start_state is not None:
            index = np.flatnonzero(self.arrays.to_numpy(rows))
            self._restore_rows(index, options_.start_state)
            elapsed = self.arrays.to_numpy(self._elapsed).copy()
            elapsed[index] = options_.episode_step
            self._elapsed = self.arrays.from_numpy(elapsed)
            if options_.replay_actions is not None:
                self._replay(index, options_.replay_actions, options_.replay_steps)
        elif full and self.reset_schedule is not None:
            offsets = self.reset_schedule.offsets(self.num_envs, self.max_episode_steps, self.np_random)
            if self.reset_schedule.physical:
                self._warm_up(offsets)
            else:
                self._elapsed = self.arrays.from_numpy(offsets)
        self._needs_reset = False
        outcome = self._outcome()
        info = {"success": outcome.success, "is_success": outcome.success, "episode_step": self._elapsed,
                "failure": self.arrays.zeros(self.num_envs, bool), "reward_terms": dict(outcome.terms)}
        return self._observe(), info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every env once, or through a chunk ``(num_envs, K, 4)``, then autoreset."""
        if self._needs_reset:
            raise RuntimeError("step() called before reset(); call reset() first")
        chunk = self.arrays.actions(actions, self.num_envs)
        if self.autoreset_mode == AutoresetMode.DISABLED:
            finished = self.arrays.to_numpy(self._finished)
            if finished.any():
                raise RuntimeError(
                    f"envs {np.flatnonzero(finished).tolist()} have finished their episode and "
                    "autoreset_mode is Disabled: call reset(options={'reset_mask': mask}) for them first")
        where = self.arrays.where
        restarting = self._pending_reset
        active = ~restarting
        reward = self.arrays.zeros(self.num_envs, float)
        steps = self.arrays.zeros(self.num_envs, int)
        outcome = None
        for k in range(chunk.shape[1]):
            if not self.arrays.maybe_any(active):
                break
            outcome = self._advance(chunk[:, k], active)
            self._elapsed = self._elapsed + active
            self._run = self._run + active
            steps = steps + active
            reward = reward + where(active, outcome.reward, 0.0)
            terminated, truncated = self._ends(outcome)
            active = active & ~(terminated | truncated)  # an env that ends inside a chunk stays still
        if outcome is None:  # every env was restarting: nothing moved
            outcome = self._outcome()
        terminated, truncated = self._ends(outcome)
        terminated, truncated = terminated & ~restarting, truncated & ~restarting
        info = {"success": outcome.success, "is_success": outcome.success, "episode_step": self._elapsed,
                "failure": outcome.failure, "reward_terms": dict(outcome.terms)}
        if np.ndim(actions) == 3:
            info["chunk_steps"] = steps
        if self.arrays.maybe_any(restarting):  # NextStep: these start over now; their action was ignored
            reward = where(restarting, 0.0, reward)
            info = self._restart(restarting, info)
        obs = self._observe()

        done = terminated | truncated
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            if self.arrays.maybe_any(done):
                info["final_obs"], info["_final_obs"] = self.arrays.final_obs(obs, done), done
                info["final_info"], info["_final_info"] = dict(info), done
                info = self._restart(done, info)
                obs = self._observe(done, obs)
        elif self.autoreset_mode == AutoresetMode.NEXT_STEP:
            self._pending_reset = done
        else:
            self._finished = self._finished | done
        return obs, reward, terminated, truncated, info

    def render(self) -> Any:
        """Frames of every env, ``(num_envs, H, W, 3)`` uint8 (``render_mode="rgb_array"``)."""
        if self.render_mode is None:
            gym.logger.warn("render() called with render_mode=None; pass render_mode='rgb_array'")
            return None
        return self._render()

    def get_state(self) -> dict[str, Any]:
        """A host snapshot of the whole batch (the backend's state, counters, autoreset flags,
        RNG) from which :meth:`set_state` continues exactly; training checkpoints store it."""
        host = self.arrays.to_numpy
        return {**self._backend_state(), "elapsed": host(self._elapsed).copy(), "run": host(self._run).copy(),
                "pending_reset": host(self._pending_reset).copy(), "finished": host(self._finished).copy(),
                "needs_reset": self._needs_reset, "rng": self.np_random.bit_generator.state}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot of an env of the same backend, task and size."""
        self._set_backend_state(state)
        as_array = self.arrays.from_numpy
        self._elapsed = as_array(np.asarray(state["elapsed"], self.arrays.to_numpy(self._elapsed).dtype))
        self._run = as_array(np.asarray(state.get("run", state["elapsed"]), self.arrays.to_numpy(self._run).dtype))
        self._pending_reset = as_array(np.asarray(state["pending_reset"], bool))
        self._finished = as_array(np.asarray(state["finished"], bool))
        self._needs_reset = bool(state["needs_reset"])
        self._np_random = np.random.Generator(np.random.PCG64())
        self._np_random.bit_generator.state = state["rng"]

    # ------------------------------------------------------------------ internals
    def _start_rows(self, rows: Any, group_size: int) -> None:
        """Reset the backend's ``rows`` and the core's counters and flags of those rows."""
        where = self.arrays.where
        start = self._reset_rows(rows, group_size)
        self._elapsed = where(rows, start, self._elapsed)
        self._run = where(rows, 0, self._run)
        self._pending_reset = self._pending_reset & ~rows
        self._finished = self._finished & ~rows

    def _restart(self, rows: Any, info: dict[str, Any]) -> dict[str, Any]:
        """Autoreset ``rows`` and rewrite their entries of ``info`` for their new episodes."""
        where = self.arrays.where
        self._start_rows(rows, 1)
        fresh = self._outcome()
        success = where(rows, fresh.success, info["success"])
        return {**info, "success": success, "is_success": success, "episode_step": self._elapsed,
                "failure": info["failure"] & ~rows,
                "reward_terms": {k: where(rows, fresh.terms[k], v) for k, v in info["reward_terms"].items()}}

    def _ends(self, outcome: Outcome) -> tuple[Any, Any]:
        terminated = outcome.failure | (outcome.success & self.terminate_on_success)
        limit = self._elapsed >= self.max_episode_steps
        if self.horizon is not None:
            limit = limit | (self._run >= self.horizon)
        return terminated, limit & ~terminated

    def _replay(self, index: np.ndarray, actions: np.ndarray, steps: Any) -> None:
        """Advance env ``index[i]`` through the first ``steps[i]`` of its recorded ``actions[i]``,
        counted as elapsed. A recorded episode went on past these steps, so an end met on the way
        (a replay a hair off a chaotic push) is left for the next ``step`` to report."""
        full = np.zeros((self.num_envs, ACTION_DIM))
        for t in range(int(steps.max(initial=0))):
            replaying = np.zeros(self.num_envs, bool)
            replaying[index] = steps > t
            full[index] = actions[:, t]
            active = self.arrays.from_numpy(replaying)
            self._advance(self.arrays.actions(full, self.num_envs)[:, 0], active)
            self._elapsed = self._elapsed + active

    def _warm_up(self, offsets: np.ndarray) -> None:
        """``staggered-warmup``: advance env i by ``offsets[i]`` steps of the warm-up policy,
        counted as elapsed; an env whose episode ends on the way starts over and counts on."""
        schedule = self.reset_schedule
        assert schedule is not None
        for t in range(int(offsets.max(initial=0))):
            active = self.arrays.from_numpy(offsets > t)
            if schedule.warmup_policy == "random":
                actions = self.np_random.uniform(-1.0, 1.0, (self.num_envs, ACTION_DIM))
            else:
                expert = self.arrays.to_numpy(self.expert_action()).astype(np.float64)
                actions = np.clip(expert + schedule.warmup_noise * self.np_random.standard_normal(expert.shape),
                                  -1.0, 1.0)
            outcome = self._advance(self.arrays.actions(actions, self.num_envs)[:, 0], active)
            self._elapsed = self._elapsed + active
            ended = active & (outcome.failure | (outcome.success & self.terminate_on_success))
            if self.arrays.maybe_any(ended):
                self._start_rows(ended, 1)


class PhysicsEnv(BatchedEnv, ABC):
    """The arguments every physics backend (MuJoCo, MJX, Warp) takes, with their defaults: a
    backend's ``__init__`` names only its own extra ones and passes the rest here.

    Args:
        task: task name (see ``worldsim list-envs``), with or without ``worldsim/``.
        num_envs: number of envs, 1 to 65536.
        obs_mode: ``"state"``, ``"pixels"`` or ``"pixels+state"`` (see
            :mod:`worldsim.envs.observations`; a backend may support fewer).
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
    """

    #: How error messages name these envs.
    description = "worldsim envs"

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
    ) -> None:
        num_envs = check_env_arguments(type(self), unknown, num_envs, self.description)
        super().__init__(task, num_envs, obs_mode=obs_mode, image_size=image_size, wrist_camera=wrist_camera,
                         reward_type=reward_type, reward_types=PHYSICS_REWARD_TYPES,
                         reset_schedule=ResetSchedule.parse(reset_schedule), autoreset_mode=autoreset_mode,
                         max_episode_steps=max_episode_steps, terminate_on_success=terminate_on_success,
                         render_mode=render_mode)
