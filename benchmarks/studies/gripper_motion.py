"""What does the hand-written gripper motion give the world model's figures?

The proprio dynamics move the imagined gripper to the pose the action commands, by the position
servos' own formula (:func:`worldsim.world_models.proprio.commanded_proprio`: TCP + 0.03 x action,
clipped to the workspace; the finger gap from the action), plus a learned correction: a
hand-written aid. With ``[model.proprio] commanded = false`` the same MLP learns the whole move
from the action and the context proprio. This study trains each seed's ladder ``pixels`` model
again as the anchor study's ``clear+arm`` variant (the frames ``tiny`` draws today) with the
motion learned, everything else as the ladder trained it, and replays both on the same balanced
held-out episodes of the BC policy (:func:`anchor_clearing.compare_variants`; the ``clear+arm``
models are the anchor study's, reused from the same ``--out``): the gripper's error 8 and 32 steps
in, whole-frame and window PSNR, the pushed cube's error 16 steps after contact, outcome agreement
and the action gap, per seed, and each seed's difference between the two (``minus_clear+arm``).
What it cannot show is the formula's worth to a policy trained in imagination: that is the
ladder's protocol. Writes ``benchmarks/studies/results/gripper_motion.json``.

    python benchmarks/studies/gripper_motion.py --ladder runs/ladder_controls --seeds 0 1 2 3 4 \
        --out runs/anchor_clearing
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # anchor_clearing.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from anchor_clearing import VARIANTS, compare_variants  # noqa: E402
from common import STUDY_RESULTS, report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", type=Path, default=Path("runs/ladder_controls"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=Path("runs/anchor_clearing"),
                        help="the ladder model's variants (the anchor study's folder: its clear+arm models are reused)")
    parser.add_argument("--threads", type=int, default=1, help="for the evaluations (training takes the base's)")
    args = parser.parse_args()

    from worldsim.runtime.threads import use_torch_threads

    use_torch_threads(args.threads)
    base = VARIANTS["clear+arm"]
    variants = {"clear+arm": base, "clear+arm+learned-motion": base | {"proprio": {"commanded": False}}}
    metrics = compare_variants(args.ladder, args.seeds, variants, args.out, reference="clear+arm")
    report("gripper_motion", metrics, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
