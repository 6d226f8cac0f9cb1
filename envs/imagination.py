"""How a task is imagined: the imagination ladder's :class:`Rung` and :class:`ImaginationConfig`,
the one set of settings every command and library call that runs a policy in a world model takes.

It lives beside the env registry rather than in :mod:`worldsim.world_models` (which holds the
imagined env itself) because everything that imagines (training, evaluation, collection, the
pipelines) already depends on ``worldsim.envs``, and ``worldsim.envs`` depends on none of them:
the config can be imported anywhere without an import cycle and without loading the world
model's code (torch, diffusers) for a ``--help``.

**The ladder.** How much of the simulator imagination may use is one setting, the rung; each
rung takes away one aid of the simulator (:data:`RUNGS`, from the most help to none):

- ``oracle``: the imagined state drawn by the scene's renderer, the objects seeded at the
  recorded state. No frame is denoised, so its figures bound what the dynamics allow: an upper
  bound for analysis, not a world-model figure;
- ``sim-seeded``: the model's own frames, the objects seeded at the recorded state;
- ``pixels``: nothing from the simulator while imagining: the keyframes are read as a file
  without ``state``, so the model finds the objects in the real start frames itself (its
  judge's detector), and the keyframes read the objects' motion from that detector too. The
  state may still have supervised training;
- ``video``: as ``pixels``, with a model trained without state either (frames, proprio, actions
  and success flags only, as a real robot's cameras give them). Its detector was never
  supervised, so keyframes come from gripper events alone.

A rung is a typed value: every consumer asks it what it allows (:attr:`Rung.seeded`,
:attr:`Rung.rendered`, :attr:`Rung.trained_on_state`, :meth:`Rung.keyframes`), and every refusal
is a one-line ``ValueError`` naming the rung, what is missing and what to use instead. The judge
(``"rule"``: the task's rule on the positions the model carries, which needs the object pathway;
``"head"``: the learned success head; None: the model's own) is chosen apart from the rung.

:func:`~worldsim.envs.registration.make_task_envs` takes the config as it is and makes the
task's imagined twin (:class:`~worldsim.world_models.env.ImaginedVectorEnv`, whose defaults are
these).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, get_args

from worldsim.envs.core import IMAGINED_REWARD_TYPES, ImaginedReward
from worldsim.runtime.device import DEVICES, Device
from worldsim.runtime.validation import check_choice, check_int, check_range


class ImaginingModel(Protocol):
    """What a rung asks of a world model (:class:`~worldsim.world_models.model.WorldModel`): whether
    it has the object pathway (``objects``) and learned from the state (``config.state_supervision``)."""

    objects: Any
    config: Any

    def aid_flags(self) -> dict[str, bool]: ...


class KeyframeFile(Protocol):
    """What a rung asks of keyframes (:class:`~worldsim.world_models.data.EpisodeBank`)."""

    state: Any
    path: Any

    def without_state(self) -> Any: ...

Judge = Literal["rule", "head"]
JUDGES: tuple[str, ...] = get_args(Judge)
Placebo = Literal["static"]
PLACEBOS: tuple[str, ...] = get_args(Placebo)


@dataclass(frozen=True)
class Rung:
    """One rung of the imagination ladder: what imagination on it takes from the simulator and
    from the data, and what it refuses (the module docstring)."""

    name: str
    seeded: bool
    """The objects start at the keyframes' recorded simulator state (so the keyframes need
    ``state``, and the model the object pathway, which carries them)."""
    rendered: bool
    """The frames are the imagined state drawn by the scene's renderer; no frame is denoised."""
    trained_on_state: bool
    """The world model may have learned from the simulator's state (False: it must not have)."""
    sees: str
    """What the policy sees (the ladder table's words)."""
    starts: str
    """Where the objects start (the ladder table's words)."""
    meaning: str
    """What a figure on this rung means, in a report's words."""

    def __str__(self) -> str:
        return self.name

    def to_json(self) -> str:
        return self.name

    @classmethod
    def from_json(cls, value: Any) -> Rung:
        """The rung named ``value`` (a rung stays as it is); ``ValueError`` listing the rungs."""
        if isinstance(value, Rung):
            return value
        if value not in RUNGS:
            raise ValueError(f"rung={value!r}; allowed: {', '.join(RUNGS)}")
        return RUNGS[value]

    @property
    def aids(self) -> tuple[str, ...]:
        """What imagination on this rung takes from the simulator (beside what the world model
        itself was built with)."""
        return tuple(aid for aid, taken in (("the recorded simulator state at each start", self.seeded),
                                            ("the scene's renderer for every frame", self.rendered),
                                            ("the simulator's state as training supervision", self.trained_on_state))
                     if taken)

    def check(self, model: ImaginingModel) -> None:
        """``ValueError`` (one line) when ``model`` cannot imagine on this rung: a seeded rung with
        a model without the object pathway; ``video`` with a model trained with state."""
        if self.seeded and model.objects is None:
            raise ValueError(f"rung={self.name!r} seeds the object pathway at the recorded state, and this world model "
                             "has no object pathway (trained without state, or built without it): use rung 'pixels' "
                             "(or 'video' for a model trained without state)")
        if not self.trained_on_state and model.config.state_supervision:
            raise ValueError(f"rung={self.name!r} needs a world model trained without the simulator's state "
                             "(train-wm --no-state-supervision), and this one was trained with it: use rung 'pixels'")

    def keyframes(self, model: ImaginingModel, bank: KeyframeFile) -> Any:
        """The keyframes as imagination on this rung may read them: ``bank`` itself on the seeded
        rungs, ``bank`` without its state on the others; :meth:`check` first, and ``ValueError``
        for a seeded rung with a bank without state."""
        self.check(model)
        if not self.seeded:
            return bank.without_state()
        if bank.state is None:
            raise ValueError(f"rung={self.name!r} seeds the objects at the recorded simulator state, and keyframes="
                             f"{str(bank.path)!r} holds no 'state' observations: use rung 'pixels' (or record "
                             "with obs_mode='pixels+state')")
        return bank


