"""Teach a policy to read the world model's frames: does it then gain from imagination on the
``pixels`` rung?

A policy acts on the model's own frames differently than on the real frames they stand for
(``frame_readability.py``), so what GRPO teaches it there carries over poorly. Here the policy is
first fine-tuned to act on the model's frames as it acts on the real ones: the model replays
the round's real episodes (``round_0/all.h5``: the base policy's episodes and the demonstrations)
open loop on the ``pixels`` rung, from episode starts and from one random step per episode, for
``--horizon`` steps, and the policy's mean chunk on each imagined frame (with the imagined proprio)
is pulled towards the frozen base policy's mean chunk on the real frame (with the real proprio),
while its chunk on the real frame is held where it was. Nothing here reads the simulator while
imagining: the real frames and proprio are recorded ones.

Then, for the base policy and the adapted one: the readability gap on the held-out episodes,
real success on the ladder's 200 test episodes, and one round of GRPO in imagination with the
ladder run's settings (its world model, keyframes, rung and reward), itself tested on the same
episodes. Every comparison is paired (McNemar).

    python benchmarks/studies/frame_consistency.py --run runs/ladder/pixels_s0 \\
        --base runs/ladder/base_s0 --out runs/frame_consistency_s0
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldsim.data.reader import EpisodeReader
from worldsim.evaluation.compare import paired_comparison
from worldsim.pipelines.coevolve import TEST_SEED_OFFSET
from worldsim.policies import load_policy
from worldsim.runtime.threads import use_torch_threads
from worldsim.world_models.data import EpisodeBank
from worldsim.world_models.model import WorldModel
from worldsim.world_models.replay import open_loop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frame_readability import bucketed, held_out_gap  # noqa: E402
from rl_on_frames import points, test  # noqa: E402


def twins(model: WorldModel, data: Path, horizon: int, seed: int) -> dict[str, np.ndarray]:
    """Real frames and proprio beside the model's open-loop imagination of them (pixels rung)."""
    rng = np.random.default_rng(seed)
    with EpisodeReader(data) as reader:
        bank = EpisodeBank(reader, tasks=model.config.tasks)
    n = len(bank)
    episodes = np.concatenate([np.arange(n), np.arange(n)])
    starts = np.concatenate([np.zeros(n, np.int64), rng.integers(0, np.maximum(bank.lengths - 1, 1))])
    run = open_loop(model, bank, episodes, starts, horizon, generator=torch.Generator().manual_seed(seed))
    keep = run.valid.copy()
    keep[:, 0] = False  # step 0 is the real frame in both
    return {"real": run.real[keep], "imagined": run.imagined[keep], "real_proprio": run.real_proprio[keep],
            "imagined_proprio": run.imagined_proprio[keep], "instruction": bank.infos[0].instruction}


