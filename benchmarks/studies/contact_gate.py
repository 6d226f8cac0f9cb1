"""What does the hand-written contact gate give the world model's figures?

The object pathway lets a cube move only where the gripper's TCP passes within 8 cm of it, or
where it already moves (:meth:`worldsim.world_models.objects.ObjectDynamics.contact_gate`): a
hand-written rule, added because a pathway learned from expert pushes alone, where the cube goes
wherever the gripper heads, slid cubes a policy never reached. The imagination ladder's models
learn from expert demonstrations and the BC policy's own episodes together. This study trains
each seed's ladder ``pixels`` model again as the anchor study's ``clear+arm`` variant (the frames
``tiny`` draws today) with ``[model.objects] gate = false``, everything else as the ladder trained
it, and replays both on the same balanced held-out episodes of the BC policy
(:func:`anchor_clearing.compare_variants`; the ``clear+arm`` models are the anchor study's, reused
from the same ``--out``): whole-frame and window PSNR, the pushed cube's error 16 steps after
contact, outcome agreement and the action gap, per seed, and each seed's difference between the
two (``minus_clear+arm``). What it cannot show is the gate's worth to a policy trained in imagination: that is the
ladder's protocol. Writes ``benchmarks/studies/results/contact_gate.json``.

    python benchmarks/studies/contact_gate.py --ladder runs/ladder_controls --seeds 0 1 2 3 4 \
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
    gated = VARIANTS["clear+arm"]
    variants = {"clear+arm": gated, "clear+arm+no-gate": gated | {"objects": gated["objects"] | {"gate": False}}}
    metrics = compare_variants(args.ladder, args.seeds, variants, args.out, reference="clear+arm")
    report("contact_gate", metrics, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
