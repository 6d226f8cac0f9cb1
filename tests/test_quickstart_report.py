"""The quickstart's report.md says what a careful reader needs: budgets (and cuts), the paired
verdict with intervals, world-model fidelity beside base rates, detection, links to media."""

import copy
import json
import re

from worldsim.pipelines.quickstart_report import budget_lines, detection_summary, write_report


def _judged(auc, low, high, call, verdict, rollouts=25, failures=15):
    return {"auc": auc, "interval": [low, high], "verdict": verdict, "call": call, "rollouts": rollouts,
            "failures": failures, "seeds": 3}


CHANCE = "cannot be told apart from chance on {} rollouts ({} failures) per seed"

SUMMARY = {
    "task": "PushCube-v0", "seed": 0, "torch_threads": 2, "demos": 20, "rung": "pixels",
    "timings_s": {"behaviour cloning": 12.5, "failure detection": 3.0}, "wall_clock_s": 15.5,
    "budgets": {"bc": {"steps": 50, "asked": 50, "stopped_by": "steps"},
                "world_model": {"steps": 20, "asked": 20, "stopped_by": "steps"},
                "grpo": {"env_steps": 3200, "asked": 600, "stopped_by": "steps"}},
    "bc_loss": {"train": 0.4749, "val": 0.5284},
    "comparison": {"episodes": 200, "before": {"success_rate": 0.445, "ci95": [0.376, 0.516]},
                   "after": {"success_rate": 0.485, "ci95": [0.415, 0.556]},
                   "only_after_succeeded": 20, "only_before_succeeded": 12, "difference": 0.04,
                   "difference_ci95": [-0.015, 0.095], "p_value": 0.215, "significant": False},
    "bc_real_success": 0.445, "final_real_success": 0.485, "imagined_success": [0.3, 0.4],
    "world_model": {"held_out": {"episodes": 40, "successes": 20, "failures": 20, "near_miss_failures": 5,
                                 "base_rate": 0.5, "balanced": True},
                    "psnr_at_8": 24.3, "psnr_at_32": 21.7, "object_error_16_after_contact_cm": 3.06,
                    "agreement": {k: {"accuracy": 0.65, "balanced_accuracy": 0.64, "base_rate": 0.5}
                                  for k in ("last_16", "full")},
                    "physics_ceiling": {"exact": 1.0, "shift_0.1mm": 0.75, "shift_0.33mm": 0.65, "shift_1mm": 0.6}},
    "detectors": {"knn": {**_judged(0.8, 0.66, 0.92, "separates", "separates failures from successes"), "step": 10,
                          "where_rollouts_differ": {"step": 57, **_judged(0.62, 0.4, 0.81, "chance",
                                                                          CHANCE.format(21, 15), 21)}}},
    "detection": {"rollouts": 100, "failures": 63, "median_failure_length": 100}, "detection_skipped": None,
    "guard": {"accepted": False, "reasons": ["imagined success exceeds real by 0.46 > 0.3"]},
}


