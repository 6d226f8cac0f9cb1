"""World-model fidelity on held-out real episodes (``worldsim eval-wm``, ``worldsim imagine``).

The test is open-loop replay: start from a real state with its real context, feed the real
episode's recorded actions one by one, and compare every imagined frame with the real one.

- **PSNR and SSIM per horizon step** (scikit-image's ``peak_signal_noise_ratio`` and
  ``structural_similarity`` on the 8-bit RGB frames), averaged over the replays that still
  have a real frame at that step, from episode starts and, separately, from the keyframes of
  the held-out episodes (:mod:`worldsim.world_models.keyframes`), so the effect of keyframe
  starts on the error's depth is visible;
- **success agreement**: each held-out episode is replayed from its start to its end; the
  imagined episode succeeds if the success head fires (probability >= the model's calibrated
  ``success_threshold``) on any imagined frame, the real one if the episode succeeded.
  Accuracy, precision and recall of imagined against real outcomes (World-VLA-Loop's "does
  the model say success exactly when reality does"); also by horizon (replays of only the
  last ``h`` steps of each episode, from the real state there: open-loop drift grows with
  ``h``) and by threshold; and the same head on the real frames
  (:func:`head_on_real_frames`), which tells the head's share of the disagreement from the
  dynamics' share;
- **the task object's position error** (:func:`object_error`): where the success head's
  keypoint detector finds the object in each imagined frame against where it really was, in
  cm on the table, per step (PSNR is dominated by the static scene; this is what the task is
  about);
- a plot of PSNR, SSIM and the object's error against the horizon and side-by-side videos
  (real | imagined).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from skimage.metrics import peak_signal_noise_ratio, structural_similarity
from tqdm.auto import tqdm

from worldsim.runtime.atomic import atomic_path
from worldsim.data.datasets import EpisodeReader
from worldsim.envs.observations import ENTITY_HEIGHTS, STATE_LAYOUT, entity_positions
from worldsim.policies.base import Policy
from worldsim.policies.runner import ChunkQueue
from worldsim.runtime.run_logging import write_json
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.keyframes import KeyframeRule, select_keyframes
from worldsim.world_models.latents import frames_to_latents, latents_to_frames
from worldsim.world_models.model import WorldModel


@dataclass
class OpenLoop:
    """Open-loop replays of ``N`` real episodes over ``H`` steps: ``real`` and ``imagined``
    uint8 frames ``(N, H + 1, height, width, 3)`` (index 0: the real start frame in both),
    ``valid`` ``(N, H + 1)`` (False past the episode's end), imagined ``success_prob`` and
    real ``success`` ``(N, H + 1)``."""

    real: np.ndarray
    imagined: np.ndarray
    valid: np.ndarray
    success_prob: np.ndarray
    success: np.ndarray


@torch.no_grad()
def open_loop(model: WorldModel, bank: EpisodeBank, episodes: np.ndarray, starts: np.ndarray, horizon: int, *,
              sampling_steps: int | None = None, generator: torch.Generator | None = None,
              batch_size: int = 64, policy: Policy | None = None) -> OpenLoop:
    """Replay the recorded actions of bank episodes ``episodes`` from steps ``starts`` for
    ``horizon`` steps (past an episode's end the last action repeats and ``valid`` is False).

    With a ``policy`` (one that reads pixels), the policy acts instead, on the imagined
    observations (``image``, ``proprio``, ``instruction``; its chunks are served by a
    :class:`~worldsim.policies.runner.ChunkQueue`); ``real`` still shows the recorded episode
    from the same start, for reference, and every step is ``valid``."""
    cfg = model.config
    device = model.device
    n, h = len(episodes), int(horizon)
    out = OpenLoop(np.zeros((n, h + 1, *bank.image_shape), np.uint8), np.zeros((n, h + 1, *bank.image_shape),
                   np.uint8), np.zeros((n, h + 1), bool), np.zeros((n, h + 1)), np.zeros((n, h + 1), bool))
    for begin in range(0, n, batch_size):
        j, t0 = episodes[begin:begin + batch_size], starts[begin:begin + batch_size]
        rows = slice(begin, begin + len(j))
        context_rows = bank.context_rows(j, t0, cfg.context)
        context = frames_to_latents(torch.from_numpy(bank.images[context_rows]), cfg.patch).to(device)
        first = frames_to_latents(torch.from_numpy(bank.images[bank.obs_start[j]]), cfg.patch).to(device)
        proprio = torch.from_numpy(bank.proprio[context_rows]).to(device)
        task = torch.tensor([model.task_index(bank.infos[e].task) for e in j], device=device)
        steps_t = np.arange(h + 1)[None] + t0[:, None]
        valid = steps_t <= bank.lengths[j][:, None]
        real_rows = bank.obs_start[j][:, None] + np.minimum(steps_t, bank.lengths[j][:, None])
        out.real[rows], out.valid[rows] = bank.images[real_rows], valid
        out.success[rows] = bank.success[real_rows]
        out.imagined[rows, 0] = bank.images[real_rows[:, 0]]
        out.success_prob[rows, 0] = model.success_prob(context[:, -1], task, proprio[:, -1]).cpu().numpy()
        queue = None if policy is None else ChunkQueue(policy, len(j), deterministic=True)
        if queue is not None:
            out.valid[rows] = True
        for k in range(h):
            if queue is None:
                a_rows = bank.step_start[j] + np.minimum(t0 + k, bank.lengths[j] - 1)
                action = torch.from_numpy(bank.actions[a_rows]).to(device)
            else:
                obs = {"image": out.imagined[rows, k], "proprio": proprio[:, -1].cpu().numpy(),
                       "instruction": tuple(bank.infos[e].instruction for e in j)}
                action = torch.from_numpy(np.clip(queue(obs), -1.0, 1.0).astype(np.float32)).to(device)
            pred = model.predict(context, first, proprio, action, task, sampling_steps, generator)
            context = torch.cat([context[:, 1:], pred.latent[:, None]], dim=1)
            proprio = torch.cat([proprio[:, 1:], pred.proprio[:, None]], dim=1)
            out.imagined[rows, k + 1] = latents_to_frames(pred.latent, cfg.patch).cpu().numpy()
            out.success_prob[rows, k + 1] = pred.success_prob.cpu().numpy()
    return out


def psnr_curve(run: OpenLoop) -> np.ndarray:
    """Mean PSNR (dB) over the valid replays at each step 1..H (identical frames count as 100 dB)."""
    return _curve(run, _psnr)


def ssim_curve(run: OpenLoop) -> np.ndarray:
    """Mean SSIM over the valid replays at each step 1..H."""
    return _curve(run, _ssim)


def _psnr(real: np.ndarray, imagined: np.ndarray) -> float:
    if np.array_equal(real, imagined):
        return 100.0
    return float(peak_signal_noise_ratio(real, imagined, data_range=255))


def _ssim(real: np.ndarray, imagined: np.ndarray) -> float:
    return float(structural_similarity(real, imagined, channel_axis=-1, data_range=255))


def _curve(run: OpenLoop, metric: Any) -> np.ndarray:
    values = []
    for k in range(1, run.real.shape[1]):
        rows = np.flatnonzero(run.valid[:, k])
        scores = [metric(run.real[i, k], run.imagined[i, k]) for i in rows]
        values.append(np.mean(scores) if scores else np.nan)
    return np.array(values)


def side_by_side(run: OpenLoop, i: int, until: int | None = None) -> np.ndarray:
    """Frames ``(T, H, 2W + 2, 3)`` of replay ``i``: real on the left, imagined on the right,
    up to the episode's end (or ``until`` steps)."""
    last = int(np.flatnonzero(run.valid[i])[-1]) + 1
    last = last if until is None else min(last, until + 1)
    gap = np.full((last, run.real.shape[2], 2, 3), 255, np.uint8)
    return np.concatenate([run.real[i, :last], gap, run.imagined[i, :last]], axis=2)


def episode_scores(run: OpenLoop) -> tuple[np.ndarray, np.ndarray]:
    """Per replay: the highest imagined success probability over its valid steps (the imagined
    episode succeeds iff this reaches the threshold) and whether the real episode succeeded."""
    n = len(run.real)
    return (np.array([run.success_prob[i][run.valid[i]].max() for i in range(n)]),
            np.array([run.success[i][run.valid[i]].any() for i in range(n)]))


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


def success_agreement(run: OpenLoop, threshold: float = 0.5) -> dict[str, float]:
    """Episode-level agreement of imagined and real success over full replays (``run`` from
    episode starts to their ends): accuracy, precision, recall, and the counts."""
    scores, real = episode_scores(run)
    return _agreement(scores >= threshold, real)


@torch.no_grad()
def head_on_real_frames(model: WorldModel, bank: EpisodeBank, threshold: float,
                        batch_size: int = 256) -> dict[str, Any]:
    """The success head judging the *real* frames of ``bank``: what the success agreement
    would be with perfect dynamics. Set against :func:`success_agreement` of the replays, it
    splits the disagreement between the head (misjudging even real frames) and the dynamics
    (imagined frames that drift from the real ones). Returns ``episode`` (the agreement dict,
    an episode succeeding when any of its real frames reaches ``threshold``), ``frame_recall``
    (over the real success frames), ``frame_false_positive_rate`` (over the other frames) and
    the frame counts."""
    task = np.concatenate([np.full(length + 1, model.task_index(bank.infos[e].task))
                           for e, length in enumerate(bank.lengths)])
    probs = np.concatenate([
        model.success_prob(frames_to_latents(torch.from_numpy(bank.images[i:i + batch_size]),
                                             model.config.patch).to(model.device),
                           torch.from_numpy(task[i:i + batch_size]).to(model.device),
                           torch.from_numpy(bank.proprio[i:i + batch_size]).to(model.device)).cpu().numpy()
        for i in range(0, len(bank.images), batch_size)])
    fired, success = probs >= threshold, bank.success.astype(bool)
    fired_per_episode = np.split(fired, bank.obs_start[1:])  # the bank stores episodes back to back
    return {"episode": _agreement(np.array([f.any() for f in fired_per_episode]),
                                  np.array([bank.episode(j, "success").any() for j in range(len(bank))])),
            "frame_recall": float(fired[success].mean()) if success.any() else float("nan"),
            "frame_false_positive_rate": float(fired[~success].mean()) if (~success).any() else float("nan"),
            "success_frames": int(success.sum()), "frames": len(success)}


@torch.no_grad()
def object_error(model: WorldModel, bank: EpisodeBank, run: OpenLoop, episodes: np.ndarray,
                 starts: np.ndarray, batch_size: int = 256) -> dict[str, Any] | None:
    """How far the task's object is, in the imagined frames of ``run`` (replays of bank
    episodes ``episodes`` from steps ``starts``), from where it really was: the success head's
    keypoint detector finds the object in every frame and the distance to its real position
    (``state``, projected into the frame) is measured in cm on the plane the object rests on.
    PSNR is dominated by the static scene; this is the error of what the task is about.

    Returns ``imagined_cm`` and ``real_cm`` (the detector on the real frames: its own floor),
    medians over the valid replays at each step 0..H, and ``final_imagined_cm``, the median at
    each replay's last valid step; ``None`` when the bank has no ``state``."""
    if bank.state is None:
        return None
    task_object = bank.state[:, STATE_LAYOUT["object_pos"]]
    # the entity the task acts on: the one nearest the task object in x-y (a cube, or a zone to reach)
    which = np.linalg.norm(entity_positions(bank.state)[..., :2] - task_object[:, None, :2], axis=-1).argmin(-1)
    steps_t = np.arange(run.real.shape[1])[None] + starts[:, None]
    rows = bank.obs_start[episodes][:, None] + np.minimum(steps_t, bank.lengths[episodes][:, None])
    entity = which[rows]

    def located(frames: np.ndarray) -> np.ndarray:
        flat = frames.reshape(-1, *frames.shape[2:])
        points = np.concatenate([
            model.success_head.keypoints(model.success_head.heatmaps(frames_to_latents(
                torch.from_numpy(flat[i:i + batch_size]), model.config.patch).to(model.device))).cpu().numpy()
            for i in range(0, len(flat), batch_size)]).reshape(*frames.shape[:2], -1, 2)
        return np.take_along_axis(points, entity[..., None, None], axis=2)[:, :, 0]

    def on_table(pixels: np.ndarray) -> np.ndarray:  # a lifted object is measured on its resting plane
        return bank.camera.unproject(pixels, ENTITY_HEIGHTS[entity])[..., :2]

    truth = on_table(np.take_along_axis(bank.entity_pixels[rows], entity[..., None, None], axis=2)[:, :, 0])
    errors = {name: 100 * np.linalg.norm(on_table(located(frames)) - truth, axis=-1)
              for name, frames in (("imagined", run.imagined), ("real", run.real))}
    curve = {f"{name}_cm": [float(np.median(e[run.valid[:, k], k])) if run.valid[:, k].any() else float("nan")
                            for k in range(e.shape[1])] for name, e in errors.items()}
    last = run.valid.shape[1] - 1 - np.argmax(run.valid[:, ::-1], axis=1)
    curve["final_imagined_cm"] = float(np.median(errors["imagined"][np.arange(len(last)), last]))
    return curve


def _agreement(imagined: np.ndarray, real: np.ndarray) -> dict[str, float]:
    n = len(real)
    tp, fp = int((imagined & real).sum()), int((imagined & ~real).sum())
    fn, tn = int((~imagined & real).sum()), int((~imagined & ~real).sum())
    return {"accuracy": (tp + tn) / max(n, 1), "precision": tp / (tp + fp) if tp + fp else float("nan"),
            "recall": tp / (tp + fn) if tp + fn else float("nan"), "true_positive": tp, "false_positive": fp,
            "false_negative": fn, "true_negative": tn, "episodes": n}


def evaluate_world_model(world_model: WorldModel | str | Path, data: str | Path | EpisodeBank, *,
                         episodes: int | None = None, horizon: int = 32,
                         keyframe_rule: KeyframeRule | None = None,
                         max_keyframes: int = 256, success_threshold: float | None = None,
                         sampling_steps: int | None = None, seed: int = 0, out: str | Path | None = None,
                         videos: int = 4, progress: bool = True) -> dict[str, Any]:
    """The fidelity report of the module docstring for the first ``episodes`` episodes of
    ``data`` (all by default) whose tasks the model knows.

    Returns a JSON-ready dict: ``episode_start`` and ``keyframe`` (``psnr`` and ``ssim`` lists
    over steps 1..horizon, ``replays``), ``psnr_at_8``, ``psnr_at_horizon``, ``ssim_at_8``,
    ``success`` (:func:`success_agreement` at ``success_threshold``, default the model's
    calibrated one), ``success_by_horizon`` (the same for replays of each episode's last 8,
    16 and 32 steps), ``success_by_threshold`` (accuracy at thresholds 0.1 .. 0.9),
    ``success_episodes`` (per episode: real outcome, highest imagined probability),
    ``success_head_on_real_frames`` (:func:`head_on_real_frames`), ``object_error``
    (:func:`object_error` of the full replays; ``None`` without ``state``),
    ``keyframe_counts``. With ``out``, also writes
    ``fidelity.json``, ``error_growth.png`` and ``videos`` side-by-side videos there.
    """
    model = world_model if isinstance(world_model, WorldModel) else WorldModel.from_pretrained(world_model)
    model.eval()
    if isinstance(data, EpisodeBank):
        bank = data
    else:
        with EpisodeReader(data) as reader:
            known = [t for t in reader.tasks if t in model.config.tasks]
            if not known:
                raise ValueError(f"data={str(data)!r} holds episodes of {', '.join(reader.tasks)}; the world "
                                 f"model knows only {', '.join(model.config.tasks)}")
            chosen = [i.index for i in reader.episode_info() if i.task in known][:episodes]
            bank = EpisodeBank(reader, tasks=known, episodes=chosen)
    if bank.image_shape[0] != model.config.image_size:
        raise ValueError(f"data holds {bank.image_shape} images; the world model imagines "
                         f"{model.config.image_size}-pixel frames")
    threshold = model.config.success_threshold if success_threshold is None else success_threshold
    generator = torch.Generator(model.device).manual_seed(seed)
    every = np.arange(len(bank))
    bar = tqdm(total=6, desc="eval-wm", disable=not progress)
    from_start = open_loop(model, bank, every, np.zeros(len(bank), np.int64), horizon,
                           sampling_steps=sampling_steps, generator=generator)
    bar.update(1)
    keys = select_keyframes(bank, keyframe_rule or KeyframeRule())
    pick = np.random.default_rng(seed).permutation(len(keys))[:max_keyframes]
    from_keyframes = open_loop(model, bank, keys.episode[pick], keys.step[pick], horizon,
                               sampling_steps=sampling_steps, generator=generator) if len(pick) else None
    bar.update(1)
    full = open_loop(model, bank, every, np.zeros(len(bank), np.int64), int(bank.lengths.max()),
                     sampling_steps=sampling_steps, generator=generator)
    bar.update(1)
    by_horizon = {}
    for h in (8, 16, 32):  # the last h steps of every episode, from the real state there
        tail = open_loop(model, bank, every, np.maximum(bank.lengths - h, 0), h, sampling_steps=sampling_steps,
                         generator=generator)
        by_horizon[str(h)] = success_agreement(tail, threshold)
        bar.update(1)
    bar.close()
    scores, real = episode_scores(full)

    report: dict[str, Any] = {"episodes": len(bank), "horizon": horizon, "sampling_steps":
                              sampling_steps or model.config.sampling_steps}
    for name, run in (("episode_start", from_start), ("keyframe", from_keyframes)):
        if run is None:
            report[name] = {"psnr": [], "ssim": [], "replays": 0}
            continue
        report[name] = {"psnr": psnr_curve(run).round(3).tolist(), "ssim": ssim_curve(run).round(4).tolist(),
                        "replays": len(run.real)}
    start = report["episode_start"]
    at8 = min(8, horizon) - 1
    report.update(psnr_at_8=start["psnr"][at8], ssim_at_8=start["ssim"][at8],
                  psnr_at_horizon=start["psnr"][-1], success_threshold=threshold,
                  success=success_agreement(full, threshold),
                  success_by_horizon={**by_horizon, "full": success_agreement(full, threshold)},
                  success_by_threshold={f"{th:.1f}": float(((scores >= th) == real).mean())
                                        for th in np.arange(1, 10) / 10},
                  success_head_on_real_frames=head_on_real_frames(model, bank, threshold),
                  object_error=_rounded(object_error(model, bank, full, every, np.zeros(len(bank), np.int64))),
                  success_episodes={"real": real.tolist(), "max_prob": scores.round(4).tolist()},
                  keyframe_counts=keys.counts())
    if out is not None:
        from worldsim.runtime.video import write_video

        out = Path(out)
        write_json(out / "fidelity.json", report)
        plot_error_growth(report, out / "error_growth.png")
        for i in range(min(videos, len(bank))):
            write_video(out / f"replay_{i}.mp4", side_by_side(full, i), fps=10)
    return report


def _rounded(curves: dict[str, Any] | None) -> dict[str, Any] | None:
    if curves is None:
        return None
    return {k: np.round(v, 2).tolist() if isinstance(v, list) else round(v, 2) for k, v in curves.items()}


def plot_error_growth(report: dict[str, Any], path: str | Path) -> Path:
    """PSNR and SSIM against the imagined step, from episode starts and from keyframes, and
    (with ``state`` in the data) the task object's position error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    objects = report.get("object_error")
    fig, axes = plt.subplots(1, 3 if objects else 2, figsize=(12 if objects else 8, 3))
    if objects:
        for name in ("imagined", "real"):
            axes[2].plot(objects[f"{name}_cm"], label=f"{name} frames")
        axes[2].set_xlabel("step from the episode start")
        axes[2].set_ylabel("task object error (cm)")
        axes[2].grid(alpha=0.3)
        axes[2].legend()
    for name in ("episode_start", "keyframe"):
        for ax, metric in zip(axes, ("psnr", "ssim")):
            values = report[name][metric]
            if values:
                ax.plot(np.arange(1, len(values) + 1), values, label=name.replace("_", " "))
    for ax, label in zip(axes, ("PSNR (dB)", "SSIM")):
        ax.set_xlabel("imagined step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return Path(path)
