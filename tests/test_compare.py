"""Paired comparison of two policies on the same episodes, and the paired starts behind it."""

import numpy as np
import pytest

from worldsim.evaluation.compare import over_seeds, paired_comparison, verdict
from worldsim.evaluation.evaluate import evaluate_policy
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.rollout import slot_seed


def test_mcnemar_counts_only_the_episodes_where_the_policies_disagree():
    before = np.array([1, 1, 0, 0, 0, 0, 1, 0, 0, 0] * 20, bool)
    after = before.copy()
    after[2::10] = True  # 20 episodes gained, none lost
    c = paired_comparison(before, after)
    assert c["episodes"] == 200 and c["only_after_succeeded"] == 20 and c["only_before_succeeded"] == 0
    assert c["difference"] == pytest.approx(0.1) and c["p_value"] == pytest.approx(2 * 0.5**20)
    assert c["significant"] and c["difference_ci95"][0] > 0
    assert "significant gain for after" in verdict(c)
    even = paired_comparison(before, before)
    assert even["p_value"] == 1.0 and not even["significant"] and even["difference_ci95"] == [0.0, 0.0]
    noisy = after.copy()
    noisy[:30:10] = False  # 17 gained, 3 lost: 15 of 40 points better, p about 0.003
    assert paired_comparison(before, noisy)["significant"]
    small = paired_comparison([True, False, False], [False, True, True])
    assert not small["significant"] and "not a significant difference" in verdict(small)
    with pytest.raises(ValueError, match="equal length"):
        paired_comparison([True], [True, False])


def test_evaluations_with_one_seed_run_the_same_episodes_whatever_the_envs():
    """Episode k starts from the state seeded by (seed, k): the same for 3 envs as for 5."""
    expert = ScriptedExpert(ScriptedExpertConfig("ReachCube-v0"))
    a = evaluate_policy(expert, ["ReachCube-v0"], 7, num_envs=3, seed=4, progress=False).tasks["ReachCube-v0"]
    b = evaluate_policy(expert, ["ReachCube-v0"], 7, num_envs=5, seed=4, progress=False).tasks["ReachCube-v0"]
    assert a.outcomes == b.outcomes and a.mean_length == b.mean_length  # same starts, same deterministic policy
    assert a.mean_return == b.mean_return
    c = evaluate_policy(expert, ["ReachCube-v0"], 7, num_envs=3, seed=5, progress=False).tasks["ReachCube-v0"]
    assert len(c.outcomes) == 7 and c.mean_return != a.mean_return  # another seed, other starts
    assert slot_seed(4, 0) != slot_seed(4, 1) and slot_seed(4, 1) == slot_seed(4, 1)


def test_over_seeds_resamples_seeds_then_episodes():
    """A gain that every seed shows has a tight interval; the same pooled gain carried by one seed
    of five has an interval over seeds that reaches zero, though pooled McNemar calls it significant."""
    before = [False] * 100
    steady = [(before, [True] * 20 + [False] * 80)] * 5  # +20 points on every seed
    result = over_seeds(steady, draws=2_000)
    assert result["difference"] == pytest.approx(0.2) and result["per_seed"] == [pytest.approx(0.2)] * 5
    assert 0.1 < result["ci95"][0] < 0.2 < result["ci95"][1] < 0.3 and result["seeds"] == 5
    lucky = [(before, [True] * 100)] + [(before, before)] * 4  # +100 on one seed, 0 on the others
    result = over_seeds(lucky, draws=2_000)
    assert result["difference"] == pytest.approx(0.2) and result["ci95"][0] == 0.0
    pooled = paired_comparison(sum((b for b, _ in lucky), []), sum((a for _, a in lucky), []))
    assert pooled["difference"] == pytest.approx(0.2) and pooled["significant"]
    assert over_seeds(steady, draws=500, seed=3) == over_seeds(steady, draws=500, seed=3)  # deterministic
    with pytest.raises(ValueError, match="^paired outcomes must be two non-empty lists of equal length; got 2 and 1$"):
        over_seeds([([True, False], [True])])
    with pytest.raises(ValueError, match="needs at least one seed"):
        over_seeds([])
