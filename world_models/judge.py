"""The judge: who decides whether an imagined step has succeeded, and whether it has failed.

Two judges read the same imagined step (:attr:`~worldsim.world_models.config.JudgeConfig.outcome`
chooses; a caller may ask the other):

- ``"head"``, the learned success head (:class:`~worldsim.world_models.success_head.SuccessHead`):
  its keypoint detector finds the scene's objects in a frame and an MLP on the keypoints, the
  proprio and the task gives the success logit. It is trained on the dataset's per-observation
  ``success`` flags and, where the data has ``state``, on the objects' projected pixel positions
  and the goal-minus-object offset; on the real next frames and on the denoiser's own (detached)
  estimates of them, so that it judges imagined frames as it judges real ones. With the object
  pathway it judges the positions the pathway carries, else it reads every new frame;
- ``"rule"``, each task's own success rule on the objects' imagined positions
  (:class:`~worldsim.world_models.outcome.TaskRules`, with the object pathway).

Whoever judges success, a cube imagined off the table fails the episode as in physics (with the
pathway; without it nothing is known to fail). The head's detector also finds the objects in
real start frames for the pathway (:meth:`Judge.locate`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from worldsim.world_models.config import OFFSET_WEIGHT, WorldModelConfig
from worldsim.world_models.outcome import TaskRules
from worldsim.world_models.success_head import SuccessHead, keypoint_loss


class Judge(nn.Module):
    """The success head and, with the object pathway, the tasks' ``rules``."""

    def __init__(self, config: WorldModelConfig, rules: TaskRules | None) -> None:
        super().__init__()
        self.success_head = SuccessHead(config)
        self.rules = rules
        self.own = config.judge  # read when judging: a caller may change the outcome or the threshold

    def check(self, outcome: str | None) -> str:
        """The outcome that judges under ``outcome`` (None: this judge's own); ``ValueError`` for
        ``"rule"`` without the tasks' rules (a model without the object pathway)."""
        outcome = self.own.outcome if outcome is None else outcome
        if outcome == "rule" and self.rules is None:
            raise ValueError("judge='rule' applies the task's rule to the objects' imagined positions, which only a "
                             "world model with the object pathway carries: use judge='head' (or None)")
        return outcome

    def loss(self, real: torch.Tensor, imagined: torch.Tensor, batch: dict[str, torch.Tensor],
             proprio: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The success head's loss on the real next frames and the denoiser's estimates of them
        (latents ``(B, c, h, w)`` each), with the next normalised ``proprio`` ``(B, 4)``: binary
        cross-entropy of the success flag, plus, when the batch has ``goal_offset`` ``(B, 3)`` in
        metres, the squared error of its offset estimate in decimetres, and when it has
        ``entity_pixels``, the detector's :func:`~worldsim.world_models.success_head.keypoint_loss`
        (and with ``[model.judge] heights`` and ``entity_heights``, the height MLP's
        :meth:`~worldsim.world_models.success_head.SuccessHead.height_loss`). Also its named terms,
        detached."""
        labels = batch["success"].float().repeat(2)
        logits, offsets, heatmaps, found, heights = self.success_head.outputs(
            torch.cat([real, imagined]), batch["task"].repeat(2), proprio.repeat(2, 1))
        success = F.binary_cross_entropy_with_logits(logits, labels)
        terms = {"success_bce": success.detach()}
        if "goal_offset" in batch:
            offset = F.mse_loss(offsets, 10.0 * batch["goal_offset"].repeat(2, 1))
            terms["success_offset"] = offset.detach()
            success = success + OFFSET_WEIGHT * offset
        if "entity_pixels" in batch:
            detector, distance = keypoint_loss(heatmaps, found, batch["entity_pixels"].repeat(2, 1, 1))
            terms["success_keypoints"], terms["keypoint_error_px"] = detector.detach(), distance
            success = success + detector
            if self.success_head.height_mlp is not None and "entity_heights" in batch:
                height, error = self.success_head.height_loss(heights, batch["entity_heights"].repeat(2, 1),
                                                              batch["entity_pixels"].repeat(2, 1, 1))
                terms["success_heights"], terms["height_error_cm"] = height.detach(), error
                success = success + height
        with torch.no_grad():
            terms["success_acc"] = ((logits > 0) == labels.bool()).float().mean()
        return success, terms

    def verdict(self, outcome: str, latent: torch.Tensor | None, task: torch.Tensor, proprio: torch.Tensor,
                normalized: torch.Tensor, points: torch.Tensor | None = None, heights: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """An imagined step's success probability ``(B,)`` (1 or 0 for the rule) and whether it has
        failed ``(B,)`` (None without the pathway), from its ``latent`` frame (None: not drawn), the
        raw and the ``normalized`` next proprio ``(B, 4)`` and, with the pathway, the objects'
        ``points`` ``(B, E, 2)`` and ``heights`` ``(B, E)``: judged where the pathway put the
        objects, as the frame was drawn there."""
        if self.rules is None or points is None or heights is None:
            if latent is None:
                raise ValueError("draw=False needs the object pathway: without it success is judged on the frame")
            return torch.sigmoid(self.success_head(latent, task, normalized)), None
        if outcome == "rule":
            success, failed = self.rules.outcome(task, proprio, points, heights)
            return success.float(), failed
        probability = torch.sigmoid(self.success_head.judge(points, task, normalized)[0])
        return probability, self.rules.failed(proprio, points, heights)

    def locate(self, latent: torch.Tensor) -> torch.Tensor:
        """Every scene object's position (pixels, ``(B, E, 2)``) found in latent frames."""
        return self.success_head.locate(latent)

    def find(self, latent: torch.Tensor, proprio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every scene object's position (pixels, ``(B, E, 2)``) and height (metres, ``(B, E)``)
        found in latent frames with their normalised ``proprio`` ``(B, 4)``: the heights read by
        the success head's height MLP with ``[model.judge] heights``, else each object's resting
        height."""
        return self.success_head.find(latent, proprio)[1:]
