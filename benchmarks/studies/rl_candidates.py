"""Do GRPO fine-tunes make the rankers without rollouts fail? Before a ranking set with RL
candidates is built (``policy_ranking.py --rl-from``), one set's main BC run and its fine-tunes in
physics, measured in physics and by the rankers that need no rollout, without a world model.

Builds set ``--set`` exactly as ``policy_ranking.py`` does (the same demonstrations, held-out
episodes, BC run ``bc_a`` and real evaluation episodes, so its BC checkpoints' real success can be
checked against ``benchmarks/results/policy_ranking.json``), then its GRPO fine-tunes
(``--rl-lrs``, kept at ``--rl-iterations``), and gives each ranker's Spearman against real success
over the BC checkpoints and fine-tunes together and over the fine-tunes alone. Writes
``benchmarks/studies/results/rl_candidates.json``::

    python benchmarks/studies/rl_candidates.py --set 21

Kept fine-tunes are extended when ``--ranking.rl-iterations`` asks for more (the run is trained
again from its base; GRPO's iterations do not depend on the run's length, so the earlier ones
come out the same).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmark scripts
import policy_ranking  # noqa: E402
from common import STUDY_RESULTS, report  # noqa: E402


@dataclass
class Args:
    set: int = 21
    """The candidate set's seed (demonstrations, training and evaluation episodes)."""
    ranking: policy_ranking.Args = field(
        default_factory=lambda: policy_ranking.Args(rl_from=("bc_a",), rl_iterations=(3, 6, 9, 18, 36)))
    """The ranking benchmark's settings the set is built with (its BC run, fine-tunes, episodes)."""
    threads: int = 1
    """torch CPU threads."""


def measure(ranking: policy_ranking.Args, path: Path, about: dict[str, Any], held_out: Path) -> dict[str, Any]:
    """A candidate's real success (``--real-episodes`` per task) and offline signals, kept in its run."""
    from worldsim.evaluation.evaluate import evaluate_in_physics
    from worldsim.evaluation.offline import offline_signals
    from worldsim.evaluation.rank import per_task_summary
    from worldsim.policies import load_policy
    from worldsim.runtime.run_logging import write_json

    measured = policy_ranking.measured_path(path, "_real")
    if not measured.exists():
        policy = load_policy(path).eval()
        start = time.time()
        real = evaluate_in_physics(policy, list(policy_ranking.TASKS), ranking.real_episodes, seed=about["seed"])
        write_json(measured, {"policy": str(path), **about, "real": per_task_summary(real),
                              "offline": offline_signals(policy, held_out), "seconds": round(time.time() - start, 1)})
    return json.loads(measured.read_text())


def main(args: Args) -> None:
    from worldsim.evaluation.rank import spearman_kendall
    from worldsim.runtime.threads import use_torch_threads

    use_torch_threads(args.threads)
    ranking, seed = args.ranking, args.set
    root = ranking.out / f"set{seed}"
    root.mkdir(parents=True, exist_ok=True)
    demos, held_out = root / "demos.h5", root / "held_out.h5"
    policy_ranking.collect(demos, ranking.demos, seed)
    policy_ranking.collect(held_out, ranking.held_out, seed + 500)
    base = root / "bc_a"
    policy_ranking.train_run(ranking, base, demos, policy_ranking.recipes(ranking)["bc_a"], seed)
    rows = [measure(ranking, base / f"policy_step{s}",
                    {"run": "bc_a", "steps": s, "demos": ranking.demos, "seed": seed + 10_000}, held_out)
            for s in ranking.checkpoints]
    for run_name, rl in policy_ranking.rl_runs(ranking).items():
        run = root / run_name
        policy_ranking.fine_tune(ranking, base / "policy", run, rl["lr"], seed)
        for n in ranking.rl_iterations:
            steps = ranking.bc_steps + policy_ranking.updates_until(run, n)
            rows.append(measure(ranking, run / f"policy_iter{n}",
                                {"run": run_name, "iterations": n, "steps": steps, "demos": ranking.demos,
                                 "seed": seed + 10_000}, held_out))
    real = np.array([np.mean([t["success_rate"] for t in r["real"]["per_task"].values()]) for r in rows])
    fine_tuned = np.array(["iterations" in r for r in rows])

    def spearman(values: np.ndarray, keep: np.ndarray) -> float | None:
        rho = spearman_kendall(real[keep], values[keep])["spearman"]
        return None if np.isnan(rho) else float(rho)

    rankers = {}
    for name, (value, sign) in policy_ranking.RANKERS.items():
        values = np.array([sign * value(r) for r in rows], float)
        rankers[name] = {"all": spearman(values, np.ones_like(fine_tuned)), "fine_tunes": spearman(values, fine_tuned),
                         "values": values.tolist()}
    report("rl_candidates", {
        "set": seed, "names": [f"{r['run']}@iter{r['iterations']}" if "iterations" in r else f"bc_a@{r['steps']}"
                               for r in rows],
        "real": real.tolist(), "real_per_task": [{k: v["success_rate"] for k, v in r["real"]["per_task"].items()}
                                                 for r in rows],
        "band_points": float(100 * np.ptp(real)), "rankers": rankers,
        "seconds": sum(r["seconds"] for r in rows)}, args, STUDY_RESULTS)


if __name__ == "__main__":
    main(tyro.cli(Args))
