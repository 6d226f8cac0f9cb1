"""The imagination ladder: what each rung of :attr:`~worldsim.envs.imagination.ImaginationConfig.rung`
lets imagination take from the simulator, and what it refuses.

Each rung takes away one aid of the simulator:

- ``oracle``: the imagined state drawn by the scene's renderer
  (:mod:`~worldsim.world_models.scene_frames`), the objects seeded at the recorded state. No
  frame is denoised, so its figures bound what the dynamics allow: an upper bound for
  analysis, not a world-model figure;
- ``sim-seeded``: the model's own frames, the objects seeded at the recorded state;
- ``pixels``: nothing from the simulator while imagining: the keyframes are read as a file
  without ``state`` (:meth:`~worldsim.world_models.data.EpisodeBank.without_state`), so the
  model finds the objects in the real start frames itself (its success head's detector), and
  the keyframes read the objects' motion from that detector too
  (:func:`~worldsim.world_models.keyframes.detected_positions`). The state may still have
  supervised training;
- ``video``: as ``pixels``, with a model trained without state either
  (``WorldModelConfig.state_supervision=False``): frames, proprio, actions and success flags
  only, as a real robot's cameras give them. Its detector was never supervised, so keyframes
  come from gripper events alone.

The judge (``"rule"``: the task's rule on the positions the model carries, which needs the
object pathway; ``"head"``: the learned success head; None: the model's own ``outcome``) is
independent of the rung. Every refusal is a one-line ``ValueError`` naming the rung, what is
missing and what to use instead.
"""

from __future__ import annotations

from worldsim.envs.imagination import JUDGES, RUNGS
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.model import WorldModel

SEEDED_RUNGS = ("oracle", "sim-seeded")
"""The rungs whose objects start at the recorded simulator state."""


def check_judge(model: WorldModel, judge: str | None) -> str:
    """The outcome that judges ``model``'s imagined frames under ``judge`` (None: the model's
    own); ``ValueError`` for an unknown judge or ``"rule"`` on a model without the pathway."""
    if judge is None:
        return model.config.outcome
    if judge not in JUDGES:
        raise ValueError(f"judge={judge!r}; allowed: {', '.join(JUDGES)} (or None: the model's own)")
    if judge == "rule" and model.rules is None:
        raise ValueError("judge='rule' applies the task's rule to the objects' imagined positions, which only a "
                         "world model with the object pathway carries: use judge='head' (or None)")
    return judge


def rung_bank(model: WorldModel, bank: EpisodeBank, rung: str) -> EpisodeBank:
    """The keyframes as imagination on ``rung`` may read them: ``bank`` itself on the seeded
    rungs, ``bank`` without its state on ``pixels`` and ``video``. ``ValueError`` (one line) for
    an unknown rung, a seeded rung with a model without the pathway or a bank without state,
    and ``video`` with a model trained with state."""
    if rung not in RUNGS:
        raise ValueError(f"rung={rung!r}; allowed: {', '.join(RUNGS)}")
    if rung in SEEDED_RUNGS:
        if model.rules is None:
            raise ValueError(f"rung={rung!r} seeds the object pathway at the recorded state, and this world model "
                             "has no object pathway (trained without state, or with --no-object-pathway): use "
                             "rung 'pixels' (or 'video' for a model trained without state)")
        if bank.state is None:
            raise ValueError(f"rung={rung!r} seeds the objects at the recorded simulator state, and keyframes="
                             f"{str(bank.path)!r} holds no 'state' observations: use rung 'pixels' (or record "
                             "with obs_mode='pixels+state')")
        return bank
    if rung == "video" and model.config.state_supervision:
        raise ValueError("rung='video' needs a world model trained without the simulator's state "
                         "(train-wm --no-state-supervision), and this one was trained with it: use rung 'pixels'")
    return bank.without_state()


def seeds_objects(rung: str) -> bool:
    """Whether the objects of an imagined episode on ``rung`` start at the recorded state."""
    return rung in SEEDED_RUNGS
