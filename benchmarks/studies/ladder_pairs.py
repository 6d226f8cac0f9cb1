"""Two imagination-ladder runs compared arm by arm on the same test episodes.

Two runs of ``benchmarks/imagination_ladder.py`` whose protocols differ only in the world model
(``--wm-model``: e.g. the presets' ``tiny`` against it with options on) share each seed's BC
base, direct-RL runs and test episodes (``--test-seed``), so their arms are paired episode by
episode. This study checks that they are (the same task, seeds, test seed and episodes, and BC's
test outcomes identical in both), then gives each arm's gain in the second run over the same arm
in the first, each arm read as its own round evaluations chose: over seeds with its 95% interval
(seeds, then episodes, resampled), the pooled McNemar figure beside it, and per seed.

    python benchmarks/studies/ladder_pairs.py --runs \\
        benchmarks/seed_records/imagination_ladder/PickPlaceCube-v0_test90000 \\
        benchmarks/seed_records/imagination_ladder/PickPlaceCube-v0_judge.heights=true_test90000 \\
        --name ladder_pairs_pick_carry

(each run's kept records: its protocol and every seed's record, as the ladder keeps them).

Writes ``benchmarks/studies/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmark scripts
from common import STUDY_RESULTS, report  # noqa: E402
from imagination_ladder import direct_view, gains, successes  # noqa: E402

PAIRED = ("task", "seeds", "test_seed", "test_episodes")
"""What two runs' protocols must share for their test episodes to be the same."""


def paired_records(first: Path, second: Path) -> tuple[dict[str, Any], dict[str, Any], list[tuple[dict, dict]]]:
    """Both runs' protocols and their seed records, seed by seed; ``ValueError`` naming what
    keeps them from being paired."""
    protocols = [json.loads((run / "protocol.json").read_text()) for run in (first, second)]
    differ = [key for key in PAIRED if protocols[0].get(key) != protocols[1].get(key)]
    if differ:
        raise ValueError(f"{first} and {second} are not on the same test episodes: {', '.join(differ)} differ")
    pairs = []
    for seed in protocols[0]["seeds"]:
        files = [run / f"seed_{seed}.json" for run in (first, second)]
        missing = [str(f) for f in files if not f.exists()]
        if missing:
            raise ValueError(f"seed {seed} has not been tested in {', '.join(missing)}")
        a, b = (direct_view(json.loads(f.read_text())) for f in files)
        if a["arms"]["bc"]["test"] != b["arms"]["bc"]["test"]:
            raise ValueError(f"seed {seed}: BC's test outcomes differ between the runs (not the same base policy)")
        pairs.append((a, b))
    return protocols[0], protocols[1], pairs


def compare(first: Path, second: Path) -> dict[str, Any]:
    """Every arm both runs have: its success in each and the second's gain over the first."""
    protocol_a, protocol_b, pairs = paired_records(first, second)
    # each seed's chosen direct-RL run as direct-rl, not the grid's runs one by one
    arms = [arm for arm in pairs[0][0]["arms"] if arm in pairs[0][1]["arms"] and arm != "bc"
            and not arm.startswith("direct-rl@")]
    figures: dict[str, Any] = {}
    for arm in arms:
        records = [{"arms": {"first": a["arms"][arm], "second": b["arms"][arm]}} for a, b in pairs]
        vs = gains(records, "second", "first")
        figures[arm] = {"first": successes(records, "first"), "second": successes(records, "second"),
                        "gain": vs["gain"], "gain_ci": vs["ci"], "gain_ci_pooled": vs["ci_pooled"],
                        "p_pooled": vs["p_pooled"], "per_seed": vs["per_seed"]}
    bc = [{"arms": {"bc": a["arms"]["bc"]}} for a, _ in pairs]
    return {"runs": [str(first), str(second)], "wm_model": [protocol_a.get("wm_model", []),
                                                            protocol_b.get("wm_model", [])],
            "task": protocol_a["task"], "seeds": protocol_a["seeds"], "test_seed": protocol_a["test_seed"],
            "test_episodes_per_seed": protocol_a["test_episodes"], "bc": successes(bc, "bc"), "arms": figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs=2, required=True, metavar=("FIRST", "SECOND"),
                        help="the two ladder folders; gains are the second's over the first's")
    parser.add_argument("--name", default="ladder_pairs")
    args = parser.parse_args()
    try:
        metrics = compare(*args.runs)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    report(args.name, metrics, args, STUDY_RESULTS)


if __name__ == "__main__":
    main()
