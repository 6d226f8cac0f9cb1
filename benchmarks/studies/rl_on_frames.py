"""Which frames can a policy learn from? One round of GRPO in imagination from the same BC
policy, the same real keyframes and settings, with only the world model or the rung changed.

Each configuration ``NAME=WORLD_MODEL[:RUNG]`` trains from ``--policy`` for ``--env-steps``
imagined steps (``--num-envs`` envs, ``--reward-type``, the keyframes ``--keyframes``), and every
trained policy and the BC policy are tested on the same ``--test-episodes`` real episodes (seed
``--seed`` + 30000, as the ladder's), so every comparison is paired (McNemar). The ``oracle``
rung's frames are the scene renderer's: its row bounds what the frames cost, it is not a world
model's figure. Each configuration also reports the BC policy's action gap on its frames
(:func:`~worldsim.world_models.metrics.action_gap`, over the balanced held-out replays of
``--heldout``, steps 1-8).

    python benchmarks/studies/rl_on_frames.py --policy runs/ladder/base_s0/bc/policy \\
        --keyframes runs/ladder/pixels_s0/round_0/data.h5 --heldout runs/ladder/base_s0/heldout.h5 \\
        --config pixels=runs/ladder/pixels_s0/round_0/wm oracle=runs/ladder/pixels_s0/round_0/wm:oracle \\
        --reward-type dense --num-envs 128 --env-steps 51200 --out runs/rl_on_frames_s0
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from worldsim.envs.core import IMAGINED_REWARD_TYPES
from worldsim.envs.imagination import ImaginationConfig
from worldsim.evaluation.compare import paired_comparison
from worldsim.evaluation.evaluate import evaluate_in_physics
from worldsim.evaluation.rank import per_task_summary
from worldsim.pipelines.coevolve import TEST_SEED_OFFSET
from worldsim.policies import load_policy
from worldsim.runtime.threads import use_torch_threads
from worldsim.training.grpo import GRPOConfig, train_grpo
from worldsim.world_models.model import WorldModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_readability import held_out_gap  # noqa: E402


def test(policy: Path, task: str, episodes: int, seed: int, cache: Path) -> list[bool]:
    """Per-episode real outcomes on the test episodes (kept in ``cache``, reused when there)."""
    if cache.exists():
        return json.loads(cache.read_text())
    result = per_task_summary(evaluate_in_physics(load_policy(policy), [task], episodes, seed=seed))
    outcomes = [bool(o) for o in result["per_task"][task]["outcomes"]]
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(outcomes))
    return outcomes


def gap_at_8(policy: Path, world_model: Path, imagination: ImaginationConfig, heldout: Path, seed: int) -> float:
    """The BC policy's mean action gap over steps 1-8 of the balanced held-out replays."""
    model = WorldModel.from_pretrained(world_model).eval()
    gap, _, _ = held_out_gap(model, load_policy(policy).eval(), heldout, 8, imagination=imagination, seed=seed)
    return float(np.mean(gap["imagined"]))


def points(comparison: dict[str, Any]) -> dict[str, Any]:
    return {"difference": 100 * comparison["difference"],
            "ci95": [100 * x for x in comparison["difference_ci95"]], "p": comparison["p_value"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--keyframes", type=Path, required=True)
    parser.add_argument("--heldout", type=Path, required=True)
    parser.add_argument("--config", nargs="+", required=True, help="NAME=WORLD_MODEL[:RUNG]")
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--reward-type", default="dense", choices=IMAGINED_REWARD_TYPES)
    parser.add_argument("--num-envs", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-5, help="co-evolution's RL rate")
    parser.add_argument("--env-steps", type=int, default=51_200)
    parser.add_argument("--test-episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--name", default="rl_on_frames_s0")
    args = parser.parse_args()
    use_torch_threads(args.threads)
    test_seed = args.seed + TEST_SEED_OFFSET
    bc = test(args.policy, args.task, args.test_episodes, test_seed, args.out / "test_bc.json")
    rows: dict[str, Any] = {}
    outcomes: dict[str, list[bool]] = {}
    for entry in args.config:
        name, _, spec = entry.partition("=")
        world_model, _, rung = spec.partition(":")
        if not name or not world_model:
            parser.error(f"--config {entry}: give NAME=WORLD_MODEL[:RUNG]")
        imagination = ImaginationConfig(world_model=Path(world_model), keyframes=args.keyframes, rung=rung or "pixels",
                                        reward_type=args.reward_type)
        out = args.out / name
        if not (out / "policy").exists():
            train_grpo(GRPOConfig(policy=args.policy, task=args.task, obs_mode="pixels", imagination=imagination,
                                  num_envs=args.num_envs, lr=args.lr, total_env_steps=args.env_steps, eval_every=0,
                                  eval_episodes=10, checkpoint_every=0, seed=args.seed, out=out,
                                  torch_threads=args.threads, progress=False))
        outcomes[name] = test(out / "policy", args.task, args.test_episodes, test_seed, out / "test.json")
        rows[name] = {"world_model": world_model, "rung": imagination.rung.name, "oracle": imagination.rung.rendered,
                      "success": float(np.mean(outcomes[name])), "vs_bc": points(paired_comparison(bc, outcomes[name])),
                      "bc_action_gap_8": gap_at_8(args.policy, Path(world_model), imagination, args.heldout, args.seed)}
        print(name, rows[name], flush=True)
    names = list(rows)
    pairs = {f"{b}_vs_{a}": points(paired_comparison(outcomes[a], outcomes[b]))
             for i, a in enumerate(names) for b in names[i + 1:]}
    report(args.name, {"bc": float(np.mean(bc)), "test_episodes": args.test_episodes, "rows": rows, "pairs": pairs},
           args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
