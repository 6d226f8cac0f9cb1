"""The imagined environment: a world model wrapped as a native Gymnasium ``VectorEnv``.

Example (``runs/wm_push`` from ``worldsim train-wm``, ``data/push.h5`` from ``worldsim collect``)::

    import gymnasium as gym, worldsim
    dream = gym.make_vec("worldsim/Imagined-PushCube-v0", num_envs=64, world_model="runs/wm_push",
                         keyframes="data/push.h5", reset_schedule="keyframe")
    obs, info = dream.reset(seed=0)                  # obs["image"]: (64, 64, 64, 3) uint8
    obs, reward, terminated, truncated, info = dream.step(dream.action_space.sample())

Library code and commands make it from an :class:`~worldsim.envs.imagination.ImaginationConfig`
(:func:`~worldsim.envs.registration.make_task_envs`); made on its own (``gym.make_vec``) its
imagination is :data:`ENV_IMAGINATION`: the config's defaults, but episodes run to the task's
time limit, as physics runs them. It is the physics env of the same task
(:class:`worldsim.envs.vector_env.TabletopVectorEnv`) as a policy and a trainer see it: the same
observation space (``obs_mode="pixels"``: ``image``, ``proprio``, ``instruction``) and action space,
the same action checks (NaN, inf or wrong shapes are refused; finite values are clipped to [-1, 1]),
chunks ``(num_envs, K, 4)`` executed open loop with ``info["chunk_steps"]``, the same autoreset
modes (``NextStep``, ``SameStep`` with ``final_obs``/``final_info``, ``Disabled`` with
``reset(options={"reset_mask": m})``), ``reset(options={"group_size": G})``, the time limit inside
the env, and the same info keys (``success``, ``episode_step``, ``failure``, ``reward_terms``).

What imagination cannot do, and what it does instead:

- observations: only ``obs_mode="pixels"``; the 56-d ``state`` (cube poses, velocities) is not
  imagined, so ``"state"`` and ``"pixels+state"`` are refused, as is the wrist camera. What
  the frames are and what imagination takes from the simulator is the ``rung``
  (:mod:`~worldsim.envs.imagination`): on ``"pixels"`` (default) and ``"video"`` the world
  model's own frames, the keyframes read as if they had no ``state`` (the model finds the
  objects in the real start frames); on ``"sim-seeded"`` its own frames, the objects started at
  the recorded state; on ``"oracle"`` the imagined gripper and objects drawn by the scene's
  renderer (:mod:`~worldsim.world_models.scene_frames`; no frame is denoised: an upper bound
  for analysis, not a world-model figure);
- reward: ``reward_type="transition"`` (default) gives 1 on the step where the imagined
  verdict turns from 0 to 1 (WoVR), else 0; ``"sparse"`` gives 1 on every step whose new frame
  is judged a success, as the physics env's sparse reward does. The verdict is the success
  head's probability against the threshold, or, with ``judge="rule"`` (by default for a model
  whose judge's ``outcome`` is ``"rule"``), each task's own success rule on the objects' imagined positions
  (:mod:`~worldsim.world_models.outcome`). With
  ``terminate_on_success=True`` (default) the two are the same. ``"dense"`` is the physics env's
  dense reward on the imagined gripper and objects: the mean of the task's shaping terms and a
  success stage, 1 on a success; it needs a model with the object pathway (the objects'
  positions are not otherwise imagined). ``info["reward_terms"]`` holds ``success_prob``, and
  with ``"dense"`` the shaping terms too;
- ``placebo="static"`` (a control arm): the object pathway is switched off, so every object stays
  where the model found it at the start while the gripper, frames, judge and reward run as usual;
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

Frames are drawn when they are looked at: for a model whose frames are drawn from the first frame
and the step's state alone (:attr:`~worldsim.world_models.model.WorldModel.frames_on_demand`, the
``tiny`` preset's), a step inside an action chunk advances the gripper, the objects and the
verdict without drawing its frame, and only the frame the observation returns is drawn: one
frame per chunk (``step()`` and ``reset()`` end by observing, so ``render()`` and snapshots
between calls find every frame drawn). Nothing a policy, the reward or the verdict sees changes;
the diffusion noise is drawn per drawn frame.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from worldsim.data.reader import EpisodeReader
from worldsim.envs.core import IMAGINED_REWARD_TYPES, BatchedEnv, Outcome, check_env_arguments
from worldsim.envs.families.base import Evaluation
from worldsim.envs.imagination import DEFAULT_IMAGINATION, ImaginationConfig, Rung
from worldsim.envs.reset_schedule import KINDS as SCHEDULES
from worldsim.envs.reset_schedule import ResetSchedule
from worldsim.envs.single_env import SingleEnv
from worldsim.envs.tasks import TaskSpec
from worldsim.runtime.device import resolve_device
from worldsim.world_models.config import WorldModelConfig
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.imagined_step import Rollout
from worldsim.world_models.keyframes import KeyframeRule, KeyframeStarts
from worldsim.world_models.latents import latents_to_frames
from worldsim.world_models.model import WorldModel
from worldsim.world_models.scene_frames import scene_frames, step_frames

RESET_SCHEDULES = ("keyframe", *(k for k in SCHEDULES if k != "staggered-warmup"))
ENV_IMAGINATION = DEFAULT_IMAGINATION.replace(horizon=None)
"""An imagined env's imagination when it is made on its own: episodes run to the time limit."""
SETTINGS = frozenset(f.name for f in dataclasses.fields(ImaginationConfig)) - {"world_model", "keyframes"}
"""The imagination settings the env also takes as keyword arguments."""


