"""A policy's imagined and real outcomes from the same real starts (``worldsim imagined-vs-real``).

Imagination RL (``train-rl --world-model``) starts each episode from a real recorded state of its
keyframes file (an episode start or a keyframe) and runs the policy closed loop on the imagined
frames for ``horizon`` steps; the policy learns from what the world model says became of them.
Open-loop replays of recorded actions (``eval-wm``) cannot test that, because there the actions
do not react to what is imagined. :func:`compare_from_starts` draws starts as the imagined env
draws them for RL and runs the policy from each in imagination. It then runs the policy from the
same recorded states in physics (the MuJoCo env reset with ``start_state``) and compares the
outcomes start by start: success at any step within the horizon, as GRPO counts it.

Physics reaches a keyframe as it was recorded: it restarts from the recorded episode's first state
(at rest, which the ``state`` observation holds completely) and replays the episode's actions up
to the keyframe (the ``replay_actions`` reset option). Restarting from the keyframe's own ``state``
row instead would start the push without its angular and finger velocities, centimetres off within
16 steps. A stochastic policy's outcome is itself a draw, so physics runs twice from the same
starts, with other action samples. How often those two runs agree is the most any world model can
reach (``ceiling``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import torch
from rich.table import Table
from tqdm import tqdm

from worldsim.data.reader import EpisodeReader
from worldsim.envs.imagination import ImaginationConfig
from worldsim.envs.registration import make_task_envs
from worldsim.envs.tasks import get_task
from worldsim.evaluation.compare import paired_comparison
from worldsim.evaluation.evaluate import wilson_interval
from worldsim.policies.base import Policy, load_policy
from worldsim.policies.runner import ChunkQueue
from worldsim.runtime.atomic import atomic_path
from worldsim.runtime.device import resolve_device
from worldsim.runtime.run_logging import write_json
from worldsim.runtime.validation import check_int
from worldsim.runtime.video import upscale, write_video
from worldsim.world_models.env import ImaginedVectorEnv
from worldsim.world_models.metrics import agreement

KINDS = ("episode_start", "keyframe")


@dataclass
class StartAgreementConfig:
    """A policy run from the same real starts in a world model and in physics (:func:`run_start_agreement`).
    Set the imagination as the ``train-rl`` run to be checked had it."""

    policy: Path
    """Pixel policy checkpoint or run folder (e.g. the BC policy an RL run starts from, or the run itself)."""
    task: str = "PushCube-v0"
    """Task of the keyframes to start from."""
    starts: int = 200
    """Starts to run from (each once in imagination, twice in physics)."""
    deterministic: bool = False
    """Take the policy's mean action (RL samples; then the ceiling is not measured)."""
    seed: int = 0
    """Seed of the starts, the imagination and the action samples (same seed, same starts)."""
    videos: int = 8
    """Starts shown in imagined_vs_real.mp4 (imagined | physics)."""
    out: Path = Path("runs/imagined_vs_real")
    """Folder for report.json, agreement.png and imagined_vs_real.mp4."""
    progress: bool = True
    """Show a progress bar."""
    imagination: ImaginationConfig = field(default_factory=ImaginationConfig)
    """The imagination of the train-rl run to check (--world-model and --keyframes, a file with
    state observations, are needed): its starts (episode starts and keyframes) and horizon. The
    policy runs on its device too."""

    SET_BY_COMMAND: ClassVar[dict[str, tuple[str, ...]]] = {"imagination": ("reward_type",)}
    """Only outcomes are compared: the reward does not matter."""

    def __post_init__(self) -> None:
        self.imagination.require("imagined-vs-real")
        check_int("starts", self.starts)
        check_int("videos", self.videos, 0)


def run_start_agreement(config: StartAgreementConfig) -> dict[str, Any]:
    """:func:`compare_from_starts` as ``config`` says; writes ``report.json`` and
    ``agreement.png`` (and the video) to ``config.out`` and returns the report."""
    policy = load_policy(config.policy, device=resolve_device(config.imagination.device)).eval()
    report = compare_from_starts(policy, get_task(config.task).name, config.imagination, starts=config.starts,
                                 seed=config.seed, deterministic=config.deterministic, videos=config.videos,
                                 out=config.out, progress=config.progress)
    report["policy"] = str(config.policy)
    write_json(Path(config.out) / "report.json", report)
    plot_start_agreement(report, Path(config.out) / "agreement.png")
    return report


@dataclass
class Rollouts:
    """One closed-loop run of a policy from a batch of starts."""

    success: np.ndarray
    """Whether each start's episode succeeded at some step within the horizon."""
    steps: np.ndarray
    """Steps each episode ran before it ended (success, failure, time limit or horizon)."""
    frames: np.ndarray
    """The first starts' observed frames ``(videos, steps + 1, H, W, 3)``, the last held once an
    episode ended."""


