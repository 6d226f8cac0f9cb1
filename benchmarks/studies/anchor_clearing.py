"""Does clearing what moves from the anchor frame remove the doubled cube and the ghost arm?

The ``tiny`` world model draws each frame as a change from the episode's first frame, with the
cubes carried where the object pathway puts them. Left as they are, the cubes' old pixels and the
starting arm stay in the anchor, and a small one-step denoiser erases neither fully: a pale second
cube and a ghost of the arm. Two variants take them out (``[model.objects]``,
:mod:`worldsim.world_models.anchor`):

- ``clear``: the spots the carried cubes leave show the empty table (learned: the per-pixel
  median of the training frames);
- ``clear+arm``: also the starting arm cleared from the first frame (its footprint around the
  TCP and its colours there learned from the first frames; a cube under the footprint kept), the
  denoiser drawing the arm where the gripper is.

For each seed of a finished imagination-ladder run (``--ladder``, made by
``benchmarks/imagination_ladder.py``), each variant is trained exactly as that seed's ``pixels``
world model was (its ``config.json``: same round-0 data, steps, seed and threads; only the option
differs) and replayed on the BC policy's held-out episodes read with sampled actions (the ladder's
own set where BC is tested so, else collected from the same starts:
:func:`imagination_ladder.heldout_episodes`; :func:`worldsim.world_models.evaluate_world_model`:
balanced, 32 steps, the ``pixels`` rung, the BC policy's action gap, no physics ceiling). The base
is the ladder's own model and its replay of the same episodes.
Per variant and seed: whole-frame PSNR, the windows on the gripper, the task's object and where
each started (a ghost of the arm or a second cube shows there, once the thing has left), the
object's error 16 steps after contact, outcome agreement and the action gap; the mean over seeds
and each variant's per-seed difference from the base. Trained models and evaluations are kept
under ``--out`` and reused. Writes ``benchmarks/studies/results/anchor_clearing.json``.

    python benchmarks/studies/anchor_clearing.py --ladder runs/ladder_controls --seeds 0 1 2 3 4 \
        --out runs/anchor_clearing
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402
from imagination_ladder import fidelity, heldout_episodes  # noqa: E402

from worldsim.envs.imagination import RUNGS  # noqa: E402

Changes = dict[str, Any]
"""A variant's changes to the ladder model's options, section of ``[model]`` (``objects``,
``proprio``, ``frames``) -> option -> value or ``camera`` -> value, and to how it is replayed
(``imagination``: the :class:`~worldsim.envs.imagination.ImaginationConfig` options, such as
``judge``). Variants with the same model options share one trained model."""

VARIANTS: dict[str, Changes] = {"clear": {"objects": {"clear": True}},
                                "clear+arm": {"objects": {"clear": True, "clear_arm": True}}}
"""Each variant's changes to the ladder model's options."""


def figures(fid: dict[str, Any]) -> dict[str, Any]:
    """The figures this study reads off one fidelity report."""
    from worldsim.world_models.metrics import REGIONS

    by, contact = fid["success_by_horizon"], fid.get("object_error_after_contact") or {}
    gripper = fid["episode_start"]["gripper_cm"]
    out = {"psnr_8": fid["psnr_at_8"], "psnr_32": fid["psnr_at_horizon"],
           "gripper_cm_8": gripper[7], "gripper_cm_32": gripper[-1],
           "object_error_cm_16": contact.get("at_horizon_cm"), "agreement_full": by["full"]["accuracy"],
           "agreement_last_8": by["last_8"]["accuracy"], "action_gap_8": fid.get("action_gap_at_8")}
    for step, at in ((8, fid["region_psnr_at_8"]), (32, fid["region_psnr_at_horizon"])):
        for name in REGIONS:  # a region added after the report was written: None
            out[f"psnr_{name}_{step}"] = at.get(name, {}).get("model")
            out[f"psnr_{name}_copy_first_{step}"] = at.get(name, {}).get("copy_first")
    return out


def trained(base_run: Path, changes: Changes, data: Path, out: Path) -> Path:
    """The variant of the world model trained in ``base_run`` (a ``train-wm`` run folder) with
    ``changes`` to its options, trained on ``data`` into ``out`` by ``worldsim train-wm`` with the
    base's own settings (reused when there). Every other option of the object pathway, the
    proprio dynamics, the judge and the camera is the base model's as it was built (an option it
    predates at the value that loads it so), not the preset's today. No changes on the base's own
    data: the base model itself, as it was trained."""
    from dataclasses import asdict

    from worldsim.world_models.config import JudgeConfig, ObjectPathwayConfig, ProprioConfig

    if unknown := set(changes) - {"objects", "proprio", "judge", "frames", "camera"}:
        raise ValueError(f"a variant changes [model.objects], [model.proprio], [model.judge], [model.frames] or "
                         f"[model] camera, not {', '.join(sorted(unknown))}")
    config = json.loads((base_run / "config.json").read_text())
    if not changes and Path(config["data"]).resolve() == data.resolve():
        return base_run
    if (out / "world_model").exists():
        return out
    built = json.loads((base_run / "world_model" / "config.json").read_text())["config"]
    for section, defaults in (("objects", ObjectPathwayConfig()), ("proprio", ProprioConfig()),
                              ("judge", JudgeConfig())):
        if built[section] is None:  # a model trained without state has no pathway
            config["model"][section] = None
            continue
        config["model"][section] = asdict(defaults) | built[section] | changes.get(section, {})
    config["model"]["camera"] = changes.get("camera", built.get("camera", "scene"))
    if "frames" in changes:
        config["model"]["frames"] = built["frames"] | changes["frames"]
    config |= {"out": str(out), "data": str(data), "progress": False, "overwrite": True}
    config = {k: v for k, v in config.items() if v is not None}  # unset options stay at their defaults
    out.mkdir(parents=True, exist_ok=True)
    settings = out.parent / "train_wm.json"
    settings.write_text(json.dumps(config, indent=1))
    subprocess.run([sys.executable, "-m", "worldsim", "train-wm", "--config-file", str(settings)], check=True)
    return out


def compare_variants(ladder: Path, seeds: list[int], variants: dict[str, Changes], out: Path,
                     reference: str = "base", arm: str = "pixels") -> dict[str, Any]:
    """For each seed of the finished ladder run ``ladder``, each of ``variants`` (name: its
    :data:`Changes`) trained as that seed's model of the ``arm`` rung (``pixels`` or ``video``:
    :func:`trained`, under ``out``) and replayed on that rung on its held-out episodes; the ladder's
    own model is the base. Returns, per
    variant, the mean over seeds of :func:`figures`, each seed's, and (for the others) each
    seed's difference from the ``reference`` (the base or a variant) and its mean
    (``minus_<reference>``, ``minus_<reference>_per_seed``)."""
    from worldsim.data.reader import EpisodeReader
    from worldsim.envs.imagination import ImaginationConfig
    from worldsim.world_models import evaluate_world_model

    def model_of(changes: Changes) -> Changes:
        return {k: v for k, v in changes.items() if k != "imagination"}

    # the variant whose folder holds each variant's model: the first one with the same model options
    owner = {v: next(o for o, c in variants.items() if model_of(c) == model_of(changes))
             for v, changes in variants.items()}
    per_seed: dict[str, dict[int, dict[str, Any]]] = {"base": {}, **{v: {} for v in variants}}
    protocol = json.loads((ladder / "protocol.json").read_text())
    for seed in seeds:
        # the BC policy's held-out episodes read with sampled actions (the ladder's own where BC is
        # tested by sampled actions, else collected here from the same starts) and the ladder
        # model's replay of them, kept beside the ladder's figures or under ``out``
        arm_run, bc = ladder / f"{arm}_s{seed}", ladder / f"base_s{seed}" / "bc"
        heldout = heldout_episodes(bc, protocol["task"], protocol["heldout_episodes"], ladder / f"base_s{seed}",
                                   seed, "sampled")
        with EpisodeReader(heldout) as reader:
            both = {i.success for i in reader.episode_info()} == {True, False}
        home = arm_run if (arm_run / "fidelity@sampled").exists() else out / f"base_s{seed}"
        fidelity(arm_run / "round_0" / "wm", heldout, RUNGS[arm], home / "fidelity@sampled", seed, policy=bc)
        kept_base = home / "fidelity@sampled" / "fidelity.json"
        base = json.loads(kept_base.read_text())
        if "region_psnr_at_8" not in base:
            raise ValueError(f"{kept_base} has no region figures: regather the ladder first")
        per_seed["base"][seed] = figures(base)
        for variant, changes in variants.items():
            folder = out / f"{variant}_s{seed}"
            wm = trained(arm_run / "round_0" / "wm", model_of(changes), arm_run / "round_0" / "all.h5",
                         out / f"{owner[variant]}_s{seed}" / "wm")
            kept = folder / "fidelity" / "fidelity.json"
            replay = ImaginationConfig(rung=arm, **changes.get("imagination", {}))
            fid = json.loads(kept.read_text()) if kept.exists() else evaluate_world_model(
                wm, heldout, balance=both, curve_steps=32, imagination=replay, policy=bc,
                out=folder / "fidelity", videos=2, seed=seed, progress=False, physics_ceiling=False)
            per_seed[variant][seed] = figures(fid)
            print(f"seed {seed} {variant}: " + json.dumps(per_seed[variant][seed]), file=sys.stderr)

    def mean(rows: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None and not np.isnan(r[key])]
        return round(float(np.mean(values)), 3) if values else None

    keys = list(per_seed["base"][seeds[0]])
    metrics: dict[str, Any] = {"seeds": seeds, "variants": {}}
    for variant, rows in per_seed.items():
        entry: dict[str, Any] = {"mean": {k: mean(list(rows.values()), k) for k in keys},
                                 "per_seed": {str(s): r for s, r in rows.items()}}
        if variant not in ("base", reference):
            against = per_seed[reference]
            diffs = [{k: None if r[k] is None or against[s][k] is None else r[k] - against[s][k] for k in keys}
                     for s, r in rows.items()]
            entry[f"minus_{reference}"] = {k: mean(diffs, k) for k in keys}
            entry[f"minus_{reference}_per_seed"] = {k: [None if d[k] is None else round(d[k], 3) for d in diffs]
                                                   for k in keys}
        metrics["variants"][variant] = entry
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", type=Path, default=Path("runs/ladder_controls"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", type=Path, default=Path("runs/anchor_clearing"))
    parser.add_argument("--threads", type=int, default=1, help="for the evaluations (training takes the base's)")
    args = parser.parse_args()

    from worldsim.runtime.threads import use_torch_threads

    use_torch_threads(args.threads)
    metrics = compare_variants(args.ladder, args.seeds, {v: VARIANTS[v] for v in args.variants}, args.out)
    report("anchor_clearing", metrics, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
