"""Policy evaluation: success rates with intervals, in physics or imagination, and policy ranking."""

from worldsim.evaluation.evaluate import EvalResults, Imagination, evaluate_policy, results_table

__all__ = ["EvalResults", "Imagination", "evaluate_policy", "results_table"]