ORACLE = Rung("oracle", seeded=True, rendered=True, trained_on_state=True,
              sees="the imagined state drawn by the scene's renderer (no frame denoised)",
              starts="the recorded simulator state",
              meaning="the **oracle** rung: the policy saw the imagined state drawn by the simulator's renderer, "
                      "objects started at the recorded state. Its figures are an upper bound for analysis, not what "
                      "this world model's own frames give.")
SIM_SEEDED = Rung("sim-seeded", seeded=True, rendered=False, trained_on_state=True, sees="the model's own frames",
                  starts="the recorded simulator state",
                  meaning="the **sim-seeded** rung: the policy saw the world model's own frames, with the objects "
                          "started at the recorded simulator state; the simulator helped at every episode start.")
PIXELS = Rung("pixels", seeded=False, rendered=False, trained_on_state=True, sees="the model's own frames",
              starts="the model's detector, on the real start frames; the keyframes' state is never read",
              meaning="the **pixels** rung: the policy saw the world model's own frames, and nothing came from the "
                      "simulator while imagining (the model found the objects in the real start frames itself).")
VIDEO = Rung("video", seeded=False, rendered=False, trained_on_state=False, sees="the model's own frames",
             starts="none carried: a model without the object pathway",
             meaning="the **video** rung: the policy saw the world model's own frames, from a model trained on "
                     "frames, proprio, actions and success flags alone (no simulator state, in training or "
                     "imagination).")
RUNGS: dict[str, Rung] = {rung.name: rung for rung in (ORACLE, SIM_SEEDED, PIXELS, VIDEO)}
"""The imagination ladder, from the most simulator help to none."""


def hand_written_aids(pathway: bool, rule_judge: bool, dense_reward: bool, arm_cleared: bool = False,
                      gated: bool = True, commanded: bool = True, pasted: bool = True,
                      cleared: bool = False, camera: bool = False, fitted_camera: bool = False,
                      resting: bool = False) -> tuple[str, ...]:
    """What imagination takes from hand-written code rather than from learning, on any rung: the
    gripper's commanded motion (unless the model learns the whole move: ``commanded``); with the
    object pathway (``pathway``) the contact gate (unless the model has it off: ``gated``), the
    cube's pixels carried from the start frame (unless the denoiser draws the moved cube:
    ``pasted``); the exact camera wherever the model places things in the frame through it (with
    the pathway, and ``camera``: the gripper's planes or the arm's clearing without it), unless it
    fitted its own to its frames and state (``fitted_camera``: nothing hand-written); the
    spots the moved cubes leave (``cleared``) and the starting arm (``arm_cleared``) cleared from the
    first frame when the model clears them; the objects the model finds in real start frames taken
    to rest on their planes (``resting``: a judge that reads no heights, on a rung that does not
    seed the starts); the task's success rule when it judges (``rule_judge``); the task's shaping
    with the dense reward (``dense_reward``)."""
    return tuple(aid for aid, taken in (
        ("hand-written: the gripper's commanded motion (plus a learned correction)", commanded),
        ("hand-written: the contact gate on cube motion", pathway and gated),
        ("hand-written: the cube's pixels carried from the start frame", pathway and pasted),
        ("hand-written: the spots the moved cubes leave cleared to the empty table (learned from the frames)",
         pathway and cleared),
        ("hand-written: the starting arm cleared from the first frame (its footprint and colour learned "
         "from the frames)", pathway and arm_cleared),
        ("hand-written: the exact camera", (pathway or camera) and not fitted_camera),
        ("hand-written: the objects found in the start frames taken to rest on their planes", pathway and resting),
        ("hand-written: the task's success rule as the judge", rule_judge),
        ("hand-written: the task's dense reward shaping", dense_reward)) if taken)


