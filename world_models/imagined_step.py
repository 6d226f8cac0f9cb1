"""What imagination carries and produces, step by step: a batch's :class:`Rollout` (the context
windows) and one step's :class:`Prediction` (:meth:`~worldsim.world_models.model.WorldModel.predict`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from worldsim.envs.observations import ENTITIES
from worldsim.world_models.config import WorldModelConfig


@dataclass
class Prediction:
    """One imagined step for a batch: the next latent frame ``(B, 3p^2, h, w)`` (None when the
    step was not drawn: ``WorldModel.predict(draw=False)``), the next
    proprio ``(B, 4)`` (raw units), the success probability of the new frame ``(B,)`` (1 or 0
    with ``outcome="rule"``: the task's rule) and, with the pathway, the objects' next image
    positions ``(B, E, 2)`` (pixels) and heights ``(B, E)`` (metres), and whether the imagined
    scene has failed as physics would end it ``(B,)`` (a cube off the table; without the pathway,
    never), and the next proprio normalised ``(B, 4)``, which the frame is drawn under."""

    latent: torch.Tensor | None
    proprio: torch.Tensor
    success_prob: torch.Tensor
    points: torch.Tensor | None = None
    heights: torch.Tensor | None = None
    failed: torch.Tensor | None = None
    next_norm: torch.Tensor | None = None


@dataclass
class Rollout:
    """What imagination carries from step to step for ``B`` episodes: the context latents
    ``(B, C, 3p^2, h, w)`` (oldest first), the episode's first frame ``(B, 3p^2, h, w)``, the
    context proprio ``(B, C, 4)`` (raw) and, with the object pathway, the objects' context image
    positions ``(B, C, E, 2)`` (pixels) and heights ``(B, C, E)`` (metres), and, for a model that
    draws each frame from the first (``anchor="first"``), where its detector found the objects in
    the first frame ``(B, E, 2)`` and the raw proprio of the first frame ``(B, 4)`` (None where the
    start did not give it: the arm is then not carried from the first frame). Made by
    :meth:`WorldModel.start`."""

    context: torch.Tensor
    first: torch.Tensor
    proprio: torch.Tensor
    points: torch.Tensor | None = None
    heights: torch.Tensor | None = None
    first_points: torch.Tensor | None = None
    first_proprio: torch.Tensor | None = None

    @classmethod
    def empty(cls, config: WorldModelConfig, num_envs: int, device: torch.device, *, first_points: bool
              ) -> Rollout:
        """A rollout of ``num_envs`` episodes of a model of ``config``, all zeros, on ``device`` (to be
        filled by started ones, :meth:`put`); ``first_points``: the model reads the objects'
        positions in the first frame."""
        n, entities = num_envs, len(ENTITIES)

        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, device=device)

        latent, pathway = (config.latent_channels, config.latent_size, config.latent_size), config.objects is not None
        return cls(zeros(n, config.context, *latent), zeros(n, *latent), zeros(n, config.context, 4),
                   zeros(n, config.context, entities, 2) if pathway else None,
                   zeros(n, config.context, entities) if pathway else None,
                   zeros(n, entities, 2) if pathway and first_points else None,
                   zeros(n, 4) if pathway and first_points else None)

    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the tensors carried, on the CPU (an env's snapshot holds it)."""
        return {k: v.cpu().clone() for k, v in vars(self).items() if v is not None}

    def restore(self, snapshot: dict[str, torch.Tensor]) -> None:
        """Copy a :meth:`snapshot` of a rollout of the same shapes back in place; ``ValueError`` when
        its shapes differ."""
        if tuple(snapshot["context"].shape) != tuple(self.context.shape):
            raise ValueError(f"the snapshot holds context of shape {tuple(snapshot['context'].shape)}; this rollout "
                             f"has {tuple(self.context.shape)} (num_envs={len(self.context)})")
        for name, value in vars(self).items():
            if value is not None:
                value.copy_(snapshot[name])

    def advance(self, pred: Prediction) -> Rollout:
        """The windows one step on: the prediction joins the context, the oldest step leaves (the
        frames stay as they were when the step was not drawn)."""
        def roll(window: torch.Tensor | None, new: torch.Tensor | None) -> torch.Tensor | None:
            return None if window is None or new is None else torch.cat([window[:, 1:], new[:, None]], dim=1)

        context = self.context if pred.latent is None else roll(self.context, pred.latent)
        proprio = roll(self.proprio, pred.proprio)
        assert context is not None and proprio is not None  # always carried
        return Rollout(context, self.first, proprio, roll(self.points, pred.points), roll(self.heights, pred.heights),
                       self.first_points, self.first_proprio)

    def rows(self, index: torch.Tensor | slice) -> Rollout:
        """The episodes ``index`` of the batch."""
        def pick(value: torch.Tensor | None) -> torch.Tensor | None:
            return None if value is None else value[index]

        return Rollout(self.context[index], self.first[index], self.proprio[index], pick(self.points),
                       pick(self.heights), pick(self.first_points), pick(self.first_proprio))

    def put(self, index: torch.Tensor | slice, other: Rollout) -> None:
        """Write ``other`` into the episodes ``index`` of this batch, in place."""
        for name, value in vars(self).items():
            new = getattr(other, name)
            if value is not None and new is not None:
                value[index] = new
