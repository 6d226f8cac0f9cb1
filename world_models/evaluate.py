"""World-model fidelity on held-out real episodes (``worldsim eval-wm``).

An imagined rollout must look and end like the real one. The report measures both, on a
held-out set that can tell a good model from a bad one:

- **the held-out set** (:func:`held_out_bank`): with ``balance=True``, as many failed as
  successful episodes (base rate 50%), so agreement cannot be earned by always answering
  "success"; failures whose task object came within ``near_miss_m`` of the goal are counted as
  near misses (at 64x64 a near miss and a success differ by a pixel or two);
- **image fidelity**: PSNR and SSIM per imagined step from episode starts and from keyframes,
  and the imagined gripper's distance from the real one (cm); PSNR in the gripper's and the task
  object's windows and in the windows they started in (a ghost arm or a doubled cube shows
  there), each beside the copied start frame's;
- **outcome agreement**, beside its base rate and as balanced accuracy, at the horizons RL in
  imagination uses: replays of the last ``h`` steps of every held-out episode (``last_<h>``:
  the start is a real mid-episode state, as a keyframe start is, and the outcome is the
  episode's, so a balanced set stays balanced) and replays of ``h`` steps from the keyframe
  rule's starts (``keyframe_<h>``: RL's own start distribution, whose outcomes within ``h``
  steps are mostly failures), and ``keyframe_<h>_balanced``, keyframe windows drawn so that
  half of them end in a real success (base rate 50%); and over full replays from episode
  starts, with a per-episode confusion table;
- **the task object's position error after contact**: replays from the step before the object
  first moves (``contact_horizon`` steps), in cm on the table, per step;
- the success head on the real frames (perfect dynamics' agreement), and side-by-side videos;
- with a policy, **its action gap**: how far its actions on the imagined frames lie from its
  actions on the real ones, the frames' share of what it would learn wrong in imagination;
- **physics' own ceiling** (:func:`~worldsim.world_models.ceiling.physics_agreement`, with
  ``state``): the same held-out episodes replayed open loop in physics from their recorded starts
  with the task's cube a fraction of a millimetre off. A push amplifies any error of the start,
  so no model reading the scene from frames agrees more often than physics does there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from worldsim.data.reader import EpisodeReader
from worldsim.envs.imagination import DEFAULT_IMAGINATION, ImaginationConfig
from worldsim.envs.observations import STATE_LAYOUT
from worldsim.policies.base import Policy
from worldsim.runtime.atomic import atomic_path
from worldsim.runtime.device import resolve_device
from worldsim.runtime.run_logging import write_json
from worldsim.world_models.ceiling import physics_agreement
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.keyframes import KINDS, KeyframeRule, select_keyframes
from worldsim.world_models.metrics import (
    action_gap,
    agreement,
    copy_first_psnr_curve,
    episode_scores,
    gripper_error_curve,
    head_on_real_frames,
    object_error,
    psnr_curve,
    region_centres,
    region_half_width,
    region_psnr_curves,
    ssim_curve,
)
from worldsim.world_models.model import WorldModel
from worldsim.world_models.replay import OpenLoop, open_loop, pathway_replay, side_by_side

NEAR_MISS_M = 0.04
RL_HORIZONS = (8, 16, 40)
CONTACT_HORIZON = 16


@dataclass
class HeldOut:
    """The held-out episodes as a bank, with each one's real outcome, the task object's closest
    x-y approach to its goal (metres; NaN without ``state``) and whether it is a near miss."""

    bank: EpisodeBank
    success: np.ndarray
    closest_m: np.ndarray
    near_miss: np.ndarray
    balanced: bool

    def summary(self) -> dict[str, Any]:
        return {"episodes": len(self.success), "successes": int(self.success.sum()),
                "failures": int((~self.success).sum()), "near_miss_failures": int(self.near_miss.sum()),
                "base_rate": float(self.success.mean()), "balanced": self.balanced}


def held_out_bank(model: WorldModel, data: str | Path | EpisodeBank, *, episodes: int | None = None,
                  balance: bool = False, near_miss_m: float = NEAR_MISS_M, seed: int = 0) -> HeldOut:
    """The episodes of ``data`` whose tasks ``model`` knows (the first ``episodes`` of them);
    with ``balance``, a random subset of ``min(successes, failures)`` of each outcome.
    ``ValueError`` when nothing is left, or when ``balance`` finds only one outcome."""
    if isinstance(data, EpisodeBank):
        bank = data
    else:
        with EpisodeReader(data) as reader:
            known = [t for t in reader.tasks if t in model.config.tasks]
            if not known:
                raise ValueError(f"data={str(data)!r} holds episodes of {', '.join(reader.tasks)}; the world "
                                 f"model knows only {', '.join(model.config.tasks)}")
            infos = [i for i in reader.episode_info() if i.task in known][:episodes]
            if balance:
                won = np.array([i.success for i in infos], bool)
                if won.all() or not won.any():
                    raise ValueError(f"data={str(data)!r}: balance needs successes and failures; it holds "
                                     f"{int(won.sum())} and {int((~won).sum())} (collect with more action noise)")
                indices = [infos[k].index for k in balanced_draw(won, np.random.default_rng(seed))]
            else:
                indices = [i.index for i in infos]
            bank = EpisodeBank(reader, tasks=known, episodes=indices)
    if bank.image_shape[0] != model.config.image_size:
        raise ValueError(f"data holds {bank.image_shape} images; the world model imagines "
                         f"{model.config.image_size}-pixel frames")
    bank.use_camera(model.camera)
    success = np.array([bank.episode(j, "success").any() for j in range(len(bank))])
    if bank.state is not None:
        gap = STATE_LAYOUT["goal_minus_object"]
        closest = np.array([np.linalg.norm(bank.episode(j, "state")[:, gap][:, :2], axis=1).min()
                            for j in range(len(bank))])
    else:
        closest = np.full(len(bank), np.nan)
    return HeldOut(bank, success, closest, ~success & (closest < near_miss_m), balance)


def balanced_draw(success: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sorted positions of ``min(successes, failures)`` successes and as many failures of the
    boolean ``success``, drawn at random without replacement: a set whose base rate is 50%."""
    wins, losses = np.flatnonzero(success), np.flatnonzero(~np.asarray(success, bool))
    n = min(len(wins), len(losses))
    return np.sort(np.concatenate([rng.choice(wins, n, replace=False), rng.choice(losses, n, replace=False)]))


