"""``report.md`` of a quickstart run: what each stage measured, said as a careful reader would.

Success rates come with their 95% intervals and the two policies are compared on the same
episodes (a gain is called one only when McNemar's test finds it); the world model's outcome
agreement stands beside its base rate; the budgets actually run are listed, and a stage a time
budget cut short is flagged; every plot and video the run made is linked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worldsim.evaluation.compare import verdict
from worldsim.runtime.atomic import atomic_path
from worldsim.runtime.run_logging import write_json

MEDIA = (".png", ".mp4", ".gif")


def _pct(rate: float) -> str:
    return f"{100 * rate:.1f}%"


def _count(n: int, noun: str) -> str:
    """``1 near miss``, ``2 near misses``, ``0 successes``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'}"


def budget_lines(summary: dict[str, Any]) -> list[str]:
    """The budgets each stage ran, and a warning for any a time budget cut."""
    b = summary["budgets"]
    lines = ["| stage | ran | asked | stopped by |", "|---|---|---|---|",
             f"| behaviour cloning | {b['bc']['steps']} steps | {b['bc']['asked']} | {b['bc']['stopped_by']} |",
             f"| world model | {b['world_model']['steps']} steps | {b['world_model']['asked']} | "
             f"{b['world_model']['stopped_by']} |",
             f"| GRPO in imagination | {b['grpo']['env_steps']} env steps | {b['grpo']['asked']} | "
             f"{b['grpo']['stopped_by']} |"]
    cut = [name for name, stage in b.items() if stage["stopped_by"] == "time_budget"]
    if cut:
        lines += ["", f"**Warning: a time budget cut {', '.join(cut)} short; these figures depend on the machine "
                  "and will not repeat elsewhere.**"]
    return lines


def guard_lines(guard: dict[str, Any]) -> list[str]:
    """What co-evolution's guard decided about the GRPO policy (a rolled-back policy is not deployed)."""
    if guard["accepted"]:
        return ["Co-evolution's guard accepted the GRPO policy.", ""]
    return [f"Co-evolution's guard rolled the GRPO policy back ({'; '.join(guard['reasons'])}): the run's final "
            "policy is the BC one.", ""]


def media_links(out: Path) -> list[str]:
    """A link to every plot and video under ``out``, by folder."""
    files = sorted(p for p in out.rglob("*") if p.suffix in MEDIA)
    return [f"- [{p.relative_to(out)}]({p.relative_to(out)})" for p in files]


def ceiling_lines(ceiling: dict[str, float]) -> list[str]:
    """Physics' own agreement on the same episodes: the line per-episode agreement is read against."""
    shifts = {k.removeprefix("shift_"): v for k, v in ceiling.items() if k.startswith("shift_")}
    if not shifts:
        return []
    return ["", "Physics itself, replaying the same recorded actions from each episode's start with the cube "
            + " / ".join(shifts) + " off, agrees " + " / ".join(_pct(v) for v in shifts.values())
            + " with the recorded outcomes: pushes are chaotic, so no model reading the scene from 64x64 "
            "frames can be expected above those lines over full replays."]


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    """Write ``out/report.md`` and ``out/summary.json`` of a quickstart run's ``summary``."""
    c = summary["comparison"]
    wm = summary["world_model"]
    held = wm["held_out"]
    agreement = wm["agreement"]
    if summary["detection_skipped"]:
        detection = [f"Skipped: {summary['detection_skipped']}"]
    else:
        detection = [(out / "detect" / "table.md").read_text().replace("](", "](detect/"), "",
                     "![ROC](detect/roc.png)"]
    contact = wm["object_error_16_after_contact_cm"]
    lines = [
        f"# worldsim quickstart: {summary['task']}", "",
        f"Seed {summary['seed']}, {summary['torch_threads']} torch threads, "
        f"{summary['wall_clock_s'] / 60:.1f} minutes. "
        "Every budget is a number of steps: the same seed gives the same figures on another machine.", "",
        "## Budgets", "", *budget_lines(summary), "",
        "## 1-2. Expert demonstrations and behaviour cloning", "",
        f"{summary['demos']} noisy scripted-expert episodes -> TinyVLA, {summary['budgets']['bc']['steps']} steps; "
        f"final training loss "
        f"{summary['bc_loss']['train']:.4f}, validation loss {summary['bc_loss']['val']:.4f} "
        "([curves](bc/curves.png)).", "",
        "## 3. RL in imagination: is the post-trained policy better?", "",
        f"Both policies ran the same {c['episodes']} real episodes "
        f"(episode k starts from the same state for both):", "",
        "| policy | real success | 95% CI |", "|---|---|---|",
        f"| BC (base) | {_pct(c['before']['success_rate'])} | {_pct(c['before']['ci95'][0])} - "
        f"{_pct(c['before']['ci95'][1])} |",
        f"| after GRPO in imagination | {_pct(c['after']['success_rate'])} | {_pct(c['after']['ci95'][0])} - "
        f"{_pct(c['after']['ci95'][1])} |", "",
        verdict(c, "BC", "GRPO") + f" Discordant episodes: {c['only_after_succeeded']} only after GRPO, "
        f"{c['only_before_succeeded']} only BC.", "",
        *guard_lines(summary["guard"]),
        "Imagined success of the same policies (the world model's view): "
        + ", ".join(_pct(s) for s in summary["imagined_success"]) + ". Per-round table, guard verdicts and "
        "videos: [coevolve/report.md](coevolve/report.md); ![success](coevolve/success.png)", "",
        "## 4. How far the world model can be trusted", "",
        f"On {held['episodes']} new real episodes of the BC policy ({_count(held['successes'], 'success')}, "
        f"{_count(held['failures'], 'failure')}, {_count(held['near_miss_failures'], 'near miss')}; base rate "
        f"{_pct(held['base_rate'])}{', balanced' if held['balanced'] else ''}):", "",
        f"- image fidelity: PSNR {wm['psnr_at_8']:.1f} dB after 8 imagined steps, {wm['psnr_at_32']:.1f} dB after 32;",
        f"- the pushed object's position 16 steps after first contact: {contact:.1f} cm off (median)" if contact
        is not None else "- the pushed object's position error: not measured (no contact in the held-out episodes)",
        f"- imagined vs real outcome over the last 16 steps: {_pct(agreement['last_16']['accuracy'])} agreement, "
        f"balanced accuracy {_pct(agreement['last_16']['balanced_accuracy'])} (base rate "
        f"{_pct(agreement['last_16']['base_rate'])});",
        f"- over full replays from episode starts: {_pct(agreement['full']['accuracy'])}, balanced "
        f"{_pct(agreement['full']['balanced_accuracy'])} (base rate {_pct(agreement['full']['base_rate'])}).",
        *ceiling_lines(wm.get("physics_ceiling") or {}), "",
        "Details: [fidelity/confusion.md](fidelity/confusion.md), ![error growth](fidelity/error_growth.png)", "",
        "## 5. Failure detection on the BC policy's real rollouts", "",
        "Detectors read the features TinyVLA recorded while collecting; they are fitted on part of the rollouts, "
        "calibrated (constant conformal band) on held-out successes, and tested on the rest. "
        "ROC-AUC 0.5 is chance.", "",
        *detection, "",
        "## Plots and videos", "", *media_links(out), "",
        "## Stage timings", "", "| stage | seconds |", "|---|---|",
        *[f"| {name} | {seconds} |" for name, seconds in summary["timings_s"].items()],
    ]
    path = out / "report.md"
    with atomic_path(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")
    write_json(out / "summary.json", summary)
    return path