def adapt(policy_path: Path, pairs: dict[str, Any], steps: int, batch: int, lr: float, seed: int,
          out: Path) -> Path:
    """Fine-tune a copy of the policy so that its mean chunk on imagined frames matches the base
    policy's on the real ones, its own on real frames held; saves to ``out``."""
    policy = load_policy(policy_path).train()
    reference = copy.deepcopy(policy).eval().requires_grad_(False)
    optimiser = torch.optim.Adam(policy.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    n, instruction = len(pairs["real"]), pairs["instruction"]
    log = []
    for step in range(steps):
        idx = rng.integers(0, n, batch)
        real = policy.preprocess({"image": pairs["real"][idx], "proprio": pairs["real_proprio"][idx],
                                  "instruction": (instruction,) * batch})
        imagined = policy.preprocess({"image": pairs["imagined"][idx], "proprio": pairs["imagined_proprio"][idx],
                                      "instruction": (instruction,) * batch})
        with torch.no_grad():
            target = reference.action_mean(reference.features(real))
        on_imagined = ((policy.action_mean(policy.features(imagined)) - target) ** 2).mean()
        on_real = ((policy.action_mean(policy.features(real)) - target) ** 2).mean()
        loss = on_imagined + on_real
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step % 100 == 0 or step == steps - 1:
            log.append({"step": step, "imagined": on_imagined.item(), "real": on_real.item()})
            print(log[-1], flush=True)
    policy.eval().save_pretrained(out)
    (out / "adapt_log.json").write_text(json.dumps(log))
    return out


def readability(policy_path: Path, model: WorldModel, heldout: Path, seed: int) -> dict[str, Any]:
    """The policy's action gap between imagined and real frames on the balanced held-out replays."""
    return bucketed(held_out_gap(model, load_policy(policy_path).eval(), heldout, 32, seed=seed)[0]["imagined"])


def grpo_round(run: Path, policy_path: Path, out: Path, threads: int) -> Path:
    """One round of GRPO in imagination with the ladder run's own settings."""
    from worldsim.envs.imagination import ImaginationConfig
    from worldsim.pipelines.coevolve import CoevolveConfig, train_rl
    from worldsim.pipelines.coevolve_parts import RLRounds

    if not (out / "policy").exists():
        saved = json.loads((run / "state.json").read_text())["config"]
        config = CoevolveConfig(
            base_policy=policy_path, task=saved["task"], suite=None, real_episodes=saved["real_episodes"], rounds=1,
            rl=RLRounds(env_steps=saved["rl"]["env_steps"], num_envs=saved["rl"]["num_envs"]),
            eval_episodes=saved["eval_episodes"], seed=saved["seed"], out=out, torch_threads=threads,
            progress=False, imagination=ImaginationConfig(rung=saved["imagination"]["rung"],
                                                          reward_type=saved["imagination"]["reward_type"]))
        train_rl(config, policy_path, out, run / "round_0" / "wm", run / "round_0" / "data.h5", config.rl.env_steps)
    return out / "policy"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a ladder run on the pixels rung")
    parser.add_argument("--base", type=Path, required=True, help="its base folder (bc/, heldout.h5)")
    parser.add_argument("--task", default="PushCube-v0")
    parser.add_argument("--horizon", type=int, default=40)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--test-episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--name", default="frame_consistency_s0")
    args = parser.parse_args()
    use_torch_threads(args.threads)
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    model = WorldModel.from_pretrained(args.run / "round_0" / "wm").eval()
    base = args.base / "bc" / "policy"
    adapted = args.out / "adapted"
    if not (adapted / "model.safetensors").exists():
        pairs = twins(model, args.run / "round_0" / "all.h5", args.horizon, args.seed)
        print(f"{len(pairs['real'])} frame pairs", flush=True)
        adapt(base, pairs, args.steps, args.batch, args.lr, args.seed, adapted)
    policies = {"bc": base, "adapted": adapted,
                "bc_grpo": args.run / "round_1" / "rl" / "policy",
                "adapted_grpo": grpo_round(args.run, adapted, args.out / "adapted_grpo", args.threads)}
    seed = args.seed + TEST_SEED_OFFSET
    outcomes = {name: test(p, args.task, args.test_episodes, seed, args.out / f"test_{name}.json")
                for name, p in policies.items()}
    rows = {name: {"policy": str(p), "success": float(np.mean(outcomes[name])),
                   "gap": readability(p, model, args.base / "heldout.h5", args.seed)}
            for name, p in policies.items()}
    for name in ("adapted", "bc_grpo", "adapted_grpo"):
        rows[name]["vs_bc"] = points(paired_comparison(outcomes["bc"], outcomes[name]))
    rows["adapted_grpo"]["vs_bc_grpo"] = points(paired_comparison(outcomes["bc_grpo"], outcomes["adapted_grpo"]))
    rows["adapted_grpo"]["vs_adapted"] = points(paired_comparison(outcomes["adapted"], outcomes["adapted_grpo"]))
    report(args.name, {"run": str(args.run), "rows": rows}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
