"""Can a policy read the world model's frames? The action a policy takes on an imagined frame
against the action it takes on the real frame it stands for.

A policy trained in imagination learns from what it does on imagined frames; if it acts
differently there than on the real frames, what it learns does not carry over. PSNR does not
say this: a blurred gripper costs few decibels but may move the policy's action a lot. This
study replays ``--episodes`` held-out real episodes of ``--data`` open loop in each world model
(:func:`~worldsim.world_models.replay.open_loop`, the recorded actions, from episode starts, for
``--horizon`` steps; balanced between successes and failures) and, at every valid step, runs the
policy on the real and on the imagined observation
(:func:`~worldsim.world_models.metrics.action_gap`: ``gap_seen`` with the imagined proprio, what
the policy sees in imagination; ``gap_frame`` with the real proprio, the frame's share), as the
mean L2 distance between its two mean actions (action units) in steps 1-8, 9-16 and
17-``horizon``. Two lines read them: ``step_change``, how far the policy's real action moves from
one step to the next, and the ``oracle`` rung, whose
frames the scene's renderer draws from the imagined state (its gap is the dynamics' share: an
upper bound for analysis, not a world-model figure). Each configuration is
``NAME=WORLD_MODEL[:RUNG[:SAMPLING_STEPS]]``.

    python benchmarks/studies/frame_readability.py --policy runs/ladder/base_s0/bc \\
        --data runs/ladder/base_s0/heldout.h5 \\
        --config tiny=runs/ladder/pixels_s0/round_0/wm tiny_oracle=runs/ladder/pixels_s0/round_0/wm:oracle \\
        --name frame_readability_s0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldsim.envs.imagination import DEFAULT_IMAGINATION, ImaginationConfig
from worldsim.policies import load_policy
from worldsim.policies.base import Policy
from worldsim.runtime.threads import use_torch_threads
from worldsim.world_models.evaluate import HeldOut, held_out_bank
from worldsim.world_models.metrics import action_gap, psnr_curve
from worldsim.world_models.model import WorldModel
from worldsim.world_models.replay import OpenLoop, open_loop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

BUCKETS = ((1, 8), (9, 16), (17, None))


def bucketed(curve: list[float]) -> dict[str, float]:
    """Means of a per-step curve (steps 1..H) over each bucket of steps."""
    return {f"steps_{lo}_{hi or len(curve)}": float(np.nanmean(curve[lo - 1:hi])) for lo, hi in BUCKETS}


def held_out_gap(model: WorldModel, policy: Policy, data: Path, horizon: int, *,
                 imagination: ImaginationConfig = DEFAULT_IMAGINATION, seed: int = 0, episodes: int | None = None
                 ) -> tuple[dict[str, list[float]], OpenLoop, HeldOut]:
    """``policy``'s :func:`~worldsim.world_models.metrics.action_gap` over ``horizon``-step
    replays of the balanced held-out episodes of ``data`` from their starts, imagined as
    ``imagination`` says (its rung and sampling steps), with the replays and the held-out set."""
    held = held_out_bank(model, data, episodes=episodes, balance=True, seed=seed)
    bank = held.bank
    run = open_loop(model, bank, np.arange(len(bank)), np.zeros(len(bank), np.int64), horizon,
                    imagination=imagination, generator=torch.Generator(model.device).manual_seed(seed))
    return action_gap(run, policy, [info.instruction for info in bank.infos]), run, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="held-out real episodes (pixels+state)")
    parser.add_argument("--config", nargs="+", required=True, help="NAME=WORLD_MODEL[:RUNG[:SAMPLING_STEPS]]")
    parser.add_argument("--episodes", type=int, default=60, help="read from --data, then balanced")
    parser.add_argument("--horizon", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--name", default="frame_readability")
    args = parser.parse_args()
    use_torch_threads(args.threads)
    policy = load_policy(args.policy).eval()
    rows: dict[str, Any] = {}
    step_change: dict[str, float] = {}
    for entry in args.config:
        name, _, spec = entry.partition("=")
        path, rung, steps = [*spec.split(":"), "", ""][:3]
        if not name or not path:
            parser.error(f"--config {entry}: give NAME=WORLD_MODEL[:RUNG[:SAMPLING_STEPS]]")
        imagination = ImaginationConfig(rung=rung or "pixels", sampling_steps=int(steps) if steps else None)
        model = WorldModel.from_pretrained(path).eval()
        gap, run, held = held_out_gap(model, policy, args.data, args.horizon, imagination=imagination, seed=args.seed,
                                      episodes=args.episodes)
        psnr = psnr_curve(run)
        rows[name] = {"world_model": path, "rung": imagination.rung.name, "oracle": imagination.rung.rendered,
                      "sampling_steps": int(steps) if steps else model.config.sampling_steps,
                      "gap_seen": bucketed(gap["imagined"]), "gap_frame": bucketed(gap["frame"]),
                      "psnr_8": float(psnr[7]), "psnr_32": float(psnr[min(31, len(psnr) - 1)]),
                      "episodes": len(held.bank), "successes": int(held.success.sum())}
        step_change = step_change or bucketed(gap["step_change"])
        print(name, rows[name], flush=True)
    report(args.name, {"policy": str(args.policy), "data": str(args.data), "step_change": step_change,
                       "configs": rows}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
