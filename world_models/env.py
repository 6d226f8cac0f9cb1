"""The imagined environment: a world model wrapped as a native Gymnasium ``VectorEnv``.

Example (``runs/wm_push`` from ``worldsim train-wm``, ``data/push.h5`` from ``worldsim collect``)::

    import gymnasium as gym, worldsim
    dream = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=64, world_model="runs/wm_push",
                         keyframes="data/push.h5", reset_schedule="keyframe")
    obs, info = dream.reset(seed=0)                  # obs["image"]: (64, 64, 64, 3) uint8
    obs, reward, terminated, truncated, info = dream.step(dream.action_space.sample())

It is the physics env of the same task (:class:`worldsim.envs.vector_env.TabletopVectorEnv`)
as a policy and a trainer see it: the same observation space (``obs_mode="pixels"``:
``image``, ``proprio``, ``instruction``) and action space, the same action checks (NaN, inf or
wrong shapes are refused; finite values are clipped to [-1, 1]), chunks ``(num_envs, K, 4)``
executed open loop with ``info["chunk_steps"]``, the same autoreset modes (``NextStep``,
``SameStep`` with ``final_obs``/``final_info``, ``Disabled`` with
``reset(options={"reset_mask": m})``), ``reset(options={"group_size": G})``, the time limit
inside the env, and the same info keys (``success``, ``episode_step``, ``failure``,
``reward_terms``).

What imagination cannot do, and what it does instead:

- observations: only ``obs_mode="pixels"``; the 56-d ``state`` (cube poses, velocities) is not
  imagined, so ``"state"`` and ``"pixels+state"`` are refused, as is the wrist camera;
- reward: ``reward_type="transition"`` (default) gives 1 on the step where the success head's
  verdict turns from 0 to 1 (WoVR), else 0; ``"sparse"`` gives 1 on every step whose new frame
  is judged a success, as the physics env's sparse reward does. With
  ``terminate_on_success=True`` (default) the two are the same. The physics env's ``dense``
  reward needs the state and is refused. ``info["reward_terms"]`` holds ``success_prob``;
- ``terminated``: success (if ``terminate_on_success``); ``failure`` is always False (a cube
  leaving the table is not detected in imagination);
- ``truncated``: the elapsed-step counter reaches ``max_episode_steps`` (the task's limit by
  default), or the episode has run ``horizon`` imagined steps (the imagined horizon, no cap by
  default); never together with ``terminated``;
- resets start from real recorded states of the ``keyframes`` file (its episodes of this
  task), with their real preceding frames as context: ``reset_schedule="keyframe"`` mixes
  episode starts and mid-episode keyframes (:mod:`worldsim.world_models.keyframes`; the
  ``episode_step`` counter of a keyframe start is its real step, so the time limit means what
  it means in physics); the physics schedules ``"synchronous"``, ``"staggered"``,
  ``"staggered-random"`` and ``"staggered-groups"`` start at episode starts and offset the
  counters as in physics (``"staggered-warmup"`` needs physics and is refused).

Same seed, same imagined episodes (on the same device): ``reset(seed=s)`` seeds the start
draws and the diffusion noise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from worldsim.data.datasets import EpisodeReader
from worldsim.envs.observations import OBS_MODES, observation_space
from worldsim.envs.reset_schedule import KINDS as SCHEDULES
from worldsim.envs.reset_schedule import ResetSchedule
from worldsim.envs.tasks import TaskSpec, get_task
from worldsim.envs.single_env import SingleEnv
from worldsim.envs.vector_env import (
    ACTION_DIM,
    CONTROL_DT,
    check_actions,
    check_env_arguments,
    parse_autoreset_mode,
    parse_reset_options,
)
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.keyframes import KeyframeRule, Keyframes, select_keyframes
from worldsim.world_models.model import WorldModel, frames_to_latents, latents_to_frames

REWARD_TYPES = ("transition", "sparse")
IMAGINED_OBS_MODES = ("pixels",)
RESET_SCHEDULES = ("keyframe", *(k for k in SCHEDULES if k != "staggered-warmup"))


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or a torch device."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r}; allowed: 'auto', 'cpu', 'cuda'")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for but torch sees no CUDA device")
    return torch.device(device)


class ImaginedVectorEnv(VectorEnv):
    """``num_envs`` imagined episodes of one task, stepped together by a world model.

    Args:
        task: task name, with or without ``worldsim/`` (the registered ids
            ``worldsim/Imagined-<Task>`` set it).
        num_envs: number of envs, 1 to 65536.
        world_model: a :class:`WorldModel` or the folder it was saved in (a ``train-wm`` run
            folder works too). It must have been trained on ``task``.
        keyframes: episode file (or :class:`EpisodeReader` / :class:`EpisodeBank`) whose
            episodes of ``task`` provide the real start states; it must hold ``image`` and
            ``proprio`` of the model's image size.
        obs_mode: ``"pixels"`` only (see the module docstring).
        image_size: must equal the model's (default: the model's).
        wrist_camera: must be False (the model imagines the front camera).
        reward_type: ``"transition"`` (default) or ``"sparse"``.
        reset_schedule: ``"keyframe"`` (default) or a physics schedule without warm-up.
        keyframe_rule: a :class:`KeyframeRule` (or a dict of its fields): keyframe choice and
            the share of keyframe starts (``ratio``) under ``reset_schedule="keyframe"``.
        autoreset_mode: ``"NextStep"`` (default), ``"SameStep"`` or ``"Disabled"``.
        max_episode_steps: time limit; the task's by default.
        horizon: imagined steps after which an episode is truncated (None: no cap).
        terminate_on_success: end the episode (``terminated``) when the success head says so.
        success_threshold: success probability at or above which a frame is a success
            (default: the threshold ``train-wm`` calibrated and saved with the model).
        sampling_steps: denoising steps per frame (default: the model's).
        render_mode: ``"rgb_array"`` to allow :meth:`render` (the current imagined frames).
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``: where the model runs.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": int(1 / CONTROL_DT),
                "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        task: str | TaskSpec = "PushCube-v0",
        num_envs: int = 1,
        *,
        world_model: str | Path | WorldModel | None = None,
        keyframes: str | Path | EpisodeReader | EpisodeBank | None = None,
        obs_mode: str = "pixels",
        image_size: int | None = None,
        wrist_camera: bool = False,
        reward_type: str = "transition",
        reset_schedule: str | ResetSchedule = "keyframe",
        keyframe_rule: KeyframeRule | dict[str, Any] | None = None,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_episode_steps: int | None = None,
        horizon: int | None = None,
        terminate_on_success: bool = True,
        success_threshold: float | None = None,
        sampling_steps: int | None = None,
        render_mode: str | None = None,
        device: str | torch.device = "auto",
        **unknown: Any,
    ):
        check_env_arguments(ImaginedVectorEnv, unknown, num_envs, "imagined envs")
        self.task = task if isinstance(task, TaskSpec) else get_task(str(task).removeprefix("Imagined-"))
        if obs_mode not in IMAGINED_OBS_MODES:
            if obs_mode in OBS_MODES:
                raise ValueError(f"obs_mode={obs_mode!r}: an imagined env cannot produce the 'state' "
                                 f"observation (cube poses and velocities are not imagined); allowed: "
                                 f"{', '.join(map(repr, IMAGINED_OBS_MODES))} "
                                 "(image + proprio + instruction)")
            raise ValueError(f"obs_mode={obs_mode!r} is not a mode; allowed: {', '.join(IMAGINED_OBS_MODES)}")
        if wrist_camera:
            raise ValueError("wrist_camera=True: the world model imagines the front camera only; "
                             "allowed: wrist_camera=False")
        if reward_type not in REWARD_TYPES:
            extra = " (the dense reward needs the physical state)" if reward_type == "dense" else ""
            raise ValueError(f"reward_type={reward_type!r}{extra}; allowed: {', '.join(REWARD_TYPES)}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}; allowed: None, 'rgb_array'")
        if world_model is None or keyframes is None:
            raise TypeError("an imagined env needs world_model= (a world model folder) and keyframes= (an "
                            "episode file of real start states)")
        if success_threshold is not None and not 0.0 < success_threshold < 1.0:
            raise ValueError(f"success_threshold={success_threshold!r} must be in (0, 1)")
        for name, value in (("max_episode_steps", max_episode_steps), ("horizon", horizon)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                      or value < 1):
                raise ValueError(f"{name}={value!r} must be an int >= 1 (or None)")
        self.max_episode_steps = int(max_episode_steps or self.task.max_episode_steps)
        self.horizon = None if horizon is None else int(horizon)

        self.device = resolve_device(device)
        self.model = (world_model if isinstance(world_model, WorldModel)
                      else WorldModel.from_pretrained(world_model)).to(self.device).eval()
        cfg = self.model.config
        self._task_id = self.model.task_index(self.task.name)
        if image_size is not None and int(image_size) != cfg.image_size:
            raise ValueError(f"image_size={image_size!r} does not match the world model, which imagines "
                             f"{cfg.image_size}x{cfg.image_size} frames; allowed: {cfg.image_size}")
        self.sampling_steps = cfg.sampling_steps if sampling_steps is None else int(sampling_steps)
        if not 1 <= self.sampling_steps <= 50:
            raise ValueError(f"sampling_steps={sampling_steps!r} must be in [1, 50]")

        self.bank = (keyframes if isinstance(keyframes, EpisodeBank)
                     else EpisodeBank(keyframes, tasks=[self.task.name], argument="keyframes"))
        if self.bank.image_shape != (cfg.image_size, cfg.image_size, 3):
            raise ValueError(f"keyframes={str(self.bank.path)!r} holds {self.bank.image_shape} images; the "
                             f"world model imagines ({cfg.image_size}, {cfg.image_size}, 3): record the "
                             f"keyframes with image_size={cfg.image_size}")
        self._bank_episodes = np.array([j for j, info in enumerate(self.bank.infos)
                                        if info.task == self.task.name], np.int64)
        if len(self._bank_episodes) == 0:
            raise ValueError(f"keyframes={str(self.bank.path)!r} holds no episodes of {self.task.name} "
                             f"(it has {', '.join(self.bank.tasks)})")
        if isinstance(reset_schedule, str) and reset_schedule == "keyframe":
            self.reset_schedule: ResetSchedule | None = None
        else:
            schedule = ResetSchedule.parse(reset_schedule)
            if schedule.physical:
                raise ValueError(f"reset_schedule={schedule.kind!r} advances the physics; allowed for "
                                 f"imagined envs: {', '.join(RESET_SCHEDULES)}")
            self.reset_schedule = schedule
        rule = keyframe_rule if keyframe_rule is None or isinstance(keyframe_rule, KeyframeRule) \
            else KeyframeRule(**keyframe_rule)
        self.keyframe_rule = rule or KeyframeRule()
        keys = select_keyframes(self.bank, self.keyframe_rule)
        mine = np.isin(keys.episode, self._bank_episodes)
        self.keyframes = Keyframes(keys.episode[mine], keys.step[mine], keys.weight[mine], keys.kind[mine])

        self.num_envs = int(num_envs)
        self.obs_mode = obs_mode
        self.reward_type = reward_type
        self.terminate_on_success = terminate_on_success
        self.success_threshold = float(cfg.success_threshold if success_threshold is None else success_threshold)
        self.render_mode = render_mode
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.image_shape = (cfg.image_size, cfg.image_size)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.single_observation_space = observation_space("pixels", self.image_shape, False)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

        n, c, s = self.num_envs, cfg.latent_channels, cfg.latent_size
        self._context = torch.zeros(n, cfg.context, c, s, s, device=self.device)
        self._first = torch.zeros(n, c, s, s, device=self.device)
        self._proprio = torch.zeros(n, cfg.context, 4, device=self.device)
        self._task = torch.full((n,), self._task_id, dtype=torch.long, device=self.device)
        self._frames = np.zeros((n, *self.image_shape, 3), np.uint8)
        self._success = np.zeros(n, bool)
        self._success_prob = np.zeros(n)
        self._elapsed = np.zeros(n, np.int64)
        self._imagined = np.zeros(n, np.int64)
        self._pending_reset = np.zeros(n, bool)
        self._finished = np.zeros(n, bool)
        self._needs_reset = True
        self._np_random, self._np_random_seed = seeding.np_random(None)
        self._generator = torch.Generator(self.device)
        self._generator.manual_seed(int(self._np_random.integers(2**62)))

    # ------------------------------------------------------------------ public API
    @property
    def instruction(self) -> str:
        return self.task.instruction

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset all envs, or those in ``options["reset_mask"]`` (bool array, num_envs), to real
        start states. ``options["group_size"] = G`` gives each run of G consecutive reset envs
        the same start (GRPO's groups); the number of reset envs must be a multiple of G."""
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seed)
            self._generator.manual_seed(int(self._np_random.integers(2**62)))
        mask, group_size = parse_reset_options(options, self.num_envs, self._needs_reset)
        if mask is not None:
            self._reset_envs(np.flatnonzero(mask), group_size)
        else:
            self._reset_envs(np.arange(self.num_envs), group_size)
            if self.reset_schedule is not None:
                self._elapsed[:] = self.reset_schedule.offsets(self.num_envs, self.max_episode_steps,
                                                               self._np_random)
        self._needs_reset = False
        return self._observe(), self._info(np.zeros(self.num_envs, bool))

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
            before = self._success.copy()
            self._imagine(chunk[:, k], index)
            self._elapsed[index] += 1
            self._imagined[index] += 1
            steps[index] += 1
            gained = self._success if self.reward_type == "sparse" else self._success & ~before
            reward[index] += gained[index]
            terminated, truncated = self._ended()
            active &= ~(terminated | truncated)  # an env that ends inside a chunk stays still
        if len(restarting) == self.num_envs:  # every env restarts: nothing was imagined
            terminated, truncated = self._ended()
        info = self._info(np.zeros(self.num_envs, bool))
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
                info["final_obs"][i] = {k: (v[i] if k == "instruction" else v[i].copy())
                                        for k, v in obs.items()}
            info["_final_obs"] = done.copy()
            info["final_info"] = self._info(np.zeros(self.num_envs, bool))
            info["_final_info"] = done.copy()
            self._restart(ended, info)
            obs = self._observe()
        elif self.autoreset_mode == AutoresetMode.NEXT_STEP:
            self._pending_reset = done
        elif self.autoreset_mode == AutoresetMode.DISABLED:
            self._finished |= done
        return obs, reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        """The current imagined frames of every env, (num_envs, H, W, 3) uint8."""
        if self.render_mode is None:
            gym.logger.warn("render() called with render_mode=None; pass render_mode='rgb_array'")
            return None
        return self._frames.copy()

    def get_state(self) -> dict[str, Any]:
        """A snapshot of the whole batch (imagined frames, counters, autoreset flags, RNGs) from
        which :meth:`set_state` continues exactly; training checkpoints store it."""
        return {"context": self._context.cpu().clone(), "first": self._first.cpu().clone(),
                "proprio": self._proprio.cpu().clone(), "frames": self._frames.copy(),
                "success": self._success.copy(), "success_prob": self._success_prob.copy(),
                "elapsed": self._elapsed.copy(), "imagined": self._imagined.copy(),
                "pending_reset": self._pending_reset.copy(), "finished": self._finished.copy(),
                "needs_reset": self._needs_reset, "rng": self._np_random.bit_generator.state,
                "torch_rng": self._generator.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot taken from an imagined env of the same size."""
        if tuple(state["context"].shape) != tuple(self._context.shape):
            raise ValueError(f"the snapshot holds context of shape {tuple(state['context'].shape)}; this env "
                             f"has {tuple(self._context.shape)} (num_envs={self.num_envs})")
        self._context.copy_(state["context"])
        self._first.copy_(state["first"])
        self._proprio.copy_(state["proprio"])
        for name in ("frames", "success", "success_prob", "elapsed", "imagined", "pending_reset", "finished"):
            getattr(self, f"_{name}")[:] = state[name]
        self._needs_reset = bool(state["needs_reset"])
        self._np_random = np.random.Generator(np.random.PCG64())
        self._np_random.bit_generator.state = state["rng"]
        self._generator.set_state(state["torch_rng"])

    # ------------------------------------------------------------------ internals
    def _check_actions(self, actions) -> np.ndarray:
        return check_actions(actions, self.num_envs).astype(np.float32)

    def _draw_starts(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Bank episode and step of ``count`` new starts: keyframes with probability ``ratio``
        under the keyframe schedule (when there are any), else episode starts."""
        episodes = self._bank_episodes[self._np_random.integers(0, len(self._bank_episodes), count)]
        steps = np.zeros(count, np.int64)
        if self.reset_schedule is None and len(self.keyframes):
            use = self._np_random.random(count) < self.keyframe_rule.ratio
            if use.any():
                p = self.keyframes.weight / self.keyframes.weight.sum()
                pick = self._np_random.choice(len(self.keyframes), int(use.sum()), p=p)
                episodes[use], steps[use] = self.keyframes.episode[pick], self.keyframes.step[pick]
        return episodes, steps

    def _reset_envs(self, index: np.ndarray, group_size: int = 1) -> None:
        if len(index) == 0:
            return
        if len(index) % group_size:
            raise ValueError(f"group_size={group_size} does not divide the {len(index)} envs being reset")
        episodes, steps = self._draw_starts(len(index) // group_size)
        episodes, steps = np.repeat(episodes, group_size), np.repeat(steps, group_size)
        bank, cfg = self.bank, self.model.config
        rows = bank.context_rows(episodes, steps, cfg.context)
        where = torch.as_tensor(index, device=self.device)
        frames = torch.from_numpy(bank.images[rows]).to(self.device)
        self._context[where] = frames_to_latents(frames, cfg.patch)
        first = torch.from_numpy(bank.images[bank.obs_start[episodes]]).to(self.device)
        self._first[where] = frames_to_latents(first, cfg.patch)
        self._proprio[where] = torch.from_numpy(bank.proprio[rows]).to(self.device)
        self._frames[index] = bank.images[rows[:, -1]]
        self._success[index] = bank.success[rows[:, -1]]
        self._success_prob[index] = self._success[index]
        self._elapsed[index] = steps
        self._imagined[index] = 0
        self._pending_reset[index] = False
        self._finished[index] = False

    def _restart(self, index: np.ndarray, info: dict[str, Any]) -> None:
        """Reset the envs in ``index`` and rewrite their rows of ``info`` for the new episode."""
        self._reset_envs(index)
        info["success"][index] = self._success[index]
        info["failure"][index] = False
        info["episode_step"][index] = self._elapsed[index]
        info["reward_terms"]["success_prob"][index] = self._success_prob[index]

    @torch.inference_mode()
    def _imagine(self, actions: np.ndarray, index: np.ndarray) -> None:
        """One imagined step for the envs in ``index`` with their ``actions`` rows."""
        every = len(index) == self.num_envs
        rows = slice(None) if every else torch.as_tensor(index, device=self.device)
        action = torch.from_numpy(actions[index]).to(self.device)
        context, proprio = self._context[rows], self._proprio[rows]
        pred = self.model.predict(context, self._first[rows], proprio, action, self._task[rows],
                                  self.sampling_steps, self._generator)
        self._context[rows] = torch.cat([context[:, 1:], pred.latent[:, None]], dim=1)
        self._proprio[rows] = torch.cat([proprio[:, 1:], pred.proprio[:, None]], dim=1)
        self._frames[index] = latents_to_frames(pred.latent, self.model.config.patch).cpu().numpy()
        prob = pred.success_prob.float().cpu().numpy()
        self._success_prob[index] = prob
        self._success[index] = prob >= self.success_threshold

    def _ended(self) -> tuple[np.ndarray, np.ndarray]:
        terminated = self._success & self.terminate_on_success
        limit = self._elapsed >= self.max_episode_steps
        if self.horizon is not None:
            limit |= self._imagined >= self.horizon
        return terminated, limit & ~terminated

    def _info(self, failure: np.ndarray) -> dict[str, Any]:
        return {"success": self._success.copy(), "episode_step": self._elapsed.copy(),
                "failure": failure.copy(), "reward_terms": {"success_prob": self._success_prob.copy()}}

    def _observe(self) -> dict[str, Any]:
        return {"image": self._frames.copy(),
                "proprio": self._proprio[:, -1].cpu().numpy().astype(np.float32),
                "instruction": (self.task.instruction,) * self.num_envs}


class ImaginedEnv(SingleEnv):
    """One imagined episode at a time, for ``gym.make``: an :class:`ImaginedVectorEnv` with
    ``num_envs=1`` and autoreset disabled (see :class:`~worldsim.envs.single_env.SingleEnv`).
    Takes the same keyword arguments except ``num_envs`` and ``autoreset_mode``."""

    vector_class = ImaginedVectorEnv
