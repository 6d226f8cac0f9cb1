"""What does finding the objects in the start frames cost imagination on the ``pixels`` rung?

On the ``pixels`` rung an imagined episode starts from real frames alone: the model's keypoint
detector finds each object in the context frames (:meth:`worldsim.world_models.model.WorldModel.start`)
and, unless the model reads their heights too (``[model.judge] heights``), each is taken to rest
on its plane (a cube's centre half a cube above the table), a hand-written assumption wrong for a
cube held in the air. The ``sim-seeded`` rung starts the same model from the recorded state instead, so
the difference between the two bounds what any better start (a learned height, a sharper
detector) could give.

For each seed of a finished imagination-ladder run (``--ladder``, its ``pixels`` models) this
study measures:

- **at the ladder's keyframes** (the rule of :mod:`~worldsim.world_models.keyframes` on the
  round's real episodes, found as the pixels rung finds them: by the detector): the share where
  the task's cube is off the table (its centre more than 1 cm above its resting height), the
  detector's error in pixels, and the table-plane error of the cube's position put at its
  resting height against put at its true height (the height assumption's own share);
- **on the held-out episodes** the ladder's fidelity figures are read on (balanced; BC's sampled
  actions, or its mean action where those balance more episodes, as on PickPlaceCube, where
  sampled BC almost never succeeds): outcome agreement over full replays, the last 8 steps and
  balanced 8-step keyframe windows, the cube's error 16 steps after contact and the PSNR at 8
  and 32 steps, on both rungs (the same windows, the same generator seed).

Each seed's figures are kept under ``--out`` (read back, not measured again, so ladders or seeds
can run in parallel processes and a last run with all of them gathers); writes
``benchmarks/studies/results/start_positions.json`` (one entry per ladder, as given).

    python benchmarks/studies/start_positions.py --ladder runs/ladder_nopaste runs/ladder_pick --seeds 0 1 2 3 4 \
        --out runs/start_positions
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # anchor_clearing.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from anchor_clearing import trained  # noqa: E402
from common import STUDY_RESULTS, report  # noqa: E402

LIFTED_M = 0.01
"""A cube whose centre is more than this above its resting height is off the table."""
AGREEMENTS = {"full": "full", "last_8": "last_8", "keyframe_8": "keyframe_8_balanced"}


def start_errors(model: Any, bank: Any, rows: np.ndarray) -> dict[str, Any]:
    """The task cube found in ``bank``'s frames at observation ``rows`` by ``model``'s detector:
    how often it is off the table, the detector's pixel error, and the table-plane error of its
    position put at its resting height, at its true height and at the height the detector reads
    (the resting one again for a detector that reads none)."""
    import torch

    from worldsim.envs.observations import ENTITY_HEIGHTS, entity_positions, task_entities
    from worldsim.envs.tasks import get_task
    from worldsim.world_models.latents import frames_to_latents

    cube = int(task_entities(get_task(bank.tasks[0]))[0])
    found, read = [], []
    with torch.no_grad():
        for i in range(0, len(rows), 256):
            latent = frames_to_latents(torch.from_numpy(bank.images[rows[i:i + 256]]), model.config.patch)
            proprio = model.scale.normalize(torch.from_numpy(bank.proprio[rows[i:i + 256]]))
            points, heights = model.judge.find(latent, proprio)
            found.append(points[:, cube].numpy())
            read.append(heights[:, cube].numpy())
    pixels_found, height_read = np.concatenate(found).astype(np.float64), np.concatenate(read).astype(np.float64)
    assert bank.state is not None and bank.entity_heights is not None and bank.entity_pixels is not None
    true = entity_positions(bank.state[rows])[:, cube]
    height = bank.entity_heights[rows, cube].astype(np.float64)
    lifted = height > ENTITY_HEIGHTS[cube] + LIFTED_M

    def table(at: np.ndarray) -> np.ndarray:
        return np.linalg.norm(model.camera.unproject(pixels_found, at)[:, :2] - true[:, :2], axis=1)

    errors = {"resting_height": table(np.full(len(rows), ENTITY_HEIGHTS[cube])), "true_height": table(height),
              "read_height": table(height_read)}
    pixels = np.linalg.norm(pixels_found - bank.entity_pixels[rows, cube], axis=1)

    def cm(x: np.ndarray) -> float | None:
        return round(100 * float(x.mean()), 3) if len(x) else None

    return {"starts": len(rows), "lifted": int(lifted.sum()), "lifted_share": round(float(lifted.mean()), 4),
            "lifted_height_cm": cm(height[lifted]), "detector_px_median": round(float(np.median(pixels)), 3),
            "detector_px_mean": round(float(pixels.mean()), 3),
            "height_error_cm": cm(np.abs(height_read - height)),
            "height_error_cm_lifted": cm(np.abs(height_read - height)[lifted]),
            "table_cm": {name: cm(e) for name, e in errors.items()},
            "table_cm_lifted": {name: cm(e[lifted]) for name, e in errors.items()}}


def keyframe_starts(model: Any, data: Path) -> dict[str, Any]:
    """:func:`start_errors` at the keyframes the ``pixels`` rung draws from ``data`` (the round's
    real episodes), found as that rung finds them (by the detector)."""
    from worldsim.world_models.data import EpisodeBank
    from worldsim.world_models.keyframes import KeyframeRule, KeyframeStarts

    bank = EpisodeBank(data)
    bank.use_camera(model.camera)
    keys = KeyframeStarts(bank.without_state(), bank.tasks[0], KeyframeRule(), model.judge.locate,
                          model.config.patch).keyframes
    return start_errors(model, bank, bank.obs_start[keys.episode] + keys.step)


def last_window_starts(model: Any, heldout: Path, steps: int = 8) -> dict[str, Any]:
    """:func:`start_errors` where the held-out episodes' last ``steps``-step windows start (late
    in an episode: on PickPlaceCube, a cube in the gripper or over the bin)."""
    from worldsim.world_models.data import EpisodeBank

    bank = EpisodeBank(heldout)
    bank.use_camera(model.camera)
    return start_errors(model, bank, bank.obs_start + np.maximum(bank.lengths - steps, 0))


def fidelity(model: Any, heldout: Path, rung: str, seed: int) -> dict[str, Any]:
    """The ladder's fidelity figures of ``model`` on ``heldout`` on ``rung``."""
    from worldsim.envs.imagination import ImaginationConfig
    from worldsim.world_models.evaluate import evaluate_world_model

    fid = evaluate_world_model(model, heldout, balance=True, curve_steps=32, imagination=ImaginationConfig(rung=rung),
                               seed=seed, videos=0, progress=False, physics_ceiling=False)
    by, contact = fid["success_by_horizon"], fid["object_error_after_contact"] or {}
    return {**{f"agreement_{name}": None if by.get(key) is None else round(by[key]["accuracy"], 4)
               for name, key in AGREEMENTS.items()},
            "cube_after_contact_cm": contact.get("at_horizon_cm"), "psnr_8": round(fid["psnr_at_8"], 3),
            "psnr_32": round(fid["psnr_at_horizon"], 3), "episodes": fid["held_out"]["episodes"]}


