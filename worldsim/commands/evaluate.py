"""Evaluation commands: ``worldsim evaluate``, ``worldsim rank-policies`` and ``worldsim imagined-vs-real``."""

from __future__ import annotations

from rich.console import Console

from worldsim.evaluation.evaluate import EvaluationConfig
from worldsim.evaluation.rank import RankConfig
from worldsim.evaluation.start_agreement import StartAgreementConfig


def evaluate(config: EvaluationConfig) -> None:
    """Roll a policy out on tasks: success rates with 95% intervals.

    Without --task or --suite, a checkpoint is evaluated on the tasks it was trained on (as it
    records them); in physics, or with --world-model and --keyframes in imagination, from real
    episode starts. Optionally videos of the first episodes, and the results as JSON (--out)."""
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
    them (ranking.json, ranking.md and ranking.png in --out). With --held-out demonstrations the
    rankers that need no rollout (validation loss, action error, action entropy) are scored
    beside it: imagination is worth its cost where it ranks better than they do."""
    from worldsim.evaluation.rank import rank_policies as rank
    from worldsim.evaluation.rank import ranking_table

    result = rank(config)
    console = Console()
    console.print(ranking_table(result))
    agree = result["over_policies"]
    interval = agree["spearman_ci"]
    within = f" (95% interval over episodes {interval[0]:.2f} to {interval[1]:.2f})" if interval else ""
    console.print(f"imagination: Spearman {agree['spearman']:.3f}{within}, Pearson {agree['pearson']:.3f} over "
                  f"{len(result['policies'])} policies -> {config.out}")
    for name, offline in result["offline_rankers"].items():
        console.print(f"{name} (no rollouts): Spearman {offline['spearman']:.3f}")


def imagined_vs_real(config: StartAgreementConfig) -> None:
    """Run a policy from the same real starts in a world model and in physics; compare the outcomes.

    The starts are drawn as train-rl draws its imagined episodes' starts (episode starts and
    keyframes of --keyframes, --keyframe-ratio, --horizon); the policy acts closed loop on the
    imagined frames, then in physics from the same recorded states, twice (its own
    repeatability, the ceiling).
    Writes report.json, agreement.png and imagined_vs_real.mp4 to --out."""
    from worldsim.evaluation.start_agreement import agreement_table, run_start_agreement

    report = run_start_agreement(config)
    console = Console()
    console.print(agreement_table(report))
    console.print(f"report -> {config.out}")
