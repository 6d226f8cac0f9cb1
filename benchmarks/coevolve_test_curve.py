"""Every round of a co-evolution benchmark on its test episodes: real episodes that no round
evaluation saw, so no figure here was chosen by the guard or by a look at it.

``benchmarks/coevolve.py --test-episodes N`` evaluates each seed's base and final policy on the
test episodes. This script evaluates the policy of every round, accepted or not, on the same
episodes, and the final policy of each baseline folder named by ``--baselines`` (e.g. a direct-RL
run on another budget), then compares them pooled over the seeds, paired (McNemar), against the
base and against the round before, and the rounds named by ``--against`` against each baseline.
Evaluations are kept in ``<run>/test_curve.json`` and reused when the script runs again.
``--seed-offset K`` puts everything, the base included, on another set of fresh episodes (seed
+ K), a second test of the same policies. ``--average`` adds the uniform average of the weights
of every round's policy (rounds 1 on, accepted or not; written to ``<run>/average_of_rounds_1-R``),
compared with the base, the last round and each baseline: the rounds fine-tune one policy at a
small learning rate, so their average is a policy too, with the rounds' noise averaged out.

    python benchmarks/coevolve_test_curve.py --out runs/bench_coevolve_push_short128_4r \\
        --baselines direct-rl-400ep direct-rl-700ep direct-rl --against 4 7 9 --average
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from common import report
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from worldsim.evaluation.compare import paired_comparison
from worldsim.evaluation.evaluate import evaluate_in_physics
from worldsim.evaluation.rank import per_task_summary
from worldsim.pipelines.coevolve import last_accepted, real_outcomes
from worldsim.policies import load_policy
from worldsim.runtime.run_logging import write_json
from worldsim.runtime.threads import use_torch_threads


def average_of_rounds(run: Path, policies: dict[str, str]) -> Path:
    """The uniform average of the weights of ``policies``' rounds 1 to R (keys ``"round <k>"``;
    round 0, the base, and any other key are left out), saved once under ``run`` as
    ``average_of_rounds_1-R/policy`` (an extended run gets a new one) with round R's config; its folder."""
    rounds = sorted((int(k.split()[1]), Path(v)) for k, v in policies.items()
                    if k.startswith("round ") and k != "round 0")
    if not rounds:
        raise ValueError("no round policies to average (keys 'round 1' on)")
    folder = run / f"average_of_rounds_1-{rounds[-1][0]}" / "policy"
    if not folder.exists():
        weights = [load_file(str(policy / "model.safetensors")) for _, policy in rounds]
        average = {name: torch.stack([w[name].double() for w in weights]).mean(0).to(tensor.dtype)
                   for name, tensor in weights[-1].items()}
        staging = folder.with_name(".policy.tmp")
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "config.json").write_bytes((rounds[-1][1] / "config.json").read_bytes())
        save_file(average, str(staging / "model.safetensors"))
        staging.replace(folder)
    return folder


def weights_digest(policy: Path) -> str:
    """What identifies a policy in the cache: its weights, not its folder (folders get renamed and reused)."""
    files = sorted(policy.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"{policy}: no policy weights (*.safetensors) there")
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def test_outcomes(run: Path, results: dict[str, Any], policies: dict[str, str], seed: int,
                  progress: tqdm) -> dict[str, list[bool]]:
    """Per-episode outcomes of each named policy on as many episodes as ``run``'s test (its
    ``results``), from ``seed`` (cached in the run)."""
    test = results["test"]
    cache_file = run / "test_curve.json"
    cache: dict[str, Any] = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    out = {}
    for name, policy in policies.items():
        key = f"{weights_digest(Path(policy))}@{seed}x{test['episodes_per_task']}"
        if key not in cache:
            summary = per_task_summary(evaluate_in_physics(load_policy(policy), results["tasks"],
                                                           test["episodes_per_task"], seed=seed))
            cache[key] = real_outcomes(results["tasks"], {"real": summary})
            write_json(cache_file, cache)
        out[name] = cache[key]
        progress.update()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the benchmarks/coevolve.py folder")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--baselines", nargs="*", default=[], help="variant folders <name>_s<seed> in --out")
    parser.add_argument("--against", type=int, nargs="*", default=[], help="rounds compared with each baseline")
    parser.add_argument("--seed-offset", type=int, default=None,
                        help="episodes from seed + this instead of the run's test episodes (a second test)")
    parser.add_argument("--average", action="store_true", help="add the average of the rounds' weights")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (the runs' own: 1)")
    args = parser.parse_args()
    use_torch_threads(args.threads)

    per_seed = []
    progress = tqdm(desc="test evaluations", unit="policy")
    for seed in args.seeds:
        run = args.out / f"coevolve_s{seed}"
        results = json.loads((run / "results.json").read_text())
        if not results.get("test"):
            raise SystemExit(f"{run} has no test evaluation: run benchmarks/coevolve.py with --test-episodes")
        policies = {f"round {r['round']}": r["policy"] for r in results["rounds"]}
        for name in args.baselines:
            baseline = json.loads((args.out / f"{name}_s{seed}" / "results.json").read_text())
            policies[name] = last_accepted(baseline["rounds"])["policy"]
            if not Path(policies[name]).resolve().is_relative_to((args.out / f"{name}_s{seed}").resolve()):
                raise SystemExit(f"{name}_s{seed}'s policy {policies[name]} lies outside its folder: was it moved?")
        if args.average:
            policies["average"] = str(average_of_rounds(run, policies))
        episodes_seed = results["test"]["seed"] if args.seed_offset is None else seed + args.seed_offset
        outcomes = test_outcomes(run, results, policies, episodes_seed, progress)
        if args.seed_offset is None and outcomes["round 0"] != real_outcomes(results["tasks"], results["test"]["base"]):
            raise SystemExit(f"{run}: the base policy's test outcomes differ from the run's own: not the same episodes")
        per_seed.append(outcomes)
    progress.close()

    def pooled(name: str) -> list[bool]:
        return sum((o[name] for o in per_seed), [])

    def rates(name: str) -> dict[str, Any]:
        return {"success_rate": float(sum(pooled(name)) / len(pooled(name))),
                "per_seed": [sum(o[name]) / len(o[name]) for o in per_seed]}

    rounds = min(sum(k.startswith("round ") for k in o) for o in per_seed)
    average = None
    if args.average:
        average = {**rates("average"),
                   "vs_base": paired_comparison(pooled("round 0"), pooled("average")),
                   "vs_last_round": paired_comparison(pooled(f"round {rounds - 1}"), pooled("average")),
                   "vs_baselines": {name: paired_comparison(pooled(name), pooled("average"))
                                    for name in args.baselines}}
    curve = [{"round": k, **rates(f"round {k}"),
              "vs_base": paired_comparison(pooled("round 0"), pooled(f"round {k}")) if k else None,
              "vs_previous": paired_comparison(pooled(f"round {k - 1}"), pooled(f"round {k}")) if k else None}
             for k in range(rounds)]
    summary = {"out": str(args.out), "seeds": args.seeds, "test_episodes": len(per_seed[0]["round 0"]),
               "seed_offset": args.seed_offset,
               "rounds": curve, "average_of_rounds": average,
               "baselines": {name: paired_comparison(pooled("round 0"), pooled(name)) for name in args.baselines},
               "rounds_vs_baselines": {f"round {k} vs {name}": paired_comparison(pooled(name), pooled(f"round {k}"))
                                       for k in args.against for name in args.baselines}}
    report("coevolve_test_curve", summary, args)


if __name__ == "__main__":
    main()
