"""What a world model's open-loop replays are scored by.

- **image fidelity**: PSNR and SSIM per imagined step (scikit-image, on the 8-bit RGB frames),
  and PSNR in the regions the task is about (the gripper, the task's object) and where they
  started (where a ghost of the starting arm or a doubled cube would stay), each beside the
  copied start frame's, and in the windows on the other cubes (a cube the pathway moves but the
  frame does not draw vanishes there);
- **outcome agreement**: does the imagined episode succeed exactly when the real one did
  (World-VLA-Loop's test)? Reported with the real episodes' base rate and the balanced
  accuracy, since on a set of mostly successes, always answering "success" scores high;
- **the gripper's position error**: the imagined TCP against the real one, in cm, per step;
- **the task object's position error** after contact: where the success head's keypoint
  detector finds the object in the imagined frames against where it really was, in cm on the
  table (PSNR is dominated by the static scene; this is what the task is about);
- **the head on real frames**: the success head judging the real frames, which splits the
  disagreement between the head and the dynamics;
- **the policy's action gap**: how far a policy's action on an imagined frame lies from its
  action on the real frame it stands for. A policy trained in imagination learns from what it
  does on imagined frames, and PSNR does not say whether it can read them: a gripper blurred
  into a ghost costs few decibels and may move the action a lot.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from worldsim.envs.observations import ENTITIES, ENTITY_HEIGHTS, STATE_LAYOUT, entity_positions
from worldsim.policies.base import Policy
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.latents import frames_to_latents
from worldsim.world_models.model import WorldModel
from worldsim.world_models.replay import OpenLoop


def psnr_curve(run: OpenLoop) -> np.ndarray:
    """Mean PSNR (dB) over the valid replays at each step 1..H (identical frames count as 100 dB)."""
    return _curve(run, _psnr)


def copy_first_psnr_curve(run: OpenLoop) -> np.ndarray:
    """The trivial predictor's PSNR curve: each replay's real start frame copied as every later
    frame, against the real frames (what a model's :func:`psnr_curve` must beat to show motion)."""
    return _curve(run, _psnr, lambda i, k: run.real[i, 0])


def ssim_curve(run: OpenLoop) -> np.ndarray:
    """Mean SSIM over the valid replays at each step 1..H."""
    return _curve(run, _ssim)


def gripper_error_curve(run: OpenLoop) -> np.ndarray:
    """Median distance (cm) between the imagined and the real TCP over the valid replays at
    each step 1..H: whether the imagined arm goes where the recorded actions took the real one."""
    distance = 100 * np.linalg.norm(run.imagined_proprio[..., :3] - run.real_proprio[..., :3], axis=-1)
    return np.array([np.median(distance[run.valid[:, k], k]) if run.valid[:, k].any() else np.nan
                     for k in range(1, run.real.shape[1])])


REGIONS = ("gripper", "gripper_start", "object", "object_start", "other_cubes")
REGION_FRACTION = 0.1  # a region's half-width as a fraction of the frame: 6 px of 64, a cube and its edge


def region_half_width(image_size: int) -> int:
    """The half-width in pixels of the square a region is scored in, for frames of ``image_size``."""
    return max(1, round(REGION_FRACTION * image_size))


def region_centres(run: OpenLoop, bank: EpisodeBank, episodes: np.ndarray, starts: np.ndarray, half: int
                   ) -> dict[str, np.ndarray]:
    """Where the frame's task-relevant regions are, ``(N, H + 1, 2)`` pixels (column, row), for
    replays ``run`` of bank episodes ``episodes`` from ``starts``: the real gripper (its TCP
    projected by the image camera) and where it started; with ``state``, the task's object and
    where it started, and the other cubes, ``(N, H + 1, C, 2)``, a window each (the task's own
    cube NaN). A start region counts (its centre is not NaN) only at steps where the
    thing has left it, its window of half-width ``half`` no longer overlapping the thing's own:
    whatever is drawn there beyond the table is a ghost of the starting arm or a second cube.
    The regions are located from the recorded episode: an evaluation aid, never seen while imagining."""
    centres = {"gripper": bank.camera.project(run.real_proprio[..., :3].astype(np.float64))}
    others = None
    if bank.entity_pixels is not None:
        rows, entity = task_entity(bank, episodes, starts, run.real.shape[1])
        task_object = np.take_along_axis(bank.entity_pixels[rows], entity[..., None, None], axis=2)[:, :, 0]
        centres["object"] = task_object.astype(np.float64)
        cubes = np.array([k for k, name in enumerate(ENTITIES) if name.endswith("_cube")])
        others = bank.entity_pixels[rows][:, :, cubes].astype(np.float64)  # (N, H + 1, C, 2)
        others[cubes[None, None] == entity[..., None]] = np.nan
    for name in list(centres):
        now = centres[name]
        start = np.broadcast_to(now[:, :1], now.shape).copy()
        start[np.abs(now - start).max(axis=-1) <= 2 * half] = np.nan  # the thing is still (partly) there
        centres[f"{name}_start"] = start
    if others is not None:
        centres["other_cubes"] = others
    return {name: centres[name] for name in REGIONS if name in centres}


def region_psnr_curves(run: OpenLoop, centres: dict[str, np.ndarray], half: int) -> dict[str, dict[str, list]]:
    """Per region of ``centres`` (:func:`region_centres`): the PSNR per step 1..H of the imagined
    frames and of the copied start frame (the trivial predictor) within the ``(2 half + 1)``-pixel
    square around the region's centre (clipped to the frame), from the squared error pooled over
    the valid replays whose centre is not NaN at that step (NaN where no replay counts), and over
    a region's windows where it has several (centres ``(N, H + 1, C, 2)``): a window the copy
    repeats exactly adds zero error rather than a capped score. Whole-frame PSNR is
    dominated by the static table; these are the pixels the task and the eye are on."""
    height, width = run.real.shape[2:4]
    real, imagined = run.real.astype(np.float64), run.imagined.astype(np.float64)
    curves = {}
    for name, centre in centres.items():
        where = centre[:, :, None] if centre.ndim == 3 else centre  # (N, H + 1, windows, 2)
        squared: dict[str, list[float]] = {"psnr": [], "psnr_copy_first": []}
        for k in range(1, run.real.shape[1]):
            errors: dict[str, list[np.ndarray]] = {"psnr": [], "psnr_copy_first": []}
            counted = run.valid[:, k, None] & ~np.isnan(where[:, k]).any(axis=-1)  # (N, windows)
            for i, j in zip(*np.nonzero(counted), strict=True):
                col = int(np.clip(np.round(where[i, k, j, 0]), 0, width - 1))
                row = int(np.clip(np.round(where[i, k, j, 1]), 0, height - 1))
                box = (slice(max(row - half, 0), row + half + 1), slice(max(col - half, 0), col + half + 1))
                truth = real[i, k][box]
                errors["psnr"].append(((imagined[i, k][box] - truth) ** 2).ravel())
                errors["psnr_copy_first"].append(((real[i, 0][box] - truth) ** 2).ravel())
            for key, e in errors.items():
                squared[key].append(float(np.concatenate(e).mean()) if e else np.nan)
        curves[name] = {key: [round(_psnr_of(m), 3) for m in mse] for key, mse in squared.items()}
    return curves


def _psnr_of(mse: float) -> float:
    """PSNR (dB) of a mean squared error on 8-bit pixels; 100 dB for no error (as identical frames count)."""
    if np.isnan(mse):
        return float("nan")
    return 100.0 if mse == 0 else float(10 * np.log10(255.0 ** 2 / mse))


def _psnr(real: np.ndarray, imagined: np.ndarray) -> float:
    if np.array_equal(real, imagined):
        return 100.0
    return float(peak_signal_noise_ratio(real, imagined, data_range=255))


def _ssim(real: np.ndarray, imagined: np.ndarray) -> float:
    return float(structural_similarity(real, imagined, channel_axis=-1, data_range=255))


def _curve(run: OpenLoop, metric: Any, predicted: Any = None) -> np.ndarray:
    """``metric`` of each valid real frame against its prediction (the imagined frame, or
    ``predicted(i, k)``), averaged over the replays at each step 1..H."""
    values = []
    for k in range(1, run.real.shape[1]):
        rows = np.flatnonzero(run.valid[:, k])
        scores = [metric(run.real[i, k], run.imagined[i, k] if predicted is None else predicted(i, k)) for i in rows]
        values.append(np.mean(scores) if scores else np.nan)
    return np.array(values)


@torch.no_grad()
def mean_actions(policy: Policy, images: np.ndarray, proprio: np.ndarray, instructions: np.ndarray,
                 batch_size: int = 256) -> np.ndarray:
    """``policy``'s mean action (its mean chunk's first, clipped to [-1, 1]) ``(..., A)`` on
    observations ``images`` ``(..., H, W, 3)``, ``proprio`` ``(..., P)`` and ``instructions``
    (one string per observation, shape ``images.shape[:-3]``)."""
    lead = images.shape[:-3]
    images, proprio = images.reshape(-1, *images.shape[-3:]), proprio.reshape(-1, proprio.shape[-1])
    words = np.broadcast_to(instructions, lead).reshape(-1)
    out = []
    for begin in range(0, len(images), batch_size):
        rows = slice(begin, begin + batch_size)
        batch = policy.preprocess({"image": images[rows], "proprio": proprio[rows], "instruction": tuple(words[rows])})
        out.append(policy.act(batch, deterministic=True).actions[:, 0].clamp(-1.0, 1.0).cpu().numpy())
    return np.concatenate(out).reshape(*lead, -1)


def action_gap(run: OpenLoop, policy: Policy, instructions: list[str]) -> dict[str, Any]:
    """The policy's action gap over replays ``run`` (``instructions``: one per replay): per step
    1..H, the mean L2 distance between its mean action on the imagined frame with the imagined
    proprio (what it sees in imagination) and on the real frame with the real proprio
    (``imagined``), and the same with the real proprio on both (``frame``: the frame's share);
    ``step_change``, the mean L2 distance between its real actions at consecutive steps, is how
    much its action moves anyway: the line a gap is read against."""
    words = np.array(instructions, dtype=object)[:, None]
    real = mean_actions(policy, run.real, run.real_proprio, words)
    seen = mean_actions(policy, run.imagined, run.imagined_proprio, words)
    frame = mean_actions(policy, run.imagined, run.real_proprio, words)
    steps = run.valid[:, 1:]

    def curve(gap: np.ndarray) -> list[float]:
        return [round(float(gap[steps[:, k], k].mean()), 4) if steps[:, k].any() else float("nan")
                for k in range(steps.shape[1])]

    return {"imagined": curve(np.linalg.norm(seen - real, axis=-1)[:, 1:]),
            "frame": curve(np.linalg.norm(frame - real, axis=-1)[:, 1:]),
            "step_change": curve(np.linalg.norm(real[:, 1:] - real[:, :-1], axis=-1))}


def window_max(per_step: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per replay of ``(N, H + 1)`` values: the largest over its valid steps after the start (the
    start, a real frame, is not judged)."""
    return np.where(valid[:, 1:], per_step[:, 1:], -np.inf).max(axis=1)


def episode_scores(run: OpenLoop) -> tuple[np.ndarray, np.ndarray]:
    """Per replay: the highest imagined success probability over its valid imagined steps (the
    imagined episode succeeds iff this reaches the threshold) and whether the real episode
    succeeded on one of those steps."""
    return window_max(run.success_prob, run.valid), (run.success[:, 1:] & run.valid[:, 1:]).any(axis=1)


def calibrate_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """The threshold ``th`` that maximises the accuracy of ``scores >= th`` against boolean
    ``labels``: candidates are the midpoints between neighbouring distinct scores (and points
    beyond both ends, kept inside (0, 1)); among equally accurate ones the middle one is taken,
    the widest margin on both sides. ``ValueError`` when the labels are all of one class (any
    threshold past the scores would do; nothing is learned from them)."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels, bool)
    if scores.shape != labels.shape or scores.ndim != 1 or not len(scores):
        raise ValueError(f"scores {scores.shape} and labels {labels.shape} must be equal-length 1-d arrays")
    if labels.all() or not labels.any():
        raise ValueError(f"all {len(labels)} labels are {bool(labels[0])}: a threshold needs both classes")
    levels = np.unique(np.clip(scores, 1e-6, 1 - 1e-6))
    candidates = np.concatenate([[levels[0] / 2], (levels[:-1] + levels[1:]) / 2, [(levels[-1] + 1) / 2]])
    accuracy = ((scores[None] >= candidates[:, None]) == labels[None]).mean(axis=1)
    best = np.flatnonzero(accuracy == accuracy.max())
    return float(candidates[best[len(best) // 2]])


def agreement(imagined: np.ndarray, real: np.ndarray) -> dict[str, Any]:
    """Imagined against real outcomes (boolean arrays): accuracy beside the real base rate and
    the accuracy of always answering the majority outcome, balanced accuracy (mean of recall
    and specificity, 0.5 for any constant answer), precision, recall, and the confusion counts."""
    imagined, real = np.asarray(imagined, bool), np.asarray(real, bool)
    n = len(real)
    tp, fp = int((imagined & real).sum()), int((imagined & ~real).sum())
    fn, tn = int((~imagined & real).sum()), int((~imagined & ~real).sum())
    recall = tp / (tp + fn) if tp + fn else float("nan")
    specificity = tn / (tn + fp) if tn + fp else float("nan")
    base_rate = float(real.mean()) if n else float("nan")
    return {"accuracy": (tp + tn) / n if n else float("nan"), "base_rate": base_rate,
            "majority_accuracy": max(base_rate, 1 - base_rate) if n else float("nan"),
            "balanced_accuracy": float(np.nanmean([recall, specificity])) if n else float("nan"),
            "precision": tp / (tp + fp) if tp + fp else float("nan"), "recall": recall,
            "specificity": specificity, "true_positive": tp, "false_positive": fp, "false_negative": fn,
            "true_negative": tn, "episodes": n}


def success_agreement(run: OpenLoop, threshold: float = 0.5) -> dict[str, Any]:
    """:func:`agreement` of the replays' outcomes: imagined success when the head reaches
    ``threshold`` on any valid imagined frame, real success when any valid real frame succeeds."""
    scores, real = episode_scores(run)
    return agreement(scores >= threshold, real)


def row_tasks(model: WorldModel, bank: EpisodeBank) -> np.ndarray:
    """The model's task index of every observation row of ``bank`` (episodes back to back)."""
    return np.concatenate([np.full(length + 1, model.task_index(bank.infos[e].task))
                           for e, length in enumerate(bank.lengths)])


@torch.no_grad()
def real_frame_probabilities(model: WorldModel, bank: EpisodeBank, batch_size: int = 256) -> np.ndarray:
    """The success head's probability on every real frame of ``bank``, its keypoints found in the
    frame: one per observation row."""
    task = row_tasks(model, bank)
    return np.concatenate([
        model.success_prob(frames_to_latents(torch.from_numpy(bank.images[i:i + batch_size]),
                                             model.config.patch).to(model.device),
                           torch.from_numpy(task[i:i + batch_size]).to(model.device),
                           torch.from_numpy(bank.proprio[i:i + batch_size]).to(model.device)).cpu().numpy()
        for i in range(0, len(bank.images), batch_size)])


def head_on_real_frames(model: WorldModel, bank: EpisodeBank, threshold: float,
                        batch_size: int = 256) -> dict[str, Any]:
    """The success head judging the *real* frames of ``bank``: what the success agreement
    would be with perfect dynamics. Set against :func:`success_agreement` of the replays, it
    splits the disagreement between the head (misjudging even real frames) and the dynamics
    (imagined frames that drift from the real ones). Returns ``episode`` (the agreement dict,
    an episode succeeding when any of its real frames reaches ``threshold``), ``frame_recall``
    (over the real success frames), ``frame_false_positive_rate`` (over the other frames) and
    the frame counts."""
    fired, success = real_frame_probabilities(model, bank, batch_size) >= threshold, bank.success.astype(bool)
    fired_per_episode = np.split(fired, bank.obs_start[1:])  # the bank stores episodes back to back
    return {"episode": agreement(np.array([f.any() for f in fired_per_episode]),
                                  np.array([bank.episode(j, "success").any() for j in range(len(bank))])),
            "frame_recall": float(fired[success].mean()) if success.any() else float("nan"),
            "frame_false_positive_rate": float(fired[~success].mean()) if (~success).any() else float("nan"),
            "success_frames": int(success.sum()), "frames": len(success)}


@torch.no_grad()
def object_error(model: WorldModel, bank: EpisodeBank, run: OpenLoop, episodes: np.ndarray,
                 starts: np.ndarray, recorded_gripper: tuple[np.ndarray, np.ndarray] | None = None,
                 batch_size: int = 256) -> dict[str, Any] | None:
    """How far the task's object is, in the imagined frames of ``run`` (replays of bank
    episodes ``episodes`` from steps ``starts``), from where it really was: the success head's
    keypoint detector finds the object in every frame and the distance to its real position
    (``state``, projected into the frame) is measured in cm on the plane the object rests on.
    PSNR is dominated by the static scene; this is the error of what the task is about.

    Returns ``imagined_cm`` and ``real_cm`` (the detector on the real frames: its own floor),
    with the object pathway ``pathway_cm`` (the positions the model carried, put back in the
    world at their imagined heights, against the real ones) and ``frame_vs_pathway_cm`` (the
    object found in the imagined frames against where the pathway carried it) and, given ``recorded_gripper``
    (:func:`~worldsim.world_models.replay.pathway_replay`'s positions and heights for the same
    replays), ``pathway_recorded_gripper_cm``, medians over the valid replays at
    each step 0..H, and ``final_imagined_cm``, the median at each replay's last valid step;
    ``None`` when the bank has no ``state``."""
    if bank.state is None:
        return None
    rows, entity = task_entity(bank, episodes, starts, run.real.shape[1])

    def located(frames: np.ndarray) -> np.ndarray:
        flat = frames.reshape(-1, *frames.shape[2:])
        points = np.concatenate([
            model.judge.success_head.keypoints(model.judge.success_head.heatmaps(frames_to_latents(
                torch.from_numpy(flat[i:i + batch_size]), model.config.patch).to(model.device))).cpu().numpy()
            for i in range(0, len(flat), batch_size)]).reshape(*frames.shape[:2], -1, 2)
        return np.take_along_axis(points, entity[..., None, None], axis=2)[:, :, 0]

    def on_table(pixels: np.ndarray) -> np.ndarray:  # a lifted object is measured on its resting plane
        return bank.camera.unproject(pixels, ENTITY_HEIGHTS[entity])[..., :2]

    if bank.entity_pixels is None:
        raise ValueError("object positions need episodes recorded with state (obs_mode 'pixels+state')")
    truth = on_table(np.take_along_axis(bank.entity_pixels[rows], entity[..., None, None], axis=2)[:, :, 0])
    found = {name: on_table(located(frames)) for name, frames in (("imagined", run.imagined), ("real", run.real))}
    errors = {name: 100 * np.linalg.norm(where - truth, axis=-1) for name, where in found.items()}
    if run.points is not None and run.heights is not None:
        errors["pathway"] = pathway_error(bank, episodes, starts, run.points, run.heights)
        # does the frame draw the object where the pathway carried it (both on its resting plane)?
        carried = np.take_along_axis(run.points, entity[..., None, None], axis=2)[:, :, 0]
        errors["frame_vs_pathway"] = 100 * np.linalg.norm(found["imagined"] - on_table(carried), axis=-1)
    if recorded_gripper is not None:
        errors["pathway_recorded_gripper"] = pathway_error(bank, episodes, starts, *recorded_gripper)
    curve: dict[str, Any] = {
        f"{name}_cm": [float(np.median(e[run.valid[:, k], k])) if run.valid[:, k].any() else float("nan")
                       for k in range(e.shape[1])] for name, e in errors.items()}
    last = run.valid.shape[1] - 1 - np.argmax(run.valid[:, ::-1], axis=1)
    curve["final_imagined_cm"] = float(np.median(errors["imagined"][np.arange(len(last)), last]))
    return curve


def task_entity(bank: EpisodeBank, episodes: np.ndarray, starts: np.ndarray, length: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The bank rows ``(N, length)`` of ``length`` steps of episodes ``episodes`` from
    ``starts`` (past an episode's end, its last), and at each the entity the task acts on: the
    one nearest the task object in x-y (a cube, or a zone to reach). Needs ``state``."""
    assert bank.state is not None  # the callers check
    task_object = bank.state[:, STATE_LAYOUT["object_pos"]]
    which = np.linalg.norm(entity_positions(bank.state)[..., :2] - task_object[:, None, :2], axis=-1).argmin(-1)
    steps_t = np.arange(length)[None] + starts[:, None]
    rows = bank.obs_start[episodes][:, None] + np.minimum(steps_t, bank.lengths[episodes][:, None])
    return rows, which[rows]


def pathway_error(bank: EpisodeBank, episodes: np.ndarray, starts: np.ndarray, points: np.ndarray,
                  heights: np.ndarray) -> np.ndarray:
    """How far ``(N, H + 1)`` cm, in x-y, the pathway carried the task's object (image positions
    ``points`` ``(N, H + 1, E, 2)`` put back in the world at their imagined ``heights``) from
    where it really was, for replays of bank episodes ``episodes`` from ``starts``. Needs
    ``state``."""
    if bank.state is None:
        raise ValueError("object positions need episodes recorded with state (obs_mode 'pixels+state')")
    rows, entity = task_entity(bank, episodes, starts, points.shape[1])
    real_xy = entity_positions(bank.state[rows.ravel()]).reshape(*rows.shape, -1, 3)
    real_xy = np.take_along_axis(real_xy, entity[..., None, None], axis=2)[:, :, 0, :2]
    carried = np.take_along_axis(points, entity[..., None, None], axis=2)[:, :, 0]
    height = np.take_along_axis(heights, entity[..., None], axis=2)[:, :, 0]
    return 100 * np.linalg.norm(bank.camera.unproject(carried, height)[..., :2] - real_xy, axis=-1)