def test_report_states_the_paired_verdict_base_rates_and_links_every_media_file(tmp_path):
    (tmp_path / "detect").mkdir()
    (tmp_path / "detect" / "table.md").write_text("| detector | ROC-AUC |\n|---|---|\n| [knn](knn.png) | 0.80 |\n")
    (tmp_path / "fidelity").mkdir()
    (tmp_path / "fidelity" / "replay_0.mp4").write_bytes(b"\0")
    text = write_report(tmp_path, SUMMARY).read_text()
    assert "| BC (base) | 44.5% | 37.6% - 51.6% |" in text
    assert "+4.0 points" in text and "p = 0.21" in text and "not a significant difference" in text
    assert "base rate 50.0%, balanced" in text and "3.1 cm off (median)" in text
    assert "cube 0.1mm / 0.33mm / 1mm off, agrees 75.0% / 65.0% / 60.0%" in text
    assert "[knn](detect/knn.png)" in text and "- [fidelity/replay_0.mp4](fidelity/replay_0.mp4)" in text
    assert "| behaviour cloning | 12.5 |" in text and "Warning" not in text
    assert "rolled the GRPO policy back (imagined success exceeds real by 0.46 > 0.3)" in text
    assert json.loads((tmp_path / "summary.json").read_text())["comparison"]["episodes"] == 200
    assert "sampled actions" not in text  # a summary without the readings says nothing of them
    assert "PSNR 24.3 dB after 8 imagined steps, 21.7 dB after 32;" in text  # no trivial predictor measured
    copied = copy.deepcopy(SUMMARY)
    copied["world_model"]["psnr_copy_first"] = [22.2, 21.2]
    assert "21.7 dB after 32 (the start frame copied, the trivial predictor: 22.2 / 21.2 dB);" in \
        write_report(tmp_path, copied).read_text()
    assert "What it took besides what the model learned" not in text  # a summary without the aids
    copied["aids"] = ["the simulator's state as training supervision", "hand-written: the exact camera"]
    assert ("found the objects in the real start frames itself). What it took besides what the model learned: the "
            "simulator's state as training supervision; hand-written: the exact camera. The side-by-side videos"
            ) in write_report(tmp_path, copied).read_text()
    assert "in the windows on" not in text  # a summary without the regions says nothing of them
    copied["world_model"]["region_psnr_at_32"] = {"gripper": {"model": 15.1, "copy_first": 12.9},
                                                  "object_start": {"model": 14.8, "copy_first": 13.9}}
    assert "- PSNR after 32 steps in the windows on the gripper 15.1 dB (copied 12.9); where the object started " \
           "(a doubled cube shows there) 14.8 dB (copied 13.9);" in write_report(tmp_path, copied).read_text()


def test_the_report_reads_both_policies_sampled_and_compares_their_better_readings(tmp_path):
    (tmp_path / "detect").mkdir()
    (tmp_path / "detect" / "table.md").write_text("| detector | ROC-AUC |\n|---|---|\n")
    best = {"readings": {"bc": "sampled", "final": "mean"}, "sampled_success": {"bc": 0.5, "final": 0.47},
            "comparison": {**SUMMARY["comparison"], "before": {"success_rate": 0.5, "ci95": [0.43, 0.57]},
                           "difference": -0.015, "difference_ci95": [-0.07, 0.04], "p_value": 0.71}}
    text = write_report(tmp_path, {**SUMMARY, "best_readings": best}).read_text()
    assert "Read with sampled actions on the same episodes: BC 50.0%, after GRPO 47.0%." in text
    assert "Each at its better reading (BC: sampled, GRPO: mean; chosen on these same episodes): GRPO 48.5% vs BC " \
           "50.0% on the same 200 episodes: -1.5 points" in text


def test_the_report_names_the_rung_and_calls_the_oracle_an_upper_bound(tmp_path):
    (tmp_path / "detect").mkdir()
    (tmp_path / "detect" / "table.md").write_text("| detector | ROC-AUC |\n|---|---|\n")
    pixels = write_report(tmp_path, SUMMARY).read_text()
    assert "GRPO imagined on the **pixels** rung" in pixels and "nothing came from the simulator" in pixels
    assert "upper bound" not in pixels
    oracle = write_report(tmp_path, {**SUMMARY, "rung": "oracle"}).read_text()
    assert "the **oracle** rung" in oracle and "an upper bound for analysis" in oracle
    assert json.loads((tmp_path / "summary.json").read_text())["rung"] == "oracle"


def test_a_stage_cut_by_its_time_budget_is_flagged_loudly():
    cut = copy.deepcopy(SUMMARY)
    cut["budgets"]["world_model"] = {"steps": 597, "asked": 800, "stopped_by": "time_budget"}
    lines = budget_lines(cut)
    assert "| world model | 597 steps | 800 | time_budget |" in lines
    assert "a time budget cut world_model short" in lines[-1]


def test_skipped_detection_says_why(tmp_path):
    skipped = copy.deepcopy(SUMMARY) | {"detectors": None, "detection": None,
                                        "detection_skipped": "the calibration set holds no successful rollouts"}
    text = write_report(tmp_path, skipped).read_text()
    assert "Skipped: the calibration set holds no successful rollouts" in text