@torch.no_grad()
def run_from_starts(env: Any, policy: Policy, obs: Any, horizon: int, *, deterministic: bool,
                    videos: int = 0) -> Rollouts:
    """Run ``policy`` on every env of ``env`` (just reset, its observation ``obs``) for at most
    ``horizon`` steps, one episode each: what happens after an env's episode ends is ignored."""
    n = env.num_envs
    queue = ChunkQueue(policy, n, deterministic=deterministic)
    alive, success, steps = np.ones(n, bool), np.zeros(n, bool), np.zeros(n, np.int64)
    clips = [obs["image"][:videos].copy()]
    for _ in range(horizon):
        obs, _, terminated, truncated, info = env.step(queue(obs))
        success |= alive & np.asarray(info["success"], bool)
        steps += alive
        frame = clips[-1].copy()
        shown = alive[:videos]
        frame[shown] = obs["image"][:videos][shown]
        clips.append(frame)
        alive &= ~np.asarray(terminated | truncated, bool)
        if not alive.any():
            break
    return Rollouts(success, steps, np.stack(clips, axis=1))


def rates(imagined: np.ndarray, real: np.ndarray) -> dict[str, Any]:
    """Both success rates with their Wilson intervals, their paired difference (imagined - real)
    and :func:`~worldsim.world_models.metrics.agreement`."""
    if not len(real):
        return {"starts": 0}
    paired = paired_comparison(real.tolist(), imagined.tolist())
    n = len(real)
    return {"starts": n,
            "imagined_success": float(imagined.mean()), "imagined_ci95": list(wilson_interval(int(imagined.sum()), n)),
            "real_success": float(real.mean()), "real_ci95": list(wilson_interval(int(real.sum()), n)),
            "imagined_minus_real": paired["difference"], "imagined_minus_real_ci95": paired["difference_ci95"],
            "imagined_minus_real_p": paired["p_value"], "agreement": agreement(imagined, real)}


def recorded_start(world: ImaginedVectorEnv, episode: np.ndarray, step: np.ndarray) -> dict[str, np.ndarray]:
    """Reset options that put physics where the imagined envs started: the first recorded state of
    each bank ``episode``, then its recorded actions replayed up to ``step``. The state is read
    from the keyframes file here, for physics alone: on the ``pixels`` and ``video`` rungs the
    imagined env's own bank holds none. ``ValueError`` when the file has no ``state``."""
    bank = world.bank
    with EpisodeReader(bank.path) as reader:
        check_state(reader)
        files = bank.index.file_index
        first = {j: reader.load(int(files[j]), "state")[0] for j in np.unique(episode).tolist()}
    actions = np.zeros((len(episode), int(step.max(initial=0)), bank.actions.shape[1]), np.float32)
    for i, (j, t) in enumerate(zip(episode, step, strict=True)):
        actions[i, :t] = bank.actions[bank.step_start[j]:bank.step_start[j] + t]
    return {"start_state": np.stack([first[j] for j in episode.tolist()]), "replay_actions": actions,
            "replay_steps": step}


def check_state(reader: EpisodeReader) -> None:
    """``ValueError`` when the keyframes file of ``reader`` holds no ``state`` to restart physics from."""
    if "state" not in reader.obs_keys:
        raise ValueError(f"keyframes={str(reader.path)!r} holds no 'state' observations: physics cannot be "
                         "restarted from its states (record it with obs_mode='pixels+state')")