def held_out(base: Path) -> tuple[str, Path]:
    """The ladder's held-out episodes of BC with the most to balance (twice the fewer of their
    successes and failures): those read with sampled actions or by its mean action (on a tie,
    sampled: the reading the ladder's fidelity figures are read on)."""
    from worldsim.data.reader import EpisodeReader

    balanced: dict[str, int] = {}
    for reading in ("sampled", "mean"):
        if (base / f"heldout_{reading}.h5").exists():
            with EpisodeReader(base / f"heldout_{reading}.h5") as reader:
                outcomes = [info.success for info in reader.episode_info()]
            balanced[reading] = 2 * min(sum(outcomes), len(outcomes) - sum(outcomes))
    reading = max(balanced, key=lambda r: balanced[r], default=None)
    if reading is None or balanced[reading] == 0:
        raise ValueError(f"{base}: no held-out episodes hold both successes and failures")
    return reading, base / f"heldout_{reading}.h5"


MODELS = {"ladder": {}, "heights": {"judge": {"heights": True}}}
"""Each model measured: the ladder's own, and (``--heights``) the variant trained again with these
changes (its detector reading the objects' heights)."""


def study_seed(ladder: Path, seed: int, out: Path, heights: bool) -> dict[str, Any]:
    """Both measurements for one seed's ``pixels`` model and, with ``heights`` or where measured
    before, its variant reading heights (each kept in ``out``: read back when there)."""
    from worldsim.runtime.run_logging import write_json
    from worldsim.world_models.model import WorldModel

    run = ladder / f"pixels_s{seed}" / "round_0"
    row: dict[str, Any] = {}
    for name, changes in MODELS.items():
        kept = out / f"{ladder.name}_{name}_s{seed}.json"
        if not kept.exists() and name != "ladder" and not heights:
            continue
        if not kept.exists():
            wm = trained(run / "wm", changes, run / "all.h5", out / f"{ladder.name}_{name}_s{seed}" / "wm")
            model = WorldModel.from_pretrained(wm).eval()
            reading, heldout = held_out(ladder / f"base_s{seed}")
            rungs = {rung: fidelity(model, heldout, rung, seed) for rung in ("pixels", "sim-seeded")}
            recorded_gain = {key: None if rungs["pixels"][key] is None or rungs["sim-seeded"][key] is None
                             else round(rungs["sim-seeded"][key] - rungs["pixels"][key], 4)
                             for key in rungs["pixels"] if key != "episodes"}
            write_json(kept, {"heldout_reading": reading, "keyframes": keyframe_starts(model, run / "data.h5"),
                              "last_8_starts": last_window_starts(model, heldout), "rungs": rungs,
                              "seeded_minus_pixels": recorded_gain})
        row[name] = json.loads(kept.read_text())
    if "heights" in row:
        row["heights_minus_ladder"] = {key: round(value - row["ladder"]["rungs"]["pixels"][key], 4)
                                       for key, value in row["heights"]["rungs"]["pixels"].items()
                                       if key != "episodes" and value is not None
                                       and row["ladder"]["rungs"]["pixels"][key] is not None}
    return row


