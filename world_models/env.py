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
  imagined, so ``"state"`` and ``"pixels+state"`` are refused, as is the wrist camera. What
  the frames are and what imagination takes from the simulator is the ``rung``
  (:mod:`~worldsim.world_models.ladder`): on ``"pixels"`` (default) and ``"video"`` the world
  model's own frames, the keyframes read as if they had no ``state`` (the model finds the
  objects in the real start frames); on ``"sim-seeded"`` its own frames, the objects started at
  the recorded state; on ``"oracle"`` the imagined gripper and objects drawn by the scene's
  renderer (:mod:`~worldsim.world_models.scene_frames`; no frame is denoised: an upper bound
  for analysis, not a world-model figure);
- reward: ``reward_type="transition"`` (default) gives 1 on the step where the imagined
  verdict turns from 0 to 1 (WoVR), else 0; ``"sparse"`` gives 1 on every step whose new frame
  is judged a success, as the physics env's sparse reward does. The verdict is the success
  head's probability against the threshold, or, with ``judge="rule"`` (by default for a model
  with ``outcome="rule"``), each task's own success rule on the objects' imagined positions
  (:mod:`~worldsim.world_models.outcome`). With
  ``terminate_on_success=True`` (default) the two are the same. ``"dense"`` is the physics env's
  dense reward on the imagined gripper and objects: the mean of the task's shaping terms and a
  success stage, 1 on a success; it needs a model with the object pathway (the objects'
  positions are not otherwise imagined). ``info["reward_terms"]`` holds ``success_prob``, and
  with ``"dense"`` the shaping terms too;
- ``terminated``: success (if ``terminate_on_success``), or failure: with the object pathway,
  a cube imagined off the table, as in physics (without it, ``failure`` is always False);
- ``truncated``: the elapsed-step counter reaches ``max_episode_steps`` (the task's limit by
  default), or the episode has run ``horizon`` imagined steps (the imagined horizon, no cap by
  default); never together with ``terminated``;
- resets start from real recorded states of the ``keyframes`` file (its episodes of this
  task), with their real preceding frames as context: ``reset_schedule="keyframe"`` mixes
  episode starts and mid-episode keyframes (:mod:`worldsim.world_models.keyframes`; the
  ``episode_step`` counter of a keyframe start is its real step, so the time limit means what
  it means in physics). Keyframes at the task object's motion onset and a failed episode's
  closest approach read the objects' positions from the file's ``state`` on the seeded rungs,
  from the model's own keypoint detector on the real frames on ``pixels`` (a model trained with
  state supervision), and not at all on ``video`` (gripper events only): see
  :attr:`ImaginedVectorEnv.keyframe_source` and ``keyframes.counts()``. The physics schedules
  ``"synchronous"``, ``"staggered"``, ``"staggered-random"`` and ``"staggered-groups"`` start
  at episode starts and offset the counters as in physics (``"staggered-warmup"`` needs
  physics and is refused). Each env's current start is :attr:`ImaginedVectorEnv.start_episode`
  (an episode of :attr:`bank`) at its reset's ``episode_step``: the keyframe file's ``state``
  there restarts physics from the same real state (``reset(options={"start_state": ...})``), which
  :mod:`worldsim.evaluation.start_agreement` does (the env's own :attr:`bank` holds no state on
  the ``pixels`` and ``video`` rungs).

Same seed, same imagined episodes (on the same device): ``reset(seed=s)`` seeds the start
draws and the diffusion noise.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from worldsim.data.reader import EpisodeReader
from worldsim.envs.core import IMAGINED_REWARD_TYPES, BatchedEnv, Outcome, check_env_arguments
from worldsim.envs.families.base import Evaluation
from worldsim.envs.imagination import DEFAULT_IMAGINATION
from worldsim.envs.observations import ENTITIES
from worldsim.envs.reset_schedule import KINDS as SCHEDULES
from worldsim.envs.reset_schedule import ResetSchedule
from worldsim.envs.single_env import SingleEnv
from worldsim.envs.tasks import TaskSpec
from worldsim.runtime.device import resolve_device
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.keyframes import KeyframeRule, Keyframes, detected_positions, select_keyframes
from worldsim.world_models.ladder import check_judge, rung_bank, seeds_objects
from worldsim.world_models.model import Rollout, WorldModel
from worldsim.world_models.scene_frames import scene_frames, step_frames

