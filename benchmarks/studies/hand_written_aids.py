"""What does each hand-written aid give the world model's figures?

While imagining on the ``pixels`` rung nothing comes from the simulator, but some of what the
model does is written by hand rather than learned (:func:`worldsim.envs.imagination.hand_written_aids`).
This study toggles them one at a time against the ``tiny`` preset's model, each where the model
has a learned alternative:

- ``gate``: the contact gate (a cube moves only where the gripper's TCP passes within 8 cm of
  it, or where it already moves: :meth:`worldsim.world_models.objects.ObjectDynamics.contact_gate`),
  added because a pathway learned from expert pushes alone slid cubes a policy never reached; off
  (``[model.objects] gate = false``), the learned pathway alone decides which cubes move;
- ``motion``: the gripper's commanded motion (the position servos' formula, TCP + 0.03 x action
  clipped to the workspace and the finger gap from the action:
  :func:`worldsim.world_models.proprio.commanded_proprio`, plus a learned correction); off
  (``[model.proprio] commanded = false``), the proprio MLP learns the whole move;
- ``carry``: the cubes' pixels carried from the frame drawn from to where the pathway puts them
  (:func:`worldsim.world_models.objects.carry_objects`); off (``[model.objects] carry = false``,
  which also turns off clearing their old spots and the starting arm, both edits of the carried
  frame), the denoiser draws the moved cubes from the pathway's positions alone;
- ``paste``: the moved cubes' pixels pasted where the pathway puts them, off in ``tiny``
  (``[model.objects] paste = false``: their old spots are cleared and the denoiser draws them);
  the variant turns it on (``paste = true``);
- ``camera``: the scene's exact camera, through which the pathway's positions, the gripper's
  planes and the arm's clearing are placed in the frame (:mod:`worldsim.world_models.camera`);
  off (``camera = "fitted"``), the model fits its own to its training frames, the cubes found by
  their colours and paired with the recorded state;
- ``planes``: the gripper's planes (its TCP placed in the frame through the camera, a blob the
  denoiser reads), the one use of the camera a model trained without state makes; off
  (``[model.frames] gripper_planes = false``), the denoiser reads the proprio only as numbers;
- ``rule``: the task's success rule as the judge, on the pathway's positions
  (:mod:`worldsim.world_models.outcome`); off (``[imagination] judge = "head"``, the same model),
  the success head the model learned from the success flags judges.

For each seed of a finished imagination-ladder run (``--ladder``) whose models are the preset's
today, the ladder's ``pixels`` model (``tiny``) is trained again with the aid toggled (the judge
needs no new model), everything else as the ladder trained it, and both are replayed on the same
balanced held-out episodes of the BC policy read with sampled actions
(:func:`anchor_clearing.compare_variants`; the ladder's own model replayed again, as ``tiny``, so
that both carry the same figures): the
gripper's error 8 and 32 steps in, whole-frame and window PSNR, the pushed cube's error 16 steps
after contact, outcome agreement and the action gap, per seed, and each seed's difference
(``minus_tiny``). What it cannot show is an aid's worth to a policy trained in imagination:
that is the ladder's protocol. Writes ``benchmarks/studies/results/hand_written_aids.json``.
With ``--arm video`` the ladder's ``video`` models (trained without state, judged by their
success head) are the base instead, replayed on the ``video`` rung, and the result is
``hand_written_aids_video.json``.

    python benchmarks/studies/hand_written_aids.py --ladder runs/ladder_nopaste --seeds 0 1 2 3 4 \
        --out runs/hand_written_aids
    python benchmarks/studies/hand_written_aids.py --ladder runs/ladder_video --arm video --aids planes \
        --out runs/hand_written_aids_video
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # anchor_clearing.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from anchor_clearing import Changes, compare_variants  # noqa: E402
from common import STUDY_RESULTS, report  # noqa: E402

TOGGLED: dict[str, tuple[str, Changes]] = {
    "gate": ("no-gate", {"objects": {"gate": False}}),
    "motion": ("learned-motion", {"proprio": {"commanded": False}}),
    # without carried pixels there is no carried frame to clear, and nothing left to draw unpasted
    "carry": ("no-carry", {"objects": {"carry": False, "clear": False, "clear_arm": False, "paste": True}}),
    "paste": ("pasted", {"objects": {"paste": True}}),
    "rule": ("head-judge", {"imagination": {"judge": "head"}}),
    "camera": ("fitted-camera", {"camera": "fitted"}),
    "planes": ("no-gripper-planes", {"frames": {"gripper_planes": False}}),
}
"""Each aid: the variant with it toggled from the ``tiny`` preset's setting (its folder name under
``--out``) and its changes to the ladder model's options."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", type=Path, default=Path("runs/ladder_controls"),
                        help="an imagination-ladder run whose pixels models the tiny preset of today built")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--aids", nargs="+", default=list(TOGGLED), choices=list(TOGGLED))
    parser.add_argument("--out", type=Path, default=Path("runs/hand_written_aids"), help="the variants' models")
    parser.add_argument("--threads", type=int, default=1, help="for the evaluations (training takes the base's)")
    parser.add_argument("--arm", choices=["pixels", "video"], default="pixels",
                        help="the ladder's models the aids are toggled in")
    args = parser.parse_args()
    if args.arm == "video" and (state_bound := [a for a in args.aids if a not in ("motion", "planes")]):
        parser.error(f"--arm video: a model trained without state has no {', '.join(state_bound)} to toggle; "
                     "allowed: motion, planes")

    from worldsim.runtime.threads import use_torch_threads

    use_torch_threads(args.threads)
    variants = {"tiny": {}} | {TOGGLED[aid][0]: TOGGLED[aid][1] for aid in args.aids}
    metrics = compare_variants(args.ladder, args.seeds, variants, args.out, reference="tiny", arm=args.arm)
    if "camera" in args.aids:
        metrics["camera_fit"] = {str(seed): camera_fit(args.out / f"{TOGGLED['camera'][0]}_s{seed}" / "wm",
                                                       args.ladder / f"base_s{seed}" / "heldout_sampled.h5")
                                 for seed in args.seeds}
    name = "hand_written_aids" if args.arm == "pixels" else f"hand_written_aids_{args.arm}"
    report(name, metrics | {"aids": {aid: TOGGLED[aid][0] for aid in args.aids}}, args, STUDY_RESULTS)


