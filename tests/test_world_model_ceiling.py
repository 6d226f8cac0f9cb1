"""Physics' own agreement with recorded outcomes (worldsim.world_models.ceiling): replayed from
their rebuilt starts, recorded episodes end as recorded; a moved cube changes how they end."""

import numpy as np
import pytest

from worldsim.data.collect import collect_episodes
from worldsim.envs.families import make_family
from worldsim.envs.observations import qpos_from_state
from worldsim.envs.scene import Scene
from worldsim.envs.tasks import get_task
from worldsim.policies import ScriptedExpert, ScriptedExpertConfig
from worldsim.world_models import EpisodeBank
from worldsim.world_models.ceiling import physics_agreement, shift_task_cube


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    path = tmp_path_factory.mktemp("ceiling") / "push.h5"
    collect_episodes(["PushCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t, noise=0.3, epsilon=0.2, seed=5)),
                     10, path, num_envs=10, image_size=32, progress=False)
    return EpisodeBank(path)


def test_recorded_episodes_replayed_from_their_starts_end_as_recorded(bank):
    real = np.array([bank.episode(j, "success").any() for j in range(len(bank))])
    assert real.any() and (~real).any()
    replayed = physics_agreement(bank, shifts_mm=(0.0, 30.0))
    assert set(replayed) == {"exact", "shift_0mm", "shift_30mm"}
    assert replayed["exact"]["accuracy"] == replayed["shift_0mm"]["accuracy"] == 1.0
    assert replayed["exact"]["base_rate"] == real.mean() and replayed["exact"]["episodes"] == 10
    # a cube 3 cm from where the recorded pushes went: successes no longer happen
    assert replayed["shift_30mm"]["recall"] < 1.0


def test_the_task_cube_is_the_one_moved(bank):
    scene = Scene.load()
    family = make_family(get_task("PushCube-v0"), scene)
    qpos = qpos_from_state(scene, bank.state[bank.obs_start])
    moved = qpos.copy()
    shift_task_cube(scene, family, moved, 0.002, np.random.default_rng(0))
    changed = np.flatnonzero(np.abs(moved - qpos).max(axis=0) > 0)
    red = scene.cube("red")
    assert set(changed) <= {red.start, red.start + 1}  # PushCube's object is the red cube, moved in x-y
    assert np.linalg.norm(moved[:, red.start:red.start + 2] - qpos[:, red.start:red.start + 2], axis=1) \
        == pytest.approx(0.002)


def test_a_bank_without_state_is_refused(bank):
    state = bank.state
    bank.state = None
    try:
        with pytest.raises(ValueError, match="no 'state' observations"):
            physics_agreement(bank)
    finally:
        bank.state = state