RESET_SCHEDULES = ("keyframe", *(k for k in SCHEDULES if k != "staggered-warmup"))


class ImaginedVectorEnv(BatchedEnv):
    """``num_envs`` imagined episodes of one task, stepped together by a world model.

    Library code and commands make it from an
    :class:`~worldsim.envs.imagination.ImaginationConfig`
    (:func:`~worldsim.envs.registration.make_task_envs`); its defaults are the config's, except
    ``horizon`` (made on its own, the env runs episodes to the task's time limit, as physics does).

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
        reward_type: ``"transition"`` (default), ``"sparse"`` or ``"dense"`` (a model with the
            object pathway only).
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
        rung: the imagination rung, ``"oracle"``, ``"sim-seeded"``, ``"pixels"`` (default) or
            ``"video"`` (:mod:`~worldsim.world_models.ladder`, which says what each refuses).
        judge: who judges success and so the reward, ``"rule"`` (a model with the object
            pathway) or ``"head"`` (default None: the model's own ``outcome``).
        render_mode: ``"rgb_array"`` to allow :meth:`render` (the current imagined frames).
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``: where the model runs.
    """

    obs_modes = ("pixels",)
    obs_mode_refusal = ("by an imagined env, which cannot produce the 'state' observation (cube poses and "
                        "velocities are not imagined)")

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
        reward_type: str = DEFAULT_IMAGINATION.reward_type,
        reset_schedule: str | ResetSchedule = "keyframe",
        keyframe_rule: KeyframeRule | dict[str, Any] | None = None,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_episode_steps: int | None = None,
        horizon: int | None = None,
        terminate_on_success: bool = True,
        success_threshold: float | None = DEFAULT_IMAGINATION.success_threshold,
        sampling_steps: int | None = DEFAULT_IMAGINATION.sampling_steps,
        rung: str = DEFAULT_IMAGINATION.rung,
        judge: str | None = DEFAULT_IMAGINATION.judge,
        render_mode: str | None = None,
        device: str | torch.device = DEFAULT_IMAGINATION.device,
        **unknown: Any,
    ) -> None:
        num_envs = check_env_arguments(ImaginedVectorEnv, unknown, num_envs, "imagined envs")
        if wrist_camera:
            raise ValueError("wrist_camera=True: the world model imagines the front camera only; "
                             "allowed: wrist_camera=False")
        if world_model is None or keyframes is None:
            raise TypeError("an imagined env needs world_model= (a world model folder) and keyframes= (an "
                            "episode file of real start states)")
        if success_threshold is not None and not 0.0 < success_threshold < 1.0:
            raise ValueError(f"success_threshold={success_threshold!r} must be in (0, 1)")
        if horizon is not None and (isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer))
                                    or horizon < 1):
            raise ValueError(f"horizon={horizon!r} must be an int >= 1 (or None)")
        if isinstance(reset_schedule, str) and reset_schedule == "keyframe":
            schedule = None
        else:
            schedule = ResetSchedule.parse(reset_schedule)
            if schedule.physical:
                raise ValueError(f"reset_schedule={schedule.kind!r} advances the physics; allowed for "
                                 f"imagined envs: {', '.join(RESET_SCHEDULES)}")

        self.device = resolve_device(device)
        self.model = (world_model if isinstance(world_model, WorldModel)
                      else WorldModel.from_pretrained(world_model)).to(self.device).eval()
        cfg = self.model.config
        if image_size is not None and int(image_size) != cfg.image_size:
            raise ValueError(f"image_size={image_size!r} does not match the world model, which imagines "
                             f"{cfg.image_size}x{cfg.image_size} frames; allowed: {cfg.image_size}")
        if reward_type == "dense" and self.model.rules is None:
            raise ValueError("reward_type='dense' shapes the reward on the objects' imagined positions, which "
                             "only a world model with the object pathway carries; allowed for this model: "
                             "transition, sparse")
        super().__init__(task, num_envs, obs_mode=obs_mode, image_size=cfg.image_size, wrist_camera=False,
                         reward_type=reward_type, reward_types=IMAGINED_REWARD_TYPES, reset_schedule=schedule,
                         autoreset_mode=autoreset_mode, max_episode_steps=max_episode_steps,
                         terminate_on_success=terminate_on_success, render_mode=render_mode)
        self.horizon = None if horizon is None else int(horizon)
        self._task_id = self.model.task_index(self.task.name)
        self.sampling_steps = cfg.sampling_steps if sampling_steps is None else int(sampling_steps)
        if not 1 <= self.sampling_steps <= 50:
            raise ValueError(f"sampling_steps={sampling_steps!r} must be in [1, 50]")
        self.success_threshold = float(cfg.success_threshold if success_threshold is None else success_threshold)

        self.outcome = check_judge(self.model, judge)
        self.rung = rung
        # the pixels and video rungs never load the file's state: nothing can leak into imagination
        self.bank = rung_bank(self.model, keyframes if isinstance(keyframes, EpisodeBank) else EpisodeBank(
            keyframes, tasks=[self.task.name], argument="keyframes", state=seeds_objects(rung)), rung)
        if self.bank.image_shape != (cfg.image_size, cfg.image_size, 3):
            raise ValueError(f"keyframes={str(self.bank.path)!r} holds {self.bank.image_shape} images; the "
                             f"world model imagines ({cfg.image_size}, {cfg.image_size}, 3): record the "
                             f"keyframes with image_size={cfg.image_size}")
        self._bank_episodes = np.array([j for j, info in enumerate(self.bank.infos)
                                        if info.task == self.task.name], np.int64)
        if len(self._bank_episodes) == 0:
            raise ValueError(f"keyframes={str(self.bank.path)!r} holds no episodes of {self.task.name} "
                             f"(it has {', '.join(self.bank.tasks)})")
        self.scene_frames = scene_frames(self.model, self.bank, rung, self.num_envs)
        rule = keyframe_rule if keyframe_rule is None or isinstance(keyframe_rule, KeyframeRule) \
            else KeyframeRule(**keyframe_rule)
        self.keyframe_rule = rule or KeyframeRule(ratio=DEFAULT_IMAGINATION.keyframe_ratio)
        # without state, the motion-onset and failure keyframes read where the world model's own
        # detector finds the objects in the real frames; only a detector trained on keypoints
        # (state_supervision) knows where they are: else (the video rung) gripper events alone
        positions, self.keyframe_source = None, "state" if self.bank.has_state else "gripper"
        if not self.bank.has_state and cfg.state_supervision:
            positions = detected_positions(self.bank, self.model.success_head.locate, cfg.patch, self.device)
            self.keyframe_source = "detector"
        keys = select_keyframes(self.bank, self.keyframe_rule, positions)
        mine = np.isin(keys.episode, self._bank_episodes)
        self.keyframes = Keyframes(keys.episode[mine], keys.step[mine], keys.weight[mine], keys.kind[mine])

        n, c, s = self.num_envs, cfg.latent_channels, cfg.latent_size
        zeros = functools.partial(torch.zeros, device=self.device)
        pathway = cfg.object_pathway
        self._rollout = Rollout(zeros(n, cfg.context, c, s, s), zeros(n, c, s, s), zeros(n, cfg.context, 4),
                                zeros(n, cfg.context, len(ENTITIES), 2) if pathway else None,
                                zeros(n, cfg.context, len(ENTITIES)) if pathway else None,
                                zeros(n, len(ENTITIES), 2) if pathway and cfg.anchor == "first" else None)
        self._task = torch.full((n,), self._task_id, dtype=torch.long, device=self.device)
        self._frames = np.zeros((n, *self.image_shape, 3), np.uint8)
        self._success = np.zeros(n, bool)
        self._failed = np.zeros(n, bool)
        self._success_prob = np.zeros(n)
        self.start_episode = np.zeros(n, np.int64)  # the bank episode each env's episode started from
        self._terms: dict[str, np.ndarray] = {}  # the dense reward's shaping terms, with reward_type="dense"
        self._generator = torch.Generator(self.device)
        self._generator.manual_seed(int(self.np_random.integers(2**62)))

    def close_extras(self, **kwargs: Any) -> None:
        if self.scene_frames is not None:
            self.scene_frames.close()

    # ------------------------------------------------------------------ backend hooks
    def _seed_backend(self, seed: int) -> None:
        self._generator.manual_seed(int(self.np_random.integers(2**62)))

    def _reset_rows(self, mask: np.ndarray, group_size: int) -> np.ndarray:
        """Real start states: episode starts, or keyframes (their real step) with probability
        ``ratio`` under the keyframe schedule, with their real preceding frames as context."""
        start = np.zeros(self.num_envs, np.int64)
        index = np.flatnonzero(mask)
        if len(index) == 0:
            return start
        episodes, steps = self._draw_starts(len(index) // group_size)
        episodes, steps = np.repeat(episodes, group_size), np.repeat(steps, group_size)
        bank, cfg = self.bank, self.model.config
        rows = bank.context_rows(episodes, steps, cfg.context)
        self._rollout.put(torch.as_tensor(index, device=self.device), self.model.start(
            torch.from_numpy(bank.images[rows]), torch.from_numpy(bank.images[bank.obs_start[episodes]]),
            torch.from_numpy(bank.proprio[rows]), bank.recorded_objects(rows)))
        self._frames[index] = bank.images[rows[:, -1]]
        if self.scene_frames is not None:
            assert bank.state is not None  # checked in __init__
            self.scene_frames.start(index, bank.state[rows[:, -1]])
        self.start_episode[index] = episodes
        self._success[index] = bank.success[rows[:, -1]]
        self._failed[index] = False
        self._success_prob[index] = self._success[index]
        self._shape(index)
        start[index] = steps
        return start

    def _advance(self, actions: np.ndarray, active: np.ndarray) -> Outcome:
        before = self._success.copy()
        self._imagine(actions.astype(np.float32), np.flatnonzero(active))
        if self.reward_type == "dense":
            reward = Evaluation(self._success, self._terms).dense_reward()
        else:
            reward = (self._success if self.reward_type == "sparse" else self._success & ~before).astype(float)
        return self._outcome(reward)

    def _outcome(self, reward: np.ndarray | None = None) -> Outcome:
        reward = np.zeros(self.num_envs) if reward is None else reward
        terms = {"success_prob": self._success_prob.copy(), **{k: v.copy() for k, v in self._terms.items()}}
        return Outcome(self._success.copy(), self._failed.copy(), reward, terms)

    def _observe(self, rows: np.ndarray | None = None, previous: Any = None) -> dict[str, Any]:
        return {"image": self._frames.copy(),
                "proprio": self._rollout.proprio[:, -1].cpu().numpy().astype(np.float32),
                "instruction": (self.task.instruction,) * self.num_envs}

    def _render(self) -> np.ndarray:
        return self._frames.copy()

    def _backend_state(self) -> dict[str, Any]:
        rollout = {k: v.cpu().clone() for k, v in vars(self._rollout).items() if v is not None}
        flags = {name: getattr(self, f"_{name}").copy() for name in ("frames", "success", "failed", "success_prob")}
        terms = {k: v.copy() for k, v in self._terms.items()}
        return {**rollout, **flags, "terms": terms,
                "start_episode": self.start_episode.copy(), "torch_rng": self._generator.get_state()}

    def _set_backend_state(self, state: dict[str, Any]) -> None:
        if tuple(state["context"].shape) != tuple(self._rollout.context.shape):
            raise ValueError(f"the snapshot holds context of shape {tuple(state['context'].shape)}; this env "
                             f"has {tuple(self._rollout.context.shape)} (num_envs={self.num_envs})")
        for name, value in vars(self._rollout).items():
            if value is not None:
                value.copy_(state[name])
        for name in ("frames", "success", "failed", "success_prob"):
            getattr(self, f"_{name}")[:] = state[name]
        self._terms = {k: v.copy() for k, v in state["terms"].items()}
        self.start_episode[:] = state["start_episode"]
        self._generator.set_state(state["torch_rng"])

    # ------------------------------------------------------------------ internals
    def _draw_starts(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Bank episode and step of ``count`` new starts: keyframes with probability ``ratio``
        under the keyframe schedule (when there are any), else episode starts."""
        episodes = self._bank_episodes[self.np_random.integers(0, len(self._bank_episodes), count)]
        steps = np.zeros(count, np.int64)
        if self.reset_schedule is None and len(self.keyframes):
            use = self.np_random.random(count) < self.keyframe_rule.ratio
            if use.any():
                p = self.keyframes.weight / self.keyframes.weight.sum()
                pick = self.np_random.choice(len(self.keyframes), int(use.sum()), p=p)
                episodes[use], steps[use] = self.keyframes.episode[pick], self.keyframes.step[pick]
        return episodes, steps

    @torch.inference_mode()
    def _imagine(self, actions: np.ndarray, index: np.ndarray) -> None:
        """One imagined step for the envs in ``index`` with their ``actions`` rows."""
        every = len(index) == self.num_envs
        rows = slice(None) if every else torch.as_tensor(index, device=self.device)
        action = torch.from_numpy(actions[index]).to(self.device)
        rollout = self._rollout.rows(rows)
        draw = self.scene_frames is None
        pred = self.model.predict(rollout, action, self._task[rows], self.sampling_steps, self._generator, draw=draw,
                                  outcome=self.outcome)
        self._rollout.put(rows, rollout.advance(pred))
        self._frames[index] = step_frames(pred, self.model.config.patch, self.scene_frames, index)
        prob = pred.success_prob.float().cpu().numpy()
        self._success_prob[index] = prob
        self._success[index] = prob >= self.success_threshold
        if pred.failed is not None:
            self._failed[index] = pred.failed.cpu().numpy()
        self._shape(index)

    @torch.inference_mode()
    def _shape(self, index: np.ndarray) -> None:
        """With ``reward_type="dense"``: the shaping terms of the envs in ``index`` at their
        latest imagined (or, just reset, recorded) gripper and object positions."""
        if self.reward_type != "dense" or self.model.rules is None:
            return
        rollout = self._rollout
        assert rollout.points is not None and rollout.heights is not None  # the pathway, checked in __init__
        rows = torch.as_tensor(index, device=self.device)
        terms = self.model.rules.terms(self._task_id, rollout.proprio[rows, -1], rollout.points[rows, -1],
                                       rollout.heights[rows, -1])
        for name, value in terms.items():
            self._terms.setdefault(name, np.zeros(self.num_envs))[index] = value.float().cpu().numpy()


class ImaginedEnv(SingleEnv):
    """One imagined episode at a time, for ``gym.make``: an :class:`ImaginedVectorEnv` with
    ``num_envs=1`` and autoreset disabled (see :class:`~worldsim.envs.single_env.SingleEnv`).
    Takes the same keyword arguments except ``num_envs`` and ``autoreset_mode``."""

    vector_class = ImaginedVectorEnv
