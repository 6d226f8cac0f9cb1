"""Evaluation commands: ``worldsim evaluate`` and ``worldsim rank-policies``."""

from __future__ import annotations

from rich.console import Console

from worldsim.evaluation.evaluate import EvaluationConfig
from worldsim.evaluation.rank import RankConfig


def evaluate(config: EvaluationConfig) -> None:
    """Roll a policy out on tasks: success rates with 95% intervals.

    Without --task or --suite, a checkpoint is evaluated on the tasks it was trained on (as it
    records them). Optionally videos of the first episodes, and the results as JSON (--out)."""
    from worldsim.evaluation.evaluate import evaluate_checkpoint, results_table

    results = evaluate_checkpoint(config)
    console = Console()
    console.print(results_table(results))
    if config.out is not None:
        console.print(f"results -> {config.out}")


def rank_policies(config: RankConfig) -> None:
    """Rank policies by imagined success and compare with their real success.

    Each policy runs real episodes in physics and imagined ones in the world model from the real
    starts of --keyframes; Spearman's and Pearson's correlations say how well imagination ranks
    them (ranking.json, ranking.md and ranking.png in --out)."""
    from worldsim.evaluation.rank import rank_policies as rank
    from worldsim.evaluation.rank import ranking_table

    result = rank(config)
    console = Console()
    console.print(ranking_table(result))
    agree = result["over_policies"]
    console.print(f"Spearman {agree['spearman']:.3f}, Pearson {agree['pearson']:.3f} over "
                  f"{len(result['policies'])} policies -> {config.out}")