def camera_fit(world_model: Path, episodes: Path) -> dict[str, float]:
    """How far the camera ``world_model`` fitted to its frames is from the scene's: its pose and
    field of view, and where each places the cubes and the gripper's TCP of held-out ``episodes``
    (pixels apart, mean and largest)."""
    import numpy as np
    from scipy.spatial.transform import Rotation

    from worldsim.envs.observations import entity_positions
    from worldsim.envs.scene import CUBES
    from worldsim.world_models import EpisodeBank, WorldModel
    from worldsim.world_models.data import image_camera

    fitted = WorldModel.from_pretrained(world_model).camera
    scene, bank = image_camera(fitted.height, fitted.width), EpisodeBank(episodes)
    cubes = entity_positions(bank.state)[:, :len(CUBES)].reshape(-1, 3)
    tcp = bank.proprio[:, :3].astype(np.float64)
    apart = {name: np.linalg.norm(fitted.project(p) - scene.project(p), axis=-1) for name, p in
             (("cubes", cubes), ("tcp", tcp))}
    return {"fovy": round(fitted.fovy, 3), "scene_fovy": scene.fovy,
            "position_cm": round(100 * float(np.linalg.norm(fitted.position - scene.position)), 2),
            "rotation_deg": round(float(np.degrees(Rotation.from_matrix(fitted.rotation.T @ scene.rotation)
                                                   .magnitude())), 3),
            **{f"{name}_px_{stat}": round(float(fn(d)), 3) for name, d in apart.items()
               for stat, fn in (("mean", np.mean), ("max", np.max))}}


if __name__ == "__main__":
    main()
