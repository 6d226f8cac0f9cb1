"""Physics' own ceiling on imagined-vs-real outcome agreement: how often the recorded actions,
replayed open loop in physics itself from a state a fraction of a millimetre off, end the way
the recorded episode ended.

``eval-wm`` replays recorded episodes open loop in the world model and asks whether the
imagined episode succeeds exactly when the real one did. A closed-loop policy's actions react
to where the real cube went; replayed open loop, they no longer do, and a push amplifies small
errors (``push_divergence.py``). So even perfect dynamics given a slightly wrong start disagree
with the record sometimes: that rate bounds what any world model reading a 64x64 frame (a pixel
is about 1 cm on the table) can reach.

For each held-out policy of the world-model study (``iid``: expert noise 0.3, random actions 20%
of steps; ``noisier``: 0.6, 30%), ``--episodes`` PushCube episodes are recorded with their full
physics state and a balanced subset is drawn (as many failures as successes, base rate 50%, as
``eval-wm --balance``). Each is replayed over the windows ``eval-wm`` scores (the full episode,
and its last 8, 16 and 40 steps) exactly (a check: 100%) and with the red cube shifted by 0.01, 0.1,
0.33, 1 and 3 mm in a random direction or turned by 0.5 and 2 degrees at the window's start. Agreement
is reported with its 95% Wilson interval. ``closed_loop_agreement`` asks the same of the policy
itself run again from the perturbed start (the expert's moves with the same noise and random
actions, now seeing where the cube is): how reproducible an outcome is when the actions react, as
a policy's do in imagination. ``majority_agreement`` bounds every predictor, not only a single
replay: a model that knows the start only to within a shift can do no better than the outcome
most of the starts that far off lead to, and the majority of ``--votes`` replays, each shifted its
own random way, is that best guess; agreement rises only where a window's outcome leans one way.
``--data`` takes episode files (the world-model study's held-out
sets) and replays, in full, the very episodes ``eval-wm --balance`` scores there, from their
starts rebuilt from ``state`` (``worldsim.world_models.ceiling``): ``exact`` is then off by
float32 rounding.

    python benchmarks/studies/outcome_ceiling.py --episodes 1000 --data runs/study/default/iid.h5 \
        runs/study/default/noisier.h5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from physics_replay import WINDOWS, ceiling, majority_ceiling, record_pushes  # beside this script

from worldsim.data.reader import EpisodeReader
from worldsim.evaluation.evaluate import wilson_interval
from worldsim.world_models.ceiling import physics_agreement
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.evaluate import balanced_draw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402


def file_ceiling(path: Path, seed: int) -> dict[str, object]:
    """Full open-loop replays of the very episodes ``eval-wm --balance`` scores in ``path``,
    from their starts rebuilt from ``state`` (:func:`~worldsim.world_models.ceiling.physics_agreement`)."""
    with EpisodeReader(path) as reader:  # the draw eval-wm --balance makes (held_out_bank, seed 0)
        infos = reader.episode_info()
    picked = balanced_draw(np.array([i.success for i in infos]), np.random.default_rng(0))
    bank = EpisodeBank(path, episodes=[infos[k].index for k in picked])
    replayed = physics_agreement(bank, (0.01, 0.1, 0.33, 1.0, 3.0), seed)
    out: dict[str, object] = {"balanced_episodes": len(bank)}
    for name, a in replayed.items():
        hits = a["true_positive"] + a["true_negative"]
        out[name] = round(a["accuracy"], 4)
        out[f"{name}_ci"] = [round(x, 4) for x in wilson_interval(hits, a["episodes"])]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=400, help="episodes recorded per held-out policy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, nargs="*", default=[],
                        help="episode files with state (eval-wm's held-out sets): replay their balanced "
                             "selections in full from their recorded starts")
    parser.add_argument("--votes", type=int, default=9, help="shifted replays per episode that majority_agreement "
                                                            "votes over (odd, so no tie; 0: skip it)")
    args = parser.parse_args()
    if args.votes < 0 or (args.votes and args.votes % 2 == 0):
        parser.error(f"--votes {args.votes}: give an odd count (a majority needs no tie), or 0 to skip")
    policies = {"iid": (0.3, 0.2), "noisier": (0.6, 0.3)}
    sets = {}
    for offset, (name, (noise, epsilon)) in enumerate(policies.items()):
        rng = np.random.default_rng(args.seed + offset)
        recording = record_pushes(0.03, args.episodes, noise, epsilon, rng)
        rows = balanced_draw(recording.success, rng)
        sets[name] = {"expert_noise": noise, "expert_epsilon": epsilon, "recorded": args.episodes,
                      "recorded_success_rate": round(float(recording.success.mean()), 4),
                      "balanced_episodes": len(rows), "base_rate": 0.5,
                      "agreement": ceiling(recording, rows, rng),
                      "closed_loop_agreement": ceiling(recording, rows, rng, closed_loop=True)}
        if args.votes:  # its own generator: the single-replay figures above stay as they were
            sets[name]["majority_agreement"] = majority_ceiling(
                recording, rows, np.random.default_rng([args.seed + offset, args.votes]), args.votes)
    files = {path.stem: file_ceiling(path, args.seed) for path in args.data}
    report("outcome_ceiling", {"task": "PushCube-v0", "control_step_m": 0.03, "windows": list(WINDOWS),
                               "votes": args.votes, "held_out_sets": sets, "recorded_held_out_full_replays": files},
           args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
