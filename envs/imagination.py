"""How a task is imagined: :class:`ImaginationConfig`, the one set of settings every command and
library call that runs a policy in a world model takes.

It lives beside the env registry rather than in :mod:`worldsim.world_models` (which holds the
imagined env itself) because everything that imagines (training, evaluation, collection, the
pipelines) already depends on ``worldsim.envs``, and ``worldsim.envs`` depends on none of them:
the config can be imported anywhere without an import cycle and without loading the world
model's code (torch, diffusers) for a ``--help``.

:func:`~worldsim.envs.registration.make_task_envs` takes it as it is and makes the task's
imagined twin (:class:`~worldsim.world_models.env.ImaginedVectorEnv`, whose defaults are these).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from worldsim.envs.core import IMAGINED_REWARD_TYPES, ImaginedReward
from worldsim.runtime.device import DEVICES, Device

Rung = Literal["oracle", "sim-seeded", "pixels", "video"]
RUNGS: tuple[str, ...] = get_args(Rung)
"""The imagination ladder, from the most simulator help to none (:attr:`ImaginationConfig.rung`)."""
Judge = Literal["rule", "head"]
JUDGES: tuple[str, ...] = get_args(Judge)


@dataclass(frozen=True)
class ImaginationConfig:
    """A world model standing in for physics, and how its episodes run.

    Training (``train-rl``, co-evolution's RL rounds), collection in imagination and
    ``imagined-vs-real`` start episodes at real recorded states of ``keyframes``: episode starts,
    and mid-episode keyframes with probability ``keyframe_ratio``; and cut them after
    ``horizon`` imagined steps. Evaluation in imagination (``evaluate``, ``rank-policies``,
    co-evolution's imagined evaluations) measures what a policy does over a whole episode, so it
    always starts at real episode starts and runs to the task's time limit: there
    ``keyframe_ratio`` and ``horizon`` do not apply (:meth:`for_evaluation`)."""

    world_model: Path | None = None
    """World model folder (a `worldsim train-wm` run) that imagines the episodes (None: physics)."""
    keyframes: Path | None = None
    """Episode file (recorded with image_size equal to the model's) whose real states start the
    imagined episodes."""
    keyframe_ratio: float = 0.5
    """Share of training starts at mid-episode keyframes rather than episode starts: half, so that
    the policy practises the states where episodes are decided as often as their beginnings
    (0: episode starts only). Evaluations always start at episode starts."""
    horizon: int | None = 40
    """Cut imagined training episodes after this many steps (None: the task's time limit): a
    world model is most accurate close to the real states it starts from, so short episodes
    give the policy less room to exploit its errors. Evaluations run to the time limit."""
    rung: Rung = "pixels"
    """How much of the simulator imagination may use, one aid less per rung
    (:mod:`~worldsim.world_models.ladder`): "oracle", the imagined state drawn by the scene's
    renderer from objects seeded at the recorded state (an upper bound for analysis, not a
    world-model figure); "sim-seeded", the model's own frames, its objects seeded at the
    recorded state; "pixels", the model's own frames and nothing from the simulator while
    imagining (the keyframes' state is never read: the model finds the objects in the real start
    frames itself); "video", as "pixels" with a model trained without state either
    (``train-wm --no-state-supervision``), the case of a real robot's camera data. The first two
    need a model with the object pathway and keyframes with state; "video" refuses a model
    trained with state."""
    judge: Judge | None = None
    """Who judges an imagined frame's success, and so the reward: "rule", the task's own success
    rule on the objects' imagined positions (a model with the object pathway), "head", the
    model's learned success head, or None, the model's own ``outcome``. Set it to measure both."""
    reward_type: ImaginedReward = "transition"
    """Reward in imagination: transition (1 when the imagined verdict turns to success), sparse (1
    on every success frame) or dense (the physics env's shaped reward on the imagined gripper
    and objects; a model with the object pathway)."""
    success_threshold: float | None = None
    """Success probability at or above which an imagined frame is a success (None: the threshold
    train-wm calibrated and saved with the model)."""
    sampling_steps: int | None = None
    """Denoising steps per imagined frame (None: the model's own)."""
    device: Device = "auto"
    """Where the world model runs (auto: CUDA when available)."""

    def __post_init__(self) -> None:
        for name in ("world_model", "keyframes"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, Path(value))
        if not (isinstance(self.keyframe_ratio, (int, float)) and 0.0 <= self.keyframe_ratio <= 1.0):
            raise ValueError(f"keyframe_ratio={self.keyframe_ratio!r} must be in [0, 1]")
        for name, low, high in (("horizon", 1, None), ("sampling_steps", 1, 50)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low
                                      or (high is not None and value > high)):
                bound = f"in [{low}, {high}]" if high else f"an int >= {low}"
                raise ValueError(f"{name}={value!r} must be {bound} (or None)")
        if self.success_threshold is not None and not (math.isfinite(self.success_threshold)
                                                       and 0.0 < self.success_threshold < 1.0):
            raise ValueError(f"success_threshold={self.success_threshold!r} must be in (0, 1) (or None)")
        if self.rung not in RUNGS:
            raise ValueError(f"rung={self.rung!r}; allowed: {', '.join(RUNGS)}")
        if self.judge is not None and self.judge not in JUDGES:
            raise ValueError(f"judge={self.judge!r}; allowed: {', '.join(JUDGES)} (or None: the model's own)")
        if self.reward_type not in IMAGINED_REWARD_TYPES:
            raise ValueError(f"reward_type={self.reward_type!r}; allowed: {', '.join(IMAGINED_REWARD_TYPES)}")
        if self.device not in DEVICES:
            raise ValueError(f"device={self.device!r}; allowed: {', '.join(DEVICES)}")
        if (self.world_model is None) != (self.keyframes is None):
            raise ValueError("imagination needs both world_model and keyframes (a world model folder and an "
                             "episode file of real start states), or neither (physics)")

    @property
    def imagined(self) -> bool:
        """Whether a world model is named (else the task runs in physics)."""
        return self.world_model is not None

    def require(self, what: str) -> ImaginationConfig:
        """This config; ``ValueError`` saying that ``what`` needs a world model when none is named."""
        if not self.imagined:
            raise ValueError(f"{what} needs a world model: pass --world-model and --keyframes")
        return self

    def for_evaluation(self) -> ImaginationConfig:
        """The same imagination as evaluations run it: episode starts only, to the time limit."""
        return dataclasses.replace(self, keyframe_ratio=0.0, horizon=None)

    def replace(self, **changes: Any) -> ImaginationConfig:
        """A copy with ``changes`` (e.g. the world model a pipeline has just trained)."""
        return dataclasses.replace(self, **changes)

    def env_kwargs(self) -> dict[str, Any]:
        """The imagined env's arguments (:class:`~worldsim.world_models.env.ImaginedVectorEnv`).
        A keyframe ratio of 0 starts every episode at an episode start (the ``synchronous``
        schedule); above 0, the ``keyframe`` schedule with that ratio. A caller that sets its own
        ``reset_schedule`` (a trainer's) replaces the schedule; the ratio still applies under
        ``keyframe``."""
        if not self.imagined:
            raise ValueError("no world model to imagine with (world_model is None)")
        return {"world_model": self.world_model, "keyframes": self.keyframes, "horizon": self.horizon,
                "rung": self.rung, "judge": self.judge, "reward_type": self.reward_type,
                "success_threshold": self.success_threshold, "sampling_steps": self.sampling_steps,
                "device": self.device,
                "reset_schedule": "keyframe" if self.keyframe_ratio > 0 else "synchronous",
                "keyframe_rule": {"ratio": self.keyframe_ratio}}


DEFAULT_IMAGINATION = ImaginationConfig()
"""The defaults, which :class:`~worldsim.world_models.env.ImaginedVectorEnv` takes as its own,
except the horizon: the env made on its own (``gym.make_vec``) runs the task's episodes as
physics does, to the time limit, and the ``keyframe`` schedule."""
