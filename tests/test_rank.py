"""Policy ranking in imagination: correlations, the CLI's outputs, and bad input."""

import json
import math
import re

import pytest
import torch
from conftest import write_toml

from worldsim.commands.cli import main
from worldsim.evaluation.rank import rank_agreement
from worldsim.policies.tinyvla import TinyVLA, TinyVLAConfig

INSTRUCTION = "push the red cube onto the blue square"


def test_rank_agreement_is_scipys_correlations():
    assert rank_agreement([0.1, 0.2, 0.5], [0.0, 0.3, 0.4]) == pytest.approx(
        {"spearman": 1.0, "spearman_p": 1 / 6, "pearson": 11 / 13, "n": 3})  # cov 0.0733 / var 0.0867
    # exact over the 720 orders of 6 policies: rho >= 0.9 for the identity and the 5 one-swap neighbours of rho 0.94
    six = rank_agreement([0.0, 0.1, 0.2, 0.3, 0.4, 0.5], [0.0, 0.2, 0.1, 0.3, 0.4, 0.5])
    assert six["spearman"] == pytest.approx(1 - 6 * 2 / (6 * 35)) and six["spearman_p"] == pytest.approx(6 / 720)
    assert rank_agreement([0.1, 0.2, 0.5], [0.4, 0.3, 0.0])["spearman"] == pytest.approx(-1.0)
    assert math.isnan(rank_agreement([0.1, 0.2], [0.3, 0.3])["spearman"])  # constant: undefined


@pytest.mark.slow
def test_rank_policies_cli_writes_the_ranking(tmp_path, untrained_world_model, push_episodes):
    policies: list[str] = []
    for k in range(2):
        torch.manual_seed(k)
        TinyVLA(TinyVLAConfig(instructions=(INSTRUCTION,), image_size=32, language="learned", channels=(8, 8),
                              hidden_dim=32, feature_dim=32)).save_pretrained(tmp_path / f"p{k}")
        policies.append(str(tmp_path / f"p{k}"))
    on_cpu = write_toml(tmp_path / "cpu.toml", '[imagination]\ndevice = "cpu"\n')
    args = ["rank-policies", "--world-model", str(untrained_world_model), "--keyframes", str(push_episodes),
            "--episodes", "2", "--imagined-episodes", "2", "--out", str(tmp_path / "rank"), "--config-file",
            str(on_cpu), "--no-progress"]
    assert main(args + ["--policies", *policies]) == 0
    result = json.loads((tmp_path / "rank" / "ranking.json").read_text())
    assert result["tasks"] == ["PushCube-v0"] and len(result["policies"]) == 2
    assert result["rung"] == "pixels"  # the default: nothing from the simulator while imagining
    assert all(p["real"]["episodes"] == 2 and p["imagined"]["episodes"] == 2 for p in result["policies"])
    assert (tmp_path / "rank" / "ranking.png").stat().st_size > 0
    report = (tmp_path / "rank" / "ranking.md").read_text()
    assert "Spearman" in report and "permutation p" in report
    assert re.search(r"\| \d+% \(\d+-\d+\) / \d+% \(\d+-\d+\) \|", report)  # imagined / real, Wilson intervals
    assert main(args + ["--policies", policies[0]]) == 2  # one policy: nothing to rank
    assert main(args + ["--policies", *policies, "--rung", "oracle"]) == 2  # this model has no pathway to draw
    assert main(args + ["--policies", *policies, "--rung", "painted"]) == 2
    assert main(args + ["--policies", *policies, "--task", "StackCube-v0"]) == 2  # not a task of the model