def compare_from_starts(policy: Policy, task: str, imagination: ImaginationConfig, *, starts: int = 200,
                        seed: int = 0, deterministic: bool = False, videos: int = 8,
                        out: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Run ``policy`` from ``starts`` real starts of ``imagination`` (its world model, keyframes
    file, share of keyframe starts and horizon: set them as ``train-rl`` had them) in
    imagination and in physics, twice there, and compare the outcomes start by start.

    ``deterministic``: take the policy's mean action (with it, both physics runs are one and
    the ceiling is not measured); by default actions are sampled, as RL samples them. The same
    ``seed`` and imagination give the same starts whatever the policy or world model, so two
    reports compare start by start. ``out``: where ``imagined_vs_real.mp4`` goes (the first
    ``videos`` starts, imagined | physics). Returns the report (see the module docstring):
    overall and per kind of start (``episode_start``, ``keyframe``), the ceiling and the starts."""
    check_int("starts", starts)
    check_int("videos", videos, 0)
    policy.check_task(get_task(task).instruction)
    env_kwargs = policy.env_kwargs()
    with tqdm(total=3, desc=f"{task}: imagination, physics x2", disable=not progress, leave=False) as bar:
        imagined_env = make_task_envs(task, starts, imagination=imagination.require("compare_from_starts"),
                                      **env_kwargs)
        try:
            world = cast(ImaginedVectorEnv, imagined_env.unwrapped)
            with EpisodeReader(world.bank.path) as reader:
                check_state(reader)
            obs, info = imagined_env.reset(seed=seed)
            episode, step = world.start_episode.copy(), np.asarray(info["episode_step"]).copy()
            restart = recorded_start(world, episode, step)
            horizon = imagination.horizon or world.max_episode_steps
            with torch.random.fork_rng(devices=[]):  # the policy samples from torch's global stream
                torch.manual_seed(seed)
                imagined = run_from_starts(imagined_env, policy, obs, horizon, deterministic=deterministic,
                                           videos=videos)
            bar.update(1)
        finally:
            imagined_env.close()
        physics_env = make_task_envs(task, starts, **env_kwargs)
        try:
            physics = []
            for repeat in range(1 if deterministic else 2):
                obs, _ = physics_env.reset(seed=seed, options=restart)
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed + 1 + repeat)
                    physics.append(run_from_starts(physics_env, policy, obs, horizon, deterministic=deterministic,
                                                   videos=videos if repeat == 0 else 0))
                bar.update(2 if deterministic else 1)
        finally:
            physics_env.close()
    real = physics[0].success
    kind = np.where(step > 0, "keyframe", "episode_start")
    report = {"task": task, "world_model": str(imagination.world_model), "keyframes": str(imagination.keyframes),
              "rung": imagination.rung.name,
              "keyframe_ratio": imagination.keyframe_ratio, "horizon": horizon, "seed": seed,
              "deterministic": deterministic, **rates(imagined.success, real),
              "ceiling": None if deterministic else agreement(physics[1].success, real),
              "by_start": {k: rates(imagined.success[kind == k], real[kind == k]) for k in KINDS},
              "per_start": {"episode": episode.tolist(), "step": step.tolist(),
                            "imagined": imagined.success.tolist(), "real": real.tolist(),
                            "real_repeat": None if deterministic else physics[1].success.tolist(),
                            "imagined_steps": imagined.steps.tolist(), "real_steps": physics[0].steps.tolist()}}
    if out is not None and videos:
        report["video"] = str(write_video(Path(out) / "imagined_vs_real.mp4",
                                          upscale(side_by_side(imagined.frames, physics[0].frames)), fps=10))
    return report


def agreement_table(report: dict[str, Any]) -> Table:
    """Imagined and real success per kind of start, with the imagination's agreement beside the
    base rate and the ceiling."""
    table = Table(title=f"{report['policy']} in {report['world_model']} and in physics, from the same "
                        f"{report['starts']} starts ({report['horizon']} steps)")
    for column in ("starts", "n", "imagined", "real", "imagined - real", "agreement", "majority", "balanced acc."):
        table.add_column(column, justify="left" if column == "starts" else "right")
    for name, part in (("all", report), *report["by_start"].items()):
        if part["starts"]:
            a = part["agreement"]
            table.add_row(name.replace("_", " "), str(part["starts"]), _rate(part, "imagined"), _rate(part, "real"),
                          f"{100 * part['imagined_minus_real']:+.1f} (p {part['imagined_minus_real_p']:.2f})",
                          f"{a['accuracy']:.1%}", f"{a['majority_accuracy']:.1%}", f"{a['balanced_accuracy']:.1%}")
    if report["ceiling"] is not None:
        c = report["ceiling"]
        table.add_row("physics twice (ceiling)", str(c["episodes"]), "", "", "", f"{c['accuracy']:.1%}",
                      f"{c['majority_accuracy']:.1%}", f"{c['balanced_accuracy']:.1%}")
    return table


def plot_start_agreement(report: dict[str, Any], path: Path) -> Path:
    """Success in imagination and in physics per kind of start (95% intervals), and how often
    they agree beside the majority answer and physics' own repeat."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = {name: part for name, part in (("all", report), *report["by_start"].items()) if part["starts"]}
    x = np.arange(len(parts))
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for offset, side, colour in ((-0.18, "imagined", "tab:orange"), (0.18, "real", "tab:blue")):
        rate = np.array([p[f"{side}_success"] for p in parts.values()])
        ci = np.array([p[f"{side}_ci95"] for p in parts.values()])
        left.bar(x + offset, rate, 0.36, yerr=[rate - ci[:, 0], ci[:, 1] - rate], capsize=3, color=colour,
                 label="physics" if side == "real" else side)
    left.set(xticks=x, xticklabels=[k.replace("_", " ") for k in parts], ylabel="success", ylim=(0, 1),
             title="success from the same starts")
    left.legend()
    measures = {"imagination agrees": "accuracy", "majority answer": "majority_accuracy"}
    for k, (label, key) in enumerate(measures.items()):
        right.bar(x + (k - 0.5) * 0.36, [p["agreement"][key] for p in parts.values()], 0.36, label=label)
    if report["ceiling"] is not None:
        right.axhline(report["ceiling"]["accuracy"], color="grey", ls="--", lw=1, label="physics twice (all)")
    right.set(xticks=x, xticklabels=[k.replace("_", " ") for k in parts], ylim=(0, 1), title="outcome agreement")
    right.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    return path


def _rate(part: dict[str, Any], side: str) -> str:
    low, high = part[f"{side}_ci95"]
    return f"{100 * part[f'{side}_success']:.0f}% ({100 * low:.0f}-{100 * high:.0f})"


def side_by_side(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Clips ``(V, T, H, W, 3)`` of two runs (of any lengths ``T``) as one video, each start's
    pair side by side, the shorter clip holding its last frame, one start after another."""
    length = max(left.shape[1], right.shape[1])
    held = [np.concatenate([c, c[:, -1:].repeat(length - c.shape[1], axis=1)], axis=1) for c in (left, right)]
    return np.concatenate(np.concatenate(held, axis=3))
