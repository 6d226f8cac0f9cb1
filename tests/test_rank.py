"""Policy ranking in imagination: correlations, the CLI's outputs, and bad input."""

import json
import math
import re

import numpy as np
import pytest
import torch
from conftest import write_toml

from worldsim.commands.cli import main
from worldsim.data.reader import EpisodeReader
from worldsim.evaluation.offline import offline_signals
from worldsim.evaluation.rank import (
    bootstrap_spearman,
    episodes_equivalent,
    outcome_matrix,
    pairwise_accuracy,
    rank_agreement,
    spearman_kendall,
    split_half,
)
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


def test_ranking_statistics_over_episodes():
    assert spearman_kendall([0.1, 0.2, 0.5, 0.4], [0.0, 0.3, 0.4, 0.5]) == pytest.approx(
        {"spearman": 0.8, "kendall": 2 / 3})  # one swapped pair of six
    assert math.isnan(spearman_kendall([0.1, 0.2], [0.3, 0.3])["kendall"])
    # pairs at least 10 points apart: 5 of 6 ((0, 1) is 5 points); predicted ties (1, 2) -> half
    assert pairwise_accuracy([0.0, 0.05, 0.3, 0.5], [0.1, 0.2, 0.2, 0.6], 0.10) == {"accuracy": 0.9, "pairs": 5}
    assert pairwise_accuracy([0.5, 0.55], [0.0, 1.0], 0.10) == {"accuracy": None, "pairs": 0}

    rng = np.random.default_rng(0)
    rates = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    real = (rng.random((5, 2, 400)) < rates[:, None, None]).astype(float)  # (policies, tasks, episodes)
    imagined = real[::-1].copy()  # the ranking reversed
    assert outcome_matrix([{"per_task": {"A": {"outcomes": [1, 0]}}}], ["A"]).shape == (1, 1, 2)
    with pytest.raises(ValueError, match="same number of recorded outcomes"):
        outcome_matrix([{"per_task": {"A": {"outcomes": [1, 0]}, "B": {"outcomes": [1]}}}], ["A", "B"])
    draws = bootstrap_spearman(real, real, 200, rng)
    assert draws.shape == (200,) and np.all(draws == 1.0)  # 20 points apart on 800 episodes: never swapped
    assert np.all(bootstrap_spearman(real, imagined, 50, rng) == -1.0)
    assert split_half(real, rng, splits=50)["spearman"] == 1.0
    near = (rng.random((5, 1, 40)) < np.full(5, 0.5)[:, None, None]).astype(float)  # equal policies
    assert abs(split_half(near, rng, splits=200)["spearman"]) < 0.3  # no stable real ranking to agree with
    worth = episodes_equivalent(real, rates, rng, splits=20)
    assert worth["spearman_vs_half"] == pytest.approx(1.0)
    assert worth["real_episodes_equivalent"] == 200  # as good as all of them
    assert episodes_equivalent(real, rates[::-1], rng, splits=20)["real_episodes_equivalent"] == 0
    assert list(worth["real_curve"]) == ["1", "2", "3", "5", "10", "20", "40", "80", "160", "200"]


def test_offline_signals_measure_the_fit_to_held_out_demonstrations(push_episodes):
    policy = TinyVLA(TinyVLAConfig(instructions=(INSTRUCTION,), tasks=("PushCube-v0",), image_size=32,
                                   language="learned", channels=(8, 8), hidden_dim=32, feature_dim=32,
                                   std_head="global", init_log_std=-1.0))
    torch.nn.init.zeros_(policy.mean_head[-1].weight)
    torch.nn.init.zeros_(policy.mean_head[-1].bias)  # the mean action is 0: its error is the actions' power
    signals = offline_signals(policy, push_episodes, batch_size=7, max_samples=10_000)
    reader = EpisodeReader(push_episodes)
    actions = np.concatenate([reader.load(e, "actions") for e in range(len(reader))])
    assert signals["action_error"] == pytest.approx(float((actions ** 2).mean()), rel=1e-5)
    assert signals["action_entropy"] == pytest.approx(0.5 * math.log(2 * math.pi * math.e) - 1.0, rel=1e-6)
    assert math.isfinite(signals["val_loss"]) and signals["val_loss"] > signals["action_error"] - 1e-6
    stack = TinyVLA(TinyVLAConfig(instructions=("stack the red cube on the green cube",), tasks=("StackCube-v0",),
                                  image_size=32, language="learned", channels=(8, 8), hidden_dim=32, feature_dim=32))
    with pytest.raises(ValueError, match="holds none of the policy's tasks"):
        offline_signals(stack, push_episodes)


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
    assert main(args + ["--policies", *policies, "--held-out", str(push_episodes)]) == 0
    result = json.loads((tmp_path / "rank" / "ranking.json").read_text())
    assert set(result["offline_rankers"]) == {"val_loss", "action_error", "action_entropy"}
    assert all(set(p["offline"]) == set(result["offline_rankers"]) for p in result["policies"])
    assert {"kendall", "spearman_ci", "pairwise_accuracy_10"} <= set(result["over_policies"])
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
    assert main(args + ["--policies", *policies, "--held-out", str(tmp_path / "none.h5")]) == 2