def imagination_aids(imagination: ImaginationConfig, model: ImaginingModel) -> tuple[str, ...]:
    """Everything imagining with ``imagination`` in ``model`` takes from the simulator (its rung's
    aids) and from hand-written code (:func:`hand_written_aids`, with the options the model was
    built with): what a figure from such imagination must name."""
    pathway = imagination.rung.trained_on_state and model.objects is not None
    judge = imagination.judge or model.config.judge.outcome
    flags = model.aid_flags()
    # a seeded start has the recorded heights
    flags["resting"] = flags.get("resting", False) and not imagination.rung.seeded
    return (*imagination.rung.aids, *hand_written_aids(
        pathway=pathway, rule_judge=pathway and judge == "rule", dense_reward=imagination.reward_type == "dense",
        **flags))


def replay_rung(model: ImaginingModel, bank: KeyframeFile) -> Rung:
    """The rung on which training replays ``model`` on ``bank`` (validation figures, sample videos,
    the calibration of the success threshold): its objects start as training saw them, at the
    recorded state when the state supervised it (``sim-seeded``), else found in the frames (``pixels``)."""
    return SIM_SEEDED if model.objects is not None and bank.state is not None else PIXELS


def ladder_table() -> str:
    """The ladder as a Markdown table (the manual's, generated from :data:`RUNGS`)."""
    rows = ["| rung | what the policy sees | start object positions | what imagination takes from the simulator "
            "| refuses |", "|---|---|---|---|---|"]
    for rung in RUNGS.values():
        refuses = []
        if rung.seeded:
            refuses += ["a model without the object pathway", "keyframes without `state`"]
        if not rung.trained_on_state:
            refuses.append("a model trained with state")
        name = f"`{rung.name}`" + (" (default)" if rung is DEFAULT_IMAGINATION.rung else "")
        rows.append(f"| {name} | {rung.sees} | {rung.starts} | {'; '.join(rung.aids) or 'nothing'} | "
                    f"{'; '.join(refuses) or 'nothing a frames-and-proprio file lacks'} |")
    return "\n".join(rows)


