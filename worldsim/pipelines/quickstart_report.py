"""``report.md`` of a quickstart run: what each stage measured, said as a careful reader would.

Success rates come with their 95% intervals and the two policies are compared on the same
episodes (a gain is called one only when McNemar's test finds it); the world model's outcome
agreement stands beside its base rate; the budgets actually run are listed, and a stage a time
budget cut short is flagged; a failure detector's ROC-AUC is called a result only when its interval
lies above chance (:mod:`worldsim.failure.verdict`); every plot and video the run made is linked.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from worldsim.envs.imagination import Rung
from worldsim.evaluation.compare import verdict
from worldsim.failure.verdict import sentence
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


VERDICT_KEYS = ("auc", "interval", "verdict", "call", "rollouts", "failures", "seeds")


def detection_summary(results: dict[str, Any], task: str) -> dict[str, Any]:
    """``detectors`` and ``detection`` of a quickstart summary, from ``worldsim detect``'s
    ``results.json`` on ``task``: per detector, the seen split's ROC-AUC, 95% interval and verdict
    at the shortest success's step (``step``) and where the rollouts differ, at the median
    success's step (``where_rollouts_differ``); and the rollouts' counts and lengths."""
    lengths = results["lengths"][task]
    detectors = {}
    for name, d in results["detectors"].items():
        if "verdicts" not in d:
            raise ValueError(f"{name} in the detection results holds no verdicts (an older worldsim wrote it): "
                             "remove detect/ from the run folder and --resume to rerun detection")
        seen = d["verdicts"]["seen"]
        detectors[name] = {**{k: seen["shortest_success"][k] for k in VERDICT_KEYS},
                           "step": lengths["shortest_success"],
                           "where_rollouts_differ": {"step": lengths["median_success"],
                                                     **{k: seen["median_success"][k] for k in VERDICT_KEYS}}}
    return {"detectors": detectors, "detection": {"rollouts": results["episodes"], "failures": results["failures"],
                                                  "median_failure_length": lengths["median_failure"]}}


def _names(names: list[str]) -> str:
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


def detection_lines(summary: dict[str, Any], out: Path) -> list[str]:
    """Section 5: each detector's verdict in words, with its interval, at both steps; the base rate;
    what the scores read; and, when no detector separates, why these rollouts cannot be told apart."""
    if summary["detection_skipped"]:
        return [f"Skipped: {summary['detection_skipped']}"]
    d, detectors = summary["detection"], summary["detectors"]
    first = next(iter(detectors.values()))
    late = first["where_rollouts_differ"]
    base_rate = _pct(d["failures"] / d["rollouts"])
    lines = [
        f"{d['rollouts']} rollouts, {_count(d['failures'], 'failure')} (base rate {base_rate}); "
        f"each of {first['seeds']} seeds tests {first['rollouts']} of them ({first['failures']} failures). Every "
        "rollout's score (its running maximum) is read at the same step, so that failures running to the time limit "
        "give nothing away: at the shortest success's length, and, where the rollouts differ, at the median "
        "success's, among the rollouts still running then. A ROC-AUC is called a result only when its 95% interval "
        "(episode bootstrap) lies above 0.5, chance.", "",
        f"| detector | steps 1-{first['step']}, all test rollouts | steps 1-{late['step']}, the {late['rollouts']} "
        f"still running ({late['failures']} failures) |",
        "|---|---|---|",
        *[f"| {name} | {sentence(v)} | {sentence(v['where_rollouts_differ'])} |" for name, v in detectors.items()],
        "",
    ]
    calls = {name: {v["call"], v["where_rollouts_differ"]["call"]} for name, v in detectors.items()}
    separating = [name for name, c in calls.items() if "separates" in c]
    inverted = [name for name, c in calls.items() if "below chance" in c]
    if separating:
        lines.append(f"{_names(separating)} {'separates' if len(separating) == 1 else 'separate'} this policy's "
                     "failures from its successes (see the table for where).")
    else:
        widths = [(w["interval"][1] - w["interval"][0]) / 2 for v in detectors.values()
                  for w in (v, v["where_rollouts_differ"]) if w["interval"][0] == w["interval"][0]]
        lines.append(
            f"No detector tells this policy's failures from its successes here. The first reading covers steps "
            f"1-{first['step']} of the {d['median_failure_length']} a failure runs (the shortest success ended "
            f"there); by step {late['step']} half the successes have ended, leaving "
            f"{late['rollouts'] - late['failures']} per seed beside {late['failures']} failures"
            + (f"; on so few test rollouts the 95% intervals span about ±{sum(widths) / len(widths):.2f}"
               if widths else "")
            + ", so only a score far from chance could show."
            + (f" About {rollouts_for_width(d['rollouts'], sum(widths) / len(widths), 0.1):,} rollouts "
               "(`--real-episodes`) would narrow them to ±0.10." if widths else ""))
    if inverted:
        lines.append(f"{_names(inverted)}: below chance, {'its' if len(inverted) == 1 else 'their'} score is inverted "
                     "(it ranks successes as riskier): a finding about the score, not a detector that works.")
    lines += ["", f"TPR, TNR and balanced accuracy below read each rollout to its end: failures run "
              f"{d['median_failure_length']} steps, successes end at a median {late['step']}, so a score that rises "
              "with time alarms on more failures without telling them apart; they are not detection results on "
              "their own.", "", (out / "detect" / "table.md").read_text().replace("](", "](detect/"), "",
              "![ROC](detect/roc.png)"]
    return lines


def rollouts_for_width(rollouts: int, width: float, target: float) -> int:
    """Rollouts that would narrow an interval of half-width ``width`` on ``rollouts`` to ``target``
    (a bootstrap interval shrinks as one over the square root of the rollouts), rounded up to 50."""
    return max(rollouts, math.ceil(rollouts * (width / target) ** 2 / 50) * 50)


REGION_NAMES = {"gripper": "the gripper", "gripper_start": "where the arm started (a ghost arm shows there)",
                "object": "the task's object", "object_start": "where the object started (a doubled cube shows there)",
                "other_cubes": "the other cubes (one moved but not drawn vanishes there)"}


def region_lines(regions: dict[str, dict[str, float]] | None) -> list[str]:
    """The report's line on the windows the task and the eye are on, 32 steps from episode starts,
    each beside the copied start frame (none for reports written without them)."""
    if not regions:
        return []
    parts = [f"{REGION_NAMES.get(name, name)} {r['model']:.1f} dB (copied {r['copy_first']:.1f})"
             for name, r in regions.items()]
    return [f"- PSNR after 32 steps in the windows on {'; '.join(parts)};"]


def reading_lines(summary: dict[str, Any]) -> list[str]:
    """The policies read with sampled actions too, and the verdict with each at its better reading
    (a gain that sampling the BC policy already gives is no gain of RL)."""
    best = summary.get("best_readings")
    if not best:
        return []
    sampled, chosen = best["sampled_success"], best["readings"]
    return [f"Read with sampled actions on the same episodes: BC {_pct(sampled['bc'])}, after GRPO "
            f"{_pct(sampled['final'])}. Each at its better reading (BC: {chosen['bc']}, GRPO: {chosen['final']}; "
            "chosen on these same episodes): " + verdict(best["comparison"], "BC", "GRPO"), ""]


def rung_line(rung: str, aids: list[str] | None = None) -> str:
    """The report's sentences naming the rung GRPO imagined on (and the videos and fidelity show)
    and, where the summary lists them, the aids it took besides what the model learned."""
    taken = f" What it took besides what the model learned: {'; '.join(aids)}." if aids else ""
    return (f"GRPO imagined on {Rung.from_json(rung).meaning}{taken} The side-by-side videos show the frames the "
            "policy saw, and section 4 replays the world model on the same rung.")


def write_report(out: Path, summary: dict[str, Any]) -> Path:
    """Write ``out/report.md`` and ``out/summary.json`` of a quickstart run's ``summary``."""
    c = summary["comparison"]
    wm = summary["world_model"]
    held = wm["held_out"]
    agreement = wm["agreement"]
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
        rung_line(summary["rung"], summary.get("aids")), "",
        f"Both policies ran the same {c['episodes']} real episodes "
        f"(episode k starts from the same state for both):", "",
        "| policy | real success | 95% CI |", "|---|---|---|",
        f"| BC (base) | {_pct(c['before']['success_rate'])} | {_pct(c['before']['ci95'][0])} - "
        f"{_pct(c['before']['ci95'][1])} |",
        f"| after GRPO in imagination | {_pct(c['after']['success_rate'])} | {_pct(c['after']['ci95'][0])} - "
        f"{_pct(c['after']['ci95'][1])} |", "",
        verdict(c, "BC", "GRPO") + f" Discordant episodes: {c['only_after_succeeded']} only after GRPO, "
        f"{c['only_before_succeeded']} only BC.", "",
        *reading_lines(summary),
        *guard_lines(summary["guard"]),
        "Imagined success of the same policies (the world model's view): "
        + ", ".join(_pct(s) for s in summary["imagined_success"]) + ". Per-round table, guard verdicts and "
        "videos: [coevolve/report.md](coevolve/report.md); ![success](coevolve/success.png)", "",
        "## 4. How far the world model can be trusted", "",
        f"On {held['episodes']} new real episodes of the BC policy ({_count(held['successes'], 'success')}, "
        f"{_count(held['failures'], 'failure')}, {_count(held['near_miss_failures'], 'near miss')}; base rate "
        f"{_pct(held['base_rate'])}{', balanced' if held['balanced'] else ''}):", "",
        f"- image fidelity: PSNR {wm['psnr_at_8']:.1f} dB after 8 imagined steps, {wm['psnr_at_32']:.1f} dB after 32"
        + (f" (the start frame copied, the trivial predictor: {wm['psnr_copy_first'][0]:.1f} / "
           f"{wm['psnr_copy_first'][1]:.1f} dB);" if None not in wm.get("psnr_copy_first", [None]) else ";"),
        *region_lines(wm.get("region_psnr_at_32")),
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
        "calibrated (constant conformal band) on held-out successes, and tested on the rest.", "",
        *detection_lines(summary, out), "",
        "## Plots and videos", "", *media_links(out), "",
        "## Stage timings", "", "| stage | seconds |", "|---|---|",
        *[f"| {name} | {seconds} |" for name, seconds in summary["timings_s"].items()],
    ]
    path = out / "report.md"
    with atomic_path(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n")
    write_json(out / "summary.json", summary)
    return path