def test_stages_say_what_they_gave(tmp_path):
    from worldsim.data.collect import collect_episodes
    from worldsim.pipelines.quickstart import _describe_fidelity, _describe_outcomes, _outcomes
    from worldsim.policies import ScriptedExpert, ScriptedExpertConfig

    data = tmp_path / "d.h5"
    collect_episodes(["ReachCube-v0"], lambda t: ScriptedExpert(ScriptedExpertConfig(t)), 4, data, num_envs=4,
                     image_size=32, progress=False)
    wins = sum(_outcomes(data))
    assert _describe_outcomes(data) == f"4 episodes, {wins} successes ({100 * wins / 4:.1f}%)"
    fidelity = tmp_path / "fidelity.json"
    fidelity.write_text(json.dumps({"psnr_at_8": 24.31, "psnr_at_horizon": 21.66,
                                    "success_by_horizon": {"full": {"accuracy": 0.643, "base_rate": 0.5}}}))
    assert _describe_fidelity(fidelity) == ("PSNR 24.3 / 21.7 dB after 8 / 32 steps; outcome agreement over full "
                                            "replays 64% (base rate 50%)")


def test_counts_of_one_are_singular(tmp_path):
    one = copy.deepcopy(SUMMARY)
    one["world_model"]["held_out"] |= {"successes": 1, "failures": 39, "near_miss_failures": 1}
    (tmp_path / "detect").mkdir()
    (tmp_path / "detect" / "table.md").write_text("")
    text = write_report(tmp_path, one).read_text()
    assert "(1 success, 39 failures, 1 near miss;" in text


def test_the_quickstart_says_how_long_it_should_take_when_it_starts(tmp_path, capsys, monkeypatch):
    import pytest

    import worldsim.pipelines.quickstart as quickstart

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(quickstart, "expert_demonstrations", stop)
    with pytest.raises(KeyboardInterrupt):
        quickstart.quickstart(quickstart.QuickstartConfig(out=tmp_path / "q", torch_threads=1))
    said = " ".join(capsys.readouterr().out.split())
    minutes = round(quickstart.DEFAULT_MINUTES)
    assert f"quickstart: about {minutes} minutes on 2 quiet CPU cores (the default budgets take " \
           f"{quickstart.DEFAULT_MINUTES}" in said
    from worldsim.pipelines.coevolve_parts import RLRounds, WorldModelRounds

    default = quickstart.estimate_minutes(quickstart.QuickstartConfig())
    assert default == pytest.approx(quickstart.DEFAULT_MINUTES)
    longer = quickstart.QuickstartConfig(out=tmp_path / "r", wm=WorldModelRounds(steps=1600))
    assert quickstart.estimate_minutes(longer) == pytest.approx(default * 1.5)  # the world model: half the time
    more_rl = quickstart.QuickstartConfig(rl=RLRounds(env_steps=2 * 12_800, num_envs=32))
    assert quickstart.estimate_minutes(more_rl) == pytest.approx(default * (1 + 0.5 / len(quickstart._SCALED)))


def test_detection_states_verdicts_with_intervals_and_base_rate(tmp_path):
    (tmp_path / "detect").mkdir()
    (tmp_path / "detect" / "table.md").write_text("")
    text = write_report(tmp_path, SUMMARY).read_text()
    assert "100 rollouts, 63 failures (base rate 63.0%); each of 3 seeds tests 25 of them (15 failures)" in text
    assert ("| knn | separates failures from successes (ROC-AUC 0.80, 95% CI 0.66-0.92) | cannot be told apart from "
            "chance on 21 rollouts (15 failures) per seed (ROC-AUC 0.62, 95% CI 0.40-0.81) |") in text
    assert "knn separates this policy's failures from its successes" in text
    assert "ROC-AUC 0.5 is chance" not in text
    assert json.loads((tmp_path / "summary.json").read_text())["detectors"]["knn"]["interval"] == [0.66, 0.92]