@dataclass(frozen=True)
class ImaginationConfig:
    """A world model standing in for physics, and how its episodes run.

    Training (``train-rl``, co-evolution's RL rounds), collection in imagination and
    ``imagined-vs-real`` start episodes at real recorded states of ``keyframes``: episode starts,
    and mid-episode keyframes with probability ``keyframe_ratio``; and cut them after
    ``horizon`` imagined steps. Evaluation in imagination (``evaluate``, ``rank-policies``,
    co-evolution's imagined evaluations) measures what a policy does over a whole episode, so it
    always starts at real episode starts and runs to the task's time limit: there
    ``keyframe_ratio`` and ``horizon`` do not apply (:meth:`for_evaluation`). Open-loop replays
    (``eval-wm``, ``imagine``) read its rung, judge, threshold and sampling steps."""

    COMMAND_LINE: ClassVar[tuple[str, ...]] = ("world_model", "keyframes", "keyframe_ratio", "horizon", "rung", "judge",
                                               "reward_type")
    """The fields that are flags where a command takes this config; the rest a config file sets."""

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
    rung: Rung = PIXELS
    """How much of the simulator imagination may use, one aid less per rung: "oracle", the
    imagined state drawn by the scene's renderer from objects seeded at the recorded state (an
    upper bound for analysis, not a world-model figure); "sim-seeded", the model's own frames,
    its objects seeded at the recorded state; "pixels", the model's own frames and nothing from
    the simulator while imagining; "video", as "pixels" with a model trained without state
    either (``train-wm --no-state-supervision``), the case of a real robot's camera data."""
    judge: Judge | None = None
    """Who judges an imagined frame's success, and so the reward: "rule", the task's own success
    rule on the objects' imagined positions (a model with the object pathway), "head", the
    model's learned success head, or None, the model's own. Set it to measure both."""
    reward_type: ImaginedReward = "transition"
    """Reward in imagination: transition (1 when the imagined verdict turns to success), sparse (1
    on every success frame) or dense (the physics env's shaped reward on the imagined gripper
    and objects; a model with the object pathway)."""
    success_threshold: float | None = None
    """Success probability at or above which an imagined frame is a success (None: the threshold
    train-wm calibrated and saved with the model)."""
    sampling_steps: int | None = None
    """Denoising steps per imagined frame (None: the model's own)."""
    placebo: Placebo | None = None
    """A control arm: "static" switches the learned object dynamics off, so that every object stays
    where the model found it at the start while the gripper, frames, judge and reward run as usual.
    A gain that a static world gives as well came from the reward (its shaping) or from the
    gripper's motion, not from what the model learned about the objects. None: the model as it is."""
    device: Device = "auto"
    """Where the world model runs (auto: CUDA when available)."""

    def __post_init__(self) -> None:
        for name in ("world_model", "keyframes"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, Path(value))
        object.__setattr__(self, "rung", Rung.from_json(self.rung))
        check_range("keyframe_ratio", self.keyframe_ratio, 0.0, 1.0, integer=False)
        check_int("horizon", self.horizon, 1, optional=True)
        check_range("sampling_steps", self.sampling_steps, 1, 50, optional=True)
        check_range("success_threshold", self.success_threshold, 0.0, 1.0, integer=False, optional=True,
                    low_open=True, high_open=True)
        check_choice("judge", self.judge, JUDGES, optional=True)
        check_choice("placebo", self.placebo, PLACEBOS, optional=True)
        check_choice("reward_type", self.reward_type, IMAGINED_REWARD_TYPES)
        check_choice("device", self.device, DEVICES)
        if (self.world_model is None) != (self.keyframes is None):
            raise ValueError("imagination needs both world_model and keyframes (a world model folder and an "
                             "episode file of real start states), or neither (physics)")
        if not self.rung.trained_on_state and (self.judge == "rule" or self.reward_type == "dense"):
            setting = "judge='rule'" if self.judge == "rule" else "reward_type='dense'"
            raise ValueError(f"{setting} reads the objects' imagined positions, which a model on rung "
                             f"{self.rung.name!r} (trained without state) does not carry: use judge 'head' and "
                             "reward_type 'transition' or 'sparse'")

    @property
    def imagined(self) -> bool:
        """Whether a world model is named (else the task runs in physics)."""
        return self.world_model is not None

    def require(self, what: str) -> ImaginationConfig:
        """This config; ``ValueError`` saying that ``what`` needs a world model when none is named."""
        if not self.imagined:
            raise ValueError(f"{what} needs a world model: pass --world-model and --keyframes")
        return self

    def check_placebo(self, model: ImaginingModel) -> None:
        """``ValueError`` (one line) for the static placebo with a model that has no object pathway to
        switch off."""
        if self.placebo == "static" and model.objects is None:
            raise ValueError("placebo='static' holds the object pathway's objects still, and this world model has "
                             "no object pathway (trained without state): no static placebo for it")

    def for_evaluation(self) -> ImaginationConfig:
        """The same imagination as evaluations run it: episode starts only, to the time limit."""
        return dataclasses.replace(self, keyframe_ratio=0.0, horizon=None)

    def replace(self, **changes: Any) -> ImaginationConfig:
        """A copy with ``changes`` (e.g. the world model a pipeline has just trained)."""
        return dataclasses.replace(self, **changes)

    def env_kwargs(self) -> dict[str, Any]:
        """The imagined env's arguments (:class:`~worldsim.world_models.env.ImaginedVectorEnv`):
        this config, and its keyframe schedule. A keyframe ratio of 0 starts every episode at an
        episode start (the ``synchronous`` schedule); above 0, the ``keyframe`` schedule with that
        ratio. A caller that sets its own ``reset_schedule`` (a trainer's) replaces the schedule;
        the ratio still applies under ``keyframe``."""
        if not self.imagined:
            raise ValueError("no world model to imagine with (world_model is None)")
        return {"world_model": self.world_model, "keyframes": self.keyframes, "imagination": self,
                "reset_schedule": "keyframe" if self.keyframe_ratio > 0 else "synchronous"}


DEFAULT_IMAGINATION = ImaginationConfig()
"""The defaults, which :class:`~worldsim.world_models.env.ImaginedVectorEnv` takes as its own,
except the horizon: the env made on its own (``gym.make_vec``) runs the task's episodes as
physics does, to the time limit, and the ``keyframe`` schedule."""
