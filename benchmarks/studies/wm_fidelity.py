"""World-model fidelity after a stated data and training budget, on a balanced held-out set.

1. collect ``--episodes`` noisy scripted-expert episodes of the task (64x64, ``pixels+state``;
   displacement noise ``--noise``, random actions with probability ``--epsilon``) for training,
   and ``--val-episodes`` noisier ones with another seed for evaluation, of which a balanced set
   (as many failures as successes, near misses among the failures) is kept;
2. train the ``--config`` world model for ``--steps`` optimiser steps (``--time-budget``, if
   given, only as a safety net: the result says when it cut the run);
3. evaluate it (:func:`worldsim.world_models.evaluate_world_model`): PSNR per imagined step,
   imagined-vs-real outcome agreement beside its base rate at the horizons RL in imagination
   uses (replays of 8/16/40 steps from keyframes) and over full replays, the task object's
   position error after first contact, and the success head on the real frames.

Targets (issue 17): agreement >= 90% at the RL horizon from keyframes and >= 80% over full
replays on a balanced set; object error <= 2 cm 16 steps after first contact; PSNR >= 22 dB at
32 steps. Prints one JSON line last (kept in ``benchmarks/studies/results/wm_fidelity.json``); the run
folder (``--out``) keeps the data, model, metrics, plots and videos.

    python benchmarks/studies/wm_fidelity.py --episodes 1000 --steps 3000 --out runs/bench_wm
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from worldsim.data.collect import collect_episodes
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.runtime.threads import use_torch_threads
from worldsim.world_models import TrainWMConfig, WorldModel, evaluate_world_model, train_world_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

WITHOUT_PATHWAY = {"objects": None, "judge": {"outcome": "head"}, "frames": {"anchor": "last"}}
"""The preset's architecture without the object pathway: judged by the head, drawn from the last frame."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--config", default="tiny", choices=["tiny", "base"])
    parser.add_argument("--episodes", type=int, default=1000, help="training episodes")
    parser.add_argument("--val-episodes", type=int, default=400, help="held-out episodes collected (then balanced)")
    parser.add_argument("--noise", type=float, default=0.3, help="expert action noise (std), training")
    parser.add_argument("--epsilon", type=float, default=0.2, help="expert random-action rate, training")
    parser.add_argument("--val-noise", type=float, default=0.6, help="expert action noise, held-out")
    parser.add_argument("--val-epsilon", type=float, default=0.3, help="expert random-action rate, held-out")
    parser.add_argument("--object-pathway", action=argparse.BooleanOptionalAction, default=None,
                        help="objects first, then the frame (default: the preset's, on in tiny and base)")
    parser.add_argument("--steps", type=int, default=3000, help="optimiser steps")
    parser.add_argument("--time-budget", type=float, default=None, help="safety net: stop training after this many s")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: the idle cores)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--out", type=Path, default=Path("runs/bench_wm"))
    args = parser.parse_args()
    use_torch_threads(args.threads or None)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    data, held_out = args.out / "train.h5", args.out / "val.h5"
    for path, count, seed, noise, epsilon in ((data, args.episodes, 0, args.noise, args.epsilon),
                                              (held_out, args.val_episodes, 1000, args.val_noise, args.val_epsilon)):
        if not path.exists():
            def expert(task: str, seed: int = seed, noise: float = noise, epsilon: float = epsilon) -> ScriptedExpert:
                return ScriptedExpert(ScriptedExpertConfig(task, noise, epsilon, seed))

            collect_episodes([args.task], expert, count, path, num_envs=50, seed=seed, progress=False)
    collect_s = time.time() - start
    summary = train_world_model(TrainWMConfig(
        data=data, out=args.out / "wm", steps=args.steps, batch_size=args.batch_size,
        time_budget=args.time_budget, val_fraction=0.05, val_every=500, video_every=1000, checkpoint_every=500,
        device=args.device, torch_threads=args.threads or None, overwrite=True,
        preset=args.config, model={} if args.object_pathway in (None, True) else WITHOUT_PATHWAY))
    fidelity = evaluate_world_model(args.out / "wm", held_out, balance=True, out=args.out / "eval", progress=False)
    contact = fidelity["object_error_after_contact"]
    agreement = {name: {k: a[k] for k in ("accuracy", "balanced_accuracy", "base_rate", "episodes")}
                 for name, a in fidelity["success_by_horizon"].items() if a is not None}
    report("wm_fidelity", {
        "task": args.task, "config": args.config,
        "object_pathway": WorldModel.from_pretrained(args.out / "wm").objects is not None,
        "train_episodes": args.episodes, "train_noise": args.noise,
        "train_epsilon": args.epsilon, "held_out": fidelity["held_out"], "val_noise": args.val_noise,
        "val_epsilon": args.val_epsilon, "train_steps": summary["steps"], "steps_asked": args.steps,
        "stopped_by": summary["stopped_by"], "train_seconds": summary["train_seconds"],
        "collect_seconds": round(collect_s, 1), "parameters": summary["parameters"],
        "psnr_at_8": fidelity["psnr_at_8"], "psnr_at_32": fidelity["psnr_at_horizon"],
        "agreement": agreement,
        "head_on_real_frames": fidelity["success_head_on_real_frames"]["episode"]["accuracy"],
        "object_error_after_contact_cm": contact["imagined_cm"] if contact else None,
        "object_error_at_16_cm": contact["at_horizon_cm"] if contact else None,
        "detector_floor_cm": contact["real_cm"] if contact else None,
        "targets": {"agreement_keyframe": 0.9, "agreement_full": 0.8, "object_error_at_16_cm": 2.0,
                    "psnr_at_32": 22.0}}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
