"""Does ``worldsim evaluate`` give a LeRobot policy the same outcomes as lerobot's own evaluation loop?

Run in the LeRobot environment of ``docs/lerobot.md`` (lerobot, worldsim and
``lerobot_env_worldsim`` installed together), on a checkpoint that ``lerobot-train`` wrote:

    python benchmarks/studies/lerobot_eval_agreement.py --policy runs/act_reach --task ReachCube-v0 \
        --episodes 50

The same ``--episodes`` episodes (episode k starts from the seed ``worldsim evaluate`` gives it,
``worldsim.rollout.slot_seed(seed, k)``) are run twice:

- by lerobot: ``lerobot.scripts.lerobot_eval.rollout`` (what ``lerobot-eval`` runs) with the
  policy, processors and env that ``lerobot-eval --env.type=worldsim`` builds, the envs reset
  with those seeds; an episode succeeds when ``is_success`` is set before its end, as
  ``lerobot-eval`` counts it;
- by worldsim: ``evaluate_task`` with the checkpoint loaded by ``load_policy``
  (:mod:`worldsim.policies.lerobot`), deterministic, as ``worldsim evaluate`` runs it.

Prints one JSON line last (kept in ``benchmarks/studies/results/lerobot_eval_agreement.json``):
both success rates, and on how many episodes the two outcomes agree.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402


def lerobot_outcomes(policy_path: Path, task: str, seeds: list[int], batch: int) -> list[bool]:
    """Each episode's success under lerobot's own rollout loop, episode k reset with ``seeds[k]``."""
    import einops
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.envs.factory import make_env_pre_post_processors
    from lerobot.policies.factory import make_policy, make_pre_post_processors
    from lerobot.scripts.lerobot_eval import rollout
    from lerobot_env_worldsim import WorldsimEnv

    env_config = WorldsimEnv(task=task)
    policy_config = PreTrainedConfig.from_pretrained(str(policy_path))
    policy_config.pretrained_path = str(policy_path)
    policy_config.device = "cpu"
    policy = make_policy(cfg=policy_config, env_cfg=env_config)
    policy.eval()
    preprocessor, postprocessor = make_pre_post_processors(
        policy_cfg=policy_config, pretrained_path=str(policy_path),
        preprocessor_overrides={"device_processor": {"device": "cpu"}})
    env_pre, env_post = make_env_pre_post_processors(env_cfg=env_config, policy_cfg=policy_config)
    outcomes: list[bool] = []
    for start in range(0, len(seeds), batch):
        chunk = seeds[start : start + batch]
        env = env_config.make_envs(len(chunk))[env_config.type][0]
        try:
            with torch.no_grad():
                data = rollout(env, policy, env_pre, env_post, preprocessor, postprocessor, seeds=chunk)
        finally:
            env.close()
        done = data["done"].int()
        # the steps up to and including each episode's first end, as lerobot-eval masks them
        mask = (torch.cumsum(torch.cat([torch.zeros_like(done[:, :1]), done[:, :-1]], dim=1), dim=1) == 0).int()
        outcomes += einops.reduce(data["success"].int() * mask, "b n -> b", "any").bool().tolist()
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", type=Path, required=True, help="lerobot-train output or pretrained_model folder")
    parser.add_argument("--task", default="ReachCube-v0")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=10, help="episodes lerobot's loop runs side by side")
    args = parser.parse_args()

    from worldsim.evaluation.evaluate import evaluate_task
    from worldsim.policies import load_policy
    from worldsim.policies.lerobot import lerobot_checkpoint
    from worldsim.rollout import slot_seed

    path = lerobot_checkpoint(args.policy)
    if path is None:
        raise SystemExit(f"{args.policy} holds no LeRobot policy checkpoint")
    seeds = [slot_seed(args.seed, k) for k in range(args.episodes)]
    t0 = time.perf_counter()
    theirs = lerobot_outcomes(path, args.task, seeds, args.batch)
    t1 = time.perf_counter()
    ours = evaluate_task(load_policy(path), args.task, args.episodes, num_envs=args.batch, seed=args.seed,
                         progress=False).outcomes
    t2 = time.perf_counter()
    same = np.array(theirs) == np.array(ours)
    report("lerobot_eval_agreement", {
        "task": args.task, "episodes": args.episodes,
        "lerobot_success": round(float(np.mean(theirs)), 3), "worldsim_success": round(float(np.mean(ours)), 3),
        "episodes_agreeing": int(same.sum()), "disagreeing": [k for k in range(args.episodes) if not same[k]],
        "lerobot_s": round(t1 - t0, 1), "worldsim_s": round(t2 - t1, 1),
    }, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
