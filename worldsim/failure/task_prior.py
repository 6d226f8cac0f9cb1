"""The trivial detector every figure stands beside: a rollout's risk is its task's failure rate.

Tasks fail at very different rates (a reach almost never fails, a pick-and-place often), and the
SAFE protocol pools a split's tasks into one ROC-AUC. A score that only recognises *which task*
a rollout is (SAFE's features carry the instruction) then separates failures from successes
without detecting anything. :class:`TaskPrior` is that score made explicit: fitted on the
training rollouts, it scores every step of a rollout of task ``t`` by ``t``'s failure rate among
them; a task it was not fitted on (an unseen task) gets the rate of the fitted task whose
instruction is most similar (cosine similarity of the instructions' MiniLM embeddings). A
detector is worth its pooled ROC-AUC only by what it adds to this one's; within one task the
prior is constant, so its per-task ROC-AUC is exactly 0.5.

It reads the rollout's task, which an online detector is never given, so it scores recorded
rollouts only (:meth:`TaskPrior.score_rollouts`) and has no online stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from worldsim.failure.detectors.base import Detector, DetectorStream
from worldsim.failure.rollouts import Rollout

NAME = "task-prior"


def task_instruction(task: str) -> str:
    """The instruction of a registered task; the task's own name for one that is not (recorded
    rollouts of an external suite)."""
    from worldsim.envs.tasks import get_task

    try:
        return get_task(task).instruction
    except KeyError:
        return task


def most_similar_tasks(tasks: Sequence[str], known: Sequence[str]) -> dict[str, str]:
    """Each of ``tasks`` -> the task of ``known`` whose instruction is most similar to its own
    (itself when known)."""
    from worldsim.policies.language import embed_instructions

    known, new = list(dict.fromkeys(known)), [t for t in dict.fromkeys(tasks) if t not in known]
    if not known:
        raise ValueError("no known task to compare instructions with")
    out = {t: t for t in tasks if t in known}
    if len(known) == 1:  # nothing to compare
        return {**out, **dict.fromkeys(new, known[0])}
    if new:
        similarity = embed_instructions([task_instruction(t) for t in new]) @ embed_instructions(
            [task_instruction(t) for t in known]).T
        out.update({t: known[int(j)] for t, j in zip(new, similarity.argmax(axis=1), strict=True)})
    return out


@dataclass
class TaskPriorConfig:
    """No settings: the prior is the fit rollouts' failure rate per task."""


class TaskPrior(Detector):
    """Scores each step of a rollout by its task's failure rate in the fit rollouts (see the
    module docstring); calibrated and tested by the protocol like every detector."""

    name = NAME
    needs = ("features",)  # read only for the rollout's length: the score is the task's rate

    def __init__(self, config: TaskPriorConfig | None = None) -> None:
        super().__init__(config or TaskPriorConfig())
        self.rates: dict[str, float] = {}
        self.nearest: dict[str, str] = {}

    def check_rollouts(self, rollouts: Sequence[Rollout]) -> None:
        if not rollouts:
            raise ValueError(f"{self.name}: no rollouts given")

    def _fit(self, rollouts: Sequence[Rollout], rng: np.random.Generator) -> None:
        tasks = list(dict.fromkeys(r.task for r in rollouts))
        self.rates = {t: float(np.mean([not r.success for r in rollouts if r.task == t])) for t in tasks}
        self.nearest = {}

    def rate(self, task: str) -> float:
        """The failure rate this detector scores ``task``'s rollouts by."""
        if task not in self.rates and task not in self.nearest:
            self.nearest.update(most_similar_tasks([task], list(self.rates)))
        return self.rates[self.nearest.get(task, task)]

    def score_rollouts(self, rollouts: Sequence[Rollout]) -> list[np.ndarray]:
        self._check_fitted()
        unknown = [r.task for r in rollouts if r.task not in self.rates and r.task not in self.nearest]
        if unknown:  # one embedding call for every new task, not one per rollout
            self.nearest.update(most_similar_tasks(unknown, list(self.rates)))
        return [np.full((r.length, 1), self.rate(r.task)) for r in rollouts]

    def stream(self, num_envs: int) -> DetectorStream:
        raise ValueError(f"{self.name} reads each rollout's task, which an online detector is not given; "
                         "it scores recorded rollouts only (the trivial baseline of `worldsim detect`)")
