"""The contact study of issue 17: which change makes the imagined cube follow the real pushes.

One run = one variant: collect noisy expert PushCube episodes, train the ``tiny`` world model for
``--steps``, and evaluate it (:func:`worldsim.world_models.evaluate_world_model`) on two balanced
held-out sets: new episodes of the policy that recorded the training data (``iid``: expert noise
0.3, random actions 20% of steps; the case of co-evolution, where a model imagines the policy whose
rollouts it learned from) and episodes of a noisier one (``noisier``: noise 0.6, random actions 30%).

The control step is the library's (``worldsim.envs.scene.ACTION_SCALE``, 3 cm per action unit).
The finer-step variant of the README's first table (``--control-step 0.015 --limit-multiplier 2``:
half the step, twice the episode limits) ran with this script as of commit b3dd9cc, which set
those constants module-wide for the run. A scene now carries its action scale
(``Scene.action_scale``), but the envs, the scripted expert and the world model that collection,
training and evaluation make inside the library take no such option, so that variant has no
flag here: finer control was measured, not adopted.

``benchmarks/studies/results/wm_contact_study.json`` gathers the six variants of the README's first table,
run with earlier versions of the model and scored on the ``noisier`` set alone;
``wm_contact_study_<name of --out>.json`` is one run of this script as it is: ``default`` (the
library's defaults with the success head deciding imagined success, the presets' outcome
then) and ``rule`` (the task's rule, the presets' outcome now) in the README. ``--held-out-seed``
shifts the held-out sets' seeds: the settings were chosen across sessions by their figures on the
default sets, so those figures are tuned; a shifted set tests them.

    python benchmarks/studies/wm_contact_study.py --threads 2 --outcome head --out runs/study/default
    python benchmarks/studies/wm_contact_study.py --threads 2 --outcome rule --out runs/study/rule
    python benchmarks/studies/wm_contact_study.py --threads 2 --outcome head --out runs/study/relations
    python benchmarks/studies/wm_contact_study.py --threads 2 --outcome head --held-out-seed 50000 --out runs/study/test
    python benchmarks/studies/wm_contact_study.py --threads 1 --outcome head --dynamics-updates 2 --out runs/study/h16
    python benchmarks/studies/wm_contact_study.py --threads 2 --outcome head --out runs/study/h16u1  # the defaults now
    python benchmarks/studies/wm_contact_study.py --evaluate-only --rung oracle --out runs/study/h16u1_s1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, GpuBusy, report  # noqa: E402

from worldsim.runtime.threads import use_torch_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--val-episodes", type=int, default=400)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--config", choices=("tiny", "base"), default="tiny", help="the world model's preset")
    parser.add_argument("--batch-size", type=int, default=32, help="frame-model windows per training step")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="stop training after this many seconds (the summary says which stopped it)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto; on cuda the GPU's busy share is kept")
    parser.add_argument("--object-pathway", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--carry-objects", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--dynamics-horizon", type=int, default=None,
                        help="steps they roll out on their own in training (default: 16)")
    parser.add_argument("--outcome", choices=("head", "rule"), default=None, help="what decides imagined success")
    parser.add_argument("--seed", type=int, default=0, help="the world model's training seed (the data stays)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--held-out-seed", type=int, default=0,
                        help="added to the held-out sets' seeds (1000, 2000): a fresh test of a model whose "
                             "settings were chosen on the default sets")
    parser.add_argument("--compile", default="off", choices=("off", "default", "reduce-overhead"),
                        help="torch.compile the training step's losses (train-wm --compile; for a GPU)")
    parser.add_argument("--rung", choices=("oracle", "sim-seeded", "pixels", "video"), default="sim-seeded",
                        help="the imagination rung the image figures read (sim-seeded, as the committed results ran; "
                             "other rungs' results and eval folders get _<rung>)")
    parser.add_argument("--evaluate-only", action="store_true",
                        help="evaluate the model an earlier run left in --out (after an evaluation change)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    use_torch_threads(args.threads)
    from worldsim.data.collect import collect_episodes
    from worldsim.envs.imagination import ImaginationConfig
    from worldsim.envs.scene import ACTION_SCALE
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
    from worldsim.runtime.device import resolve_device
    from worldsim.world_models import TrainWMConfig, WorldModel, evaluate_world_model, train_world_model

    args.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    held_out = {"iid": (1000 + args.held_out_seed, 0.3, 0.2), "noisier": (2000 + args.held_out_seed, 0.6, 0.3)}
    # a shifted test lives beside the default sets in --out, so one model is scored on both
    shifted = f"_seed{args.held_out_seed}" if args.held_out_seed else ""
    imagination = ImaginationConfig(rung=args.rung)
    drawn = "" if imagination.rung.seeded and not imagination.rung.rendered else f"_{args.rung}"
    for name, count, seed, noise, epsilon in (("train", args.episodes, 0, 0.3, 0.2),
                                              *((n, args.val_episodes, *v) for n, v in held_out.items())):
        path = args.out / f"{name}{shifted if name in held_out else ''}.h5"
        if not path.exists():
            def expert(task: str, seed: int = seed, noise: float = noise, epsilon: float = epsilon) -> ScriptedExpert:
                return ScriptedExpert(ScriptedExpertConfig(task, noise, epsilon, seed))

            collect_episodes(["PushCube-v0"], expert, count, path, num_envs=50, seed=seed, progress=False)
    collect_s = time.time() - start
    if args.evaluate_only:
        if not (args.out / "wm" / "summary.json").exists():
            parser.error(f"--evaluate-only: no finished training run in {args.out / 'wm'}")
        summary = json.loads((args.out / "wm" / "summary.json").read_text())
    else:
        architecture = {"objects": None if args.object_pathway is False else
                        ({} if args.carry_objects is None else {"carry": args.carry_objects}),
                        "dynamics": {} if args.dynamics_horizon is None else {"horizon": args.dynamics_horizon},
                        "judge": {} if args.outcome is None else {"outcome": args.outcome}}  # {}: the preset's
        with GpuBusy() as busy:
            summary = train_world_model(TrainWMConfig(
                data=args.out / "train.h5", out=args.out / "wm", steps=args.steps,
                batch_size=args.batch_size, time_budget=args.time_budget, val_fraction=0.05,
                val_every=500, video_every=1000, checkpoint_every=500, torch_threads=args.threads, device=args.device,
                progress=False, preset=args.config, model=architecture,
                seed=args.seed, compile=args.compile, overwrite=True))
        summary["gpu_busy_percent"] = busy.percent()
    model = WorldModel.from_pretrained(args.out / "wm", device=resolve_device(args.device))
    sets = {}
    for name in held_out:
        fidelity = evaluate_world_model(model, args.out / f"{name}{shifted}.h5", balance=True, imagination=imagination,
                                        out=args.out / f"eval_{name}{shifted}{drawn}", progress=False)
        contact = fidelity["object_error_after_contact"]
        sets[name] = {
            "held_out": fidelity["held_out"], "psnr_at_8": fidelity["psnr_at_8"],
            "psnr_at_32": fidelity["psnr_at_horizon"],
            "gripper_error_at_16_cm": fidelity["episode_start"]["gripper_cm"][15],
            "agreement": {k: None if a is None else {m: a[m] for m in ("accuracy", "balanced_accuracy", "base_rate",
                                                                         "episodes")}
                          for k, a in fidelity["success_by_horizon"].items()},
            "head_on_real_frames": fidelity["success_head_on_real_frames"]["episode"]["accuracy"],
            "physics_ceiling_full": {k: a["accuracy"] for k, a in (fidelity["physics_ceiling"] or {}).items()},
            "object_error_after_contact_cm": contact["imagined_cm"] if contact else None,
            "object_error_at_16_cm": contact["at_horizon_cm"] if contact else None,
            "pathway_error_at_16_cm": contact["pathway_cm"][-1] if contact and "pathway_cm" in contact else None,
            "frame_vs_pathway_cm": contact.get("frame_vs_pathway_cm") if contact else None,
            "pathway_error_recorded_gripper_at_16_cm": (contact["pathway_recorded_gripper_cm"][-1] if contact and
                                                        "pathway_recorded_gripper_cm" in contact else None),
            "detector_floor_cm": contact["real_cm"] if contact else None}
    trained = json.loads((args.out / "wm" / "config.json").read_text())  # what the model was trained with
    report(f"wm_contact_study_{args.out.name}{shifted}{drawn}", {
        "rung": args.rung,
        "control_step_m": ACTION_SCALE,
        "object_pathway": model.objects is not None,
        "carry_objects": model.config.objects is not None and model.config.objects.carry,
        "dynamics_horizon": model.config.dynamics.horizon,
        "outcome": model.config.judge.outcome, "success_threshold": model.config.judge.success_threshold,
        "seed": trained["seed"], "held_out_seed": args.held_out_seed,
        "compile": trained.get("compile", "off"),
        "config": trained["preset"], "batch_size": trained["batch_size"], "device": trained["device"],
        "parameters": model.num_parameters(), "train_steps": summary["steps"],
        "stopped_by": summary.get("stopped_by"), "gpu_busy_percent": summary.get("gpu_busy_percent"),
        "train_seconds": summary["train_seconds"], "collect_seconds": round(collect_s, 1), "held_out_sets": sets},
           args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
