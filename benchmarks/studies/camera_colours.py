"""Does learning the cubes' colours from the frames change the camera fitted to them?

A model with ``camera = "fitted"`` finds each cube in its training frames by the cube's colour
and fits a pinhole camera to those sightings and the recorded state
(:func:`worldsim.world_models.camera.fitted_camera`). The colours are learned from the frames
(:func:`~worldsim.world_models.camera.cube_colours`: of the distinct colours the frames show, each
cube's is the one whose pixels follow its recorded centre); before, they were the scene's
materials. For each training file given (the ladders' ``round_0/all.h5``), on the frames the fit
uses, this study learns the colours, then fits the camera twice, once with each set of colours,
and writes how far the learned colours are from the materials' (L1 over chromaticity), how many
sightings each set finds, and where each camera places the file's cubes and the gripper's TCP
against the scene's own camera (mean and largest pixels apart):
``benchmarks/studies/results/camera_colours.json``.

    python benchmarks/studies/camera_colours.py runs/ladder_nopaste/pixels_s*/round_0/all.h5 \
        runs/ladder_pick/pixels_s*/round_0/all.h5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402


def material_colours(names: list[str]) -> dict[str, np.ndarray]:
    """The chromaticity of each named cube's material in the scene."""
    from worldsim.envs.scene import Scene

    model = Scene.load().model
    rgb = {name: model.geom_rgba[model.geom(name).id][:3].astype(np.float64) for name in names}
    return {name: colour / colour.sum() for name, colour in rgb.items()}


def compare(data: Path) -> dict[str, Any]:
    """The learned colours against the materials' on one training file, and the cameras each fits."""
    from worldsim.envs.camera import PinholeCamera
    from worldsim.envs.observations import entity_positions
    from worldsim.world_models import EpisodeBank
    from worldsim.world_models.camera import FIT_FRAMES, cube_colours, cube_sightings
    from worldsim.world_models.data import image_camera

    bank = EpisodeBank(data)
    rows = np.unique(np.linspace(0, len(bank.images) - 1, min(len(bank.images), FIT_FRAMES)).round().astype(np.int64))
    images, state, proprio = bank.images[rows], bank.state[rows], bank.proprio[rows]
    learned = cube_colours(images, state, proprio)
    materials = material_colours(list(learned))
    scene = image_camera(*images.shape[1:3])
    points = {"cubes": entity_positions(bank.state)[:, :3].reshape(-1, 3),
              "tcp": bank.proprio[:, :3].astype(np.float64)}
    row: dict[str, Any] = {"colour_l1": {name: round(float(np.abs(learned[name] - materials[name]).sum()), 4)
                                         for name in learned}}
    for name, colours in (("learned", learned), ("materials", materials)):
        world, pixels = cube_sightings(images, state, proprio, colours)
        camera = PinholeCamera.fit(world, pixels, *images.shape[1:3])
        apart = {what: np.linalg.norm(camera.project(p) - scene.project(p), axis=-1) for what, p in points.items()}
        row[name] = {"sightings": len(world), "fovy": round(camera.fovy, 3),
                     **{f"{what}_px_{stat}": round(float(fn(d)), 3) for what, d in apart.items()
                        for stat, fn in (("mean", np.mean), ("max", np.max))}}
    row["same_sightings"] = row["learned"]["sightings"] == row["materials"]["sightings"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, nargs="+", help="training files with frames and state")
    args = parser.parse_args()
    files = {str(path): compare(path) for path in args.data}
    for path, row in files.items():
        print(f"{path}: colours {max(row['colour_l1'].values()):.4f} from the materials at most; cubes "
              f"{row['learned']['cubes_px_mean']:.3f} / {row['materials']['cubes_px_mean']:.3f} px from the scene's "
              f"camera (learned / materials)", file=sys.stderr)
    from worldsim.world_models.data import image_camera

    report("camera_colours", {"files": files, "scene_fovy": image_camera(64, 64).fovy}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
