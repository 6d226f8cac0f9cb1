"""What imagination carries and produces, step by step: a batch's :class:`Rollout` (the context
windows) and one step's :class:`Prediction` (:meth:`~worldsim.world_models.model.WorldModel.predict`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Prediction:
    """One imagined step for a batch: the next latent frame ``(B, 3p^2, h, w)`` (None when the
    step was not drawn: ``WorldModel.predict(draw=False)``), the next
    proprio ``(B, 4)`` (raw units), the success probability of the new frame ``(B,)`` (1 or 0
    with ``outcome="rule"``: the task's rule) and, with the pathway, the objects' next image
    positions ``(B, E, 2)`` (pixels) and heights ``(B, E)`` (metres), and whether the imagined
    scene has failed as physics would end it ``(B,)`` (a cube off the table; without the pathway,
    never)."""

    latent: torch.Tensor | None
    proprio: torch.Tensor
    success_prob: torch.Tensor
    points: torch.Tensor | None = None
    heights: torch.Tensor | None = None
    failed: torch.Tensor | None = None


@dataclass
class Rollout:
    """What imagination carries from step to step for ``B`` episodes: the context latents
    ``(B, C, 3p^2, h, w)`` (oldest first), the episode's first frame ``(B, 3p^2, h, w)``, the
    context proprio ``(B, C, 4)`` (raw) and, with the object pathway, the objects' context image
    positions ``(B, C, E, 2)`` (pixels) and heights ``(B, C, E)`` (metres), and, for a model that
    draws each frame from the first (``anchor="first"``), where its detector found the objects in
    the first frame ``(B, E, 2)``. Made by :meth:`WorldModel.start`."""

    context: torch.Tensor
    first: torch.Tensor
    proprio: torch.Tensor
    points: torch.Tensor | None = None
    heights: torch.Tensor | None = None
    first_points: torch.Tensor | None = None

    def advance(self, pred: Prediction) -> Rollout:
        """The windows one step on: the prediction joins the context, the oldest step leaves (the
        frames stay as they were when the step was not drawn)."""
        def roll(window: torch.Tensor | None, new: torch.Tensor | None) -> torch.Tensor | None:
            return None if window is None or new is None else torch.cat([window[:, 1:], new[:, None]], dim=1)

        context = self.context if pred.latent is None else roll(self.context, pred.latent)
        proprio = roll(self.proprio, pred.proprio)
        assert context is not None and proprio is not None  # always carried
        return Rollout(context, self.first, proprio, roll(self.points, pred.points), roll(self.heights, pred.heights),
                       self.first_points)

    def rows(self, index: torch.Tensor | slice) -> Rollout:
        """The episodes ``index`` of the batch."""
        def pick(value: torch.Tensor | None) -> torch.Tensor | None:
            return None if value is None else value[index]

        return Rollout(self.context[index], self.first[index], self.proprio[index], pick(self.points),
                       pick(self.heights), pick(self.first_points))

    def put(self, index: torch.Tensor | slice, other: Rollout) -> None:
        """Write ``other`` into the episodes ``index`` of this batch, in place."""
        for name, value in vars(self).items():
            new = getattr(other, name)
            if value is not None and new is not None:
                value[index] = new
