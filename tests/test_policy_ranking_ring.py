"""The ranking benchmark's mixed models (benchmarks/policy_ranking.py): every set in the ring is
ranked by a model fine-tuned on another set's policies, never on its own."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmark scripts
import policy_ranking  # noqa: E402


def test_each_set_is_ranked_by_the_model_of_the_set_before_it_in_the_ring():
    args = policy_ranking.Args(mixed_ring=(21, 22, 23))
    assert {s: policy_ranking.mixed_source(args, s) for s in (21, 22, 23)} == {21: 23, 22: 21, 23: 22}
    pair = policy_ranking.Args(mixed_ring=(5, 9))
    assert policy_ranking.mixed_source(pair, 5) == 9 and policy_ranking.mixed_source(pair, 9) == 5


@pytest.mark.parametrize("ring", [(21,), (21, 22, 21)])
def test_a_ring_that_would_rank_a_set_by_its_own_policies_is_refused(ring, tmp_path):
    with pytest.raises(SystemExit, match="at least two distinct sets"):
        policy_ranking.main(policy_ranking.Args(sets=(), mixed_ring=ring, out=tmp_path))
