"""Every variant is solvable: the scripted expert succeeds on (nearly) every episode.

The full >= 95% check over 500 episodes per variant is `benchmarks/expert_success.py`; here a
smaller batch per variant keeps the suite fast.
"""

import pytest

from worldsim.envs import TASKS
from worldsim.envs.expert import expert_success


@pytest.mark.parametrize("task", list(TASKS))
def test_expert_solves_every_variant(task):
    stats = expert_success(task, 40)
    assert stats.success_rate >= 0.9
    assert stats.mean_success_steps < TASKS[task].max_episode_steps