def contact_starts(bank: EpisodeBank) -> tuple[np.ndarray, np.ndarray]:
    """Episode and step of every episode's first contact: the step before its task object first
    moves (the motion-onset keyframe with ``lead=1``); none without ``state``."""
    keys = select_keyframes(bank, KeyframeRule(lead=1))
    onset = keys.kind == KINDS.index("motion_onset")
    return keys.episode[onset], keys.step[onset]


def balanced_windows(bank: EpisodeBank, episodes: np.ndarray, starts: np.ndarray, horizon: int, limit: int,
                     seed: int = 0) -> np.ndarray:
    """Indices into the windows ``(episodes, starts)`` of ``horizon`` steps: as many whose real
    episode succeeds within the window as windows where it does not (at most ``limit`` in all),
    drawn at random; empty when either outcome is missing. From keyframes, most windows end
    before any success, so agreement over all of them is read against a base rate of a few
    per cent; this set's base rate is 50%."""
    wins = np.array([bank.episode(j, "success")[t + 1:t + 1 + horizon].any() for j, t in zip(episodes, starts,
                                                                                           strict=True)], bool)
    n = min(int(wins.sum()), int((~wins).sum()), limit // 2)
    if n == 0:
        return np.zeros(0, np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(np.concatenate([rng.choice(np.flatnonzero(wins), n, replace=False),
                                   rng.choice(np.flatnonzero(~wins), n, replace=False)]))


def window_outcomes(run: OpenLoop, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Per replay: whether the imagined and the real episode succeed within the replayed steps."""
    scores, real = episode_scores(run)
    return scores >= threshold, real


def evaluate_world_model(world_model: WorldModel | str | Path, data: str | Path | EpisodeBank, *,
                         episodes: int | None = None, balance: bool = False, near_miss_m: float = NEAR_MISS_M,
                         curve_steps: int = 32, rl_horizons: tuple[int, ...] = RL_HORIZONS,
                         contact_horizon: int = CONTACT_HORIZON, keyframe_rule: KeyframeRule | None = None,
                         max_keyframes: int = 256, imagination: ImaginationConfig = DEFAULT_IMAGINATION,
                         policy: Policy | str | Path | None = None, seed: int = 0, physics_ceiling: bool = True,
                         out: str | Path | None = None, videos: int = 4, progress: bool = True) -> dict[str, Any]:
    """The fidelity report of the module docstring; JSON-ready. ``imagination``: the rung, judge,
    success threshold and sampling steps the replays run with
    (:func:`~worldsim.world_models.replay.open_loop`; a rendered rung's figures are an upper bound,
    not the world model's; ``report["judge"]`` names who judged). With a ``policy`` (one that reads
    pixels, or its folder), ``report["action_gap"]`` holds its
    :func:`~worldsim.world_models.metrics.action_gap` over the replays from episode starts
    (``curve_steps`` steps), and ``action_gap_at_8`` / ``action_gap_at_horizon`` the mean of its
    ``imagined`` curve over steps 1-8 / 1-``curve_steps`` beside ``step_change_mean``.

    Keys: ``held_out`` (:meth:`HeldOut.summary`), ``horizon`` (the curves' length, ``curve_steps``),
    ``episode_start`` and ``keyframe`` (``psnr``, ``ssim``, ``gripper_cm`` and the trivial predictor's
    ``psnr_copy_first``, the start frame copied, per step 1..``curve_steps``, ``replays``), ``psnr_at_8``,
    ``ssim_at_8``, ``psnr_at_horizon``, ``psnr_copy_first_at_8``, ``psnr_copy_first_at_horizon``,
    ``gripper_cm_at_horizon``, ``regions`` (``half_width_px`` and, per region of
    :func:`~worldsim.world_models.metrics.region_centres` (the gripper, the task's object, and
    where each started, once it has left), the ``psnr`` and ``psnr_copy_first`` curves of the replays from episode
    starts within that window: :func:`~worldsim.world_models.metrics.region_psnr_curves`),
    ``region_psnr_at_8`` and ``region_psnr_at_horizon`` (per region, ``model`` and
    ``copy_first``), ``success_threshold``, ``success`` (:func:`agreement` over full
    replays), ``success_by_horizon`` (``last_<h>``, ``keyframe_<h>`` and ``keyframe_<h>_balanced`` for each of
    ``rl_horizons``, and ``full``), ``success_by_threshold`` (full-replay accuracy at 0.1 .. 0.9),
    ``confusion`` (per episode: index, task, real and imagined outcome, highest imagined
    probability, near miss, closest approach in cm), ``success_head_on_real_frames``,
    ``object_error`` (full replays from episode starts) and ``object_error_after_contact``
    (from first contact, ``contact_horizon`` steps, with ``at_horizon_cm``; with the object
    pathway also ``pathway_cm`` and ``pathway_recorded_gripper_cm``), both ``None``
    without ``state``; ``keyframe_counts``; ``physics_ceiling`` (with ``physics_ceiling`` and
    ``state``, else ``None``: :func:`~worldsim.world_models.ceiling.physics_agreement` of the
    held-out episodes, the line the ``full`` agreement is read against). With ``out``, writes ``fidelity.json``,
    ``confusion.md``, ``error_growth.png`` and ``videos`` side-by-side replay videos there.
    """
    model = world_model if isinstance(world_model, WorldModel) \
        else WorldModel.from_pretrained(world_model, resolve_device(imagination.device))
    model.eval()
    held = held_out_bank(model, data, episodes=episodes, balance=balance, near_miss_m=near_miss_m, seed=seed)
    bank = held.bank
    threshold = model.config.judge.success_threshold if imagination.success_threshold is None \
        else imagination.success_threshold
    generator = torch.Generator(model.device).manual_seed(seed)
    every, zeros = np.arange(len(bank)), np.zeros(len(bank), np.int64)
    keys = select_keyframes(bank, keyframe_rule or KeyframeRule())
    pick = np.random.default_rng(seed).permutation(len(keys))[:max_keyframes]
    contact = contact_starts(bank)

    def replay(episode: np.ndarray, start: np.ndarray, steps: int) -> OpenLoop:
        run = open_loop(model, bank, episode, start, steps, imagination=imagination, generator=generator)
        bar.update(1)
        return run

    bar = tqdm(total=4 + 3 * len(rl_horizons), desc="eval-wm", disable=not progress)
    full = replay(every, zeros, int(bank.lengths.max()))
    from_start = full.head(min(curve_steps, int(bank.lengths.max())))  # the first steps of the full replays
    from_keyframes = replay(keys.episode[pick], keys.step[pick], curve_steps) if len(pick) else None
    by_horizon: dict[str, dict[str, Any] | None] = {}
    for h in rl_horizons:
        by_horizon[f"last_{h}"] = agreement(*window_outcomes(replay(every, np.maximum(bank.lengths - h, 0), h),
                                                             threshold))
    for h in rl_horizons:
        run = replay(keys.episode[pick], keys.step[pick], h) if len(pick) else None
        by_horizon[f"keyframe_{h}"] = agreement(*window_outcomes(run, threshold)) if run else None
        even = balanced_windows(bank, keys.episode, keys.step, h, max_keyframes, seed)
        run = replay(keys.episode[even], keys.step[even], h) if len(even) else None
        by_horizon[f"keyframe_{h}_balanced"] = agreement(*window_outcomes(run, threshold)) if run else None
    after_contact = replay(*contact, contact_horizon) if len(contact[0]) else None
    bar.update(1)
    bar.close()

    imagined, real = window_outcomes(full, threshold)
    scores = episode_scores(full)[0]
    report: dict[str, Any] = {"held_out": held.summary(), "horizon": curve_steps,
                              "sampling_steps": imagination.sampling_steps or model.config.sampling_steps,
                              "rung": imagination.rung.name, "judge": model.judge.check(imagination.judge)}
    for name, run in (("episode_start", from_start), ("keyframe", from_keyframes)):
        report[name] = ({"psnr": psnr_curve(run).round(3).tolist(), "ssim": ssim_curve(run).round(4).tolist(),
                         "gripper_cm": gripper_error_curve(run).round(2).tolist(),
                         "psnr_copy_first": copy_first_psnr_curve(run).round(3).tolist(), "replays": len(run.real)}
                        if run is not None else {"psnr": [], "ssim": [], "gripper_cm": [], "psnr_copy_first": [],
                                                 "replays": 0})
    start = report["episode_start"]
    at8 = min(8, len(start["psnr"])) - 1
    half = region_half_width(bank.image_shape[0])
    regions = region_psnr_curves(from_start, region_centres(from_start, bank, every, zeros, half), half)

    def regions_at(step: int) -> dict[str, dict[str, float]]:
        return {name: {"model": c["psnr"][step], "copy_first": c["psnr_copy_first"][step]}
                for name, c in regions.items()}

    contact_error = None
    if after_contact is not None:
        recorded_gripper = (pathway_replay(model, bank, *contact, contact_horizon)
                            if model.objects is not None else None)
        contact_error = _rounded(object_error(model, bank, after_contact, *contact, recorded_gripper))
    if contact_error is not None:
        contact_error["replays"] = len(contact[0])
        contact_error["at_horizon_cm"] = contact_error["imagined_cm"][-1]
    report.update(
        psnr_at_8=start["psnr"][at8], ssim_at_8=start["ssim"][at8], psnr_at_horizon=start["psnr"][-1],
        psnr_copy_first_at_8=start["psnr_copy_first"][at8], psnr_copy_first_at_horizon=start["psnr_copy_first"][-1],
        gripper_cm_at_horizon=start["gripper_cm"][-1],
        regions={"half_width_px": half, "episode_start": regions},
        region_psnr_at_8=regions_at(at8), region_psnr_at_horizon=regions_at(-1),
        success_threshold=threshold, success=agreement(imagined, real),
        success_by_horizon={**by_horizon, "full": agreement(imagined, real)},
        success_by_threshold={f"{th:.1f}": float(((scores >= th) == real).mean()) for th in np.arange(1, 10) / 10},
        confusion=[{"episode": bank.infos[j].index, "task": bank.infos[j].task, "real": bool(real[j]),
                    "imagined": bool(imagined[j]), "max_prob": round(float(scores[j]), 4),
                    "near_miss": bool(held.near_miss[j]), "closest_cm": round(100 * float(held.closest_m[j]), 2)}
                   for j in every],
        success_head_on_real_frames=head_on_real_frames(model, bank, threshold),
        object_error=_rounded(object_error(model, bank, full, every, zeros)),
        object_error_after_contact=contact_error, keyframe_counts=keys.counts(),
        **(policy_gap(policy, from_start, bank) if policy is not None else {}),
        physics_ceiling=physics_agreement(bank, seed=seed) if physics_ceiling and bank.state is not None else None)
    if out is not None:
        from worldsim.runtime.video import upscale, write_video

        out = Path(out)
        write_json(out / "fidelity.json", report)
        with atomic_path(out / "confusion.md") as tmp:
            tmp.write_text(confusion_markdown(report))
        plot_error_growth(report, out / "error_growth.png")
        for i in range(min(videos, len(bank))):
            write_video(out / f"replay_{i}.mp4", upscale(side_by_side(full, i)), fps=10)
    return report


def policy_gap(policy: Policy | str | Path, run: OpenLoop, bank: EpisodeBank) -> dict[str, Any]:
    """The report's action-gap keys for ``policy`` over replays ``run`` of ``bank``'s episodes."""
    from worldsim.policies import load_policy

    loaded = policy if isinstance(policy, Policy) else load_policy(policy)
    gap = action_gap(run, loaded.eval(), [info.instruction for info in bank.infos])
    return {"action_gap": gap, "action_gap_at_8": float(np.nanmean(gap["imagined"][:8])),
            "action_gap_at_horizon": float(np.nanmean(gap["imagined"])),
            "step_change_mean": float(np.nanmean(gap["step_change"]))}


def confusion_markdown(report: dict[str, Any]) -> str:
    """The per-episode confusion table and the agreement figures beside their base rates."""
    held = report["held_out"]
    lines = [f"# World-model outcome agreement ({held['episodes']} held-out episodes, "
             f"{held['successes']} successes, {held['failures']} failures of which {held['near_miss_failures']} "
             f"near misses; base rate {held['base_rate']:.0%})", "",
             "| replays | episodes | base rate | accuracy | balanced accuracy | majority answer |",
             "|---|---|---|---|---|---|"]
    for name, a in report["success_by_horizon"].items():
        if a is not None:
            lines.append(f"| {name} | {a['episodes']} | {a['base_rate']:.0%} | {a['accuracy']:.1%} | "
                         f"{a['balanced_accuracy']:.1%} | {a['majority_accuracy']:.1%} |")
    for name, a in (report.get("physics_ceiling") or {}).items():
        lines.append(f"| full, physics itself ({ceiling_label(name)}) | {a['episodes']} | {a['base_rate']:.0%} | "
                     f"{a['accuracy']:.1%} | {a['balanced_accuracy']:.1%} | {a['majority_accuracy']:.1%} |")
    lines += ["", f"Full replays, threshold {report['success_threshold']:.3f}:", "",
              "| episode | task | real | imagined | max prob | near miss | closest (cm) |",
              "|---|---|---|---|---|---|---|"]
    for row in report["confusion"]:
        lines.append(f"| {row['episode']} | {row['task']} | {'success' if row['real'] else 'failure'} | "
                     f"{'success' if row['imagined'] else 'failure'} | {row['max_prob']:.3f} | "
                     f"{'yes' if row['near_miss'] else ''} | {row['closest_cm']} |")
    return "\n".join(lines) + "\n"


def ceiling_label(name: str) -> str:
    """``exact`` -> "start as recorded", ``shift_0.1mm`` -> "cube 0.1 mm off"."""
    return "start as recorded" if name == "exact" else f"cube {name.removeprefix('shift_').removesuffix('mm')} mm off"


def _rounded(curves: dict[str, Any] | None) -> dict[str, Any] | None:
    if curves is None:
        return None
    return {k: np.round(v, 2).tolist() if isinstance(v, list) else round(v, 2) for k, v in curves.items()}


def plot_error_growth(report: dict[str, Any], path: str | Path) -> Path:
    """PSNR, SSIM and the gripper's error against the imagined step (from episode starts and
    keyframes), the regions' PSNR beside the copied start frame's, and the task object's position
    error after first contact (with ``state`` in the data: found in the imagined and the real
    frames, and where the object pathway carried it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    objects = report.get("object_error_after_contact")
    regions = (report.get("regions") or {}).get("episode_start", {})
    panels = 3 + bool(regions) + bool(objects)
    fig, axes = plt.subplots(1, panels, figsize=(4 * panels, 3.2))
    if regions:  # each window's PSNR (solid) beside the copied start frame's (dashed, same colour)
        ax = axes[3]
        for name, curves in regions.items():
            steps = np.arange(1, len(curves["psnr"]) + 1)
            line, = ax.plot(steps, curves["psnr"], marker=".", label=name.replace("_", " "))
            ax.plot(steps, curves["psnr_copy_first"], linestyle="--", color=line.get_color())
        ax.set_xlabel("imagined step (dashed: start frame copied)")
        ax.set_ylabel("window PSNR (dB)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    if objects:
        ax = axes[-1]
        for name, label in (("imagined", "imagined frames"), ("real", "real frames"), ("pathway", "pathway"),
                            ("pathway_recorded_gripper", "pathway, recorded gripper")):
            if f"{name}_cm" in objects:
                ax.plot(objects[f"{name}_cm"], marker=".", label=label)
        ax.set_xlabel("step after first contact")
        ax.set_ylabel("task object error (cm)")
        ax.grid(alpha=0.3)
        ax.legend()
    metrics = ("psnr", "ssim", "gripper_cm")
    for name in ("episode_start", "keyframe"):
        for ax, metric in zip(axes[:3], metrics, strict=True):
            values = report[name][metric]
            if values:
                ax.plot(np.arange(1, len(values) + 1), values, marker=".", label=name.replace("_", " "))
    for ax, label in zip(axes[:3], ("PSNR (dB)", "SSIM", "gripper error (cm)"), strict=True):
        ax.set_xlabel("imagined step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return Path(path)