class ImaginedVectorEnv(BatchedEnv):
    """``num_envs`` imagined episodes of one task, stepped together by a world model (the module
    docstring says what it does where imagination cannot do what physics does).

    Args:
        task: task name, with or without ``worldsim/`` (the ids ``worldsim/Imagined-<Task>`` set it).
        num_envs: number of envs, 1 to 65536.
        world_model: a :class:`WorldModel` or the folder it was saved in (a ``train-wm`` run
            folder works too), trained on ``task``.
        keyframes: episode file (or :class:`EpisodeReader` / :class:`EpisodeBank`) whose episodes of
            ``task`` provide the real start states, with ``image`` and ``proprio`` of the model's size.
        imagination: how the episodes are imagined (:data:`ENV_IMAGINATION` by default). Any of its
            fields but the world model and keyframes may also be given as a keyword argument
            (``rung="oracle"``, ``horizon=40``), which replaces the config's.
        obs_mode: ``"pixels"`` only.
        image_size: the model's (the only one allowed; default).
        wrist_camera: False (the model imagines the front camera).
        reset_schedule: ``"keyframe"`` (default) or a physics schedule without warm-up.
        keyframe_rule: a :class:`KeyframeRule` (or a dict of its fields): keyframe choice and the
            share of keyframe starts (``ratio``, default: the imagination's ``keyframe_ratio``).
        autoreset_mode: as the physics env's (``"NextStep"`` by default).
        max_episode_steps: the time limit (default: the task's).
        terminate_on_success: end an episode when its imagined step succeeds.
        render_mode: ``"rgb_array"`` to allow :meth:`render`.
        **settings: fields of ``imagination`` (see above).
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
        imagination: ImaginationConfig | None = None,
        obs_mode: str = "pixels",
        image_size: int | None = None,
        wrist_camera: bool = False,
        reset_schedule: str | ResetSchedule = "keyframe",
        keyframe_rule: KeyframeRule | dict[str, Any] | None = None,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_episode_steps: int | None = None,
        terminate_on_success: bool = True,
        render_mode: str | None = None,
        **settings: Any,
    ) -> None:
        unknown = {k: settings.pop(k) for k in list(settings) if k not in SETTINGS}
        num_envs = check_env_arguments(ImaginedVectorEnv, unknown, num_envs, "imagined envs", sorted(SETTINGS))
        # the settings are checked once, by the config
        self.imagination = config = (imagination or ENV_IMAGINATION).replace(**settings)
        if wrist_camera:
            raise ValueError("wrist_camera=True: the world model imagines the front camera only; "
                             "allowed: wrist_camera=False")
        if world_model is None or keyframes is None:
            raise TypeError("an imagined env needs world_model= (a world model folder) and keyframes= (an "
                            "episode file of real start states)")
        schedule = None if isinstance(reset_schedule, str) and reset_schedule == "keyframe" \
            else ResetSchedule.parse(reset_schedule)
        if schedule is not None and schedule.physical:
            raise ValueError(f"reset_schedule={schedule.kind!r} advances the physics; allowed for "
                             f"imagined envs: {', '.join(RESET_SCHEDULES)}")
        self.device = resolve_device(config.device)
        self.model, cfg = loaded_model(world_model, self.device, image_size)
        if config.reward_type == "dense" and self.model.rules is None:
            raise ValueError("reward_type='dense' shapes the reward on the objects' imagined positions, which "
                             "only a world model with the object pathway carries; allowed for this model: "
                             "transition, sparse")
        super().__init__(task, num_envs, obs_mode=obs_mode, image_size=cfg.image_size, wrist_camera=False,
                         reward_type=config.reward_type, reward_types=IMAGINED_REWARD_TYPES,
                         reset_schedule=schedule, autoreset_mode=autoreset_mode, max_episode_steps=max_episode_steps,
                         terminate_on_success=terminate_on_success, render_mode=render_mode)
        self.horizon = config.horizon
        self._task_id = self.model.task_index(self.task.name)
        self.sampling_steps = cfg.sampling_steps if config.sampling_steps is None else config.sampling_steps
        self.success_threshold = cfg.judge.success_threshold if config.success_threshold is None \
            else config.success_threshold
        self.outcome = self.model.judge.check(config.judge)
        config.check_placebo(self.model)
        rung = self.rung = config.rung
        self.bank = keyframe_bank(self.model, keyframes, self.task.name, rung)
        self.scene_frames = scene_frames(self.model, rung, self.num_envs)
        self.keyframe_rule = KeyframeRule(**keyframe_rule) if isinstance(keyframe_rule, dict) \
            else keyframe_rule or KeyframeRule(ratio=config.keyframe_ratio)
        # without state, the motion-onset and failure keyframes read where the world model's own
        # detector finds the objects in the real frames; only a detector trained on keypoints
        # (state_supervision) knows where they are: else (the video rung) gripper events alone
        self.starts = KeyframeStarts(self.bank, self.task.name, self.keyframe_rule,
                                     self.model.judge.locate if cfg.state_supervision else None, cfg.patch, self.device)
        self.keyframes, self.keyframe_source = self.starts.keyframes, self.starts.source
        n = self.num_envs
        self._rollout = Rollout.empty(cfg, n, self.device, first_points=self.model.frames.reads_first_positions)
        self._task = torch.full((n,), self._task_id, dtype=torch.long, device=self.device)
        self._frames = np.zeros((n, *self.image_shape, 3), np.uint8)
        # frames drawn on demand: which envs' latest step is undrawn, and what it was drawn from
        self._on_demand = self.scene_frames is None and self.model.frames_on_demand
        self._undrawn = np.zeros(n, bool)
        self._drawn_from: dict[str, torch.Tensor] = {}
        self._success, self._failed, self._success_prob = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n)
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
        episodes, steps = self.starts.draw(len(index) // group_size, self.np_random, self.reset_schedule is None)
        episodes, steps = np.repeat(episodes, group_size), np.repeat(steps, group_size)
        bank, cfg = self.bank, self.model.config
        rows = bank.context_rows(episodes, steps, cfg.context)
        self._rollout.put(torch.as_tensor(index, device=self.device), self.model.start(
            torch.from_numpy(bank.images[rows]), torch.from_numpy(bank.images[bank.obs_start[episodes]]),
            torch.from_numpy(bank.proprio[rows]), bank.recorded_objects(rows),
            torch.from_numpy(bank.proprio[bank.obs_start[episodes]])))
        self._frames[index] = bank.images[rows[:, -1]]
        self._undrawn[index] = False
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
        self._draw_undrawn()
        return {"image": self._frames.copy(),
                "proprio": self._rollout.proprio[:, -1].cpu().numpy().astype(np.float32),
                "instruction": (self.task.instruction,) * self.num_envs}

    def _render(self) -> np.ndarray:
        return self._frames.copy()

    def _backend_state(self) -> dict[str, Any]:
        rollout = self._rollout.snapshot()
        flags = {name: getattr(self, f"_{name}").copy() for name in ("frames", "success", "failed", "success_prob")}
        terms = {k: v.copy() for k, v in self._terms.items()}
        return {**rollout, **flags, "terms": terms,
                "start_episode": self.start_episode.copy(), "torch_rng": self._generator.get_state()}

    def _set_backend_state(self, state: dict[str, Any]) -> None:
        self._rollout.restore(state)
        self._undrawn[:] = False
        for name in ("frames", "success", "failed", "success_prob"):
            getattr(self, f"_{name}")[:] = state[name]
        self._terms = {k: v.copy() for k, v in state["terms"].items()}
        self.start_episode[:] = state["start_episode"]
        self._generator.set_state(state["torch_rng"])

    # ------------------------------------------------------------------ internals
    @torch.inference_mode()
    def _imagine(self, actions: np.ndarray, index: np.ndarray) -> None:
        """One imagined step for the envs in ``index`` with their ``actions`` rows."""
        rows = slice(None) if len(index) == self.num_envs else torch.as_tensor(index, device=self.device)
        action = torch.from_numpy(actions[index]).to(self.device)
        rollout = self._rollout.rows(rows)
        pred = self.model.predict(rollout, action, self._task[rows], self.sampling_steps, self._generator,
                                  draw=self.scene_frames is None and not self._on_demand, outcome=self.outcome,
                                  objects_move=self.imagination.placebo != "static")
        if self._on_demand:  # the frame is drawn when it is looked at (_draw_undrawn)
            assert pred.next_norm is not None  # predict() gives it
            self._keep_undrawn(rows, rollout, action, pred.next_norm)
            self._undrawn[index] = True
        else:
            self._frames[index] = step_frames(pred, self.model.config.patch, self.scene_frames, index)
        self._rollout.put(rows, rollout.advance(pred))
        prob = pred.success_prob.float().cpu().numpy()
        self._success_prob[index] = prob
        self._success[index] = prob >= self.success_threshold
        if pred.failed is not None:
            self._failed[index] = pred.failed.cpu().numpy()
        self._shape(index)

    def _keep_undrawn(self, rows: torch.Tensor | slice, before: Rollout, action: torch.Tensor,
                      next_norm: torch.Tensor) -> None:
        """Keep what the undrawn step of the envs ``rows`` is drawn from: the windows before it
        (the first frame and the objects' first positions stay in the rollout all episode), its
        action and the normalised proprio it reached."""
        kept = {"proprio": before.proprio, "points": before.points, "heights": before.heights, "action": action,
                "next_norm": next_norm}
        for name, value in kept.items():
            if value is None:
                continue
            if name not in self._drawn_from:
                self._drawn_from[name] = torch.zeros((self.num_envs, *value.shape[1:]), dtype=value.dtype,
                                                     device=self.device)
            self._drawn_from[name][rows] = value

    @torch.inference_mode()
    def _draw_undrawn(self) -> None:
        """Draw the frame of every env whose latest imagined step has not been drawn."""
        index = np.flatnonzero(self._undrawn)
        if len(index) == 0:
            return
        rows = slice(None) if len(index) == self.num_envs else torch.as_tensor(index, device=self.device)
        now, kept = self._rollout.rows(rows), {k: v[rows] for k, v in self._drawn_from.items()}
        before = dataclasses.replace(now, proprio=kept["proprio"], points=kept.get("points"),
                                     heights=kept.get("heights"))
        next_points = None if now.points is None else now.points[:, -1]
        latent = self.model.draw(before, kept["action"], self._task[rows], kept["next_norm"], next_points,
                                 self.sampling_steps, self._generator)
        self._frames[index] = latents_to_frames(latent, self.model.config.patch).cpu().numpy()
        self._undrawn[index] = False

    def _shape(self, index: np.ndarray) -> None:
        """With ``reward_type="dense"``: the shaping terms of the envs in ``index``."""
        if self.reward_type == "dense":
            for name, value in shaping_terms(self.model, self._rollout, index, self._task_id).items():
                self._terms.setdefault(name, np.zeros(self.num_envs))[index] = value


@torch.inference_mode()
def shaping_terms(model: WorldModel, rollout: Rollout, index: np.ndarray, task: int) -> dict[str, np.ndarray]:
    """The dense reward's shaping terms of task ``task`` (an index) for the episodes ``index`` of
    ``rollout``, at their latest imagined (or, just reset, recorded) gripper and object positions
    (a model with the object pathway)."""
    assert model.rules is not None and rollout.points is not None and rollout.heights is not None
    rows = torch.as_tensor(index, device=model.device)
    terms = model.rules.terms(task, rollout.proprio[rows, -1], rollout.points[rows, -1], rollout.heights[rows, -1])
    return {name: value.float().cpu().numpy() for name, value in terms.items()}


def loaded_model(world_model: str | Path | WorldModel, device: torch.device, image_size: int | None
                 ) -> tuple[WorldModel, WorldModelConfig]:
    """The world model (loaded from its folder if need be) on ``device`` in eval mode, and its
    config; ``ValueError`` when an ``image_size`` asked for is not the model's."""
    model = (world_model if isinstance(world_model, WorldModel)
             else WorldModel.from_pretrained(world_model)).to(device).eval()
    cfg = model.config
    if image_size is not None and int(image_size) != cfg.image_size:
        raise ValueError(f"image_size={image_size!r} does not match the world model, which imagines "
                         f"{cfg.image_size}x{cfg.image_size} frames; allowed: {cfg.image_size}")
    return model, cfg


def keyframe_bank(model: WorldModel, keyframes: str | Path | EpisodeReader | EpisodeBank, task: str, rung: Rung
                  ) -> EpisodeBank:
    """The episodes of ``task`` in ``keyframes`` as imagination on ``rung`` reads them
    (:meth:`~worldsim.envs.imagination.Rung.keyframes`: the pixels and video rungs never load the
    file's state, so nothing can leak into imagination); ``ValueError`` for images of another size
    than ``model``'s."""
    bank = keyframes if isinstance(keyframes, EpisodeBank) else EpisodeBank(
        keyframes, tasks=[task], argument="keyframes", state=rung.seeded)
    bank, size = rung.keyframes(model, bank), model.config.image_size
    bank.use_camera(model.camera)
    if bank.image_shape != (size, size, 3):
        raise ValueError(f"keyframes={str(bank.path)!r} holds {bank.image_shape} images; the world model imagines "
                         f"({size}, {size}, 3): record the keyframes with image_size={size}")
    return bank


class ImaginedEnv(SingleEnv):
    """One imagined episode at a time, for ``gym.make``: an :class:`ImaginedVectorEnv` with
    ``num_envs=1`` and autoreset disabled (see :class:`~worldsim.envs.single_env.SingleEnv`).
    Takes the same keyword arguments except ``num_envs`` and ``autoreset_mode``."""

    vector_class = ImaginedVectorEnv
