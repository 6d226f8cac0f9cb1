"""The walkthrough notebooks run top to bottom (their code cells, in order, in one namespace),
the co-evolution one on its tiny setting."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


def check_tabletop_envs(namespace: dict) -> None:
    assert namespace["successes"] > 100  # the expert solves most staggered episodes


def check_coevolution(namespace: dict) -> None:
    results = namespace["results"]
    assert [r["round"] for r in results["rounds"]] == [0, 1]
    assert results["real_budget"] == 4 and results["demonstrations"].endswith("demos.h5")
    assert namespace["successes"] == sum(r.success for r in namespace["rollouts"])
    assert namespace["rollouts"][0].features.shape[1] > 0  # recorded for the detectors


CHECKS = {"01_tabletop_envs.ipynb": check_tabletop_envs, "02_coevolution.ipynb": check_coevolution}


def test_every_notebook_has_a_check():
    assert {p.name for p in NOTEBOOKS} == set(CHECKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
@pytest.mark.slow
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLDSIM_NOTEBOOK_SCALE", "tiny")
    monkeypatch.setenv("WORLDSIM_NOTEBOOK_OUT", str(tmp_path))
    cells = json.loads(path.read_text())["cells"]
    namespace: dict = {}
    for cell in cells:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{path.name}", "exec"), namespace)
    CHECKS[path.name](namespace)
