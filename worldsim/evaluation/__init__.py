"""Policy evaluation: success rates with intervals, in physics or imagination, and policy ranking."""

from worldsim.evaluation.evaluate import EvalResults, evaluate_in_physics, evaluate_policy, results_table

__all__ = ["EvalResults", "evaluate_in_physics", "evaluate_policy", "results_table"]