def seed_range(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The lowest and highest of each figure of the ``rows`` (one per seed) over the seeds that have it."""
    out = {}
    for key in rows[0]:
        values = [row[key] for row in rows if row.get(key) is not None]
        if values:
            out[key] = [min(values), max(values)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", type=Path, nargs="+", required=True, help="finished imagination-ladder runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=Path("runs/start_positions"), help="each seed's figures")
    parser.add_argument("--heights", action="store_true",
                        help="also train and measure each seed's variant whose detector reads heights")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (cores are shared)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    ladders: dict[str, Any] = {}
    for ladder in args.ladder:
        seeds = {str(seed): study_seed(ladder, seed, args.out, args.heights) for seed in args.seeds}
        entry: dict[str, Any] = {"seeds": seeds, "seeded_minus_pixels_range": seed_range(
            [row["ladder"]["seeded_minus_pixels"] for row in seeds.values()])}
        if all("heights" in row for row in seeds.values()):
            entry["heights_minus_ladder_range"] = seed_range([row["heights_minus_ladder"] for row in seeds.values()])
        ladders[str(ladder)] = entry
        for seed, row in seeds.items():
            k = row["ladder"]["keyframes"]
            print(f"{ladder} s{seed}: lifted {k['lifted_share']:.1%} of {k['starts']} keyframes, table error "
                  f"{k['table_cm']['resting_height']} / {k['table_cm']['true_height']} cm (resting / true height); "
                  f"seeded - pixels {row['ladder']['seeded_minus_pixels']}; heights - ladder "
                  f"{row.get('heights_minus_ladder')}", file=sys.stderr)
    report("start_positions", {"ladders": ladders, "lifted_m": LIFTED_M}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
