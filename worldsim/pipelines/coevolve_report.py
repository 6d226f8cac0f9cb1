"""What a co-evolution run leaves for a person to look at: the success plot per round (real vs
imagined), side-by-side videos (real | imagined) of the final policy, and ``report.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from worldsim.envs.imagination import DEFAULT_IMAGINATION, ImaginationConfig
from worldsim.evaluation.compare import verdict
from worldsim.evaluation.evaluate import wilson_interval
from worldsim.runtime.atomic import atomic_path


def plot_rounds(results: dict[str, Any], path: Path) -> Path:
    """Real success per round (pooled over tasks, with its 95% interval, and the per-task points)
    and imagined success of the same policy (with its interval); rolled-back rounds are marked.
    Every point has a marker, so a single round still shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = results["rounds"]
    x = [r["round"] for r in rounds]
    fig, ax = plt.subplots(figsize=(6, 4))

    def with_interval(key: str) -> tuple[list[float], np.ndarray]:
        rates = [r[key]["success_rate"] for r in rounds]
        bounds = np.array([wilson_interval(round(r[key]["success_rate"] * r[key]["episodes"]), r[key]["episodes"])
                           for r in rounds])
        return rates, np.abs(bounds.T - np.array(rates))

    rates, spread = with_interval("real")
    ax.errorbar(x, rates, yerr=spread, fmt="o-", capsize=4, color="tab:blue", label="real, 95% CI")
    for task in results["tasks"]:
        ax.plot(x, [r["real"]["per_task"][task]["success_rate"] for r in rounds], ".", alpha=0.5,
                label=f"real {task}")
    if all("imagined" in r for r in rounds):
        rates, spread = with_interval("imagined")
        ax.errorbar(np.asarray(x) + 0.05, rates, yerr=spread, fmt="s--", capsize=4, color="tab:orange",
                    label="imagined, 95% CI")
    for r in rounds:
        if not r["accepted"]:
            ax.axvline(r["round"], color="tab:red", alpha=0.3)
            ax.text(r["round"], 0.02, "rolled back", rotation=90, color="tab:red", fontsize=8)
    ax.set_xticks(x)
    ax.set_xlabel("round (0: base policy)")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.set_title(f"{results['mode']} ({results['algo']}), {results['real_budget']} real training episodes")
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    return path


def side_by_side_videos(policy_path: Path, world_model: Path, tasks: list[str], episodes: int, seed: int,
                        out: Path, imagination: ImaginationConfig = DEFAULT_IMAGINATION) -> list[Path]:
    """``episodes`` real episodes per task of the policy (deterministic, recorded into
    ``out/final_rollouts.h5``) next to the policy acting in imagination from the same real
    starts, as it trained there (``imagination``'s rung: the frames it saw): one mp4 per task,
    real on the left, at least 256 pixels high."""
    import torch

    from worldsim.data.collect import collect_episodes
    from worldsim.policies import load_policy
    from worldsim.runtime.video import upscale, write_video
    from worldsim.world_models import EpisodeBank, WorldModel
    from worldsim.world_models.replay import open_loop, side_by_side

    policy = load_policy(policy_path).eval()
    model = WorldModel.from_pretrained(world_model)
    data = out / "final_rollouts.h5"
    collect_episodes(tasks, lambda task: policy, episodes, data, num_envs=episodes, seed=seed + 30_000,
                     image_size=model.config.image_size, obs_mode="pixels+state",
                     deterministic=True, overwrite=True, progress=False)
    bank = EpisodeBank(data)
    paths = []
    for task in tasks:
        chosen = np.array([j for j, info in enumerate(bank.infos) if info.task == task])
        run = open_loop(model, bank, chosen, np.zeros(len(chosen), np.int64), int(bank.lengths[chosen].max()),
                        policy=policy, generator=torch.Generator().manual_seed(seed), imagination=imagination)
        clips = [side_by_side(run, i, until=int(bank.lengths[j])) for i, j in enumerate(chosen)]
        paths.append(write_video(out / f"{task}_real_vs_imagined.mp4", upscale(np.concatenate(clips)), fps=10))
    return paths


def write_report(results: dict[str, Any], path: Path) -> Path:
    """``report.md``: the per-round table (real success with 95% intervals per task, imagined
    success, the guard's verdict, real episodes used), the totals and links to plot and videos."""
    tasks = results["tasks"]
    lines = [f"# Co-evolution report ({results['mode']}, {results['algo']})", "",
             f"Tasks: {', '.join(tasks)}. Real training episodes (budget): **{results['real_budget']}**; "
             f"real evaluation episodes: {results['evaluation_episodes']}"
             + (f"; the world model also learned from the demonstrations in {results['demonstrations']}"
                if results.get("demonstrations") else "")
             + f". Wall clock: {results['wall_clock_s'] / 60:.1f} min.", "",
             f"Real success, final policy against the base on the same episodes: "
             f"{verdict(results['comparison'], 'base', 'final')}", "",
             *([f"On {results['test']['episodes_per_task']} test episodes per task that no round saw (the guard "
                f"chose the final policy by the rounds' own): "
                f"{verdict(results['test']['comparison'], 'base', 'final')}", ""] if results.get("test") else []),
             "| round | " + " | ".join(tasks) + " | real mean | imagined mean | verdict | real episodes used |",
             "|---" * (len(tasks) + 5) + "|"]
    for r in results["rounds"]:
        cells = []
        for task in tasks:
            t = r["real"]["per_task"][task]
            cells.append(f"{100 * t['success_rate']:.0f}% [{100 * t['ci95'][0]:.0f}-{100 * t['ci95'][1]:.0f}]")
        imagined = f"{100 * r['imagined']['success_rate']:.1f}%" if "imagined" in r else "-"
        guard = "base" if r["round"] == 0 else ("accepted" if r["accepted"] else
                                                "rolled back: " + "; ".join(r.get("reasons", [])))
        lines.append(f"| {r['round']} | " + " | ".join(cells) +
                     f" | {100 * r['real']['success_rate']:.1f}% | {imagined} | {guard} | "
                     f"{r['real_episodes_used']} |")
    lines += ["", "![success per round](success.png)", ""]
    if results["videos"]:
        lines += ["Final policy, real (left) vs imagined (right) from the same start:", ""]
        lines += [f"- [{Path(v).name}]({Path(v).relative_to(path.parent)})" for v in results["videos"]]
    with atomic_path(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")
    return path
