"""Do RL runs in imagination gain where the world model says they gain? Each run's policy, and the
BC policy it started from, from the same real starts in its world model and in physics.

Each ``NAME=FOLDER`` holds one `train-rl` run in imagination per seed (``FOLDER/s0``, ...), as
``rl_pilots.py`` takes them. For each seed, ``--starts`` starts are drawn as that run drew its
imagined episodes' starts (its world model, keyframes file, keyframe share and horizon, from its
``config.json``). The BC policy it started from (``policy`` in the config) and the trained policy
(``FOLDER/s<seed>/policy``) each run from every start once in the world model and twice in physics
(:func:`worldsim.evaluation.start_agreement.compare_from_starts`, actions sampled as RL samples
them, or with ``--reading mean`` the mean action, as a policy is tested; ``--judge`` swaps the
success judge the run imagined with). Pooled over seeds, per run:

- imagined and real success of BC and of the trained policy, with Wilson intervals;
- the imagined gain (trained - BC in the world model) against the real gain from the same starts,
  paired tests: a model that RL can trust shows the gain physics shows;
- start-by-start agreement of imagined and real outcomes beside the majority answer, and physics
  run twice (the ceiling a stochastic policy leaves; none by the mean action).

Each comparison is kept as ``--out/<NAME>/s<seed>_<bc|trained>[@mean][~<judge>].json`` (with its
video) and reused when there. Prints one JSON line last (``benchmarks/studies/results/<--name>.json``, by default
``start_agreement.json``). A co-evolution run's rounds fit too: link each seed's
``round_1/rl`` as ``FOLDER/s<seed>``.

    python benchmarks/studies/start_agreement.py --starts 200 round0_wm=runs/pilot_dense60k \\
        expert_1000_wm=runs/pilot_study_wm expert_1000_wm_rule=runs/pilot_study_wm_rule
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from worldsim.envs.imagination import JUDGES, ImaginationConfig
from worldsim.evaluation.compare import READINGS, paired_comparison
from worldsim.evaluation.start_agreement import compare_from_starts, rates
from worldsim.policies import load_policy
from worldsim.runtime.run_logging import write_json
from worldsim.runtime.threads import use_torch_threads
from worldsim.world_models.metrics import agreement

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import STUDY_RESULTS, report  # noqa: E402

POLICIES = ("bc", "trained")


def comparison(run: Path, which: str, starts: int, seed: int, out: Path, reading: str = "sampled",
               judge: str | None = None) -> dict[str, Any]:
    """The start-by-start comparison of run ``run``'s BC or trained policy read as ``reading``
    (:data:`~worldsim.evaluation.compare.READINGS`), its world model judging by ``judge`` (the
    run's own when None), kept in ``out``."""
    # the settings are in the name, so that one --out never answers one reading or judge with another's
    name = (f"{run.name}_{which}" + ("" if reading == "sampled" else f"@{reading}")
            + ("" if judge is None else f"~{judge}"))
    path = out / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    config = json.loads((run / "config.json").read_text())
    imagination = ImaginationConfig(**{**config.get("imagination", {}), "device": "cpu"})  # as the run imagined
    if judge is not None:
        imagination = imagination.replace(judge=judge)
    if not imagination.imagined:
        raise SystemExit(f"{run} trained in physics: only runs in imagination have starts to check")
    policy = load_policy(config["policy"] if which == "bc" else run / "policy").eval()
    result = compare_from_starts(policy, config["task"], imagination, starts=starts, seed=seed,
                                 deterministic=READINGS[reading], out=out / name,
                                 videos=6 if which == "trained" else 0)
    write_json(path, result)
    return result


def pooled(results: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`~worldsim.evaluation.start_agreement.rates` over the starts of every seed, with the ceiling."""
    imagined, real = (np.concatenate([r["per_start"][key] for r in results]).astype(bool)
                      for key in ("imagined", "real"))
    repeats = [r["per_start"]["real_repeat"] for r in results]  # none when read by the mean action
    ceiling = None if None in repeats else _rounded(agreement(np.concatenate(repeats).astype(bool), real))
    return {**_rounded(rates(imagined, real)), "ceiling": ceiling,
            "imagined_per_seed": [round(r["imagined_success"], 3) for r in results],
            "real_per_seed": [round(r["real_success"], 3) for r in results]}


def gain(results: dict[str, list[dict[str, Any]]], side: str) -> dict[str, Any]:
    """Trained - BC from the same starts, in imagination or in physics (a paired test)."""
    before = np.concatenate([r["per_start"][side] for r in results["bc"]]).astype(bool)
    after = np.concatenate([r["per_start"][side] for r in results["trained"]]).astype(bool)
    c = paired_comparison(before, after)
    return {"difference": round(c["difference"], 3), "ci95": [round(v, 3) for v in c["difference_ci95"]],
            "p_value": round(c["p_value"], 4)}


def _rounded(value: Any) -> Any:
    """``value`` with its floats, also inside dicts and lists, to 3 decimals."""
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return round(value, 3) if isinstance(value, float) else value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--starts", type=int, default=200, help="starts per seed")
    parser.add_argument("--out", type=Path, default=Path("runs/start_agreement"))
    parser.add_argument("--reading", choices=list(READINGS), default="sampled",
                        help="the policies' actions: sampled, as RL samples them, or the mean action")
    parser.add_argument("--judge", choices=JUDGES, default=None,
                        help="who says an imagined episode succeeded (default: as each run imagined)")
    parser.add_argument("--name", default="start_agreement",
                        help="the result file's name (benchmarks/studies/results/NAME.json)")
    parser.add_argument("runs", nargs="+", help="NAME=FOLDER of train-rl runs in imagination, one subfolder per seed")
    args = parser.parse_args()
    use_torch_threads(2)
    runs: dict[str, Any] = {}
    for spec in args.runs:
        name, sep, folder = spec.partition("=")
        if not sep:
            parser.error(f"{spec!r}: give NAME=FOLDER")
        results: dict[str, list[dict[str, Any]]] = {which: [] for which in POLICIES}
        for seed in args.seeds:
            for which in POLICIES:
                results[which].append(comparison(Path(folder) / f"s{seed}", which, args.starts, seed,
                                                 args.out / name, args.reading, args.judge))
        config = json.loads((Path(folder) / f"s{args.seeds[0]}" / "config.json").read_text())
        runs[name] = {"folder": folder, "world_model": config["imagination"]["world_model"],
                      **{which: pooled(results[which]) for which in POLICIES},
                      "imagined_gain": gain(results, "imagined"), "real_gain": gain(results, "real")}
        print(name, json.dumps(runs[name]))
    metrics = {"seeds": args.seeds, "reading": args.reading, "judge": args.judge, "starts_per_seed": args.starts,
               "runs": runs}
    report(args.name, metrics, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
