"""Which learned judge of an imagined frame's success can imagination train on: the success head,
or a frame classifier (WoVR's and RLinf's separate image classifier)?

For one seed, the imagination ladder's BC base and round-0 data (the ladder's own files, reused
when ``--out`` holds them: 100 noisy expert demonstrations, BC, 100 BC episodes), and four
round-0 world models trained as co-evolution trains them (``tiny``, ``--wm-steps``), all on the
same data with the same seed:

- ``pixels``: with the data's state (the object pathway), judged by the task's rule on the
  positions the model read and predicted, or by its success head (at 0.5: a rule-judged model
  calibrates no cut);
- ``pixels+classifier``: the same, with the frame classifier (``outcome="classifier"``) trained
  beside the head and judging, at the cut calibrated on its validation episodes;
- ``video``: trained without state (no pathway), judged by the head, at its calibrated cut;
- ``video+classifier``: the same with the frame classifier.

Each is replayed open loop on ``--heldout-episodes`` new episodes of the BC policy, balanced
between successes and failures, on its rung (``eval-wm``'s replays: full episodes from their
starts, the last 8 steps of each episode, balanced 8-step keyframe windows where there are any),
beside physics' own agreement on the same episodes with the cube 0.33 mm and 1 mm off, and
the learned judge applied to the real frames of the same episodes (its own ceiling: what it
would agree with perfect dynamics). Each accuracy has its 95% Wilson interval; each judge is
compared with the video rung's head on the same full replays (McNemar, paired by episode).

    python benchmarks/studies/frame_judge.py --seed 0 --out runs/ladder
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from worldsim.data.merge import merge_episode_files
from worldsim.envs.imagination import ImaginationConfig
from worldsim.evaluation.compare import paired_comparison
from worldsim.evaluation.evaluate import wilson_interval
from worldsim.pipelines.coevolve import CoevolveConfig, collect_real, train_wm
from worldsim.pipelines.coevolve_parts import WorldModelRounds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py, the ladder
from coevolve import bc_base  # noqa: E402
from common import STUDY_RESULTS, report  # noqa: E402
from imagination_ladder import fidelity, heldout_episodes  # noqa: E402

TASK = "PushCube-v0"
MODELS = {  # name: (rung, judge the model trains and is judged by; None: its own)
    "pixels": ("pixels", None), "pixels+classifier": ("pixels", "classifier"),
    "video": ("video", None), "video+classifier": ("video", "classifier")}
JUDGED = [("pixels", None), ("pixels", "head"), ("pixels+classifier", None), ("video", None),
          ("video+classifier", None)]
"""The rows: a model and who judges its replays (None: its own outcome)."""


def with_interval(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """An agreement row's accuracy, its 95% Wilson interval, base rate and count."""
    if row is None:
        return None
    n = row["episodes"]
    correct = row["true_positive"] + row["true_negative"]
    return {"accuracy": row["accuracy"], "ci95": list(wilson_interval(correct, n)), "base_rate": row["base_rate"],
            "recall": row["recall"], "specificity": row["specificity"], "episodes": n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wm-steps", type=int, default=800)
    parser.add_argument("--heldout-episodes", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/ladder"))
    args = parser.parse_args()
    seed, base = args.seed, args.out / f"base_s{args.seed}"
    demos, bc = bc_base(TASK, seed, 100, 1500, base, args.threads)
    held = heldout_episodes(bc, TASK, args.heldout_episodes, base / f"heldout{args.heldout_episodes}.h5",
                            seed + 10_000)  # apart from the ladder's held-out (+50,000) and test (+30,000) seeds
    folder = args.out / f"frame_judge_s{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    models: dict[str, Path] = {}
    for name, (rung, judge) in MODELS.items():
        config = CoevolveConfig(base_policy=bc, task=TASK, suite=None, demonstrations=demos, real_episodes=100,
                                rounds=1, wm=WorldModelRounds(preset="tiny", steps=args.wm_steps), seed=seed,
                                out=folder, torch_threads=args.threads, progress=False,
                                imagination=ImaginationConfig(rung=rung, judge=judge))
        if not (folder / "all.h5").exists():  # the ladder's round-0 collection: the same seed, the same episodes
            collect_real(config, bc, folder / "data.h5", seed)
            merge_episode_files([demos, folder / "data.h5"], folder / "all.h5")
        models[name] = folder / f"wm_{name}"
        if not (models[name] / "summary.json").exists():
            train_wm(config, folder / "all.h5", models[name], None, seed)
    rows: dict[str, Any] = {}
    outcomes: dict[str, list[bool]] = {}
    for name, judge in JUDGED:
        rung = MODELS[name][0]
        key = f"{name}, judged by {judge}" if judge else name
        figures = fidelity(models[name], held, rung, folder / f"fidelity_{name}_{judge or 'own'}", seed, judge=judge)
        report_file = json.loads((folder / f"fidelity_{name}_{judge or 'own'}" / "fidelity.json").read_text())
        by = report_file["success_by_horizon"]
        outcomes[key] = [row["real"] == row["imagined"] for row in report_file["confusion"]]
        summary = json.loads((models[name] / "summary.json").read_text())
        rows[key] = {"rung": rung, "judge": figures["judge"], "cut": report_file["success_threshold"],
                     "cut_calibrated": summary["success_threshold_calibrated"],
                     "full": with_interval(by["full"]), "last_8": with_interval(by["last_8"]),
                     "keyframe_8_balanced": with_interval(by.get("keyframe_8_balanced")),
                     # the learned judge on the real frames (a rule-judged model's: its head): its own ceiling
                     "real_frames": with_interval(report_file["success_head_on_real_frames"]["episode"]),
                     "real_frame_recall": report_file["success_head_on_real_frames"]["frame_recall"],
                     "real_frame_false_positive_rate":
                         report_file["success_head_on_real_frames"]["frame_false_positive_rate"],
                     "psnr_8": figures["psnr_8"], "train_seconds": summary["train_seconds"]}
        print(key, rows[key], flush=True)
    physics = report_file["physics_ceiling"] or {}
    reference = "video"
    for key, correct in outcomes.items():
        if key != reference:
            c = paired_comparison(outcomes[reference], correct)
            rows[key]["full_vs_video_head"] = {"difference": 100 * c["difference"],
                                               "ci95": [100 * x for x in c["difference_ci95"]],
                                               "p_value": c["p_value"]}
    report(f"frame_judge_s{seed}", {
        "task": TASK, "seed": seed, "heldout": report_file["held_out"],
        "physics_full": {k: with_interval(v) for k, v in physics.items() if isinstance(v, dict) and "accuracy" in v},
        "rows": rows}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