def test_a_below_chance_detector_is_called_inverted_never_a_result(tmp_path):
    inverted = copy.deepcopy(SUMMARY)
    below = ("below chance: the score is inverted, it ranks successes as riskier (a finding about the score, not a "
             "detector that works)")
    inverted["detectors"] = {"knn": {**_judged(0.44, 0.28, 0.6, "chance", CHANCE.format(25, 15)), "step": 10,
                                     "where_rollouts_differ": {"step": 57, **_judged(0.31, 0.2, 0.45, "below chance",
                                                                                     below, 21)}}}
    (tmp_path / "detect").mkdir()
    (tmp_path / "detect" / "table.md").write_text("")
    text = write_report(tmp_path, inverted).read_text()
    assert "knn: below chance, its score is inverted (it ranks successes as riskier)" in text
    assert "No detector tells this policy's failures from its successes here" in text
    assert "steps 1-10 of the 100 a failure runs" in text and "leaving 6 per seed beside 15 failures" in text
    # what would make a detector show: intervals of ±0.14 on 100 rollouts narrow to ±0.10 on about 203
    assert "About 250 rollouts (`--real-episodes`) would narrow them to ±0.10." in text
    figures = [m for m in re.finditer(r"0\.(44|31)\b", text)]
    assert len(figures) == 2
    for m in figures:  # each figure stands behind its verdict, never bare
        before = text[text.rfind("|", 0, m.start()): m.start()]
        assert before.startswith(("| cannot be told apart from chance", "| below chance: the score is inverted"))


def test_detection_summary_reads_a_detection_run(tmp_path):
    import numpy as np

    from worldsim.failure import ProtocolConfig, Rollout, evaluate_detector
    from worldsim.failure.detect import rollout_lengths

    rng = np.random.default_rng(0)  # successes end early around one direction; failures run 60 steps, around another
    rollouts = [Rollout("PushCube-v0", i % 3 != 0, (rng.normal(size=(n, 4)) + 3 * np.eye(4)[int(i % 3 == 0)])
                        .astype(np.float32), None, i)
                for i, n in enumerate(60 if i % 3 == 0 else int(rng.integers(30, 50)) for i in range(40))]
    protocol = ProtocolConfig(seen_tasks=("PushCube-v0",), seeds=(0, 1), alpha=0.2, cp="constant")
    results = {"episodes": 40, "failures": 14, "lengths": rollout_lengths(rollouts),
               "detectors": {"knn": evaluate_detector("knn", rollouts, protocol).to_json()}}
    summary = detection_summary(json.loads(json.dumps(results)), "PushCube-v0")
    knn = summary["detectors"]["knn"]
    successes = sorted(r.length for r in rollouts if r.success)
    assert knn["step"] == successes[0] and knn["where_rollouts_differ"]["step"] == successes[(len(successes) - 1) // 2]
    assert knn["call"] == "separates" and knn["interval"][0] > 0.5 and knn["seeds"] == 2
    assert summary["detection"] == {"rollouts": 40, "failures": 14, "median_failure_length": 60}


def test_best_readings_pairs_each_policy_at_its_better_reading():
    from worldsim.pipelines.quickstart import best_readings

    def row(outcomes):
        return {"real": {"per_task": {"PushCube-v0": {"outcomes": outcomes}}}}

    results = {"rounds": [row([True, False, False, False]), row([True, True, False, False])]}
    readings = {"bc": {"success_rate": 0.75, "outcomes": [True, True, True, False]},  # sampling lifts BC
                "final": {"success_rate": 0.5, "outcomes": [False, True, True, False]}}  # a tie: the mean action
    best = best_readings(results, readings, "PushCube-v0")
    assert best["readings"] == {"bc": "sampled", "final": "mean"}
    assert best["comparison"]["difference"] == -0.25 and best["comparison"]["before"]["success_rate"] == 0.75
    assert best["sampled_success"] == {"bc": 0.75, "final": 0.5}


def test_grasping_demonstrations_take_the_smaller_noise(tmp_path, monkeypatch):
    import worldsim.data.collect as collect
    from worldsim.pipelines import quickstart
    from worldsim.policies.expert import DEMO_NOISE, GRASP_DEMO_NOISE

    noises = {}

    def record(tasks, make_policy, episodes, out, **kwargs):
        noises[tasks[0]] = make_policy(tasks[0]).config.noise

    monkeypatch.setattr(collect, "collect_episodes", record)
    for task in ("PushCube-v0", "PickPlaceCube-v0", "StackCube-v0", "ReachCube-v0"):
        quickstart.expert_demonstrations(task, 2, tmp_path / f"{task}.h5", seed=0, progress=False)
    assert noises == {"PushCube-v0": DEMO_NOISE, "PickPlaceCube-v0": GRASP_DEMO_NOISE,
                      "StackCube-v0": GRASP_DEMO_NOISE, "ReachCube-v0": DEMO_NOISE}
    assert GRASP_DEMO_NOISE < DEMO_NOISE
